"""The test suite's runner: pytest in a fresh interpreter, its results written where the tests cannot.

`agentdescent.code.TestSuite` runs this file as a plain script in the sandbox,
``python -I _runner.py [pytest args...]``, with a results channel
(``Sandbox.run(..., channel=True)``): ``AGENTDESCENT_CHANNEL_FD`` names a descriptor it
may only append to, ``AGENTDESCENT_NONCE_FD`` a pipe holding the run's nonce. Before any
code of the project is imported it reads the nonce (to EOF), takes the channel, removes
both variables from the environment, and imports pytest from site-packages (``-I``: the
tree is never on ``sys.path`` ahead of it, so a ``pytest.py`` in the tree shadows
nothing). Then ``pytest.main(args, plugins=[reporter])``: the reporter writes one JSON
line per test, whole, with ``os.write``::

    {"n": NONCE, "seq": K, "node": NODE_ID, "outcome": "passed|failed|error|skipped", "message": "..."}

(a test's outcome is its setup, call and teardown combined, as pytest's summary counts
them: a failing setup or teardown is an error; with ``--collect-only``, one ``"collected"``
record per test instead; a file that does not collect is a ``"collection error"``), and at
the session's end one ``{"n": ..., "seq": K, "end": true, "exitstatus": N, "counts":
{outcome: n}}``. The runner then leaves with ``os._exit(exitstatus)``: no exit hook of the
project runs after the end. Where it sees the test process change pytest's own code (a
function or class of ``_pytest``, ``pluggy``, ``json`` or this file replaced, a report of
another class) or a hook of the project's own files (not a ``conftest.py``) wrapping the
reports, it writes a ``{"n": ..., "seq": K, "tampered": "what"}`` record at once; the
channel is append-only, so nothing can take it back.

No compiled file under the working folder is read (those of the standard library and
site-packages are), so a ``.pyc`` planted in a ``__pycache__`` of the project cannot stand
in for a test or a module.

``-I`` also makes Python ignore ``PYTHONHASHSEED`` (and the other ``PYTHON*`` variables the
sandbox sets for reproducible runs): when one of those is set, the runner first re-executes
itself once with them honoured (``-s``, and ``-P`` where Python has it), every other
``PYTHON*`` variable dropped, and ``sys.path`` cleared of the working folder until pytest
and its plugins are imported.

It owns the runner's side of the channel and nothing else: what the records mean, and
whether to believe them, is `agentdescent.code.suite`'s. It must not import anything from
agentdescent (it runs outside the package, by path), must not import project code before
it holds the nonce and pytest, and must not write anything to the channel but records.
"""

from __future__ import annotations

import os
import sys

# Held from the start, before any project code runs: the names the reporter works with.
_write, _exit, _fstat = os.write, os._exit, os.fstat
_KEPT = ("PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8")
_STAGE = "AGENTDESCENT_RUNNER_REEXEC"
_PYTHONPATH = "AGENTDESCENT_RUNNER_PYTHONPATH"
_MESSAGE_CHARS = 4000


def _reexec_honouring_the_environment() -> None:
    """Under ``-I`` with one of `_KEPT` set: run again, once, with those (and only those ``PYTHON*``) honoured."""
    if not sys.flags.ignore_environment or os.environ.get(_STAGE) or not any(k in os.environ for k in _KEPT):
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") or k in _KEPT}
    env[_STAGE] = "1"
    if os.environ.get("PYTHONPATH"):
        env[_PYTHONPATH] = os.environ["PYTHONPATH"]
    flags = ["-s", "-P"] if sys.version_info >= (3, 11) else ["-s"]
    os.execve(sys.executable, [sys.executable, *flags, os.path.abspath(__file__), *sys.argv[1:]], env)


def _fail(message: str) -> None:
    sys.stderr.write(f"agentdescent runner: {message}\n")
    sys.stderr.flush()
    _exit(126)


def _take_channel() -> tuple[str, int]:
    """(the nonce, the channel's descriptor), both variables removed from the environment."""
    names = ("AGENTDESCENT_NONCE_FD", "AGENTDESCENT_CHANNEL_FD")
    raw = [os.environ.pop(name, "") for name in names]
    os.environ.pop(_STAGE, None)
    if not all(r.isdigit() for r in raw):
        _fail(f"{' and '.join(names)} must name descriptors; run through Sandbox.run(..., channel=True)")
    nonce_fd, channel_fd = int(raw[0]), int(raw[1])
    chunks = []
    try:
        while True:
            chunk = os.read(nonce_fd, 4096)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(nonce_fd)
        _fstat(channel_fd)
        os.set_inheritable(channel_fd, False)  # a subprocess of a test gets no copy
    except OSError as exc:
        _fail(f"cannot read the nonce or take the channel: {exc}")
    nonce = b"".join(chunks).decode("ascii", errors="replace").strip()
    if not nonce:
        _fail("the nonce pipe was empty")
    return nonce, channel_fd


