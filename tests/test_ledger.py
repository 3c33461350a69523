"""Tests for agentdescent.ledger: the exported conformance suite against both ledgers, the
shipped ledgers' house style, then SqliteLedger's concurrency, durability, history check
and error paths, then a stateful model check.

The multi-process tests use the "spawn" start method, so their child functions live at
module level and import this module afresh in the child.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import queue
import shutil
import signal
import sqlite3
import tempfile
import threading
import time
import traceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from agentdescent.errors import LedgerBusy, LedgerCorrupted, LedgerError
from agentdescent.ledger import (
    SCHEMA,
    CASConflict,
    Ledger,
    MemoryLedger,
    SqliteLedger,
    lease,
)
from agentdescent.ledger.integrity import version_digest
from agentdescent.testing import LedgerConformance

from .ledger_files import damage as _damage

SPAWN = multiprocessing.get_context("spawn")
JOIN_TIMEOUT = 60.0


def _poll(predicate, timeout: float, what: str) -> None:
    """Bounded polling: wait until ``predicate()`` holds, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


# --------------------------------------------------------------------------- conformance


class TestMemoryLedgerConformance(LedgerConformance):
    """The exported conformance suite (agentdescent.testing) against MemoryLedger."""

    def make_ledger(self, tmp_path: Path) -> Ledger:
        return MemoryLedger()


class TestSqliteLedgerConformance(LedgerConformance):
    """The exported conformance suite against SqliteLedger, one fresh file per check."""

    def make_ledger(self, tmp_path: Path) -> Ledger:
        return SqliteLedger(tmp_path / "ledger.sqlite")

    def close_ledger(self, ledger: Ledger) -> None:
        assert isinstance(ledger, SqliteLedger)
        ledger.close()


# --------------------------------------------------------------------------- house style
# What the shipped ledgers add beyond the contract: input validation, error text that
# lists the alternatives, log hygiene. Not part of LedgerConformance.


@pytest.fixture(params=["memory", "sqlite"])
def ledger(request, tmp_path):
    """Both shipped ledgers, fresh, so the house-style tests below run against each."""
    if request.param == "memory":
        yield MemoryLedger()
    else:
        with SqliteLedger(tmp_path / "ledger.sqlite") as led:
            yield led


