"""One driver per (ledger file, artifact), on real processes and real SQLite files.

A second unshared ``evolve(ledger=path)`` on an artifact another process is driving is
refused at once, naming the holder's pid; a holder killed with SIGKILL is taken over;
four drivers that share the artifact each keep every round and token under their own run
id; a driver killed between a commit and its save leaves neither (they land together), so
its resumed run equals an uninterrupted one round by round; and on a ledger that groups
nothing, that commit is adopted on resume, so the rounds' commits equal the ledger's.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentdescent import LedgerBusy, SqliteLedger, evolve
from agentdescent.domains.router import RouterDomain
from agentdescent.engine.progress import read_all_progress, read_progress

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, os, signal, sys
sys.path.insert(0, ROOT)
from agentdescent import LedgerBusy, SqliteLedger, evolve
from agentdescent.domains.router import RouterDomain
from agentdescent.engine.progress import ProgressStore

args = json.loads(sys.argv[1])
if args.get("no_atomic"):
    # A ledger that groups nothing (the seam's default): each write lands on its own.
    import contextlib
    SqliteLedger.atomic = lambda self: contextlib.nullcontext()
if args.get("kill_after_commit_round"):
    # The test hook: die right after a round that committed, before its progress is saved.
    save = ProgressStore.save
    def dying_save(self, state, history):
        if len(history) >= args["kill_after_commit_round"] and history and history[-1].committed:
            os.kill(os.getpid(), signal.SIGKILL)
        save(self, state, history)
    ProgressStore.save = dying_save
# a sharing driver names its run id on evolve (odd seeds) or on its ledger object (even seeds)
by_object = args.get("run_id") and args["seed"] % 2 == 0
ledger = SqliteLedger(args["path"], run_id=args["run_id"]) if by_object else args["path"]
try:
    result = evolve(**RouterDomain(seed=args["seed"], latency=args["latency"]).evolve_kwargs(),
                    rounds=args["rounds"], seed=args["seed"], ledger=ledger, max_concurrency=4,
                    resume=args.get("resume", True), run_id=None if by_object else args.get("run_id"))
except LedgerBusy as err:
    print(json.dumps({"busy": str(err), "holder_pid": err.pid}))
    sys.exit(3)
print(json.dumps({"pid": os.getpid(), "rounds": len(result.history), "tokens": result.usage.total_tokens,
                  "commits": sum(r.committed for r in result.history), "version": result.version,
                  "adopted": result.counters.get("orphan_commits_adopted", 0),
                  "rewards": [r.held_out_reward for r in result.history]}))
""".replace("ROOT", repr(str(ROOT)))


def _start(path: Path, *, rounds: int, seed: int = 0, latency: float = 0.002, run_id: str | None = None,
           kill_after_commit_round: int | None = None, resume: bool = True,
           no_atomic: bool = False) -> subprocess.Popen[str]:
    args = {"path": str(path), "rounds": rounds, "seed": seed, "latency": latency, "run_id": run_id,
            "kill_after_commit_round": kill_after_commit_round, "resume": resume, "no_atomic": no_atomic}
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str], timeout: float = 30.0) -> tuple[int, dict]:
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return proc.returncode, (json.loads(lines[-1]) if lines else {"stderr": err[-2000:]})