def _scrub_path() -> list[str]:
    """Take the working folder and the runner's own folder off ``sys.path``; return what was taken (to put back)."""
    here = os.path.dirname(os.path.realpath(__file__))
    work = os.path.realpath(os.getcwd())
    taken = []
    for entry in list(sys.path):
        real = os.path.realpath(entry or ".")
        if real in (here, work) or real.startswith(work + os.sep):
            sys.path.remove(entry)
            taken.append(entry)
    return taken


def _refuse_compiled_files_of_the_project() -> None:
    """No compiled file under the working folder is read: a .pyc planted beside a test would stand in for it.

    Those of the standard library and of site-packages are still read (compiling them
    afresh would cost more than the whole suite); the project's are compiled from source.
    """
    import importlib.machinery

    work = os.path.realpath(os.getcwd()) + os.sep
    read = importlib.machinery.SourceFileLoader.get_data

    def get_data(self: importlib.machinery.SourceFileLoader, path: str) -> bytes:
        if str(path).endswith(".pyc") and os.path.realpath(path).startswith(work):
            raise OSError(f"{path}: the project's compiled files are not read")
        return read(self, path)

    importlib.machinery.SourceFileLoader.get_data = get_data  # type: ignore[method-assign]


if __name__ == "__main__":
    _reexec_honouring_the_environment()
    _NONCE, _CHANNEL = _take_channel()
    _TAKEN = _scrub_path()
    _refuse_compiled_files_of_the_project()

import contextlib  # noqa: E402 - after the channel and the path: nothing of the tree can stand in for these
import functools  # noqa: E402
import json  # noqa: E402
import json.encoder  # noqa: E402
import types  # noqa: E402

import _pytest.reports  # noqa: E402
import pytest  # noqa: E402

_quote = json.encoder.encode_basestring_ascii  # the C escaper, held: the line is built by hand
_TestReport = _pytest.reports.TestReport
_realpath, _sep, _isinstance, _type = os.path.realpath, os.sep, isinstance, type
_partial, _MethodType, _FunctionType = functools.partial, types.MethodType, types.FunctionType
_CODE_LIKE = (types.FunctionType, classmethod, staticmethod, property, type, types.BuiltinFunctionType)
_WATCHED = ("_pytest", "pytest", "pluggy", "json", "__main__")
_HOOKS = ("pytest_runtest_protocol", "pytest_runtest_makereport", "pytest_runtest_logreport",
          "pytest_runtest_logfinish", "pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown",
          "pytest_pyfunc_call", "pytest_report_teststatus", "pytest_collectreport", "pytest_make_collect_report",
          "pytest_collection_finish", "pytest_sessionfinish")


