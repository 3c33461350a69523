"""A ledger that knows its own history: damage done to a real SQLite file outside agentdescent.

Every test builds a real ledger file (``tmp_path``), damages it with ``sqlite3`` (or by
cutting its bytes) the way a user or a crashed tool could, and checks that the next open,
commit or resume refuses it with a named error that says what is missing and what to do,
leaving the file as it was. Then the API checks that used to crash or pass silently, and
the upgrade of a schema-1 file. ``bench/ledger_damage.py`` prints the same cases as the
table in docs/failures.md.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import sqlite3
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentdescent import (
    BudgetGovernor,
    CASConflict,
    Diff,
    InvalidArgument,
    InvalidArgumentType,
    LedgerCorrupted,
    LedgerError,
    LedgerTooNew,
    MemoryLedger,
    RunStateDamaged,
    SqliteLedger,
    Task,
    evolve,
)
from agentdescent.engine.progress import read_progress
from agentdescent.ledger import SCHEMA, SCHEMA_VERSION
from agentdescent.ledger.integrity import version_digest

from .ledger_files import damage, router

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- helpers


def build(path: Path, heads: dict[str, int]) -> None:
    """A closed ledger where artifact ``aid`` has versions 1..heads[aid], state n=version."""
    with SqliteLedger(path) as led:
        for aid, head in heads.items():
            led.register(aid, {"n": "1"}, 0.2)
            for base in range(1, head):
                led.commit(aid, {"n": str(base + 1)}, base, meta={"diff_id": f"d{base}"})


def delete_version(aid: str, version: int) -> tuple[str, tuple]:
    return ("DELETE FROM versions WHERE artifact_id = ? AND version = ?", (aid, version))


def set_state(aid: str, version: int, state: dict[str, str]) -> tuple[str, tuple]:
    return ("UPDATE versions SET state_json = ? WHERE artifact_id = ? AND version = ?",
            (json.dumps(state, sort_keys=True), aid, version))


def refused(path: Path, error: type[Exception] = LedgerCorrupted, **kwargs) -> str:
    """Open ``path``; expect ``error``; return its message (which always names the file)."""
    with pytest.raises(error) as info:
        SqliteLedger(path, **kwargs)
    message = str(info.value)
    assert str(path) in message
    return message




# --------------------------------------------------------------------------- finding 3: the head


def test_deleting_the_head_row_is_refused_on_open_naming_the_artifact_and_the_fix(tmp_path):
    path = tmp_path / "head.sqlite"
    build(path, {"a": 4, "b": 2})
    before = damage(path, delete_version("a", 4))
    message = refused(path)
    assert "artifact 'a': version 4 missing from its history (stored: 1-3" in message
    assert "version 4 is its head (the head pointer says so)" in message
    assert "a resumed run would write another version 4 in its place" in message
    assert "'b'" not in message  # the intact artifact is not reported
    assert "check_history=False" in message and "restore the file from a backup" in message.lower()
    assert path.read_bytes() == before  # refused before anything was written


def test_a_resumed_run_refuses_a_ledger_whose_head_was_deleted_before_any_call(tmp_path):
    path = tmp_path / "run.sqlite"
    kwargs, _ = router()
    first = evolve(**kwargs, rounds=4, ledger=path, artifact_id="router")
    assert first.committed > 0
    damage(path, delete_version("router", first.version))
    kwargs, calls = router()
    with pytest.raises(LedgerCorrupted, match=f"version {first.version} is its head"):
        evolve(**kwargs, rounds=2, ledger=path, artifact_id="router")
    assert calls == []  # nothing ran, so nothing re-created that version number


def test_with_the_check_off_the_survivors_read_but_the_lost_head_is_never_rebuilt(tmp_path):
    path = tmp_path / "salvage.sqlite"
    build(path, {"a": 4})
    damage(path, delete_version("a", 4))
    with SqliteLedger(path, check_history=False) as led:
        assert [e.state["n"] for e in led.history("a")] == ["1", "2", "3"]  # what survives
        assert led.versions() == {"a": 4}  # the head pointer still says 4
        with pytest.raises(LedgerCorrupted, match="version 4, its head, is missing"):
            led.head("a")
        for base in (3, 4):
            with pytest.raises(LedgerCorrupted, match="its last commit was deleted") as info:
                led.commit("a", {"n": "other"}, base)
            assert "nothing was written" in str(info.value)
            assert info.value.problems and info.value.path == str(path)
        assert len(led.history("a")) == 3


def test_an_altered_state_is_detected_on_open_and_on_commit(tmp_path):
    path = tmp_path / "edited.sqlite"
    build(path, {"a": 3})
    before = damage(path, set_state("a", 2, {"n": "edited by hand"}))
    message = refused(path)
    assert "artifact 'a': version 2 does not match its digest" in message
    assert path.read_bytes() == before

    build(other := tmp_path / "edited-head.sqlite", {"a": 3})
    damage(other, set_state("a", 3, {"n": "edited by hand"}))
    assert "version 3 does not match its digest" in refused(other)
    with SqliteLedger(other, check_history=False) as led:
        with pytest.raises(LedgerCorrupted, match="version 3, its head, does not match its digest"):
            led.commit("a", {"n": "4"}, 3)
        with pytest.raises(LedgerCorrupted, match="version 3 does not match its digest"):
            led.history("a")


def test_a_stored_text_that_is_not_utf8_is_corruption_named_with_the_file(tmp_path):
    """A flipped byte that leaves a text column invalid UTF-8: `LedgerCorrupted`, on open and with the check off."""
    path = tmp_path / "flipped.sqlite"
    build(path, {"a": 2})
    bad = ("UPDATE versions SET state_json = CAST(X'7B226E223A2022FF227D' AS TEXT) "
           "WHERE artifact_id = ? AND version = ?", ("a", 1))
    before = damage(path, bad)
    message = refused(path)
    assert "is damaged" in message and "not valid UTF-8" in message and "'.recover'" in message
    assert path.read_bytes() == before  # nothing was written
    with SqliteLedger(path, check_history=False) as led:
        assert led.head("a")[0] == 2  # the undamaged head still reads
        with pytest.raises(LedgerCorrupted, match="not valid UTF-8"):
            led.history("a")


def test_a_row_rewritten_with_a_fresh_digest_breaks_the_link_to_the_next(tmp_path):
    path = tmp_path / "relinked.sqlite"
    build(path, {"a": 3})
    raw = sqlite3.connect(path)
    parent, meta = raw.execute(
        "SELECT parent_digest, meta_json FROM versions WHERE artifact_id = 'a' AND version = 2").fetchone()
    raw.close()
    state = json.dumps({"n": "swapped"})
    digest = version_digest("a", 2, parent, state, meta)  # the row is consistent with itself
    damage(path, ("UPDATE versions SET state_json = ?, digest = ? WHERE artifact_id = 'a' AND version = 2",
                  (state, digest)))
    message = refused(path)
    assert "version 3 does not follow version 2: its parent digest is not version 2's" in message


def test_rows_written_beyond_the_head_pointer_are_refused(tmp_path):
    path = tmp_path / "beyond.sqlite"
    build(path, {"a": 2})
    damage(path, ("INSERT INTO versions (artifact_id, version, state_json, meta_json, created_at)"
                  " VALUES ('a', 3, '{}', '{}', 0)", ()))
    assert "version 3 is stored beyond its head (the head pointer says version 2)" in refused(path)
    with SqliteLedger(path, check_history=False) as led, \
            pytest.raises(LedgerCorrupted, match="version 3 is already stored beyond its head"):
        led.commit("a", {"n": "3"}, 2)


def test_a_deleted_artifacts_row_or_head_pointer_is_named(tmp_path):
    path = tmp_path / "pointer.sqlite"
    build(path, {"a": 2, "b": 2})
    damage(path, ("UPDATE artifacts SET head_version = 0 WHERE artifact_id = 'a'", ()),
           ("UPDATE artifacts SET blast_radius = 'wide' WHERE artifact_id = 'b'", ()))
    message = refused(path)
    assert "artifact 'a': its head pointer is missing or unreadable (head_version=0)" in message
    assert "artifact 'b': its blast radius 'wide' is not a number in [0, 1]" in message


@pytest.mark.parametrize("damaged", [
    ("UPDATE versions SET version = 'x' WHERE artifact_id = 'a' AND version = 2", "a row has version 'x'"),
    ("UPDATE artifacts SET blast_radius = 'q'", "its blast radius 'q' is not a number"),
])
def test_salvage_with_the_check_off_raises_the_named_error_never_a_bare_value_error(tmp_path, damaged):
    sql, said = damaged
    path = tmp_path / "salvage.sqlite"
    build(path, {"a": 3})
    damage(path, (sql, ()))
    assert said in refused(path)
    with SqliteLedger(path, check_history=False) as led:
        for read in (lambda: led.history("a"), lambda: led.blast_radius("a")):
            try:
                read()
            except ValueError as exc:  # pragma: no cover - the failure message is the point
                pytest.fail(f"a bare ValueError escaped: {exc!r}")
            except LedgerCorrupted as exc:
                assert said.split("'")[0] in str(exc) and str(path) in str(exc)


# ------------------------------------------------------------------------ any commits, any one row


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(heads=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(1, 6), min_size=1),
       data=st.data())
def test_any_history_with_any_one_row_deleted_or_edited_is_refused_naming_it(heads, data):
    aid = data.draw(st.sampled_from(sorted(heads)), label="artifact")
    version = data.draw(st.integers(1, heads[aid]), label="version")
    how = data.draw(st.sampled_from(["delete", "edit"]), label="damage")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "l.sqlite"
        build(path, heads)
        with SqliteLedger(path) as led:  # sound before the damage
            assert led.versions() == heads
        statement = delete_version(aid, version) if how == "delete" else set_state(aid, version, {"n": "x"})
        before = damage(path, statement)
        with pytest.raises(LedgerCorrupted) as info:
            SqliteLedger(path)
        problems = info.value.problems
        assert problems and all(p.startswith(f"artifact {aid!r}:") for p in problems)
        assert f"version {version}" in problems[0] or (how == "delete" and heads[aid] == 1)
        assert path.read_bytes() == before


# --------------------------------------------------------------------------- the file itself


def test_a_zero_byte_file_is_refused_never_taken_for_a_new_ledger(tmp_path):
    path = tmp_path / "zero.sqlite"
    path.write_bytes(b"")
    message = refused(path)
    assert "is empty (0 bytes)" in message and "not taken for a new one" in message
    kwargs, calls = router()
    with pytest.raises(LedgerCorrupted, match="empty"):
        evolve(**kwargs, rounds=1, ledger=path)
    assert calls == [] and path.read_bytes() == b""


@pytest.mark.parametrize("keep", [100, 4096, 0.5])
def test_a_truncated_file_is_refused_naming_it(tmp_path, keep):
    real = tmp_path / "real.sqlite"
    build(real, {"a": 30})
    data = real.read_bytes()
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(data[: keep if isinstance(keep, int) else int(len(data) * keep)])
    before = cut.read_bytes()
    message = refused(cut)
    assert "is damaged or truncated" in message and f"the file is {len(before)} bytes" in message
    assert "not taken for a new ledger" in message
    assert cut.read_bytes() == before


def test_a_path_that_does_not_exist_is_created_whole_even_by_racing_openers(tmp_path):
    path = tmp_path / "new" / "ledger.sqlite"
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def open_it():
        barrier.wait()
        try:
            with SqliteLedger(path) as led:
                led.register("a", {}, 0.2)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(p.name for p in path.parent.iterdir()) == ["ledger.sqlite"]  # no temporary left over
    with SqliteLedger(path) as led:
        assert led.head("a") == (1, {})


def test_a_file_of_a_newer_schema_says_so_and_which_version_is_needed(tmp_path):
    path = tmp_path / "newer.sqlite"
    build(path, {"a": 2})
    before = damage(path, ("UPDATE meta SET value = 'agentdescent-ledger/3' WHERE key = 'schema'", ()))
    message = refused(path, LedgerTooNew)
    assert f"written by a newer agentdescent (schema 3, this one reads up to {SCHEMA_VERSION}" in message
    assert "upgrade agentdescent" in message and "not an agentdescent ledger" not in message
    assert path.read_bytes() == before

    other = tmp_path / "stamped.sqlite"
    build(other, {"a": 1})
    damage(other, ("PRAGMA user_version = 9", ()))
    with pytest.raises(LedgerTooNew) as info:
        SqliteLedger(other)
    assert (info.value.found, info.value.supported) == (9, SCHEMA_VERSION)
    assert isinstance(info.value, LedgerError)


# --------------------------------------------------------------------------- schema 1 files

@functools.cache
def _bench():
    """bench/ledger_damage.py, loaded once: its probe, and the schema-1 tables it writes files with."""
    spec = importlib.util.spec_from_file_location("ledger_damage", ROOT / "bench" / "ledger_damage.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def schema_1_file(path: Path, heads: dict[str, int]) -> dict[str, list[tuple[dict, dict]]]:
    """A schema-1 ledger written by hand; returns artifact -> [(state, meta)] per version."""
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA journal_mode = WAL")
    for statement in _bench().SCHEMA_1:  # the tables exactly as the schema-1 ledger wrote them
        raw.execute(statement)
    raw.execute("INSERT INTO meta VALUES ('schema', 'agentdescent-ledger/1')")
    written = {}
    for aid, head in heads.items():
        raw.execute("INSERT INTO artifacts VALUES (?, 0.4, 0)", (aid,))
        written[aid] = []
        for version in range(1, head + 1):
            state, meta = {"rule": f"{aid} v{version}"}, ({} if version == 1 else {"diff_id": f"{aid}{version}"})
            raw.execute("INSERT INTO versions VALUES (?, ?, ?, ?, 0)",
                        (aid, version, json.dumps(state), json.dumps(meta)))
            written[aid].append((state, meta))
    raw.execute("INSERT INTO run_state VALUES ('a', ?, 0)", (json.dumps({"format": "x"}),))
    raw.commit()
    raw.close()
    return written


def test_a_schema_1_file_is_upgraded_in_place_keeping_every_version(tmp_path):
    path = tmp_path / "old.sqlite"
    written = schema_1_file(path, {"a": 5, "b": 1})
    with SqliteLedger(path) as led:
        for aid, versions in written.items():
            assert [(e.version, e.state, e.meta) for e in led.history(aid)] == [
                (i, s, m) for i, (s, m) in enumerate(versions, start=1)]
        assert led.versions() == {"a": 5, "b": 1}
        assert led.blast_radius("a") == pytest.approx(0.4)
        assert led.load_run_state("a") == {"format": "x", "history": []}
        assert led.commit("a", {"rule": "a v6"}, 5) == 6
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == (SCHEMA,)
        assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert raw.execute("SELECT COUNT(*) FROM versions WHERE digest = ''").fetchone() == (0,)
    finally:
        raw.close()
    with SqliteLedger(path) as led:  # the upgraded file passes the full check
        assert led.head("a") == (6, {"rule": "a v6"})
    damage(path, delete_version("a", 6))  # and its chain now catches what schema 1 could not
    assert "version 6 is its head" in refused(path)


def test_a_damaged_schema_1_file_is_refused_before_the_upgrade_and_left_unchanged(tmp_path):
    path = tmp_path / "old-gap.sqlite"
    schema_1_file(path, {"a": 4})
    before = damage(path, delete_version("a", 2))
    assert "artifact 'a': version 2 missing" in refused(path)
    assert path.read_bytes() == before
    # Opened to salvage, it is upgraded, and the gap stays visible: nothing is papered over.
    with SqliteLedger(path, check_history=False) as led:
        assert [e.version for e in led.history("a")] == [1, 3, 4]
    assert "artifact 'a': version 2 missing" in refused(path)


# --------------------------------------------------------------------------- finding 11: run state


def _run_and_damage(path: Path, *statements: tuple[str, tuple]) -> int:
    kwargs, _ = router()
    first = evolve(**kwargs, rounds=4, ledger=path, artifact_id="router")
    assert [h.index for h in first.history] == [1, 2, 3, 4]
    damage(path, *statements)
    return first.version


@pytest.mark.parametrize(("lost", "said"), [(2, "round(s) 2 missing (stored: 1, 3-4; the state records 4)"),
                                            (4, "round(s) 4 missing (stored: 1-3; the state records 4)")])
def test_a_deleted_round_row_refuses_to_resume_and_resume_false_starts_over(tmp_path, lost, said):
    path = tmp_path / "rounds.sqlite"
    version = _run_and_damage(path, ("DELETE FROM run_rounds WHERE run_id = 'router' AND idx = ?", (lost,)))
    kwargs, calls = router()
    with pytest.raises(RunStateDamaged) as info:
        evolve(**kwargs, rounds=2, ledger=path, artifact_id="router")
    message = str(info.value)
    assert said in message and "cannot resume as is" in message and "resume=False" in message
    assert str(path) in message and calls == []
    with SqliteLedger(path) as led, pytest.raises(RunStateDamaged):
        read_progress(led, "router")  # the command line's reader says the same
    kwargs, _ = router()
    again = evolve(**kwargs, rounds=1, ledger=path, artifact_id="router", resume=False)
    assert [h.index for h in again.history] == [1] and again.version >= version


def test_a_deleted_run_state_row_refuses_to_resume(tmp_path):
    path = tmp_path / "state.sqlite"
    _run_and_damage(path, ("DELETE FROM run_state WHERE run_id = 'router'", ()))
    kwargs, calls = router()
    with pytest.raises(RunStateDamaged) as info:
        evolve(**kwargs, rounds=2, ledger=path, artifact_id="router")
    message = str(info.value)
    assert "4 saved round(s) are stored but the run's saved state" in message and "is missing" in message
    assert "cannot resume as is" in message and "resume=False" in message and calls == []
    kwargs, _ = router()
    assert evolve(**kwargs, rounds=1, ledger=path, artifact_id="router", resume=False).stop_reason


def test_read_progress_refuses_a_gap_in_the_rounds_of_any_ledger():
    ledger = MemoryLedger()
    rounds = [{"index": i} for i in (1, 2, 5)]
    ledger.save_run_state("run", {"format": "agentdescent-run-state/1", "round_count": 5}, rounds)
    with pytest.raises(RunStateDamaged, match=r"round\(s\) 3-4 missing \(stored: 1-2, 5; the state records 5\)"):
        read_progress(ledger, "run")
    old = MemoryLedger()  # saved before round_count was recorded: a gap still shows
    old.save_run_state("run", {"format": "agentdescent-run-state/1"}, rounds)
    with pytest.raises(RunStateDamaged, match=r"round\(s\) 3-4 missing .*the last is round 5"):
        read_progress(old, "run")


# --------------------------------------------------------------------------- finding 10: the API


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_lone_surrogate_in_an_artifact_id_is_a_named_error_before_the_file_is_touched(kind, tmp_path):
    led = MemoryLedger() if kind == "memory" else SqliteLedger(tmp_path / "l.sqlite")
    try:
        led.register("a", {}, 0.2)
        for call in (lambda: led.register("a\ud800", {}, 0.2), lambda: led.head("\udc00"),
                     lambda: led.commit("a\ud83d", {}, 1), lambda: led.history("\ud800"),
                     lambda: led.blast_radius("\ud800")):
            with pytest.raises(InvalidArgument, match="lone surrogate"):
                call()
        assert led.versions() == {"a": 1}
    finally:
        led.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, [1.0, math.nan], {"deep": math.inf}])
def test_nan_or_infinity_in_commit_metadata_is_refused_and_nothing_is_written(kind, bad, tmp_path):
    led = MemoryLedger() if kind == "memory" else SqliteLedger(tmp_path / "l.sqlite")
    try:
        led.register("a", {}, 0.2)
        with pytest.raises(InvalidArgument, match="strict JSON") as info:
            led.commit("a", {"k": "v"}, 1, meta={"p_improve": bad})
        assert not isinstance(info.value, TypeError)  # a bad value, not a bad type
        assert led.head("a") == (1, {}) and led.commit("a", {"k": "v"}, 1, meta={"p": 0.5}) == 2
    finally:
        led.close()


@pytest.mark.parametrize("bad", [math.inf, "100", True, math.nan, 100.0])
def test_a_budget_that_is_not_an_int_is_a_named_type_error(bad):
    with pytest.raises(InvalidArgumentType, match=r"BudgetGovernor\(max_tokens="):
        BudgetGovernor(max_tokens=bad)


def test_task_meta_and_diff_target_are_checked_when_built():
    with pytest.raises(InvalidArgumentType, match="meta='x' must be a mapping"):
        Task("t1", "prompt", meta="x")
    with pytest.raises(InvalidArgumentType, match=r"Diff\(target=None\)"):
        Diff("d1", None, {"k": "v"})  # type: ignore[arg-type]


def test_the_named_errors_sit_in_the_tree():
    assert issubclass(LedgerCorrupted, LedgerError) and issubclass(LedgerTooNew, LedgerError)
    assert issubclass(RunStateDamaged, LedgerCorrupted)
    assert not issubclass(LedgerCorrupted, CASConflict) and not issubclass(LedgerCorrupted, ValueError)
    import pickle

    err = pickle.loads(pickle.dumps(LedgerCorrupted("m", path="p", problems=("x",))))
    assert (str(err), err.path, err.problems) == ("m", "p", ("x",))
    err = pickle.loads(pickle.dumps(LedgerTooNew("m", path="p", found=3, supported=2)))
    assert (err.found, err.supported) == (3, 2)


# --------------------------------------------------------------------------- the docs' table


def test_the_damage_table_in_the_docs_is_what_the_probe_prints():
    """bench/ledger_damage.py checks every claim as it runs; the page must show its output."""
    bench = _bench()
    rows = bench.probe()
    assert len(rows) == len(bench.CASES)
    page = (ROOT / "docs" / "failures.md").read_text(encoding="utf-8")
    assert bench.table(rows) in page, "docs/failures.md's Damage table is stale: paste python bench/ledger_damage.py"
    assert "python bench/ledger_damage.py" in page
    undetected = [r["damage"] for r in rows if r["error"] == "-"]
    assert undetected == ["a sound schema-1 file (before the chain)", "the run's state and every saved round deleted"]
