"""A run's saved progress is covered by digests: a bit flipped in it is refused, never resumed from.

Every test builds a real SQLite ledger file (an offline run on the router domain, or a
hand-made record), flips bits of the saved run state (``run_state``) and rounds
(``run_rounds``) with ``sqlite3`` behind agentdescent's back, byte for byte (so a flip may
also break the UTF-8), and checks that the next load refuses it with `RunStateDamaged`
naming the file, the run and the way on. Then the files saved before the digests: they
still open, and the first save covers them.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest

from agentdescent import RunStateDamaged, SqliteLedger, evolve
from agentdescent.engine.progress import read_progress

from .ledger_files import flipped, router, stored_bytes, write_bytes

STATE = ("run_state", "state_json", "run_id = ?")
DIGEST = ("run_state", "digest", "run_id = ?")


def round_row(index: int) -> tuple[str, str, str]:
    return ("run_rounds", "round_json", f"run_id = ? AND idx = {index}")




def saved_run(path: Path) -> None:
    kwargs, _ = router()
    result = evolve(**kwargs, rounds=4, ledger=path, artifact_id="router")
    assert [h.index for h in result.history] == [1, 2, 3, 4] and result.committed > 0


def refused(led: SqliteLedger, run_id: str) -> RunStateDamaged:
    with pytest.raises(RunStateDamaged) as info:
        led.load_run_state(run_id)
    return info.value


def every_flip_is_refused(path: Path, led: SqliteLedger, run_id: str, where: tuple[str, str, str],
                          bits: list[int]) -> int:
    """Flip each of ``bits`` of that row's text in turn (restoring it after); return how many were refused."""
    original = stored_bytes(path, *where, (run_id,))
    caught = 0
    for bit in bits:
        write_bytes(path, *where, (run_id,), flipped(original, bit))
        try:
            led.load_run_state(run_id)
        except RunStateDamaged as exc:
            caught += 1
            assert str(path) in str(exc) and repr(run_id) in str(exc) and "resume=False" in str(exc)
    write_bytes(path, *where, (run_id,), original)
    assert led.load_run_state(run_id) is not None  # restored: it reads again
    return caught


# --------------------------------------------------------------------------- the finding


def test_the_finding_a_saved_rule_account_turned_accouft_is_refused_on_resume(tmp_path):
    path = tmp_path / "run.sqlite"
    saved_run(path)
    text = stored_bytes(path, *STATE, ("router",))
    at = text.index(b"account")
    damaged = flipped(text, (at + 5) * 8 + 3)  # 'n' (0x6e) -> 'f' (0x66): one bit
    assert damaged[at:at + 7] == b"accouft"
    write_bytes(path, *STATE, ("router",), damaged)
    kwargs, calls = router()
    with pytest.raises(RunStateDamaged) as info:
        evolve(**kwargs, rounds=2, ledger=path, artifact_id="router")
    message = str(info.value)
    assert f"ledger file {str(path)!r}: the saved progress of run 'router' is damaged" in message
    assert "its saved state does not match its digest: it was changed outside agentdescent" in message
    assert "resume=False" in message and "restore the file from a backup" in message
    assert info.value.path == str(path) and info.value.problems
    assert calls == []  # refused before any call
    with SqliteLedger(path) as led, pytest.raises(RunStateDamaged):
        read_progress(led, "router")  # the command line's reader says the same
    kwargs, _ = router()
    again = evolve(**kwargs, rounds=1, ledger=path, artifact_id="router", resume=False)
    assert [h.index for h in again.history] == [1]  # starting over on the same head still works


def test_sampled_bit_flips_in_a_real_runs_state_and_rounds_are_all_refused(tmp_path):
    path = tmp_path / "run.sqlite"
    saved_run(path)
    rng = random.Random(0)
    with SqliteLedger(path) as led:
        state_bits = len(stored_bytes(path, *STATE, ("router",))) * 8
        bits = rng.sample(range(state_bits), 600)
        assert every_flip_is_refused(path, led, "router", STATE, bits) == len(bits)
        for index in (1, 2, 3, 4):
            size = len(stored_bytes(path, *round_row(index), ("router",))) * 8
            bits = rng.sample(range(size), 80)
            assert every_flip_is_refused(path, led, "router", round_row(index), bits) == len(bits)


def test_every_single_bit_flip_of_a_small_record_is_refused(tmp_path):
    path = tmp_path / "small.sqlite"
    with SqliteLedger(path) as led:
        led.save_run_state("run", {"format": "agentdescent-run-state/1", "rule": "account", "round_count": 2},
                           [{"index": 1, "rule": "cite"}, {"index": 2, "rule": "account"}])
        for where in (STATE, round_row(2), DIGEST, ("run_rounds", "digest", "run_id = ? AND idx = 1")):
            bits = range(len(stored_bytes(path, *where, ("run",))) * 8)
            assert every_flip_is_refused(path, led, "run", where, list(bits)) == len(bits), where


