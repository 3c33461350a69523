"""One driver per run directory: the exclusive lock that ``run`` and ``resume`` hold.

`hold` takes an exclusive `fcntl.flock` on the run directory's ``.lock`` file before the
command reads anything else of the run, writes the holder's pid and start time into it,
and keeps it until the command ends. The OS drops the lock when the holder dies, however
it dies (``kill -9`` included), so a lock is never stale: the pid left in the file by a
dead holder means nothing once nobody holds the lock. A second ``run`` or ``resume`` on
the same directory fails at once with a `UsageError` naming the holder (pid and since
when). `holder` says who holds it without holding it (``status``); the read-only
commands never take it.

This module owns ``RUN/.lock`` only: it must not read or write any other file of the run
directory, and must not print.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

try:
    import fcntl
except ImportError:  # pragma: no cover - not a POSIX system: no lock to take
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_NAME", "Holder", "hold", "holder"]

LOCK_NAME = ".lock"
#: how long a taker waits out a reader's brief probe (`holder`) before calling the lock held
_CONTENDED = 0.1
#: how long a refused taker waits for the holder to write its pid (it writes right after locking)
_UNWRITTEN = 0.5
_STEP = 0.02


@dataclass(frozen=True)
class Holder:
    """The process holding a run directory's lock: its pid, the command and since when (ISO 8601, UTC)."""

    pid: int | None
    command: str
    since: str

    def describe(self) -> str:
        """``pid 1234 (agentdescent run, since 2026-12-01T14:00:00+00:00)``."""
        who = f"pid {self.pid}" if self.pid else "another process"
        return f"{who} (agentdescent {self.command or 'run'}, since {self.since or 'a moment ago'})"


def _open(path: Path, flags: int) -> int:
    """A descriptor on the lock file, never through a symlink, and only on a regular file."""
    fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(
        os, "O_CLOEXEC", 0), 0o666)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return fd


def _read(fd: int) -> Holder | None:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid = data.get("pid")
    return Holder(pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                  str(data.get("command") or ""), str(data.get("since") or ""))


def _wait_for_holder(fd: int) -> Holder:
    """What the holder wrote (it writes right after it locks), waiting a moment for it."""
    deadline = time.monotonic() + _UNWRITTEN
    while True:
        found = _read(fd)
        if found is not None or time.monotonic() >= deadline:
            return found or Holder(None, "", "")
        time.sleep(_STEP)


@contextlib.contextmanager
def hold(run_dir: Path, command: str) -> Iterator[None]:
    """Hold ``run_dir``'s lock for the body: the one driver of the run (``run``, ``resume``).

    Raises:
        UsageError: another process holds it (the message names its pid and since when),
            the directory does not exist, or ``.lock`` is not a regular file.
        OSError: the holder's pid cannot be written into ``.lock`` (a full disk: the
            command line says so, `agentdescent.cli.diskfull`); the lock is not kept.
    """
    if fcntl is None:  # pragma: no cover
        yield
        return
    path = Path(run_dir) / LOCK_NAME
    spec = Path(run_dir) / "spec.json"
    try:
        if not spec.is_file():  # no lock file left in a directory that is not a run's
            raise FileNotFoundError(spec)
        fd = _open(path, os.O_RDWR | os.O_CREAT)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(f"{spec}: no spec.json here; is this a run directory made by `agentdescent init`?") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot open the run directory's lock file ({exc.strerror or exc}); "
                         "if it is not a regular file, remove it") from None
    try:
        deadline = time.monotonic() + _CONTENDED
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:  # not a reader's probe: a driver holds it
                    other = _wait_for_holder(fd)
                    raise UsageError(f"{run_dir} is being run by {other.describe()}; one run or resume "
                                     "at a time: wait for it to end, or stop it first") from None
                time.sleep(_STEP)
        record = {"pid": os.getpid(), "command": command,
                  "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
        except OSError as exc:  # a full disk, most likely: the message names the file (the lock is let go)
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # nobody holds it now; the file stays (see `holder`)
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def holder(run_dir: Path) -> Holder | None:
    """Who holds ``run_dir``'s lock (a run or resume is going on), or None; takes nothing.

    It probes with a shared lock for an instant (a taker waits that out) and never creates
    the file.
    """
    if fcntl is None:  # pragma: no cover
        return None
    try:
        fd = _open(Path(run_dir) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _wait_for_holder(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