def test_register_with_another_blast_radius_keeps_the_stored_one_and_warns(ledger, caplog):
    ledger.register("a", {}, 0.2)
    with caplog.at_level(logging.WARNING, logger="agentdescent.ledger"):
        ledger.register("a", {}, 0.9)
    assert ledger.blast_radius("a") == pytest.approx(0.2)
    assert any("blast_radius=0.9" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("method", ["head", "history", "blast_radius", "commit"])
def test_unknown_id_raises_ledger_error_naming_it_and_the_known_ones(ledger, method):
    ledger.register("alpha", {}, 0.2)
    ledger.register("beta", {}, 0.2)
    call = {
        "head": lambda: ledger.head("gamma"),
        "history": lambda: ledger.history("gamma"),
        "blast_radius": lambda: ledger.blast_radius("gamma"),
        "commit": lambda: ledger.commit("gamma", {}, 1),
    }[method]
    with pytest.raises(LedgerError) as info:
        call()
    assert not isinstance(info.value, CASConflict)
    message = str(info.value)
    assert "'gamma'" in message and "'alpha'" in message and "'beta'" in message


def test_unknown_id_in_an_empty_ledger_says_none_are_registered(ledger):
    with pytest.raises(LedgerError, match="no artifact is registered"):
        ledger.head("x")
    assert ledger.versions() == {}


@pytest.mark.parametrize(
    ("state", "named"),
    [({"good": "v", "bad": 3}, "'bad'"), ({"k": None}, "'k'"), ({5: "v"}, "5")],
)
def test_bad_state_raises_type_error_naming_the_key(ledger, state, named):
    with pytest.raises(TypeError, match=named):
        ledger.register("a", state, 0.2)
    ledger.register("a", {}, 0.2)
    with pytest.raises(TypeError, match=named):
        ledger.commit("a", state, 1)
    assert ledger.head("a") == (1, {})


def test_state_that_is_not_a_mapping_raises_type_error(ledger):
    with pytest.raises(TypeError, match="mapping"):
        ledger.register("a", [("k", "v")], 0.2)


@pytest.mark.parametrize("radius", [-0.1, 1.5, math.nan, math.inf])
def test_bad_blast_radius_raises_value_error_naming_it(ledger, radius):
    with pytest.raises(ValueError, match="blast_radius"):
        ledger.register("a", {}, radius)
    assert ledger.versions() == {}


@pytest.mark.parametrize("radius", ["0.2", None, True])
def test_blast_radius_of_the_wrong_type_raises_type_error(ledger, radius):
    with pytest.raises(TypeError, match="blast_radius"):
        ledger.register("a", {}, radius)


@pytest.mark.parametrize("artifact_id", ["", None, 3])
def test_bad_artifact_id_raises_value_error(ledger, artifact_id):
    with pytest.raises(ValueError, match="artifact_id"):
        ledger.register(artifact_id, {}, 0.2)


@pytest.mark.parametrize(
    ("base", "error"), [(0, ValueError), (-1, ValueError), ("1", TypeError), (True, TypeError)]
)
def test_bad_base_version_is_refused(ledger, base, error):
    ledger.register("a", {}, 0.2)
    with pytest.raises(error, match="base_version"):
        ledger.commit("a", {}, base)
    assert ledger.head("a") == (1, {})


def test_meta_that_is_not_json_raises_type_error(ledger):
    ledger.register("a", {}, 0.2)
    with pytest.raises(TypeError, match="meta"):
        ledger.commit("a", {}, 1, meta={"x": object()})
    with pytest.raises(TypeError, match="meta"):
        ledger.commit("a", {}, 1, meta=["not", "a", "mapping"])
    assert ledger.head("a") == (1, {})


def test_commit_logs_at_debug_without_state_contents(ledger, caplog):
    ledger.register("a", {}, 0.2)
    with caplog.at_level(logging.DEBUG, logger="agentdescent.ledger"):
        ledger.commit("a", {"k": "SECRET-VALUE"}, 1)
    records = [r for r in caplog.records if r.name == "agentdescent.ledger"]
    assert any(r.levelno == logging.DEBUG and "'a'" in r.getMessage() for r in records)
    assert not any("SECRET-VALUE" in r.getMessage() for r in records)


# --------------------------------------------------------------------------- SqliteLedger


def _race_process(path: str, wid: int, attempts: int, barrier, results) -> None:
    """Child: commit ``attempts`` keys, each retried on CASConflict until it lands."""
    try:
        with SqliteLedger(path) as led:
            barrier.wait(timeout=JOIN_TIMEOUT)
            won, conflicts = [], 0
            for attempt in range(attempts):
                key = f"p{wid}-{attempt}"
                while True:
                    version, state = led.head("a")
                    state[key] = f"{wid}:{attempt}:{version}"
                    try:
                        new = led.commit("a", state, version, meta={"author": key})
                    except CASConflict:
                        conflicts += 1
                        continue
                    won.append((new, key, state))
                    break
        results.put(("ok", wid, won, conflicts))
    except BaseException:
        results.put(("error", wid, traceback.format_exc(), 0))


def test_processes_racing_cas_on_one_file_lose_no_update(tmp_path):
    path = str(tmp_path / "race.sqlite")
    with SqliteLedger(path) as led:
        led.register("a", {}, 0.2)
    n_procs, attempts = 4, 25
    barrier = SPAWN.Barrier(n_procs)
    results = SPAWN.Queue()
    procs = [
        SPAWN.Process(target=_race_process, args=(path, w, attempts, barrier, results))
        for w in range(n_procs)
    ]
    for p in procs:
        p.start()
    try:
        outcomes = [results.get(timeout=JOIN_TIMEOUT) for _ in procs]
    except queue.Empty:
        pytest.fail(f"a racing process reported nothing within {JOIN_TIMEOUT} s")
    finally:
        for p in procs:
            p.join(JOIN_TIMEOUT)
            if p.is_alive():
                p.kill()
    errors = [o[2] for o in outcomes if o[0] == "error"]
    assert not errors, errors[0]
    assert all(p.exitcode == 0 for p in procs)

    won = [w for o in outcomes for w in o[2]]
    assert len(won) == n_procs * attempts
    with SqliteLedger(path) as led:
        history = led.history("a")
        assert led.versions() == {"a": 1 + len(won)}
        assert [e.version for e in history] == list(range(1, 2 + len(won)))
        assert sorted(v for v, _, _ in won) == list(range(2, 2 + len(won)))
        for version, key, state in won:
            assert history[version - 1].state == state
            assert history[version - 1].meta == {"author": key}
        assert len(led.head("a")[1]) == len(won)


def _commit_through_inherited_handle(led: SqliteLedger, results) -> None:
    """Child (fork): commit through the ledger object the parent opened."""
    try:
        inherited = led._local.conn  # white box: the parent's connection, copied by fork
        version, _ = led.head("a")
        new = led.commit("a", {"k": "child"}, version)
        results.put(new if led._local.conn is not inherited else "reused the parent's connection")
    except BaseException:
        results.put(traceback.format_exc())


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)
def test_a_forked_child_uses_its_own_connection(tmp_path):
    fork = multiprocessing.get_context("fork")
    with SqliteLedger(tmp_path / "fork.sqlite") as led:
        led.register("a", {"k": "parent"}, 0.2)
        results = fork.Queue()
        child = fork.Process(target=_commit_through_inherited_handle, args=(led, results))
        child.start()
        try:
            outcome = results.get(timeout=JOIN_TIMEOUT)
        finally:
            child.join(JOIN_TIMEOUT)
            if child.is_alive():
                child.kill()
        assert outcome == 2, outcome
        assert child.exitcode == 0
        assert led.head("a") == (2, {"k": "child"})
        with pytest.raises(CASConflict):
            led.commit("a", {"k": "parent again"}, 1)
        assert led.commit("a", {"k": "parent again"}, 2) == 3