def _wait_for_lease(path: Path, pid: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            try:
                with sqlite3.connect(path, timeout=5) as conn:
                    if conn.execute("SELECT 1 FROM leases WHERE pid = ?", (pid,)).fetchone():
                        return
            except sqlite3.OperationalError:
                pass  # the table is not there yet
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never took the lease on {path}")


def test_a_second_unshared_driver_is_refused_at_once_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    first = _start(path, rounds=400, latency=0.02)
    try:
        _wait_for_lease(path, first.pid)
        started = time.monotonic()
        code, out = _finish(_start(path, rounds=3))
        assert code == 3, out
        assert time.monotonic() - started < 10.0  # at once: no round ran (the child's start-up is the time)
        assert out["holder_pid"] == first.pid
        assert f"pid {first.pid}" in out["busy"] and "run_id=" in out["busy"]
        assert first.poll() is None  # the holder goes on untouched
    finally:
        first.kill()
        first.wait()


def test_a_holder_killed_with_sigkill_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    first = _start(path, rounds=400, latency=0.02)
    _wait_for_lease(path, first.pid)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    with SqliteLedger(path) as ledger:  # the dead holder's row is still in the file, heartbeat fresh
        assert [row.pid for row in ledger.lease_holders("artifact")] == [first.pid]
    code, out = _finish(_start(path, rounds=2))
    assert code == 0, out
    with SqliteLedger(path) as ledger:
        assert ledger.lease_holders("artifact") == []  # released when the run returned


def test_four_sharing_drivers_each_keep_every_round_and_token(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    SqliteLedger(path).close()  # made once, so the four do not race to create it
    procs = {f"d{i}": _start(path, rounds=5, seed=i, run_id=f"d{i}") for i in range(4)}
    results = {rid: _finish(proc) for rid, proc in procs.items()}
    assert all(code == 0 for code, _ in results.values()), results
    with SqliteLedger(path) as ledger:
        saved = read_all_progress(ledger, "artifact")
        head = ledger.head("artifact")[0]
        commits_by_driver = {rid: sum(1 for e in ledger.history("artifact") if e.meta.get("driver") == rid)
                             for rid in procs}
    assert set(saved) == set(procs)  # no unshared record: nothing is last-writer-wins
    for rid, (_, out) in results.items():
        assert len(saved[rid].rounds) == 5 == out["rounds"]
        assert saved[rid].tokens == out["tokens"]
        assert saved[rid].commits == out["commits"] == commits_by_driver[rid]
    assert sum(p.tokens for p in saved.values()) == sum(out["tokens"] for _, out in results.values())
    assert sum(p.commits for p in saved.values()) == head - 1


def test_an_unshared_driver_is_refused_while_sharing_drivers_run(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    sharer = _start(path, rounds=400, latency=0.02, run_id="d0")
    try:
        _wait_for_lease(path, sharer.pid)
        with pytest.raises(LedgerBusy, match="drivers sharing it are running") as caught:
            evolve(**RouterDomain(seed=0).evolve_kwargs(), rounds=1, ledger=str(path))
        assert caught.value.pid == sharer.pid and caught.value.run_id == "d0"
        with SqliteLedger(path, run_id="d1") as other:  # another run id shares it
            other.acquire_lease("artifact")
            assert sorted(row.run_id for row in other.lease_holders("artifact")) == ["d0", "d1"]
        with pytest.raises(LedgerBusy, match="the same run id 'd0'"):
            evolve(**RouterDomain(seed=0).evolve_kwargs(), rounds=1, ledger=SqliteLedger(path, run_id="d0"))
    finally:
        sharer.kill()
        sharer.wait()


def test_a_kill_between_commit_and_save_leaves_neither_and_the_resumed_run_equals_an_uninterrupted_one(
        tmp_path: Path) -> None:
    code, whole = _finish(_start(tmp_path / "whole.sqlite", rounds=8))
    assert code == 0, whole
    path = tmp_path / "run.sqlite"
    code, out = _finish(_start(path, rounds=8, kill_after_commit_round=2))
    assert code == -signal.SIGKILL, out
    with SqliteLedger(path) as ledger:
        head = ledger.head("artifact")[0]
        progress = read_progress(ledger, "artifact")
    assert progress is not None
    assert progress.adopted == [] and progress.head_version == head  # the commit went with the unsaved round
    assert progress.commits == head - 1
    done = len(progress.rounds)
    code, out = _finish(_start(path, rounds=8 - done))
    assert code == 0, out
    assert out["adopted"] == 0
    assert out["rounds"] == 8 and out["commits"] == whole["commits"] and out["version"] == whole["version"]
    assert out["rewards"] == whole["rewards"]  # round by round, as if never killed
    with SqliteLedger(path) as ledger:
        final = read_progress(ledger, "artifact")
        assert final is not None and final.commits == ledger.head("artifact")[0] - 1 and len(final.rounds) == 8
        assert [r.held_out_reward for r in final.rounds] == whole["rewards"]


def test_on_a_ledger_that_groups_nothing_a_commit_after_the_last_save_is_adopted_on_resume(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    code, out = _finish(_start(path, rounds=8, kill_after_commit_round=2, no_atomic=True))
    assert code == -signal.SIGKILL, out
    with SqliteLedger(path) as ledger:
        stored = ledger.load_run_state("artifact")
        head = ledger.head("artifact")[0]
        progress = read_progress(ledger, "artifact")
    assert progress is not None
    assert len(progress.adopted) == 1 and progress.adopted == [head]  # the orphan commit
    assert progress.head_version == head - 1 == stored["head"]["version"]
    assert progress.commits == head - 1  # the rounds' commits equal the ledger's
    done = len(progress.rounds)
    code, out = _finish(_start(path, rounds=8 - done, no_atomic=True))
    assert code == 0, out
    assert out["adopted"] == 1
    assert out["rounds"] == 8 and out["commits"] == out["version"] - 1
    with SqliteLedger(path) as ledger:
        final = read_progress(ledger, "artifact")
        assert final is not None and final.adopted == []  # saved since: nothing left to adopt
        assert final.commits == ledger.head("artifact")[0] - 1 and len(final.rounds) == 8


def _foreign_row(path: Path, *, heartbeat_age: float, run_id: str = "") -> None:
    """A lease row of a holder on another host (its pid cannot be checked from here)."""
    now = time.time()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO leases (artifact_id, run_id, holder, host, pid, acquired_at, heartbeat)"
                     " VALUES ('artifact', ?, 'elsewhere:4242:1.0', 'elsewhere', 4242, ?, ?)",
                     (run_id, now - heartbeat_age, now - heartbeat_age))


def test_a_lease_on_another_host_is_taken_over_only_once_its_heartbeat_is_old(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    with SqliteLedger(path) as ledger:
        ledger.register("artifact", {}, 0.2)
        ledger.acquire_lease("artifact")
    _foreign_row(path, heartbeat_age=5.0)
    with SqliteLedger(path, lease_seconds=30.0) as ledger, pytest.raises(LedgerBusy) as caught:
        ledger.acquire_lease("artifact")
    assert caught.value.host == "elsewhere" and caught.value.pid == 4242 and "heartbeat 5.0 s ago" in str(caught.value)
    with SqliteLedger(path, lease_seconds=2.0) as ledger:  # older than its expiry: taken over
        ledger.acquire_lease("artifact")
        assert [row.host for row in ledger.lease_holders("artifact")] != ["elsewhere"]
    with SqliteLedger(path) as ledger:
        assert ledger.lease_holders("artifact") == []


def test_a_driver_whose_lease_was_taken_over_stops_at_its_next_save(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    with SqliteLedger(path) as ledger:
        ledger.register("artifact", {}, 0.2)
        ledger.acquire_lease("artifact")
        with sqlite3.connect(path) as conn:  # another driver took it over after our heartbeat expired
            conn.execute("UPDATE leases SET holder = 'elsewhere:4242:1.0', host = 'elsewhere', pid = 4242")
        with pytest.raises(LedgerBusy, match="was taken over by holder elsewhere:4242:1.0"):
            ledger.renew_lease("artifact")


def test_the_lease_knobs_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="run_id=''"):
        SqliteLedger(tmp_path / "a.sqlite", run_id="")
    with pytest.raises(ValueError, match="lease_seconds"):
        SqliteLedger(tmp_path / "a.sqlite", lease_seconds=0)


def test_the_commits_of_a_run_that_saved_nothing_are_not_adopted(tmp_path: Path) -> None:
    path = tmp_path / "run.sqlite"
    assert _finish(_start(path, rounds=2))[0] == 0
    with SqliteLedger(path) as ledger:
        before = read_progress(ledger, "artifact")
    assert before is not None and before.adopted == []
    code, out = _finish(_start(path, rounds=6, seed=1, resume=False))  # a new run on the same head, unsaved
    assert code == 0 and out["commits"] > 0, out
    with SqliteLedger(path) as ledger:
        after = read_progress(ledger, "artifact")
        assert ledger.head("artifact")[0] == before.head_version + out["commits"]
    assert after is not None and after.adopted == [] and len(after.rounds) == len(before.rounds)


def test_a_run_on_a_ledger_you_passed_releases_its_lease_when_it_returns(tmp_path: Path) -> None:
    with SqliteLedger(tmp_path / "run.sqlite") as ledger:
        evolve(**RouterDomain(seed=0).evolve_kwargs(), rounds=1, ledger=ledger)
        assert ledger.lease_holders("artifact") == []  # the ledger stays open; the artifact is free
        assert ledger.head("artifact")[0] >= 1


def test_run_id_is_checked_against_the_ledger_it_shares(tmp_path: Path) -> None:
    kwargs = RouterDomain(seed=0).evolve_kwargs()
    with pytest.raises(ValueError, match="ledger=None is the run's own"):
        evolve(**kwargs, rounds=1, run_id="d0")
    with pytest.raises(ValueError, match=r"SqliteLedger\(path, run_id='d0'\)"):
        evolve(**kwargs, rounds=1, run_id="d0", ledger=SqliteLedger(tmp_path / "a.sqlite"))
    with pytest.raises(ValueError, match="non-empty str"):
        evolve(**kwargs, rounds=1, run_id=" ", ledger=str(tmp_path / "a.sqlite"))