def _dump(value: object) -> str:
    """``value`` (str, bool, int, None, or a dict of them) as JSON, with only what was held from the start."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if _type(value) is int:
        return int.__repr__(value)  # type: ignore[arg-type]
    if _type(value) is str:
        return _quote(value)
    if _type(value) is dict:
        return "{" + ", ".join(_quote(k) + ": " + _dump(v) for k, v in value.items()) + "}"  # type: ignore[union-attr]
    return _quote(repr(value))


def _clip(text: str) -> str:
    if len(text) <= _MESSAGE_CHARS:
        return text
    half = _MESSAGE_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


class _Watch:
    """What pytest's own code was when the project could not yet have touched it; `changed` says what differs.

    Every function and class of the watched modules, every attribute of their classes
    (and which names a class has: a property added to `TestReport` counts), and the
    hook implementations present then.
    """

    def __init__(self, pluginmanager: object) -> None:
        self.work = _realpath(os.getcwd())
        self.entries: list[tuple[str, object, str, object]] = []  # (where, namespace, name, value)
        self.classes: list[tuple[str, object, frozenset[str]]] = []
        self.core: list[tuple[str, object, str, object]] = []  # checked after every test
        core = ("_pytest.reports", "_pytest.runner", "_pytest.skipping", "_pytest.main", "_pytest.python",
                "_pytest.outcomes", "pluggy._callers", "pluggy._hooks", "pluggy._result", "__main__")
        for name, module in list(sys.modules.items()):
            if module is None or not (name in _WATCHED or name.startswith(tuple(w + "." for w in _WATCHED[:4]))):
                continue
            space = vars(module)
            for attr, value in list(space.items()):
                if not (callable(value) or _isinstance(value, type)):
                    continue
                entry = (f"{name}.{attr}", space, attr, value)
                self.entries.append(entry)
                if name in core:
                    self.core.append(entry)
                if _isinstance(value, type) and getattr(value, "__module__", None) == name:
                    members = vars(value)
                    self.classes.append((f"{name}.{attr}", members, frozenset(members)))
                    for key, member in list(members.items()):
                        if _isinstance(member, _CODE_LIKE):
                            item = (f"{name}.{attr}.{key}", members, key, member)
                            self.entries.append(item)
                            if name in core:
                                self.core.append(item)
        self.hooks = {h: {id(i.function) for i in getattr(pluginmanager.hook, h).get_hookimpls()}  # type: ignore[attr-defined]
                      for h in _HOOKS if hasattr(pluginmanager.hook, h)}  # type: ignore[attr-defined]

    def inside(self, value: object) -> str | None:
        """Where ``value``'s code lives, if that is the project's folder (or nowhere to be seen); else None."""
        for _ in range(4):  # through the wrappers pytest's own patches use
            if _isinstance(value, (classmethod, staticmethod)):
                value = value.__func__
            elif _isinstance(value, property):
                value = value.fget
            elif _isinstance(value, _partial):
                value = value.func  # type: ignore[attr-defined]
            elif _isinstance(value, _MethodType):
                value = value.__func__
        if not _isinstance(value, _FunctionType):  # a class, or an instance: where its class's methods live
            kind = value if _isinstance(value, type) else _type(value)
            found = [self.inside(v) for k in kind.__mro__ for v in vars(k).values() if _isinstance(v, _FunctionType)]
            return next((f for f in found if f), None)
        path = _realpath(value.__code__.co_filename)
        return path if path == self.work or path.startswith(self.work + _sep) else None

    def changed(self, pluginmanager: object, full: bool) -> str | None:
        """What the project's code changed (None: nothing seen); ``full`` checks everything, else the core.

        A replacement whose code is installed (pytest's own ``legacypath`` patches `Config`
        at configure) is pytest's business; one whose code lives in the project's folder,
        or that has no Python code at all, is the project's.
        """
        for where, space, name, value in (self.entries if full else self.core):
            now = space.get(name, self)  # type: ignore[attr-defined]
            if now is not value:
                if now is self:
                    return f"{where} was deleted"
                found = self.inside(now)
                if found:
                    return f"{where} was replaced by {getattr(now, '__qualname__', type(now).__name__)} ({found})"
        if full:
            for where, members, names in self.classes:
                for key in frozenset(members) - names:  # type: ignore[arg-type]
                    found = self.inside(members[key])  # type: ignore[index]
                    if found:
                        return f"{where} gained {key} ({found})"
        for hook, known in self.hooks.items():
            for impl in getattr(pluginmanager.hook, hook).get_hookimpls():  # type: ignore[attr-defined]
                if id(impl.function) in known:
                    continue
                found = self.inside(impl.function)
                if found and os.path.basename(found) != "conftest.py":
                    return f"{getattr(impl.function, '__qualname__', impl.function)!r} ({found}) hooks {hook}"
        return None


def _outcome(reports: list) -> tuple[str, str]:
    """A test's outcome from its setup, call and teardown reports, as pytest's summary counts it."""
    outcome, message = "error", "pytest reported nothing for this test"
    for report in reports:
        text = _clip(report.longreprtext or "") if report.longrepr is not None else ""
        crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", "")
        if report.when == "call":
            if report.failed:
                outcome, message = "failed", (f"{crash}\n{text}" if crash else text)
            elif report.skipped:
                why = getattr(report, "wasxfail", None)
                outcome = "skipped"
                message = f"xfail: {why}" if why is not None else _skip_reason(report)
            else:
                outcome, message = "passed", ""
        elif report.failed:  # setup or teardown: an error, whatever the call did
            if outcome != "failed" or report.when == "setup":
                outcome = "error"
                message = f"error at {report.when}: {crash}\n{text}" if crash else f"error at {report.when}:\n{text}"
        elif report.when == "setup" and report.skipped:
            outcome = "skipped"
            why = getattr(report, "wasxfail", None)
            message = f"xfail: {why}" if why is not None else _skip_reason(report)
        elif report.when == "setup":
            outcome, message = "passed", ""  # until the call says otherwise
    return outcome, _clip(message.strip())


def _skip_reason(report: object) -> str:
    longrepr = getattr(report, "longrepr", None)
    if _isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr or "skipped")


class Reporter:
    """The plugin: one record per test on the channel, the end record at the session's end."""

    def __init__(self, nonce: str, channel: int) -> None:
        self._nonce, self._channel = nonce, channel
        self._seq = 0
        self._counts: dict[str, int] = {}
        self._reports: dict[str, list] = {}
        self._collect_only = False
        self._watch: _Watch | None = None
        self._tampered = False
        self._pluginmanager: object = None
        self.ended: int | None = None

    def _emit(self, record: dict) -> None:
        line = _dump({"n": self._nonce, "seq": self._seq, **record}) + "\n"
        self._seq += 1
        data = line.encode("utf-8", errors="replace")
        while data:
            try:
                data = data[_write(self._channel, data):]
            except OSError:  # the channel was closed under us: no end can be written, which says enough
                return

    def _record(self, node: str, outcome: str, message: str = "") -> None:
        self._counts[outcome] = self._counts.get(outcome, 0) + 1
        self._emit({"node": node, "outcome": outcome, "message": message})

    def _check(self, full: bool) -> None:
        if self._watch is None or self._tampered:
            return
        what = self._watch.changed(self._pluginmanager, full)
        if what is not None:
            self._tampered = True
            self._emit({"tampered": what})

    @pytest.hookimpl(tryfirst=True)
    def pytest_load_initial_conftests(self, early_config: pytest.Config) -> None:
        """Before the first conftest (the first project code): note pytest as it is, then put the project on the path."""
        self._pluginmanager = early_config.pluginmanager
        self._watch = _Watch(early_config.pluginmanager)
        here = _realpath(os.path.dirname(os.path.abspath(__file__)))
        given = os.environ.pop(_PYTHONPATH, "") or (os.environ.get("PYTHONPATH", "") if sys.flags.ignore_environment else "")
        entries = [os.getcwd(), *(p for p in given.split(os.pathsep) if p),
                   *(t for t in _TAKEN if _realpath(t or ".") != here)]
        for entry in reversed(entries):  # as ``python -m pytest`` has it: the folder first, then PYTHONPATH
            if entry not in sys.path:
                sys.path.insert(0, entry)

    def pytest_configure(self, config: pytest.Config) -> None:
        self._collect_only = bool(config.option.collectonly)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._record(report.nodeid, "collection error", _clip(str(report.longreprtext or "").strip()))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._check(full=True)
        if self._collect_only:
            for item in session.items:
                self._record(item.nodeid, "collected")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if _type(report) is not _TestReport and not self._tampered:
            self._tampered = True
            self._emit({"tampered": f"a report of {_type(report).__qualname__}, not pytest's TestReport"})
        self._reports.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self._check(full=False)
        self._record(nodeid, *_outcome(self._reports.pop(nodeid, [])))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, exitstatus: int) -> None:
        self._check(full=True)
        for nodeid, reports in list(self._reports.items()):  # started, never finished (an interrupt)
            self._record(nodeid, *_outcome(reports))
        self._reports.clear()
        self.ended = int(exitstatus)
        self._emit({"end": True, "exitstatus": self.ended, "counts": dict(self._counts)})


def _never_read_a_rewritten_pyc(*args: object, **kwargs: object) -> None:
    """pytest's reader of its cached, assertion-rewritten test modules, replaced: nothing is cached."""
    return None


def main(argv: list[str]) -> int:
    """Run pytest with ``argv`` and the reporter; the exit status pytest gives."""
    import _pytest.assertion.rewrite

    # A test module is always rewritten from its source, never read back from a planted
    # pytest .pyc (with PYTHONDONTWRITEBYTECODE none is written, so nothing is lost).
    _pytest.assertion.rewrite._read_pyc = _never_read_a_rewritten_pyc  # type: ignore[assignment]
    reporter = Reporter(_NONCE, _CHANNEL)
    code = int(pytest.main(argv, plugins=[reporter]))
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return code


if __name__ == "__main__":
    _exit(main(sys.argv[1:]))  # no exit hook of the project runs after the end record