def test_cas_holds_between_two_handles_on_one_file(tmp_path):
    path = tmp_path / "two.sqlite"
    with SqliteLedger(path) as first, SqliteLedger(path) as second:
        first.register("a", {"k": "0"}, 0.2)
        second.register("a", {"k": "ignored"}, 0.2)
        version, _ = first.head("a")
        assert second.commit("a", {"k": "second"}, version) == 2
        with pytest.raises(CASConflict) as info:
            first.commit("a", {"k": "first"}, version)
        assert info.value.head_version == 2
        assert first.head("a") == (2, {"k": "second"})


def test_reopen_resumes(tmp_path):
    path = tmp_path / "resume.sqlite"
    with SqliteLedger(path) as led:
        led.register("a", {"k": "1"}, 0.7)
        led.register("b", {}, 0.1)
        led.commit("a", {"k": "2"}, 1, meta={"diff_id": "d1"})
    with SqliteLedger(str(path)) as led:
        led.register("a", {"k": "fresh start?"}, 0.7)  # resume: a no-op
        assert led.versions() == {"a": 2, "b": 1}
        assert led.head("a") == (2, {"k": "2"})
        assert led.blast_radius("a") == pytest.approx(0.7)
        assert [(e.version, e.state, e.meta) for e in led.history("a")] == [
            (1, {"k": "1"}, {}),
            (2, {"k": "2"}, {"diff_id": "d1"}),
        ]
        assert led.commit("a", {"k": "3"}, 2) == 3
    with SqliteLedger(path) as led:
        assert led.head("a") == (3, {"k": "3"})


def test_file_uses_wal_json_and_the_schema_marker(tmp_path):
    path = tmp_path / "format.sqlite"
    with SqliteLedger(path) as led:
        led.register("a", {"k": "v"}, 0.2)
        led.commit("a", {"k": "w"}, 1, meta={"author": "w0"})
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == (SCHEMA,)
        rows = raw.execute(
            "SELECT version, state_json, meta_json FROM versions ORDER BY version"
        ).fetchall()
        assert [(v, json.loads(s), json.loads(m)) for v, s, m in rows] == [
            (1, {"k": "v"}, {}),
            (2, {"k": "w"}, {"author": "w0"}),
        ]
    finally:
        raw.close()


def test_path_like_and_missing_parent_folders(tmp_path):
    path = tmp_path / "deep" / "er" / "ledger.sqlite"
    with SqliteLedger(path) as led:
        assert led.path == path
        assert repr(led) == f"SqliteLedger({str(path)!r})"
        led.register("a", {}, 0.2)
    assert path.is_file()
    assert "closed" in repr(led)


def test_an_empty_file_is_refused_but_a_database_without_tables_becomes_a_ledger(tmp_path):
    path = tmp_path / "empty.sqlite"
    path.touch()
    with pytest.raises(LedgerCorrupted, match="empty \\(0 bytes\\)"):
        SqliteLedger(path)
    assert path.read_bytes() == b""  # left as it was
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 0")
    raw.execute("VACUUM")  # a valid SQLite file with no tables
    raw.close()
    assert path.stat().st_size > 0
    with SqliteLedger(path) as led:
        led.register("a", {"k": "v"}, 0.2)
    with SqliteLedger(path) as led:
        assert led.head("a") == (1, {"k": "v"})


def test_memory_path_is_refused_with_the_fix(tmp_path):
    with pytest.raises(ValueError, match="MemoryLedger"):
        SqliteLedger(":memory:")


def test_closed_ledger_raises_ledger_error_and_close_is_idempotent(tmp_path):
    led = SqliteLedger(tmp_path / "closed.sqlite")
    led.register("a", {}, 0.2)
    led.close()
    led.close()
    with pytest.raises(LedgerError, match="closed"):
        led.head("a")


