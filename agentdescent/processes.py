"""What a child program of the package is given and how it is ended: the scrubbed environment, the group kill.

This module owns the one rule for the environment a program the package starts sees
(`scrubbed_environment`: of the engine's variables only ``PATH``, ``LANG``, ``LC_ALL`` and
``TZ``, so no API key; ``HOME`` and ``TMPDIR`` pointing into a folder of the run's own) and
how such a program's whole process group is waited for and killed (`wait_exit`,
`kill_group`), and whether a process on this host still runs (`process_alive`: a run
directory's driver, a lease's holder, a sandbox root's owner). The sandbox of `agentdescent.code` and the command-line agent of
`agentdescent.agents` both start programs this way, so the rule is written once, here.

It must not start a process itself, must not read a variable of ``os.environ`` but those
four, and must not import anything above the ground floor.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess

__all__ = ["FIXED_VARIABLES", "PASSED_VARIABLES", "kill_group", "process_alive", "scrubbed_environment", "wait_exit"]

#: The engine's environment variables a child program sees; every other one is dropped.
PASSED_VARIABLES = ("PATH", "LANG", "LC_ALL", "TZ")
#: The variables that always point into the child's own folder: a caller's extra ``env`` may not set them.
FIXED_VARIABLES = ("HOME", "TMPDIR", "TMP", "TEMP")


def scrubbed_environment(home: str, tmp: str) -> dict[str, str]:
    """The environment of a child program: ``PATH``, ``LANG``, ``LC_ALL``, ``TZ``; HOME and TMPDIR inside.

    Why: a program the engine starts (a test suite on an evolved tree, a command-line
    model) must never see the engine's API keys, and must not write into the user's
    home or temporary folder. Callers add their own variables on top (checked by them).

    Args:
        home: the folder ``HOME`` points to.
        tmp: the folder ``TMPDIR``, ``TMP`` and ``TEMP`` point to.

    Returns:
        A new dict (the passed variables that are set, then ``HOME``, ``TMPDIR``, ``TMP``, ``TEMP``).
    """
    env = {name: os.environ[name] for name in PASSED_VARIABLES if name in os.environ}
    env.update({"HOME": home, "TMPDIR": tmp, "TMP": tmp, "TEMP": tmp})
    return env


def wait_exit(proc: subprocess.Popen, limit: float | None) -> bool:
    """Wait up to ``limit`` seconds for ``proc`` to exit, *without* reaping it where possible.

    With a pidfd the exited leader stays a zombie until `subprocess.Popen.wait`, so its
    process group id cannot be reused before the group is killed.

    Returns:
        True when it exited, False when ``limit`` passed first.
    """
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        fd = None
    if fd is None:
        try:
            proc.wait(timeout=limit)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        ready, _, _ = select.select([fd], [], [], limit)  # PEP 475: retried after a signal
        return bool(ready)
    finally:
        os.close(fd)


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` (a program started with ``start_new_session=True``); gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(pgid, signal.SIGKILL)


def process_alive(pid: object) -> bool:
    """Whether process ``pid`` on this host still runs (another user's counts; a zombie does not).

    Not a positive int: False. Where it cannot be told (an error other than "no such
    process"), True: a caller about to remove what the process owns must not.
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's (PermissionError), or unknown: alive
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True  # no /proc (macOS): the signal said it exists
