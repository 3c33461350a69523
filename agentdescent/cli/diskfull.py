"""A full disk, told apart from other failures and said in one line: `disk_full`, `disk_full_line`.

A write that finds no room fails deep down, as an ``OSError`` (``ENOSPC``, or ``EDQUOT``: a
quota) or as SQLite's ``database or disk is full`` inside a `agentdescent.errors.LedgerError`,
often wrapped by whatever was going on (a commit, the release of a lease in a ``finally``).
`disk_full` looks through an exception and everything it was raised from or during for
either; `disk_full_line` says what failed, on which folder's disk, how much room is left
and what to do. The command line records it as a run's end (``status.json``: state
``failed``, stop reason `DISK_FULL`) and its error boundary exits 1 with that one line:
a full disk is neither bad input nor agentdescent's fault.

It must not write a file or print.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
from pathlib import Path

__all__ = ["DISK_FULL", "disk_full", "disk_full_line", "free_space", "no_space"]

#: The stop reason ``status.json`` records for a run that ended because the disk was full.
DISK_FULL = "disk full"

_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
_SQLITE_FULL = 13  # sqlite3.SQLITE_FULL (the constant is in the module from Python 3.11)


def no_space(exc: BaseException) -> bool:
    """Is ``exc`` itself a write that found no room (``ENOSPC``, ``EDQUOT``, SQLite's ``SQLITE_FULL``)?"""
    if isinstance(exc, OSError):
        return exc.errno in _NO_SPACE
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+; the message before that
        return (code & 0xFF) == _SQLITE_FULL if isinstance(code, int) else "database or disk is full" in str(exc)
    return False


def _found(exc: BaseException | None) -> BaseException | None:
    """The first exception that is `no_space`, through ``__cause__`` and ``__context__``."""
    todo, seen = [exc], set()
    while todo:
        item = todo.pop(0)
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if no_space(item):
            return item
        todo += [item.__cause__, item.__context__]
    return None


def disk_full(exc: BaseException) -> bool:
    """Did ``exc`` happen because a disk was full: is it, or was it raised from or while handling, such a write?"""
    return _found(exc) is not None


def _size(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def free_space(folder: Path) -> int | None:
    """The bytes free on the disk holding ``folder`` (or its nearest existing parent), None if it cannot be told."""
    folder = Path(os.path.abspath(folder))
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def disk_full_line(folder: Path, exc: BaseException, then: str) -> str:
    """``disk full: the disk holding RUN has 0 bytes free (writing RUN/.lock: No space left on device); ...``.

    Args:
        folder: the run directory (whose disk is full).
        exc: the failure (`disk_full` is true of it).
        then: the command that goes on once there is room, e.g. ```agentdescent resume RUN```.
    """
    cause = _found(exc)
    if isinstance(cause, OSError):
        what = cause.strerror or os.strerror(cause.errno or errno.ENOSPC)
        detail = f"writing {cause.filename}: {what}" if cause.filename else what
    else:
        detail = f"writing the ledger: {cause}"
    free = free_space(folder)
    room = "" if free is None else f" has {_size(free)} free"
    return (f"{DISK_FULL}: the disk holding {folder}{room} ({detail}); free space on it (or move the run "
            f"directory to a disk with room), then {then}. What the ledger saved is kept")