def test_connections_of_finished_threads_are_released(tmp_path):
    with SqliteLedger(tmp_path / "threads.sqlite") as led:
        led.register("a", {}, 0.2)
        for _ in range(5):
            t = threading.Thread(target=led.versions)
            t.start()
            t.join(JOIN_TIMEOUT)
        led.versions()  # a new thread or this one prunes the dead threads' connections
        t = threading.Thread(target=led.versions)
        t.start()
        t.join(JOIN_TIMEOUT)
        assert len(led._conns) <= 2


def test_a_non_sqlite_file_raises_ledger_error_naming_the_path(tmp_path):
    path = tmp_path / "noise.bin"
    path.write_bytes(os.urandom(8192))
    with pytest.raises(LedgerError) as info:
        SqliteLedger(path)
    assert str(path) in str(info.value) and "not a SQLite database" in str(info.value)
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)
    assert path.read_bytes()[:16] != b"SQLite format 3\x00"  # left as it was


def test_another_applications_database_raises_ledger_error_and_is_left_alone(tmp_path):
    path = tmp_path / "other.db"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    raw.commit()
    raw.close()
    with pytest.raises(LedgerError) as info:
        SqliteLedger(path)
    message = str(info.value)
    assert str(path) in message and "not an agentdescent ledger" in message and "users" in message
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == {"users"}
    finally:
        raw.close()


def test_a_database_with_another_schema_marker_raises_ledger_error(tmp_path):
    path = tmp_path / "future.sqlite"
    with SqliteLedger(path) as led:
        led.register("a", {}, 0.2)
    raw = sqlite3.connect(path)
    raw.execute("UPDATE meta SET value = ? WHERE key = 'schema'", ("agentdescent-ledger/99",))
    raw.commit()
    raw.close()
    with pytest.raises(LedgerError, match="agentdescent-ledger/99"):
        SqliteLedger(path)


def _set_state(artifact_id: str, version: int, text: str) -> tuple[str, tuple]:
    return (
        "UPDATE versions SET state_json = ? WHERE artifact_id = ? AND version = ?",
        (text, artifact_id, version),
    )


def _delete_version(artifact_id: str, version: int) -> tuple[str, tuple]:
    return ("DELETE FROM versions WHERE artifact_id = ? AND version = ?", (artifact_id, version))


def _ledger_with(path: Path, heads: dict[str, int]) -> None:
    """A closed ledger file where artifact ``aid`` has versions 1..heads[aid], state n=version."""
    with SqliteLedger(path) as led:
        for aid, head in heads.items():
            led.register(aid, {"n": "1"}, 0.2)
            for base in range(1, head):
                led.commit(aid, {"n": str(base + 1)}, base)


def _chained_rows(path: Path, artifact_id: str, last: int) -> list[tuple[str, tuple]]:
    """Statements appending versions up to ``last`` (state n=version) with a sound chain and head
    pointer, as commits would write them: a long history without a commit per version."""
    raw = sqlite3.connect(path)
    try:
        head, parent = raw.execute(
            "SELECT head_version, head_digest FROM artifacts WHERE artifact_id = ?", (artifact_id,)
        ).fetchone()
    finally:
        raw.close()
    statements = []
    for version in range(head + 1, last + 1):
        state = json.dumps({"n": str(version)})
        digest = version_digest(artifact_id, version, parent, state, "{}")
        statements.append((
            "INSERT INTO versions (artifact_id, version, state_json, meta_json, created_at,"
            " parent_digest, digest) VALUES (?, ?, ?, '{}', 0.0, ?, ?)",
            (artifact_id, version, state, parent, digest),
        ))
        parent = digest
    statements.append((
        "UPDATE artifacts SET head_version = ?, head_digest = ? WHERE artifact_id = ?",
        (last, parent, artifact_id),
    ))
    return statements


def _refused(path: Path) -> str:
    """Open ``path``, expect the history check to refuse it, return the message."""
    with pytest.raises(LedgerError) as info:
        SqliteLedger(path)
    assert not isinstance(info.value, CASConflict)
    return str(info.value)


def test_a_deleted_version_row_is_refused_on_open_naming_the_artifact_and_version(tmp_path):
    path = tmp_path / "gap.sqlite"
    _ledger_with(path, {"a": 4, "b": 2})
    before = _damage(path, _delete_version("a", 3))
    message = _refused(path)
    assert str(path) in message
    assert "artifact 'a': version 3 missing" in message and "stored: 1-2, 4" in message
    assert "'b'" not in message  # the intact artifact is not reported
    assert "restore the file from a backup" in message.lower() and "new path" in message
    assert "was not modified" in message and "check_history=False" in message
    assert path.read_bytes() == before  # refused before anything was written


