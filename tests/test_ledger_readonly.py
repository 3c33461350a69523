"""`SqliteLedger(path, read_only=True)`: the same checks on open, and nothing ever written, in the file or beside it.

A read-only open reads what a writer committed (the WAL too, when a writer is still going
on), refuses every write with a named `LedgerError`, creates no file or folder, leaves no
``-wal``/``-shm`` behind in a writable folder, still refuses a damaged file, and never
upgrades a schema-1 file. The read-only mounts themselves are tests/system/test_cli_mounts.py's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentdescent import SqliteLedger
from agentdescent.errors import InvalidArgumentType, LedgerCorrupted, LedgerError
from agentdescent.ledger.connection import QUERY_ONLY, RO, read_only_mode

from .ledger_files import damage
from .test_ledger_damage import build, delete_version, schema_1_file


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_read_only_open_reads_everything_and_leaves_the_folder_byte_for_byte(tmp_path):
    path = tmp_path / "run.sqlite"
    build(path, {"a": 3, "b": 1})
    with SqliteLedger(path) as led:
        led.save_run_state("r", {"format": "x"}, [{"index": 1}])
    before = _files(tmp_path)
    with SqliteLedger(path, read_only=True) as led:
        assert led.versions() == {"a": 3, "b": 1}
        assert led.head("a") == (3, {"n": "3"})
        assert [e.version for e in led.history("a")] == [1, 2, 3]
        assert led.load_run_state("r")["history"] == [{"index": 1}]
        assert led.blast_radius("a") == pytest.approx(0.2)
        assert "read-only" in repr(led)
    assert _files(tmp_path) == before  # no -wal, no -shm, not one byte of the file


@pytest.mark.parametrize("write", [
    lambda led: led.register("c", {"n": "1"}, 0.2),
    lambda led: led.commit("a", {"n": "9"}, 2),
    lambda led: led.save_run_state("r", {"format": "x"}),
    lambda led: led.acquire_lease("a"),
])
def test_every_write_of_a_read_only_ledger_is_refused_naming_the_mode(tmp_path, write):
    path = tmp_path / "run.sqlite"
    build(path, {"a": 2})
    before = path.read_bytes()
    with SqliteLedger(path, read_only=True) as led, pytest.raises(LedgerError, match=r"opened read-only \(read_only=True\)"):
        write(led)
    assert path.read_bytes() == before
    with SqliteLedger(path) as led:
        assert led.lease_holders("a") == []  # no lease was taken


def test_a_read_only_open_creates_nothing(tmp_path):
    path = tmp_path / "missing" / "run.sqlite"
    with pytest.raises(LedgerError, match="never creates one"):
        SqliteLedger(path, read_only=True)
    assert not path.parent.exists()
    with pytest.raises(InvalidArgumentType, match="read_only='yes'"):
        SqliteLedger(tmp_path / "x.sqlite", read_only="yes")  # type: ignore[arg-type]


def test_a_read_only_open_still_refuses_a_damaged_history(tmp_path):
    path = tmp_path / "run.sqlite"
    build(path, {"a": 4})
    before = damage(path, delete_version("a", 2))
    with pytest.raises(LedgerCorrupted, match="version 2 missing"):
        SqliteLedger(path, read_only=True)
    assert path.read_bytes() == before


def test_a_schema_1_file_is_refused_read_only_and_not_upgraded(tmp_path):
    path = tmp_path / "old.sqlite"
    schema_1_file(path, {"a": 2})
    before = _files(tmp_path)
    with pytest.raises(LedgerError, match="is of schema 1") as info:
        SqliteLedger(path, read_only=True)
    assert "a read-only open never upgrades it" in str(info.value) and "The file was not changed" in str(info.value)
    assert _files(tmp_path) == before
    with SqliteLedger(path) as led:  # opened for writing, it is upgraded as before; then it reads read-only
        assert led.versions() == {"a": 2}
    with SqliteLedger(path, read_only=True) as led:
        assert led.head("a")[0] == 2


def test_a_read_only_open_reads_the_commits_a_running_writer_has_only_in_its_log(tmp_path):
    path = tmp_path / "run.sqlite"
    writer = SqliteLedger(path)
    try:
        writer.register("a", {"n": "1"}, 0.2)
        writer.commit("a", {"n": "2"}, 1)
        assert os.path.exists(f"{path}-wal")
        assert read_only_mode(path) == RO
        with SqliteLedger(path, read_only=True) as reader:
            assert reader.head("a") == (2, {"n": "2"})
            writer.commit("a", {"n": "3"}, 2)  # the writer goes on while the reader reads
            assert reader.head("a") == (3, {"n": "3"})
    finally:
        writer.close()


def test_the_read_only_modes_follow_the_side_files_and_the_folder(tmp_path):
    path = tmp_path / "run.sqlite"
    build(path, {"a": 1})
    assert read_only_mode(path) == QUERY_ONLY  # no log, a writable folder: a reader that cleans up after itself
    Path(f"{path}-journal").write_bytes(b"")
    assert read_only_mode(path) == RO
    # a read-only folder (IMMUTABLE): tests/system/test_cli_mounts.py, on a real read-only mount
