"""Module-level (picklable) callables for the scale-out tests: they travel to worker processes.

Kept apart from the test module so that a Dask worker process that unpickles them
imports this small module, not pytest. Every call claims a sequence number by creating
a file named after it in ``log_dir`` (``O_EXCL``: unique across processes) and writes its
kind and process id into it, so a test can count the calls and see where they ran.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from agentdescent import Task, Usage

from .toy import echo_run, toy_propose

#: tokens each solve call records into the meter it was given (prompt, completion)
SOLVE_TOKENS = (7, 3)
#: tokens each proposal records
PROPOSE_TOKENS = (4, 1)


def _claim(log_dir: str, kind: str) -> int:
    """The next call number (unique across processes): create the file ``<n>`` exclusively."""
    n = 0
    while True:
        try:
            fd = os.open(Path(log_dir) / f"{n:05d}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            n += 1
            continue
        os.write(fd, f"{kind} {os.getpid()}".encode())
        os.close(fd)
        return n


def logged_run(rendered: str, task: Task, *, log_dir: str, usage: Usage, kill_at: int | None = None) -> str:
    """`echo_run`, logging the call and recording `SOLVE_TOKENS`.

    With ``kill_at``, the first solve call numbered ``kill_at`` or later kills its own
    process (once: the call that re-runs it goes through).
    """
    n = _claim(log_dir, "solve")
    usage.record(*SOLVE_TOKENS)
    if kill_at is not None and n >= kill_at and _first(Path(log_dir).with_name(Path(log_dir).name + ".killed")):
        os.kill(os.getpid(), signal.SIGKILL)  # dies mid-call: its tokens never come back
    return echo_run(rendered, task)


def _first(marker: Path) -> bool:
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


def killed(log_dir: str | os.PathLike[str]) -> bool:
    """Whether a call of ``log_dir``'s run killed its process."""
    return Path(str(log_dir) + ".killed").exists()


def logged_propose(rendered: str, task: Task, output: str, reward: float, *, log_dir: str,
                   usage: Usage) -> str | None:
    """`toy_propose`, logging the call and recording `PROPOSE_TOKENS`."""
    _claim(log_dir, "propose")
    usage.record(*PROPOSE_TOKENS)
    return toy_propose(rendered, task, output, reward)


def calls(log_dir: str | Path, kind: str | None = None) -> list[tuple[int, str, int]]:
    """The logged calls, in claim order: ``(number, kind, pid)``."""
    out = []
    for path in sorted(Path(log_dir).iterdir()):
        logged = path.read_text().split()
        if not logged:  # its process was killed (a broken pool kills them all) before it wrote
            continue
        k, pid = logged
        if kind is None or k == kind:
            out.append((int(path.name), k, int(pid)))
    return out