def test_a_missing_first_version_and_a_long_gap_are_named_as_ranges(tmp_path):
    path = tmp_path / "gaps.sqlite"
    _ledger_with(path, {"a": 3, "b": 9})
    _damage(
        path,
        _delete_version("a", 1),
        *(_delete_version("b", v) for v in (2, 3, 4, 5, 7)),
    )
    message = _refused(path)
    assert "artifact 'a': version 1 missing" in message and "stored: 2-3" in message
    assert "artifact 'b': versions 2-5, 7 missing" in message and "stored: 1, 6, 8-9" in message
    assert "(2 problems)" in message


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("{not json", "Expecting property name"),
        ('["a", "list"]', "a JSON array, not an object"),
        ('{"k": 1}', "key 'k' holds a JSON number, not a string"),
        ("null", "a JSON null, not an object"),
    ],
)
def test_a_corrupt_state_below_the_head_is_refused_on_open(tmp_path, bad, said):
    path = tmp_path / "corrupt-old.sqlite"
    _ledger_with(path, {"a": 4})
    before = _damage(path, _set_state("a", 2, bad))
    message = _refused(path)
    assert str(path) in message
    assert "artifact 'a': version 2 holds unreadable state" in message and said in message
    assert "JSON object of str -> str" in message and "version 4" not in message
    assert path.read_bytes() == before


def test_every_kind_of_damage_is_listed_in_one_error(tmp_path):
    path = tmp_path / "wreck.sqlite"
    _ledger_with(path, {"gap": 5, "bad": 2, "empty": 1, "orphan": 3, "fine": 3})
    _damage(
        path,
        _delete_version("gap", 2),
        _delete_version("gap", 3),
        _set_state("bad", 1, "{"),
        (
            "UPDATE versions SET meta_json = 'nope' WHERE artifact_id = ? AND version = ?",
            ("bad", 2),
        ),
        ("DELETE FROM versions WHERE artifact_id = ?", ("empty",)),
        ("DELETE FROM artifacts WHERE artifact_id = ?", ("orphan",)),
    )
    message = _refused(path)
    assert "(5 problems)" in message
    assert "artifact 'gap': versions 2-3 missing" in message
    assert "artifact 'bad': version 1 holds unreadable state" in message
    assert "artifact 'bad': version 2 holds an unreadable audit record" in message
    assert "artifact 'empty': no version is stored (version 1 is missing)" in message
    assert "artifact 'orphan': versions 1-3 are stored but the artifact is not registered" in (
        message
    )
    assert "'fine'" not in message


def test_a_long_history_is_checked_in_full_and_problems_are_capped(tmp_path):
    path = tmp_path / "long.sqlite"
    _ledger_with(path, {"a": 1})
    n = 10_000
    _damage(path, *_chained_rows(path, "a", n))
    with SqliteLedger(path) as led:
        assert led.head("a") == (n, {"n": str(n)})

    _damage(path, _delete_version("a", n - 1))
    assert f"version {n - 1} missing" in _refused(path)

    _damage(path, *(_set_state("a", v, "[]") for v in range(101, 131)))
    message = _refused(path)
    assert "(31 problems)" in message and "... (11 more)" in message
    lines = message.splitlines()
    assert f"version {n - 1} missing" in lines[1]  # the gap first: it explains the rest
    assert "version 101 holds unreadable state" in lines[2]
    assert "version 119 holds" in message and "version 120 holds" not in message


@pytest.mark.parametrize("bad", ["{not json", '["a", "list"]', '{"k": 1}'])
def test_reading_a_corrupt_row_with_the_check_off_raises_ledger_error(tmp_path, bad):
    path = tmp_path / "corrupt.sqlite"
    _ledger_with(path, {"a": 2, "b": 1})
    _damage(path, _set_state("a", 2, bad))
    with SqliteLedger(path, check_history=False) as led:
        for call in (lambda: led.head("a"), lambda: led.history("a")):
            with pytest.raises(LedgerError) as info:
                call()
            message = str(info.value)
            assert str(path) in message and "version 2" in message and "'a'" in message
            assert "JSON object" in message
        assert led.versions() == {"a": 2, "b": 1}  # the rest of the file is still readable
        assert led.head("b") == (1, {"n": "1"})


