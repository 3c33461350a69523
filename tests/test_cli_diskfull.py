"""A full disk told apart from other failures (`agentdescent.cli.diskfull`), and the status written when there is no room.

The full disk itself, a real tmpfs filled up, is tests/system/test_cli_mounts.py's; here the
pieces: which failures are a full disk, the line that says so, and `RunDir.write_status`
falling back to writing over the old file's own bytes, never tearing it.
"""

from __future__ import annotations

import errno
import json
import sqlite3

import pytest

from agentdescent.cli import rundir
from agentdescent.cli.diskfull import disk_full, disk_full_line
from agentdescent.cli.rundir import RunDir
from agentdescent.errors import LedgerError


def _raised(exc: BaseException, cause: BaseException | None = None, during: BaseException | None = None):
    """``exc`` as Python leaves it when raised ``from cause`` while handling ``during``."""
    try:
        try:
            if during is not None:
                raise during
        finally:
            raise exc from cause
    except BaseException as caught:
        return caught


def test_a_full_disk_is_found_wherever_it_sits_in_the_causes():
    full = sqlite3.OperationalError("database or disk is full")
    assert disk_full(_raised(LedgerError("committing failed: database or disk is full"), cause=full))
    masked = _raised(LedgerError("releasing the lease failed"), during=_raised(LedgerError("commit"), cause=full))
    assert disk_full(masked)  # a finally's error over the commit's
    assert disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not disk_full(OSError(errno.EROFS, "Read-only file system"))
    assert not disk_full(_raised(LedgerError("locked"), cause=sqlite3.OperationalError("database is locked")))


def test_the_line_names_the_folder_the_file_and_the_way_on(tmp_path):
    line = disk_full_line(tmp_path, OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".lock")),
                          "`agentdescent resume RUN`")
    assert line.startswith(f"disk full: the disk holding {tmp_path} has ")
    assert f"(writing {tmp_path}/.lock: No space left on device); free space on it" in line
    assert line.endswith("then `agentdescent resume RUN`. What the ledger saved is kept")


def test_with_no_room_for_a_new_file_the_status_is_written_over_the_old_one(tmp_path, monkeypatch):
    run = RunDir(tmp_path)
    run.write_status({"state": "running", "round": 3, "error": None})

    def no_room(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(rundir, "atomic_write", no_room)
    run.write_status({"state": "failed", "stop_reason": "disk full", "error": "disk full: ..."})
    assert json.loads(run.status_file.read_text())["state"] == "failed"
    run.write_status({"state": "failed"})  # shorter: padded with spaces, no old byte left after it
    assert json.loads(run.status_file.read_text()) == {"state": "failed"}

    before = run.status_file.read_bytes()
    with pytest.raises(OSError) as info:  # more than the file's blocks hold: refused, never torn
        run.write_status({"state": "failed", "error": "x" * 10**6})
    assert info.value.errno == errno.ENOSPC
    assert run.status_file.read_bytes() == before
