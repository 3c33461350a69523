"""Where the code of an evolving file tree runs: a fresh folder, a scrubbed environment, limits.

This module owns running one command on one state of a tree (`Sandbox.run`): a fresh
temporary root per run (``work/``, the command's folder, plus ``home/`` and ``tmp/``),
the environment the command sees (nothing of the engine's but ``PATH``, ``LANG``,
``LC_ALL`` and ``TZ``, so no API key), the wall-clock timeout that kills the whole process
group, an optional write-only results channel with a nonce, and the isolation the platform
offers, applied in a fresh process by the launcher ``agentdescent/code/_jail.py``: mount
and PID namespaces of its own (everything outside the root read-only, shared scratch and
homes hidden, everything it starts ending with it), an unprivileged identity when the
engine is root, a control group limiting the whole run, a network namespace, Landlock,
an empty capability set, resource limits, and a parent-death signal.
What holds on this machine is probed once per process (`agentdescent.code.probe`) and said
plainly by `Sandbox.protections` (`agentdescent.code.protections`); where something is
missing the run degrades (a Python audit-hook guard, the ``nobody`` user) and says so, and
``require_isolation=True`` refuses instead. What a run is given is checked by
`agentdescent.code.sandbox_args`; what the command sees of the filesystem is decided by
`agentdescent.code.view`; the root's naming, sweep and removal are `agentdescent.code.roots`'.

Every run still going is known: `Sandbox.stop` ends a sandbox's runs (a reward closed, a
command stopped by a signal), and a process's exit ends those left, so a run on a thread
given up on (Ctrl-C) leaves neither its root nor its process group behind.

It must not change the state of the engine's own process (no ``unshare``, no rlimit, no
Landlock outside the launcher, no signal handler), must not let any variable of
``os.environ`` through but those four (and, with a channel, its two descriptors), must not
leave a root behind, and knows nothing of tests, junit or file-tree strategies
(`agentdescent.code`'s other modules build on it).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ..errors import InvalidArgument, SandboxUnavailable
from ..processes import kill_group as _kill_group
from ..processes import scrubbed_environment
from ..processes import wait_exit as _wait_exit
from ..validation import check_bool, check_int, check_real, check_seconds
from . import protections
from .probe import _JAIL, _Platform, _platform
from .probe import _nobody as _nobody
from .roots import _PREFIX as _PREFIX
from .roots import (
    _READ_BACK_BYTES,
    _clip_file,
    _hand_over,
    _is_root,
    _owner_prefix,
    _placeholders,
    _read_back,
    _remove_groups,
    _remove_tree,
    _sweep_once,
)
from .sandbox_args import _ENV_NAME as _ENV_NAME
from .sandbox_args import _FIXED as _FIXED
from .sandbox_args import _SECRET_NAME as _SECRET_NAME
from .sandbox_args import (
    _check_base,
    _check_command,
    _check_env,
    _check_relative,
    _check_strings,
    _check_tree,
)
from .view import _hidden_folders, _inside, _kept_folders

__all__ = ["Sandbox", "SandboxRun"]

_IGNORED = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "*.pyc", ".venv", "venv",
                                  "node_modules")


@dataclass(frozen=True)
class SandboxRun:
    """What one `Sandbox.run` did: how it ended, how long it took, what it printed and left.

    Attributes:
        returncode: the exit status (negative: killed by that signal); None when killed on
            its timeout.
        timed_out: the wall-clock timeout killed it.
        seconds: the command's wall time.
        stdout: its standard output, cut to ``max_output_chars`` (head and tail kept, a
            marker in the middle says how much was cut).
        stderr: its standard error, cut the same way.
        files: the ``read_back`` files that existed after the run (relative path -> text,
            decoded as UTF-8 with errors replaced, each capped at 5 MB).
        signal: the signal that ended it, if any (SIGKILL from the timeout, the memory limit...).
        limits: the limits it ran under (``timeout``, ``grace``, ``memory_mb``,
            ``cpu_seconds``, ``file_mb``), for `describe`.
        channel: with ``run(..., channel=True)``, what the command wrote to its results
            descriptor (decoded, capped at 5 MB); else None.
        nonce: with ``channel=True``, the run's nonce (32 hex digits) the command was given
            to read once; a record without it was not written by whoever read it.
    """

    returncode: int | None
    timed_out: bool
    seconds: float
    stdout: str
    stderr: str
    files: dict[str, str]
    signal: int | None = None
    limits: dict[str, float | None] = field(default_factory=dict)
    channel: str | None = None
    nonce: str | None = None

    @property
    def ok(self) -> bool:
        """It exited with status 0 within its timeout."""
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        """How the run ended, in one line: ``"exit 0 after 0.42 s"``, ``"killed after its 2 s timeout (+1 s grace)"``."""
        if self.timed_out:
            return (f"killed after its {_num(self.limits.get('timeout'))} s timeout "
                    f"(+{_num(self.limits.get('grace'))} s grace)")
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            why = {signal.SIGKILL: "memory_mb", signal.SIGSEGV: "memory_mb",
                   signal.SIGXCPU: "cpu_seconds", signal.SIGXFSZ: "file_mb"}.get(self.signal)
            limit = self.limits.get(why) if why else None
            hint = {"memory_mb": f" (over the {_num(limit)} MB memory limit?)",
                    "cpu_seconds": f" (over its {_num(limit)} s CPU limit)",
                    "file_mb": f" (a file over the {_num(limit)} MB limit)"}.get(why, "") if limit else ""
            return f"killed by {name} after {_secs(self.seconds)} s{hint}"
        line = f"exit {self.returncode} after {_secs(self.seconds)} s"
        first = self.stderr.lstrip().splitlines()[0] if self.stderr.strip() else ""
        if self.returncode in (126, 127) and first.startswith("agentdescent sandbox:"):
            line += f" ({first})"
        return line


def _num(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def _secs(seconds: float) -> str:
    """A duration for a message, to two figures: ``0.42``, ``3.1``, ``75``."""
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"


# --------------------------------------------------------------------------- the sandbox


class Sandbox:
    """Runs commands on a tree in a fresh temporary folder, isolated as far as the platform allows.

    Each `run` gets its own root, removed afterwards; the command sees a scrubbed
    environment, runs under resource limits and a wall-clock timeout that kills its whole
    process group, and (on Linux with Landlock) can write only inside its root, read no
    other process's /proc entry and signal nothing outside it. `protections` says what holds
    here. Thread-safe: any number of runs may go at once.

    Args:
        timeout: the command's wall-clock limit in seconds (``run`` may override it).
        grace: how long to wait, after the kill, for the process to be gone.
        memory_mb: the address-space limit per process in MB (>= 64), or None for none.
        cpu_seconds: the CPU-time limit per process; None: ``timeout + grace`` rounded up.
        file_mb: the largest file a process may write, in MB, or None for no limit.
        max_output_chars: stdout and stderr are each cut to this many characters (>= 100).
        network: let the command use the network (False: cut it off where the platform can).
        env: extra environment variables for the command; no secrets (a name holding KEY,
            TOKEN, SECRET or PASSWORD, or a value starting ``sk-``, is refused).
        require_isolation: refuse (`SandboxUnavailable`) rather than run with weaker isolation
            when Landlock, a network block with ``network=False``, or (run as root) an
            unprivileged identity in namespaces of its own, is missing.
        disk_mb: the size of the command's scratch space (its HOME and TMPDIR, a tmpfs of
            its own where the platform has mount namespaces; it counts against the memory
            limit too). None: 1024.
        max_processes: the most processes and threads the whole run may have at once (a
            control group's ``pids.max``, where the platform offers one), or None.
        unix_sockets: let the command make Unix sockets that can connect to a name (with
            ``network=False`` they are refused where seccomp is had, since a socket file on
            a shared disk is a way out of the network namespace; ``socketpair`` always works).

    Raises:
        InvalidArgument: a knob out of range, or an ``env`` entry that looks like a secret.
        InvalidArgumentType: a knob of the wrong type.
        SandboxUnavailable: ``require_isolation`` and the isolation is missing here.
    """

    def __init__(self, timeout: float = 60.0, *, grace: float = 2.0, memory_mb: int | None = 2048,
                 cpu_seconds: float | None = None, file_mb: int | None = 64, max_output_chars: int = 20_000,
                 network: bool = False, env: Mapping[str, str] | None = None,
                 require_isolation: bool = False, disk_mb: int | None = 512,
                 max_processes: int | None = 256, unix_sockets: bool = False) -> None:
        owner = "Sandbox"
        self.timeout = check_seconds(timeout, "timeout", positive=True, owner=owner,
                                     hint="the command's wall-clock limit")
        self.grace = check_seconds(grace, "grace", owner=owner, hint="the wait after the kill")
        self.memory_mb = check_int(memory_mb, "memory_mb", low=64, optional=True, owner=owner,
                                   hint="the address-space limit in MB; None for none")
        self.cpu_seconds = check_real(cpu_seconds, "cpu_seconds", low=0.0, low_open=True, optional=True,
                                      owner=owner, hint="None: timeout + grace")
        self.file_mb = check_int(file_mb, "file_mb", low=1, optional=True, owner=owner,
                                 hint="the largest file in MB; None for no limit")
        self.max_output_chars = check_int(max_output_chars, "max_output_chars", low=100, owner=owner)
        self.network = check_bool(network, "network", owner=owner)
        self.env = _check_env(env)
        self.require_isolation = check_bool(require_isolation, "require_isolation", owner=owner)
        self.disk_mb = check_int(disk_mb, "disk_mb", low=1, optional=True, owner=owner,
                                 hint="the command's scratch space (HOME and TMPDIR) in MB; None: 1024")
        self.max_processes = check_int(max_processes, "max_processes", low=8, optional=True, owner=owner,
                                       hint="the most processes and threads a run may have at once; None for no limit")
        self.unix_sockets = check_bool(unix_sockets, "unix_sockets", owner=owner)
        if self.require_isolation:
            self._require(_platform())

    def __repr__(self) -> str:
        extras = f", env={sorted(self.env)!r}" if self.env else ""
        return (f"Sandbox(timeout={self.timeout:g}, grace={self.grace:g}, memory_mb={self.memory_mb}, "
                f"cpu_seconds={self.cpu_seconds}, file_mb={self.file_mb}, "
                f"max_output_chars={self.max_output_chars}, network={self.network}{extras}, "
                f"require_isolation={self.require_isolation}, disk_mb={self.disk_mb}, "
                f"max_processes={self.max_processes}, unix_sockets={self.unix_sockets})")

    def _require(self, here: _Platform) -> None:
        missing = []
        if not here.landlock_abi:
            missing.append("Landlock filesystem isolation (Linux 5.13 or later with Landlock enabled)")
        if not self.network and not here.net and here.landlock_abi < 4:
            missing.append("a network block (a network namespace, or Landlock ABI 4 or later)")
        if _is_root() and not here.identity:
            missing.append("an unprivileged identity for the command (mount and PID namespaces, which "
                           "a root engine needs to drop root safely)")
        if missing:
            raise SandboxUnavailable(
                f"Sandbox(require_isolation=True): {' and '.join(missing)} not available on "
                f"this {here.system} machine; run on a platform that has it, or pass "
                "require_isolation=False to run with the weaker protections Sandbox.protections lists")

    @property
    def protections(self) -> dict[str, str]:
        """What isolation holds on this machine, one plain sentence per aspect.

        Keys: ``"filesystem"``, ``"identity"``, ``"secrets"``, ``"network"``, ``"limits"``,
        ``"processes"``, ``"environment"``.
        """
        here = _platform()
        return {
            "filesystem": protections.filesystem_sentence(self, here),
            "identity": protections.identity_sentence(self, here),
            "secrets": protections.secrets_sentence(self, here),
            "network": protections.network_sentence(self, here),
            "limits": protections.limits_sentence(self, here),
            "processes": protections.processes_sentence(self, here),
            "environment": ("HOME, TMPDIR, TMP and TEMP point inside the sandbox; PYTHONDONTWRITEBYTECODE=1, "
                            "PYTHONHASHSEED=0, PYTHONNOUSERSITE=1 and PYTHONUNBUFFERED=1 are set"
                            + (f"; extra variables: {', '.join(sorted(self.env))}" if self.env else "")),
        }

    # ----------------------------------------------------------------------- running

    def run(self, command: Sequence[str], *, tree: Mapping[str, str] | None = None,
            base: str | os.PathLike[str] | None = None, read_back: Sequence[str] = (),
            timeout: float | None = None, env: Mapping[str, str] | None = None,
            channel: bool = False) -> SandboxRun:
        """Run ``command`` in a fresh root holding ``base`` and ``tree``; return how it went.

        The root is removed afterwards, whatever happened. ``stdout``/``stderr`` go to
        files (never pipes), so a command that prints a lot cannot block. Where the platform
        has namespaces (`protections` says), ``work/`` is not the command's to change: it
        writes its read-back files there and nothing else (its scratch is HOME and TMPDIR).

        Args:
            command: the program and its arguments, e.g. ``[sys.executable, "-m", "pytest"]``.
            tree: files to write into ``work/`` (relative POSIX path -> text), over ``base``.
            base: a directory copied into ``work/`` first (without ``.git``, ``__pycache__``,
                ``.pytest_cache``, ``*.pyc``, virtualenvs and ``node_modules``).
            read_back: files (relative to ``work/``) to return in `SandboxRun.files`. In
                namespaces they are the only files of ``work/`` the command may write: each
                not given is made empty beforehand, its own, and one it never wrote reads
                back as missing.
            timeout: this run's wall-clock limit in seconds (None: the sandbox's).
            env: extra environment variables for this run only, over the sandbox's own
                ``env`` (checked the same way: no secrets, nothing that moves HOME or TMPDIR).
            channel: give the command a results descriptor it can only write to
                (``AGENTDESCENT_CHANNEL_FD``) and a nonce to read once from another
                (``AGENTDESCENT_NONCE_FD``); what it wrote comes back as
                `SandboxRun.channel`, with `SandboxRun.nonce`. `agentdescent.code.TestSuite`'s
                runner reports on it.

        Raises:
            InvalidArgument: an empty command, a bad ``tree`` or ``read_back`` path (absolute,
                holding ``..``, or leading outside ``work/``), a ``base`` that is not a directory.
            InvalidArgumentType: an argument of the wrong type.
            SandboxUnavailable: not a POSIX system, or ``require_isolation`` and the isolation
                is missing.
        """
        argv = _check_command(command)
        files = _check_tree(tree)
        wanted = {path: _check_relative(path, "read_back") for path in _check_strings(read_back, "read_back")}
        base_dir = _check_base(base)
        extra = _check_env(env)
        limit = check_seconds(timeout, "timeout", positive=True, optional=True, owner="Sandbox.run")
        limit = self.timeout if limit is None else limit
        channel = check_bool(channel, "channel", owner="Sandbox.run")
        here = _platform()
        if not here.posix:
            raise SandboxUnavailable(f"Sandbox.run needs a POSIX system (Linux or macOS), not {here.system}")
        if self.require_isolation:
            self._require(here)
        _sweep_once(here)
        root = os.path.realpath(tempfile.mkdtemp(prefix=_owner_prefix()))
        live = _Live.start(self, root)
        groups: list[str] = []
        try:
            work = os.path.join(root, "work")
            for name in ("home", "tmp"):
                os.mkdir(os.path.join(root, name))
            if base_dir is None:
                os.mkdir(work)
            else:
                shutil.copytree(base_dir, work, symlinks=True, ignore=_ignore)
            _write_tree(work, files)
            untouched: dict[str, int] = {}
            if here.ns:  # the command may write only its read-back files in work/
                untouched = _placeholders(work, wanted.values(), here.identity)
            config, variables = self._setup(here, root, limit, sorted(untouched))
            groups = list(config.get("cgroup", {}).get("dirs", ()))
            if "identity" in config:
                _hand_over(root, work)
            variables.update(extra)
            return self._execute(argv, root, work, config, variables, limit, wanted, live, channel, untouched)
        finally:
            _remove_tree(root)
            _remove_groups(groups, self.grace)
            live.forget()  # after: `_stop_runs` waits for this removal, not races it

    def stop(self) -> int:
        """End every run of this sandbox still going: kill its process group, remove its root.

        For a caller giving up on its runs (`agentdescent.code.TestSuite.close`, a command
        stopped by a signal): a run waited for on another thread returns at once, killed
        (`SandboxRun.signal` is SIGKILL); each killed command is waited for up to ``grace``
        seconds. A run about to start its command is killed as it starts.

        Returns:
            How many runs were ended.
        """
        return _stop_runs(lambda live: live.sandbox is self)

    def _setup(self, here: _Platform, root: str, limit: float, writable: list[str]) -> tuple[dict, dict[str, str]]:
        """The launcher's config and the command's environment for one run."""
        wanted = {"AS": None if self.memory_mb is None else self.memory_mb * 1024 * 1024,
                  "CPU": math.ceil(self._cpu(limit)), "FSIZE": None if self.file_mb is None else self.file_mb * 1024 * 1024,
                  "CORE": 0}
        config: dict = {"rlimits": {k: v for k, v in wanted.items() if v is not None and k in here.rlimits},
                        "parent": os.getpid()}
        if not self.network:
            config["net"] = here.net or ("landlock" if here.landlock_abi >= 4 else None)
            if here.seccomp and not self.unix_sockets:
                config["unix_sockets"] = False
        if here.ns:
            uid, gid = here.identity or (os.getuid(), os.getgid())
            hidden = _hidden_folders()
            config["ns"] = {"root": root, "uid": uid, "gid": gid, "userns": here.ns == "userns",
                            "hide": hidden, "keep": _kept_folders(hidden), "tmp_mb": self.disk_mb or 1024,
                            "shm": (self.memory_mb or 1024) if here.shm or here.ns else None,
                            "work_readonly": here.identity is None, "writable": writable}
            if here.identity:
                config["identity"] = {"uid": uid, "gid": gid}
            if here.cgroup and (self.memory_mb or self.max_processes):
                name = os.path.basename(root)
                config["cgroup"] = {"dirs": [os.path.join(b, "agentdescent", name) for b in here.cgroup],
                                    "memory": None if self.memory_mb is None else self.memory_mb * 1024 * 1024,
                                    "pids": self.max_processes}
        if here.landlock_abi:
            if here.shm and not here.ns:  # POSIX semaphores (multiprocessing) need a writable /dev/shm
                config["shm"] = self.memory_mb or 1024
            config["landlock"] = {"abi": here.landlock_abi, "root": root, "prefix": _PREFIX,
                                  "net": config.get("net") == "landlock",
                                  "writable": ["/dev/shm"] if here.shm or here.ns else []}
        elif here.nobody and not here.ns:
            config["user"] = {"uid": here.nobody[0], "gid": here.nobody[1], "root": root}
        config["drop_caps"] = here.caps
        env = scrubbed_environment(os.path.join(root, "home"), os.path.join(root, "tmp"))
        env.update({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "PYTHONNOUSERSITE": "1",
                    "PYTHONUNBUFFERED": "1"})
        env.update(self.env)
        if not here.landlock_abi:
            config["guard"] = {"root": root, "network": self.network}
        return config, env

    def _execute(self, argv: list[str], root: str, work: str, config: dict, env: dict[str, str],
                 limit: float, wanted: dict[str, str], live: _Live, channel: bool,
                 untouched: dict[str, int]) -> SandboxRun:
        # Output is read back through these descriptors, never by path: the command may
        # replace the files with links (to the engine's /proc entry, say).
        with contextlib.ExitStack() as stack:
            out = stack.enter_context(open(os.path.join(root, "stdout"), "w+b"))
            err = stack.enter_context(open(os.path.join(root, "stderr"), "w+b"))
            passed: tuple[int, ...] = ()
            nonce = reader = None
            if channel:
                nonce, reader, passed = _open_channel(root, env)
                stack.enter_context(reader)
            start = time.monotonic()
            try:
                proc = subprocess.Popen([sys.executable, "-I", _JAIL, json.dumps(config), "--", *argv],
                                        cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                        start_new_session=True, pass_fds=passed)
            finally:
                _close_all(passed)  # the command holds its copies; the engine needs none
            timed_out = False
            try:
                live.started(proc)
                timed_out = not _wait_exit(proc, limit)
            finally:
                _kill_group(proc.pid)  # on timeout, and stray children after a normal exit
                live.ended()  # before the reap: once reaped, the group's id may be another's
                with contextlib.suppress(subprocess.TimeoutExpired):  # stuck in the kernel: give up
                    proc.wait(timeout=self.grace if timed_out else None)
            seconds = time.monotonic() - start
            stdout, stderr = _clip_file(out, self.max_output_chars), _clip_file(err, self.max_output_chars)
            written = None
            if reader is not None:
                written = reader.read(_READ_BACK_BYTES).decode("utf-8", errors="replace")
        code = None if timed_out else proc.returncode
        ended_by = signal.SIGKILL if timed_out else (-code if code is not None and code < 0 else None)
        return SandboxRun(
            returncode=code, timed_out=timed_out, seconds=seconds,
            stdout=stdout, stderr=stderr,
            files=_read_back(work, wanted, untouched), signal=int(ended_by) if ended_by is not None else None,
            limits={"timeout": limit, "grace": self.grace, "memory_mb": self.memory_mb,
                    "cpu_seconds": self._cpu(limit), "file_mb": self.file_mb},
            channel=written, nonce=nonce)

    def _cpu(self, limit: float) -> float:
        """The CPU-time limit of a run whose wall-clock limit is ``limit``."""
        return self.cpu_seconds if self.cpu_seconds is not None else math.ceil(limit + self.grace)


# --------------------------------------------------------------------------- the runs still going


class _Live:
    """One run still going: its sandbox, root and command; `_stop_runs` ends it from any thread."""

    lock = threading.Lock()
    runs: set[_Live] = set()

    def __init__(self, sandbox: Sandbox, root: str) -> None:
        self.sandbox, self.root, self.stopped = sandbox, root, False
        self.proc: subprocess.Popen | None = None  # its command, until reaped
        self.done = threading.Event()  # its thread has cleaned up

    @classmethod
    def start(cls, sandbox: Sandbox, root: str) -> _Live:
        live = cls(sandbox, root)
        with cls.lock:
            cls.runs.add(live)
        return live

    def started(self, proc: subprocess.Popen | None) -> None:
        with self.lock:
            self.proc = proc
            if proc is not None and self.stopped:  # stopped while it was being set up
                _kill_group(proc.pid)

    def ended(self) -> None:
        self.started(None)

    def forget(self) -> None:
        with self.lock:
            self.runs.discard(self)
        self.done.set()


def _stop_runs(which: Any) -> int:
    """Kill the group of each run ``which(live)`` picks; let its thread reap it and clean up within the grace."""
    with _Live.lock:
        runs = [live for live in _Live.runs if which(live) and not live.stopped]
        for live in runs:
            live.stopped = True
            if live.proc is not None:  # not reaped yet: the group's id is still its own
                _kill_group(live.proc.pid)
    for live in runs:
        live.done.wait(live.sandbox.grace)
        _remove_tree(live.root)  # what its thread, stuck or frozen, did not remove
    return len(runs)


def _forget_parents_runs() -> None:
    """In a forked child: the parent's runs are the parent's to end."""
    _Live.lock = threading.Lock()
    _Live.runs = set()


atexit.register(_stop_runs, lambda live: True)  # a run left on a daemon thread ends with the process
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parents_runs)


# --------------------------------------------------------------------------- the results channel


def _open_channel(root: str, env: dict[str, str]) -> tuple[str, BinaryIO, tuple[int, int]]:
    """A run's results channel: (its nonce, the engine's reader, the two descriptors to pass).

    The command gets a write-only, append-only descriptor on a file in a folder of the
    root it cannot open (``AGENTDESCENT_CHANNEL_FD``), and the read end of a pipe holding
    the nonce (``AGENTDESCENT_NONCE_FD``). The engine reads the file back through a
    descriptor of its own, so a command that replaces the file changes nothing.
    """
    nonce = secrets.token_hex(16)
    folder = os.path.join(root, "channel")
    os.mkdir(folder, 0o700)
    path = os.path.join(folder, "results")
    write_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o600)
    reader = open(path, "rb")  # noqa: SIM115 - closed by the caller's exit stack
    nonce_read, nonce_write = os.pipe()
    os.write(nonce_write, f"{nonce}\n".encode())
    os.close(nonce_write)
    env["AGENTDESCENT_CHANNEL_FD"], env["AGENTDESCENT_NONCE_FD"] = str(write_fd), str(nonce_read)
    return nonce, reader, (write_fd, nonce_read)


def _close_all(fds: tuple[int, ...]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


# --------------------------------------------------------------------------- process helpers


def _ignore(folder: str, names: list[str]) -> set[str]:
    """What `shutil.copytree` skips: the usual caches, and anything neither file, folder nor link."""
    skipped = set(_IGNORED(folder, names))
    for name in names:
        try:
            mode = os.lstat(os.path.join(folder, name)).st_mode
        except OSError:
            skipped.add(name)
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            skipped.add(name)  # a FIFO or socket would block or fail the copy
    return skipped


def _write_tree(work: str, files: dict[str, str]) -> None:
    real_work = os.path.realpath(work)
    for rel, text in files.items():
        dest = os.path.join(work, rel)
        if not _inside(os.path.realpath(dest), real_work):
            raise InvalidArgument(f"Sandbox.run(tree=...): {rel!r} leads outside the sandbox's work/ "
                                  "folder through a symbolic link in base; use a path inside the tree")
        try:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "w", encoding="utf-8", newline="") as handle:
                handle.write(text)
        except OSError as exc:
            raise InvalidArgument(f"Sandbox.run(tree=...): cannot write {rel!r} ({exc.strerror}); "
                                  "a folder of base may stand where the file goes") from None