def test_reading_a_corrupt_audit_record_with_the_check_off_raises_ledger_error(tmp_path):
    path = tmp_path / "corrupt-meta.sqlite"
    _ledger_with(path, {"a": 1})
    _damage(path, ("UPDATE versions SET meta_json = 'nope' WHERE artifact_id = ?", ("a",)))
    assert "unreadable audit record" in _refused(path)
    with SqliteLedger(path, check_history=False) as led:
        assert led.head("a") == (1, {"n": "1"})
        with pytest.raises(LedgerError, match="audit record"):
            led.history("a")


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_check_history_must_be_a_bool(tmp_path, bad):
    with pytest.raises(ValueError, match="check_history"):
        SqliteLedger(tmp_path / "x.sqlite", check_history=bad)


def _commit_forever(path: str) -> None:
    """Child: commit as fast as possible until killed; each version's state names itself."""
    with SqliteLedger(path) as led:
        blob = "x" * 50_000  # big rows keep the process inside a commit much of the time
        while True:
            version, _ = led.head("a")
            led.commit("a", {"n": str(version + 1), "blob": blob}, version)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
def test_sigkill_mid_commit_leaves_only_whole_commits(tmp_path):
    path = str(tmp_path / "killed.sqlite")
    with SqliteLedger(path) as led:
        led.register("a", {"n": "1"}, 0.2)
        child = SPAWN.Process(target=_commit_forever, args=(path,))
        child.start()
        try:
            _poll(lambda: led.versions()["a"] >= 40 or not child.is_alive(), 60, "40 commits")
            assert child.is_alive(), f"committing child died early (exit code {child.exitcode})"
            os.kill(child.pid, signal.SIGKILL)
            child.join(JOIN_TIMEOUT)
        finally:
            if child.is_alive():
                child.kill()
        assert child.exitcode == -signal.SIGKILL

    with SqliteLedger(path) as led:
        history = led.history("a")
        head, _ = led.head("a")
        assert head >= 40
        assert [e.version for e in history] == list(range(1, head + 1))
        assert all(e.state["n"] == str(e.version) for e in history)
        assert all(len(e.state["blob"]) == 50_000 for e in history[1:])
        assert led.commit("a", {"n": str(head + 1)}, head) == head + 1
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        raw.close()


def _commit_then_hang(path: str, ready) -> None:
    """Child: commit inside atomic(), say so, and wait there to be killed."""
    with SqliteLedger(path) as led, led.atomic():
        led.commit("a", {"n": "2"}, 1)
        led.save_run_state("a", {"round": 1}, [{"index": 1}])
        ready.set()
        time.sleep(60)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
def test_a_process_killed_inside_atomic_leaves_the_file_as_it_was_before_the_block(tmp_path):
    path = str(tmp_path / "killed.sqlite")
    with SqliteLedger(path) as led:
        led.register("a", {"n": "1"}, 0.2)
    ready = SPAWN.Event()
    child = SPAWN.Process(target=_commit_then_hang, args=(path, ready))
    child.start()
    try:
        assert ready.wait(JOIN_TIMEOUT), "the child never committed"
        with SqliteLedger(path) as led:  # another connection: the block's writes are not there yet
            assert led.head("a") == (1, {"n": "1"}) and led.load_run_state("a") is None
        os.kill(child.pid, signal.SIGKILL)
        child.join(JOIN_TIMEOUT)
    finally:
        if child.is_alive():
            child.kill()
    with SqliteLedger(path) as led:
        assert led.head("a") == (1, {"n": "1"}) and len(led.history("a")) == 1
        assert led.load_run_state("a") is None
        assert led.commit("a", {"n": "2"}, 1) == 2


def test_atomic_writes_land_together_when_the_block_ends(tmp_path):
    path = tmp_path / "a.sqlite"
    with SqliteLedger(path) as led, SqliteLedger(path) as other:
        led.register("a", {"n": "1"}, 0.2)
        seen: list[int] = []
        with led.atomic():
            led.commit("a", {"n": "2"}, 1)
            with led.atomic():  # nested: the outermost block commits
                led.save_run_state("a", {"head": 2})
            reader = threading.Thread(target=lambda: seen.append(other.head("a")[0]))
            reader.start()
            reader.join(JOIN_TIMEOUT)
            assert led.head("a")[0] == 2 and led.load_run_state("a")["head"] == 2  # the writer sees its own
        assert seen == [1]  # another thread read what was committed before the block
        assert other.head("a")[0] == 2 and other.load_run_state("a")["head"] == 2


