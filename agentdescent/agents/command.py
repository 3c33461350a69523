"""Command-line programs as models: `CommandProvider` runs one, `CommandAgent` is an `LLMAgent` over it.

This module owns how a call to a language model becomes one run of a program: the prompt
(the messages' contents joined by blank lines, on standard input or in ``argv`` through a
``{prompt}`` placeholder), the program's environment (`agentdescent.processes`' scrubbed
rule plus an explicit ``env=``), its folder (a fresh temporary one, or a copy of the file
tree being evolved), the timeout that kills its whole process group, the bounded read of
its output, the usage it reports (or the offline estimate), and the typed failures
(`agentdescent.errors.ProviderError`'s family). What a reply *means* (a rule, a rewrite,
code edits) is `LLMAgent`'s and `agentdescent.agents.proposals`'s: a `CommandAgent` parses
replies exactly as an `LLMAgent` does, because it is one.

It must not import `agentdescent.code` (a tree reaches it as an object with ``parse``,
``materialize`` and ``load``), must not pass the engine's environment through but
`agentdescent.processes`' four variables and the ``env=`` the caller chose, and must never
read a program's output unbounded.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import re
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import (
    InvalidArgument,
    InvalidArgumentType,
    ProviderBadRequestError,
    ProviderDependencyError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from ..messages import check_messages, content_text, messages_to_prompt
from ..model import Completion, Provider, check_options
from ..processes import FIXED_VARIABLES, kill_group, scrubbed_environment, wait_exit
from ..types import sanitize_text
from ..usage import Usage
from ..validation import check_int, check_seconds
from .llm import LLMAgent
from .proposals import ParsedProposal

__all__ = ["DEFAULT_MAX_OUTPUT_BYTES", "TEMPFAIL_EXIT", "CommandAgent", "CommandProvider"]

log = logging.getLogger("agentdescent.agents.command")

#: The most of a program's standard output (and, separately, its standard error) that is read.
DEFAULT_MAX_OUTPUT_BYTES = 1_000_000
#: The exit status (sysexits' EX_TEMPFAIL) a program uses to say "temporary failure, try again".
TEMPFAIL_EXIT = 75

_PLACEHOLDERS = ("{prompt}", "{system}", "{model}", "{max_tokens}", "{temperature}")
_OPTION_PLACEHOLDERS = {"model": "{model}", "max_tokens": "{max_tokens}", "temperature": "{temperature}"}
#: ``llm --usage``'s line on standard error: ``Token usage: 1,234 input, 56 output``.
_USAGE_LINE = re.compile(r"token usage:\s*([\d,]+)\s+input,\s*([\d,]+)\s+output", re.IGNORECASE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STAT_NAMES = ("command_calls", "command_failures", "command_timeouts", "command_cut", "usage_reported",
               "usage_estimated", "tree_edits")


def _check_argv(argv: Any, prompt: str) -> list[str]:
    if isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence) or not all(isinstance(a, str) for a in argv):
        raise InvalidArgumentType(f"CommandAgent(argv={argv!r:.120}): give the program and its arguments as a "
                                  "list of str, e.g. ['llm', '-m', 'smollm2-135m']")
    out = list(argv)
    if not out or not out[0]:
        raise InvalidArgument(f"CommandAgent(argv={argv!r}): give the program and its arguments")
    if any("\0" in a for a in out):
        raise InvalidArgument("CommandAgent(argv=...): an argument holds a NUL character")
    if prompt not in ("stdin", "{prompt}"):
        raise InvalidArgument(f"CommandAgent(prompt={prompt!r}): use 'stdin' (the prompt on standard input) or "
                              "'{prompt}' (the prompt in argv, where an argument holds {prompt})")
    placed = any("{prompt}" in a for a in out)
    if prompt == "{prompt}" and not placed:
        raise InvalidArgument(f"CommandAgent(argv={out!r:.200}, prompt='{{prompt}}'): no argument holds {{prompt}}; "
                              "put it where the program takes its prompt, or use prompt='stdin'")
    if prompt == "stdin" and placed:
        raise InvalidArgument(f"CommandAgent(argv={out!r:.200}): an argument holds {{prompt}} but prompt='stdin'; "
                              "pass prompt='{prompt}' to put the prompt there")
    return out


def _check_env(env: Any) -> tuple[dict[str, str], tuple[str, ...]]:
    """``env=`` as (values set, names passed from the parent's environment)."""
    if env is None:
        return {}, ()
    if isinstance(env, Mapping):
        names, values = list(env), dict(env)
    elif isinstance(env, Sequence) and not isinstance(env, (str, bytes)):
        names, values = list(env), {}
    else:
        raise InvalidArgumentType(f"CommandAgent(env={type(env).__name__}): give a list of variable names to pass "
                                  "from this process's environment, or a mapping of names to str")
    for name in names:
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise InvalidArgument(f"CommandAgent(env=...): {name!r} is not a variable name")
        if name in FIXED_VARIABLES:
            raise InvalidArgument(f"CommandAgent(env=...): {name} always points inside the program's own "
                                  "temporary folder; leave it out (point the program at its config with its "
                                  "own variable, such as LLM_USER_PATH for llm)")
        if name in values and (not isinstance(values[name], str) or "\0" in values[name]):
            raise InvalidArgumentType(f"CommandAgent(env={{{name!r}: ...}}): use a str value without NUL")
    return values, tuple(n for n in names if n not in values)


def _whole_file(path: str, content: str) -> str:
    """A whole-file replacement block (`agentdescent.code.edits`): the path, then the file in a fence."""
    longest = max((len(m) for m in re.findall(r"`+", content)), default=0)
    fence = "`" * max(3, longest + 1)
    body = content if content.endswith("\n") or not content else content + "\n"
    return f"{path}\n{fence}\n{body}{fence}\n"


class CommandProvider(Provider):
    """A `Provider` whose model is a program: it reads the prompt and prints the reply.

    **The prompt.** The messages' contents joined by a blank line, roles dropped
    (`agentdescent.messages.messages_to_prompt`): for a solve call the artifact, then the
    task; for a propose call the proposal template's text. With ``prompt="stdin"`` it is
    written to the program's standard input (UTF-8) and stdin is closed; with
    ``prompt="{prompt}"`` it replaces ``{prompt}`` in the arguments (stdin is empty). An
    argument holding ``{system}`` receives the system messages instead, and they leave the
    prompt (``llm -s {system}``). ``{model}``, ``{max_tokens}`` and ``{temperature}``
    receive those options; an option given to a program with no placeholder for it raises
    (no knob is dropped silently).

    **The reply.** With ``reply="text"`` (the default) standard output is the reply. With
    ``reply="json"`` it must be one JSON object ``{"text": ..., "usage": {"prompt_tokens": N,
    "completion_tokens": M, "cached_tokens": K}, "finish_reason": ...}`` (all but ``text``
    optional). Usage is taken from that object, or else from the last standard-error line
    ``Token usage: N input, M output`` (what ``llm --usage`` prints); otherwise it is
    `Usage.estimate` of prompt and reply, and counted as ``usage_estimated`` in `stats`.
    Output past ``max_output_bytes`` is read and thrown away, never held: the reply is cut
    there and comes back with ``finish_reason="length"`` (an agent treats it as a reply
    cut off by the per-call limit).

    **Failures.** A program that is not there or not executable: `ProviderDependencyError`
    naming ``argv[0]``. The timeout: the whole process group is killed (SIGKILL) and reaped,
    then `ProviderTimeoutError` (retryable). Exit status 75 (EX_TEMPFAIL) or death by a
    signal: `ProviderUnavailableError` (retryable: the program says, or the system shows, that
    the failure is transient). Any other non-zero exit: `ProviderResponseError`, not
    retryable: a program that fails on a prompt (bad flags, unknown model, no key, server
    down) fails the same way on the next, so the run ends at once with the program's
    standard error in the message instead of spending its budget on retries. A
    ``{prompt}`` argument too long for the system: `ProviderBadRequestError` (use stdin).

    **The environment.** Only ``PATH``, ``LANG``, ``LC_ALL`` and ``TZ`` of this process
    (`agentdescent.processes.scrubbed_environment`), ``HOME`` and ``TMPDIR`` in a fresh
    temporary folder removed after the call, and what ``env=`` names: a list of names
    passes those variables from this process (an API key variable, ``LLM_USER_PATH``), a
    mapping sets values. The program runs in a fresh empty folder, or in a copy of a file
    tree inside `in_tree`.

    Thread-safe: each call is its own process and folder.

    Args:
        argv: the program and its arguments (list of str); placeholders as above.
        prompt: ``"stdin"`` or ``"{prompt}"``.
        timeout: seconds a call may take (> 0).
        env: variable names to pass, or a mapping of values (never HOME/TMPDIR/TMP/TEMP).
        reply: ``"text"`` or ``"json"``.
        max_output_bytes: the most of standard output (and of standard error) kept.
        usage: the meter every call records into (a new one by default).
    """

    def __init__(self, argv: Sequence[str], *, prompt: str = "stdin", timeout: float = 120.0,
                 env: Sequence[str] | Mapping[str, str] | None = None, reply: str = "text",
                 max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES, usage: Usage | None = None) -> None:
        self.argv = _check_argv(argv, prompt)
        self.prompt = prompt
        self.timeout = check_seconds(timeout, "timeout", positive=True, owner="CommandAgent")
        self.env_values, self.env_names = _check_env(env)
        if reply not in ("text", "json"):
            raise InvalidArgument(f"CommandAgent(reply={reply!r}): use 'text' (standard output is the reply) or "
                                  "'json' (one object with text, usage and finish_reason)")
        self.reply = reply
        self.max_output_bytes = check_int(max_output_bytes, "max_output_bytes", low=1, owner="CommandAgent",
                                          hint="the most of the program's output kept, in bytes")
        self.usage = usage if usage is not None else Usage()
        self._lock = threading.Lock()
        self._stats = dict.fromkeys(_STAT_NAMES, 0)
        self._tree: contextvars.ContextVar[tuple[Any, str] | None] = contextvars.ContextVar("tree", default=None)

    def __repr__(self) -> str:
        return f"CommandProvider({self.argv[0]!r}, prompt={self.prompt!r})"

    def stats(self) -> dict[str, int]:
        """Counters: ``command_calls`` (programs run), ``command_failures`` (calls that raised),
        ``command_timeouts``, ``command_cut`` (replies cut at ``max_output_bytes``),
        ``usage_reported`` / ``usage_estimated`` (calls whose tokens the program reported / that
        were estimated) and ``tree_edits`` (calls whose reply came from files changed in the tree copy)."""
        with self._lock:
            return dict(self._stats)

    def _bump(self, name: str) -> None:
        with self._lock:
            self._stats[name] += 1

    @contextlib.contextmanager
    def in_tree(self, tree: Any, rendered: str) -> Iterator[None]:
        """Run this thread's calls inside a fresh copy of ``tree.parse(rendered)``.

        Files the program changes there come back as whole-file replacement blocks (the
        reply, so the tree parses, applies and checks them like any other edits); when it
        changes none, its printed reply is the reply. A file it deletes is not a change.
        """
        token = self._tree.set((tree, rendered))
        try:
            yield
        finally:
            self._tree.reset(token)

    # -- one call ------------------------------------------------------------------------

    def _command(self, messages: list[dict[str, Any]], opts: Mapping[str, Any]) -> tuple[list[str], str]:
        if "tools" in opts:
            raise InvalidArgumentType(f"{self!r}.complete(tools=...): a command-line program takes no tools")
        values = {}
        for name, holder in _OPTION_PLACEHOLDERS.items():
            placed = any(holder in a for a in self.argv)
            if name in opts and not placed:
                raise InvalidArgumentType(
                    f"{self!r}.complete({name}={opts[name]!r}): argv has no {holder} to pass it in; add one "
                    f"(e.g. '-o', 'max_tokens', '{{max_tokens}}' for llm) or do not set it")
            if placed and name not in opts:
                raise InvalidArgument(f"{self!r}: argv holds {holder} but the call gave no {name}; set it on "
                                      "the agent (model=, call_tokens=, temperature=)")
            if placed:
                values[holder] = str(opts[name])
        if any("{system}" in a for a in self.argv):
            values["{system}"] = "\n\n".join(content_text(m.get("content")) for m in messages
                                             if m.get("role") == "system")
            messages = [m for m in messages if m.get("role") != "system"]
        text = messages_to_prompt(messages)
        values["{prompt}"] = text
        pattern = re.compile("|".join(re.escape(p) for p in _PLACEHOLDERS))
        argv = [pattern.sub(lambda m: values.get(m.group(0), m.group(0)), a) for a in self.argv]
        return argv, text

    def _environment(self, root: str) -> dict[str, str]:
        env = scrubbed_environment(os.path.join(root, "home"), os.path.join(root, "tmp"))
        env.update({name: os.environ[name] for name in self.env_names if name in os.environ})
        env.update(self.env_values)
        return env

    def complete(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> Completion:
        """Run the program once on ``messages`` and return its reply (see the class docstring).

        Raises:
            ProviderDependencyError: ``argv[0]`` is not there or not executable.
            ProviderTimeoutError: the call took longer than ``timeout`` (the group is killed).
            ProviderUnavailableError: exit status 75 or death by a signal.
            ProviderResponseError: another non-zero exit, or ``reply="json"`` output that is
                not the JSON object described.
            ProviderBadRequestError: the ``{prompt}`` argument is too long for the system.
            TypeError: an option the program has no placeholder for, or ``tools``.
        """
        owner = repr(self)
        opts = check_options(options, owner)
        argv, prompt = self._command(check_messages(messages, owner), opts)
        root = tempfile.mkdtemp(prefix="agentdescent-command-")
        try:
            for sub in ("home", "tmp", "work"):
                os.mkdir(os.path.join(root, sub))
            work = os.path.join(root, "work")
            tree = self._tree.get()
            state = None
            if tree is not None:
                state = tree[0].parse(tree[1])
                tree[0].materialize(state, work)
            self._bump("command_calls")
            try:
                out, err, cut = self._run(argv, prompt, work, self._environment(root))
                text, call, finish = self._reply(out, err, cut)
            except Exception:
                self._bump("command_failures")
                raise
            if tree is not None:
                after = tree[0].load(work)
                changed = [p for p in sorted(after) if after[p] != state.get(p)]
                if changed:
                    self._bump("tree_edits")
                    text = "\n".join(_whole_file(p, after[p]) for p in changed)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        if call is None:
            call = Usage.estimate(prompt, text)
            self._bump("usage_estimated")
        else:
            self._bump("usage_reported")
        self.usage.add(call)
        return Completion(text, call, finish)

    def _run(self, argv: list[str], prompt: str, work: str, env: dict[str, str]) -> tuple[bytes, bytes, bool]:
        """Start the program, feed it, read both outputs bounded, end its group; (stdout, stderr, cut)."""
        stdin = subprocess.PIPE if self.prompt == "stdin" else subprocess.DEVNULL
        try:
            proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=work,
                                    env=env, start_new_session=True)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            raise ProviderDependencyError(
                f"{self!r}: cannot run {argv[0]!r} ({exc.strerror or exc}); install it or give its full path as "
                f"argv[0] (the program's PATH is this process's: {os.environ.get('PATH', '')[:200]!r})") from None
        except OSError as exc:
            if exc.errno == 7:  # E2BIG: the {prompt} argument
                raise ProviderBadRequestError(
                    f"{self!r}: the prompt ({len(prompt)} characters) is too long for an argument; use "
                    "prompt='stdin' if the program reads standard input") from None
            raise ProviderDependencyError(f"{self!r}: cannot run {argv[0]!r}: {exc}") from None
        start = time.monotonic()
        try:
            out, err, cut, timed_out = self._exchange(proc, prompt.encode("utf-8") if self.prompt == "stdin" else None,
                                                      start + self.timeout)
        finally:
            kill_group(proc.pid)  # on timeout, and children left behind after a normal exit
            with contextlib.suppress(subprocess.TimeoutExpired):  # stuck in the kernel: give up
                proc.wait(timeout=5.0)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        if timed_out:
            self._bump("command_timeouts")
            raise ProviderTimeoutError(
                f"{self!r}: no reply within timeout={self.timeout:g}s; its process group was killed. Raise "
                "CommandAgent(timeout=...) for a slow model")
        code = proc.returncode
        if code:
            tail = " ".join(_ANSI.sub("", err.decode("utf-8", "replace")).split())[-400:] or "(nothing)"
            what = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            message = f"{self!r}: {argv[0]!r} {what}; its standard error ends: {tail}"
            if code < 0 or code == TEMPFAIL_EXIT:
                raise ProviderUnavailableError(message + " (a transient failure: a later call may succeed)")
            raise ProviderResponseError(message + " (exit 75, EX_TEMPFAIL, marks a failure worth retrying)")
        return out, err, cut

    def _exchange(self, proc: subprocess.Popen, data: bytes | None, deadline: float
                  ) -> tuple[bytes, bytes, bool, bool]:
        """Write ``data`` and read stdout/stderr until both close or ``deadline``; keep at most the byte limit."""
        cap = self.max_output_bytes
        out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        bufs = {out_fd: bytearray(), err_fd: bytearray()}
        cut = exited = False
        view, offset = memoryview(data or b""), 0
        in_fd = proc.stdin.fileno() if data is not None else None

        def result(timed_out: bool) -> tuple[bytes, bytes, bool, bool]:
            return bytes(bufs[out_fd]), bytes(bufs[err_fd]), cut, timed_out

        with selectors.DefaultSelector() as sel:
            for fd in (out_fd, err_fd):
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ)
            if in_fd is not None:
                os.set_blocking(in_fd, False)
                if data:
                    sel.register(in_fd, selectors.EVENT_WRITE)
                else:
                    proc.stdin.close()
            while sel.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return result(True)
                events = sel.select(min(remaining, 0.2))
                if not events and not exited and wait_exit(proc, 0):
                    exited = True  # the leader is gone: end its group so no child holds the pipes open
                    kill_group(proc.pid)
                for key, _ in events:
                    fd = key.fd
                    if fd == in_fd:
                        try:
                            offset += os.write(fd, view[offset:offset + 65536])
                        except BrokenPipeError:
                            offset = len(view)  # the program stopped reading its input: not an error here
                        except BlockingIOError:
                            continue
                        if offset >= len(view):
                            sel.unregister(fd)
                            proc.stdin.close()
                        continue
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(fd)
                        continue
                    room = cap - len(bufs[fd])
                    if len(chunk) > room:  # read on, keep nothing more: the program is never blocked
                        cut = cut or fd == out_fd
                    bufs[fd] += chunk[:max(room, 0)]
        return result(not wait_exit(proc, max(deadline - time.monotonic(), 0)))

    def _reply(self, out: bytes, err: bytes, cut: bool) -> tuple[str, Usage | None, str | None]:
        """The reply's text, the usage the program reported (or None) and the finish reason."""
        text = out.decode("utf-8", "replace")
        if cut:
            self._bump("command_cut")
            text = text.rstrip("\ufffd")  # a character split by the cut
            log.warning("%r: the output passed max_output_bytes=%d and was cut there", self, self.max_output_bytes)
        call, finish = None, "length" if cut else None
        if self.reply == "json":
            try:
                data = json.loads(text)
                if not isinstance(data, dict) or not isinstance(data.get("text"), str):
                    raise ValueError("not an object with a 'text' string")
                reported = data.get("usage")
                if reported is not None:
                    if not isinstance(reported, Mapping):
                        raise ValueError("'usage' is not an object")
                    call = Usage(int(reported.get("prompt_tokens", 0)), int(reported.get("completion_tokens", 0)),
                                 int(reported.get("cached_tokens", 0)), 1)
            except (ValueError, TypeError) as exc:
                raise ProviderResponseError(
                    f"{self!r}: reply='json' but the output is not one JSON object with a 'text' string ({exc}); "
                    f"it begins {text[:120]!r}") from None
            text = data["text"]
            finish = data.get("finish_reason") if isinstance(data.get("finish_reason"), str) else finish
        if call is None:
            lines = _USAGE_LINE.findall(_ANSI.sub("", err.decode("utf-8", "replace")))
            if lines:
                prompt_tokens, completion_tokens = (int(n.replace(",", "")) for n in lines[-1])
                call = Usage(prompt_tokens, completion_tokens, 0, 1)
        return sanitize_text(text), call, finish