def test_a_round_moved_to_another_number_is_refused(tmp_path):
    path = tmp_path / "moved.sqlite"
    with SqliteLedger(path) as led:
        led.save_run_state("run", {"round_count": 3}, [{"index": i} for i in (1, 2, 3)])
        raw = sqlite3.connect(path)
        raw.execute("UPDATE run_rounds SET idx = 7 WHERE idx = 3")  # bit 2 of the number flipped
        raw.commit()
        raw.close()
        assert "saved round(s) 7 do not match their digests" in str(refused(led, "run"))


def test_a_run_saving_after_a_refused_state_is_not_blocked_for_other_runs(tmp_path):
    path = tmp_path / "two.sqlite"
    with SqliteLedger(path) as led:
        led.save_run_state("a", {"who": "a"}, [{"index": 1}])
        led.save_run_state("b", {"who": "b"}, [{"index": 1}])
        write_bytes(path, *STATE, ("a",), flipped(stored_bytes(path, *STATE, ("a",)), 11))
        assert refused(led, "a").problems == (
            "run 'a': its saved state does not match its digest: it was changed outside agentdescent (a "
            "flipped bit, or a hand edit)",)
        assert led.load_run_state("b") == {"who": "b", "history": [{"index": 1}]}
        led.save_run_state("a", {"who": "a again"}, [])  # a new save replaces the damaged state
        assert led.load_run_state("a")["who"] == "a again"


# --------------------------------------------------------------------------- files saved before the digests


def without_run_digests(path: Path) -> None:
    """Rebuild the run-state tables as an agentdescent before the digests made them (no digest column)."""
    raw = sqlite3.connect(path)
    raw.executescript(
        "ALTER TABLE run_state RENAME TO run_state_new; ALTER TABLE run_rounds RENAME TO run_rounds_new;"
        "CREATE TABLE run_state (run_id TEXT PRIMARY KEY, state_json TEXT NOT NULL, updated_at REAL NOT NULL);"
        "CREATE TABLE run_rounds (run_id TEXT NOT NULL, idx INTEGER NOT NULL, round_json TEXT NOT NULL,"
        " PRIMARY KEY (run_id, idx));"
        "INSERT INTO run_state SELECT run_id, state_json, updated_at FROM run_state_new;"
        "INSERT INTO run_rounds SELECT run_id, idx, round_json FROM run_rounds_new;"
        "DROP TABLE run_state_new; DROP TABLE run_rounds_new;"
    )
    raw.commit()
    raw.close()


def columns(path: Path, table: str) -> list[str]:
    raw = sqlite3.connect(path)
    try:
        return [row[1] for row in raw.execute(f"PRAGMA table_info({table})")]
    finally:
        raw.close()


def test_a_file_saved_before_the_digests_opens_and_resumes_and_its_first_save_covers_it(tmp_path):
    path = tmp_path / "old.sqlite"
    saved_run(path)
    without_run_digests(path)
    assert "digest" not in columns(path, "run_state")
    with SqliteLedger(path) as led:
        before = led.load_run_state("router")  # not yet covered: read as it is
        assert [r["index"] for r in before["history"]] == [1, 2, 3, 4]
    assert "digest" not in columns(path, "run_rounds")  # a load writes nothing
    kwargs, _ = router()
    resumed = evolve(**kwargs, rounds=2, ledger=path, artifact_id="router")  # the first save covers it
    assert [h.index for h in resumed.history] == [1, 2, 3, 4, 5, 6]
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("SELECT COUNT(*) FROM run_rounds WHERE digest = ''").fetchone() == (0,)
        assert raw.execute("SELECT COUNT(*) FROM run_state WHERE digest = ''").fetchone() == (0,)
    finally:
        raw.close()
    # A round saved before the digests (and not saved again since) is covered now.
    write_bytes(path, *round_row(1), ("router",), flipped(stored_bytes(path, *round_row(1), ("router",)), 42))
    with SqliteLedger(path) as led:
        assert "saved round(s) 1 do not match their digests" in str(refused(led, "router"))


def test_rows_an_older_agentdescent_wrote_into_a_covered_file_read_as_not_yet_covered(tmp_path):
    path = tmp_path / "mixed.sqlite"
    with SqliteLedger(path) as led:
        led.save_run_state("run", {"round_count": 1}, [{"index": 1}])
    raw = sqlite3.connect(path)  # an older agentdescent's insert: it knows no digest column
    raw.execute("INSERT INTO run_rounds (run_id, idx, round_json) VALUES ('run', 2, ?)", (json.dumps({"index": 2}),))
    raw.commit()
    raw.close()
    with SqliteLedger(path) as led:
        assert [r["index"] for r in led.load_run_state("run")["history"]] == [1, 2]


def test_a_round_that_is_not_json_in_an_uncovered_file_is_still_named(tmp_path):
    path = tmp_path / "old-bad.sqlite"
    with SqliteLedger(path) as led:
        led.save_run_state("run", {"round_count": 1}, [{"index": 1}])
    without_run_digests(path)
    write_bytes(path, *round_row(1), ("run",), b'{"index": 1')
    with SqliteLedger(path) as led:
        assert "a saved round is not JSON" in str(refused(led, "run"))
    write_bytes(path, *round_row(1), ("run",), b'{"index": \xff}')
    with SqliteLedger(path) as led:
        assert "saved round(s) 1 are not UTF-8 text" in str(refused(led, "run"))