def test_an_exception_inside_atomic_keeps_the_whole_writes_before_it_and_undoes_the_failed_one(tmp_path):
    path = tmp_path / "a.sqlite"
    with SqliteLedger(path) as led:
        led.register("a", {"n": "1"}, 0.2)
        with pytest.raises(RuntimeError, match="after the commit"), led.atomic():
            led.commit("a", {"n": "2"}, 1)
            with pytest.raises(CASConflict):
                led.commit("a", {"n": "lost"}, 1)
            raise RuntimeError("after the commit")
    with SqliteLedger(path) as led:
        assert [e.state["n"] for e in led.history("a")] == ["1", "2"]


# --------------------------------------------------------------------------- stateful model

IDS = st.sampled_from(["a", "b", "c"])
STATES = st.dictionaries(st.text(max_size=4), st.text(max_size=6), max_size=3)


class MemoryLedgerMachine(RuleBasedStateMachine):
    """Drive a ledger with random registers and commits against a plain model.

    The model is ``artifact id -> list of states``; the head version is the list's
    length. A commit must succeed iff its base is the head, and then raise the head
    by exactly one.
    """

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, list[dict[str, str]]] = {}
        self.radius: dict[str, float] = {}
        self.ledger = self.open_ledger()

    def open_ledger(self) -> Ledger:
        return MemoryLedger()

    @initialize(state=STATES)
    def first_artifact(self, state):
        self.register("a", state, 0.2)

    @rule(aid=IDS, state=STATES, radius=st.floats(0, 1))
    def register(self, aid, state, radius):
        self.ledger.register(aid, state, radius)
        if aid not in self.model:
            self.model[aid] = [dict(state)]
            self.radius[aid] = radius

    @rule(data=st.data(), state=STATES)
    def commit_at_head(self, data, state):
        aid = data.draw(st.sampled_from(sorted(self.model)), label="aid")
        self._commit(aid, len(self.model[aid]), state)

    @rule(data=st.data(), state=STATES)
    def commit_stale(self, data, state):
        moved = sorted(aid for aid, states in self.model.items() if len(states) > 1)
        if not moved:
            return
        aid = data.draw(st.sampled_from(moved), label="aid")
        base = data.draw(st.integers(1, len(self.model[aid]) - 1), label="base")
        self._commit(aid, base, state)

    @rule(data=st.data(), state=STATES)
    def commit_ahead(self, data, state):
        aid = data.draw(st.sampled_from(sorted(self.model)), label="aid")
        base = data.draw(st.integers(1, 3), label="ahead") + len(self.model[aid])
        self._commit(aid, base, state)

    @rule(aid=IDS, state=STATES)
    def commit_unknown(self, aid, state):
        if aid in self.model:
            return
        with pytest.raises(LedgerError, match="unknown artifact"):
            self.ledger.commit(aid, state, 1)

    def _commit(self, aid, base, state):
        head = len(self.model[aid])
        try:
            new = self.ledger.commit(aid, state, base, meta={"base": base})
        except CASConflict as err:
            assert base != head, "a commit on the head was refused"
            assert (err.base_version, err.head_version) == (base, head)
            return
        assert base == head, f"a commit on stale base {base} won over head {head}"
        assert new == head + 1
        self.model[aid].append(dict(state))

    @rule(aid=IDS)
    def history_matches(self, aid):
        if aid not in self.model:
            return
        history = self.ledger.history(aid)
        assert [e.version for e in history] == list(range(1, len(self.model[aid]) + 1))
        assert [e.state for e in history] == self.model[aid]

    @invariant()
    def heads_match_the_model(self):
        assert self.ledger.versions() == {aid: len(h) for aid, h in self.model.items()}
        for aid, states in self.model.items():
            assert self.ledger.head(aid) == (len(states), states[-1])
            assert self.ledger.blast_radius(aid) == self.radius[aid]


class SqliteLedgerMachine(MemoryLedgerMachine):
    """The same model check on a SqliteLedger, plus closing and reopening the file."""

    def open_ledger(self) -> Ledger:
        self.tmpdir = tempfile.mkdtemp(prefix="agentdescent-ledger-")
        self.path = Path(self.tmpdir) / "machine.sqlite"
        return SqliteLedger(self.path)

    @rule()
    def reopen(self):
        self.ledger.close()
        self.ledger = SqliteLedger(self.path)

    def teardown(self):
        self.ledger.close()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