class CommandAgent(LLMAgent):
    """An `Agent` whose model is a command-line program: an `LLMAgent` over a `CommandProvider`.

    Templates, proposal modes (``"rule"``, ``"rewrite"``, ``"edit"``), conversations and
    the parsing of replies are `LLMAgent`'s, unchanged; how the program is run, fed,
    timed out, metered and failed is `CommandProvider`'s (read its docstring). With
    ``tree=`` (an `agentdescent.code.FileTree`, in ``proposal="edit"`` mode) each call runs
    in a fresh copy of the tree being evolved, and files the program changes there come
    back as edits that the tree applies and checks like any other (`CommandProvider.in_tree`).

    Args:
        argv: the program and its arguments (``["llm", "-m", "smollm2-135m", "-u"]``).
        prompt: ``"stdin"`` or ``"{prompt}"`` (an argument holds the prompt).
        timeout: seconds one call may take.
        env: variable names to pass from this process (a key variable), or a mapping of values.
        reply: ``"text"`` or ``"json"`` (see `CommandProvider`).
        max_output_bytes: the most of a reply kept (the rest is read and dropped).
        tree: the `FileTree` whose copy the program works in (``None``: an empty folder).
        usage: the meter every call records into.
        **options: any other `LLMAgent` argument (``proposal``, ``propose_template``,
            ``model``, ``call_tokens``, ``propose_with``...).

    Raises:
        TypeError / ValueError: a bad ``argv``, ``prompt``, ``env``, ``reply`` or limit
            (`agentdescent.errors.InvalidArgument`, naming it), or a bad `LLMAgent` argument;
            a ``tree`` without ``parse``, ``materialize`` and ``load``.
    """

    def __init__(self, argv: Sequence[str], *, prompt: str = "stdin", timeout: float = 120.0,
                 env: Sequence[str] | Mapping[str, str] | None = None, reply: str = "text",
                 max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES, tree: Any = None, usage: Usage | None = None,
                 **options: Any) -> None:
        self.command = CommandProvider(argv, prompt=prompt, timeout=timeout, env=env, reply=reply,
                                       max_output_bytes=max_output_bytes, usage=usage)
        missing = [m for m in ("parse", "materialize", "load") if tree is not None and not callable(getattr(tree, m, None))]
        if missing:
            raise InvalidArgumentType(f"CommandAgent(tree={tree!r:.80}): a tree needs {', '.join(missing)}; give "
                                      "the agentdescent.code.FileTree being evolved")
        self.tree = tree
        super().__init__(self.command, **options)

    def __repr__(self) -> str:
        return f"CommandAgent({self.command.argv!r:.120}, prompt={self.command.prompt!r})"

    def stats(self) -> dict[str, int]:
        """`LLMAgent.stats` plus the program's counters (`CommandProvider.stats`)."""
        return {**super().stats(), **self.command.stats()}

    def _scope(self, rendered: str) -> contextlib.AbstractContextManager[None]:
        return self.command.in_tree(self.tree, rendered) if self.tree is not None else contextlib.nullcontext()

    def solve(self, rendered: str, task: Any) -> str:
        """`LLMAgent.solve`, the program run in a copy of the tree when ``tree`` is given."""
        with self._scope(rendered):
            return super().solve(rendered, task)

    def explain_proposal(self, rendered: str, task: Any, output: str, reward: float, *,
                         failures: Any = ()) -> ParsedProposal:
        """`LLMAgent.explain_proposal` (and so `LLMAgent.propose`), the program run in a copy of the tree when ``tree`` is given."""
        with self._scope(rendered):
            return super().explain_proposal(rendered, task, output, reward, failures=failures)