_MACHINE_SETTINGS = settings(
    max_examples=30,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMemoryLedgerMachine = MemoryLedgerMachine.TestCase
TestMemoryLedgerMachine.settings = _MACHINE_SETTINGS
TestSqliteLedgerMachine = SqliteLedgerMachine.TestCase
TestSqliteLedgerMachine.settings = _MACHINE_SETTINGS


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_run_state_keeps_its_rounds_apart_and_replaces_a_round_saved_again(kind, tmp_path):
    ledger = MemoryLedger() if kind == "memory" else SqliteLedger(tmp_path / "l.sqlite")
    assert ledger.load_run_state("run") is None
    ledger.save_run_state("run", {"step": 1}, [{"index": 1, "tokens": 5}, {"index": 2, "tokens": 7}])
    ledger.save_run_state("run", {"step": 2}, [{"index": 2, "tokens": 9}, {"index": 3, "tokens": 1}])
    state = ledger.load_run_state("run")
    assert state["step"] == 2
    assert state["history"] == [{"index": 1, "tokens": 5}, {"index": 2, "tokens": 9}, {"index": 3, "tokens": 1}]
    if kind == "sqlite":
        ledger.close()
        with SqliteLedger(tmp_path / "l.sqlite") as again:  # survives a reopen
            assert again.load_run_state("run") == state


# --------------------------------------------------------------------------- a lost lease


def _lease_rows(path):
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT holder FROM leases").fetchall()


def test_renewing_a_lease_whose_row_is_gone_raises_ledger_busy_and_never_takes_it_back(tmp_path):
    path = tmp_path / "l.sqlite"
    with SqliteLedger(path) as ledger:
        ledger.register("a", {}, 0.2)
        ledger.acquire_lease("a")
        with sqlite3.connect(path) as conn:  # taken over, then released by the taker
            conn.execute("DELETE FROM leases")
        with pytest.raises(LedgerBusy, match="lease on artifact 'a' is gone") as caught:
            ledger.renew_lease("a")
        assert caught.value.artifact_id == "a" and caught.value.holder is None
        assert _lease_rows(path) == []  # not re-inserted
        with pytest.raises(LedgerBusy):  # lost for good, not only once
            ledger.renew_lease("a")
        assert _lease_rows(path) == []
        ledger.release_lease("a")  # a driver that stopped may take it again, afresh
        ledger.acquire_lease("a")
        ledger.renew_lease("a")
        assert _lease_rows(path) == [(ledger.holder,)]


def test_a_driver_that_lost_its_lease_commits_nothing(tmp_path):
    path = tmp_path / "l.sqlite"
    with SqliteLedger(path) as ledger:
        ledger.register("a", {}, 0.2)
        ledger.acquire_lease("a")
        assert ledger.commit("a", {"k": "1"}, 1) == 2
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM leases")
        with pytest.raises(LedgerBusy, match="writes nothing more"):
            ledger.commit("a", {"k": "2"}, 2)
        with ledger.atomic(), pytest.raises(LedgerBusy):  # inside a block of writes too
            ledger.commit("a", {"k": "2"}, 2)
        assert ledger.head("a") == (2, {"k": "1"}) and _lease_rows(path) == []


def test_a_displaced_driver_is_told_who_took_its_lease_over_after_the_taker_released_it(tmp_path, monkeypatch):
    path = tmp_path / "l.sqlite"
    with SqliteLedger(path) as ledger:
        ledger.register("a", {}, 0.2)
        ledger.acquire_lease("a")
        with sqlite3.connect(path) as conn:  # this driver paused: its heartbeat is old
            conn.execute("UPDATE leases SET heartbeat = heartbeat - 100")
        with monkeypatch.context() as m, sqlite3.connect(path) as conn:  # another driver takes over, then leaves
            m.setattr(lease, "holder_id", lambda: "elsewhere:4242:1.0")
            assert len(lease.acquire(conn, str(path), "a", "", 30.0)) == 1
            lease.release(conn, "a", "")
        assert _lease_rows(path) == []
        with pytest.raises(LedgerBusy, match=r"taken over by holder elsewhere:4242:1\.0 .*has released the lease since"
                           ) as caught:
            ledger.renew_lease("a")
        assert caught.value.holder == "elsewhere:4242:1.0" and "heartbeat is 100" in str(caught.value)
        ledger.release_lease("a")
        with sqlite3.connect(path) as conn:  # the displaced driver stopped: its note goes with it
            assert conn.execute("SELECT COUNT(*) FROM lease_takeovers").fetchone() == (0,)


def test_the_heartbeat_never_takes_a_lost_lease_back(tmp_path, caplog):
    path = tmp_path / "l.sqlite"
    with SqliteLedger(path) as ledger:
        ledger.register("a", {}, 0.2)
        ledger.acquire_lease("a")
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM leases")
        with caplog.at_level(logging.WARNING, logger="agentdescent.ledger"):
            ledger._beat()  # what the timer runs
            ledger._beat()
        assert _lease_rows(path) == []
        lost = [r for r in caplog.records if "lost the lease on 'a'" in r.getMessage()]
        assert len(lost) == 1  # said once; later beats leave the lost lease alone
