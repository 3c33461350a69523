"""One driver per (ledger file, artifact), on real processes and real SQLite files.

A second unshared ``evolve(ledger=path)`` on an artifact another process is driving is
refused at once, naming the holder's pid; a holder killed with SIGKILL is taken over;
four drivers that share the artifact each keep every round and token under their own run
id; a driver killed between a commit and its save leaves neither (they land together), so
its resumed run equals an uninterrupted one round by round; on a ledger that groups
nothing, that commit is adopted on resume, so the rounds' commits equal the ledger's; and a
driver stopped with SIGSTOP past its lease, taken over by a driver that commits, saves and
finishes, stops with LedgerBusy when continued (``evolve``, ``async_evolve`` and
``agentdescent run``), writing nothing over the taker's commits and progress.
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
by_object = (args.get("run_id") and args["seed"] % 2 == 0) or args.get("lease_seconds")
ledger = SqliteLedger(args["path"], run_id=args["run_id"], lease_seconds=args.get("lease_seconds") or 30.0) \
    if by_object else args["path"]
# an async driver runs until its rollouts or its time are spent (rounds * 4 rollouts, no time bound)
length = dict(asynchronous=True, max_rollouts=4 * args["rounds"], max_seconds=3600.0) \
    if args.get("asynchronous") else dict(rounds=args["rounds"], max_concurrency=4)
try:
    result = evolve(**RouterDomain(seed=args["seed"], latency=args["latency"]).evolve_kwargs(),
                    **length, seed=args["seed"], ledger=ledger,
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
           kill_after_commit_round: int | None = None, resume: bool = True, no_atomic: bool = False,
           lease_seconds: float | None = None, asynchronous: bool = False) -> subprocess.Popen[str]:
    args = {"path": str(path), "rounds": rounds, "seed": seed, "latency": latency, "run_id": run_id,
            "kill_after_commit_round": kill_after_commit_round, "resume": resume, "no_atomic": no_atomic,
            "lease_seconds": lease_seconds, "asynchronous": asynchronous}
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
    first = _start(path, rounds=10_000, latency=0.02)  # it never ends by itself: killed below
    try:
        _wait_for_lease(path, first.pid)
        code, out = _finish(_start(path, rounds=3))
        assert code == 3, out
        # at once, told by order and not by a clock: refused while the holder still runs, so it
        # never waited for the lease (and, exiting on LedgerBusy, ran no round)
        assert first.poll() is None
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


def _saved_rounds(path: Path) -> int:
    if not path.exists():  # connecting would make an empty file, which the driver then refuses
        return 0
    try:
        with sqlite3.connect(path, timeout=5) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM run_rounds").fetchone()[0])
    except sqlite3.OperationalError:
        return 0  # the file or its tables are not there yet


def _stop_outside_a_write(proc: subprocess.Popen[str], path: Path, timeout: float = 30.0) -> None:
    """SIGSTOP ``proc`` at a moment it holds no write lock on ``path`` (so a taker can write).

    A process stopped inside a write transaction would keep the file locked; it is
    continued and stopped again until this process can take the write lock itself.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        os.kill(proc.pid, signal.SIGSTOP)
        conn = sqlite3.connect(path, timeout=0.2, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:  # stopped mid-write: let it finish that write
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.05)
        finally:
            conn.close()
    raise AssertionError(f"process {proc.pid} never let go of the write lock on {path}")


def _take_over(path: Path, *, rounds: int, lease_seconds: float, timeout: float = 60.0):
    """Run ``rounds`` rounds on ``path`` in this process once the stopped holder's heartbeat expired."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return evolve(**RouterDomain(seed=0).evolve_kwargs(), rounds=rounds, max_concurrency=4,
                          ledger=SqliteLedger(path, lease_seconds=lease_seconds))
        except LedgerBusy:
            assert time.monotonic() < deadline, "the stopped holder's lease never expired"
            time.sleep(0.2)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["evolve", "async_evolve"])
def test_a_driver_stopped_past_its_lease_and_taken_over_stops_with_ledger_busy_keeping_the_takers_work(
        tmp_path: Path, asynchronous: bool) -> None:
    """The finding: a displaced driver re-took its released lease and saved over the taker's progress."""
    path = tmp_path / "run.sqlite"
    lease = 2.0
    first = _start(path, rounds=400, latency=0.02, lease_seconds=lease, asynchronous=asynchronous)
    try:
        deadline = time.monotonic() + 60
        while _saved_rounds(path) < 2:  # the first driver is under way: it has work to commit and save
            assert first.poll() is None, _finish(first)
            assert time.monotonic() < deadline, "the first driver saved no round"
            time.sleep(0.05)
        _stop_outside_a_write(first, path)
        with SqliteLedger(path) as ledger:
            before = ledger.head("artifact")[0]
        taker = _take_over(path, rounds=4, lease_seconds=lease)  # takes over, commits, saves, releases
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGCONT)
    code, out = _finish(first, timeout=120)
    assert code == 3, out  # the first driver stopped at its next write with LedgerBusy
    assert out["holder_pid"] == os.getpid() and "taken over by holder" in out["busy"]
    with SqliteLedger(path) as ledger:
        head = ledger.head("artifact")[0]
        history = ledger.history("artifact")
        saved = read_all_progress(ledger, "artifact")
        assert ledger.lease_holders("artifact") == []
    takers = [e.version for e in history if e.meta.get("holder") == ledger.holder]
    assert head == taker.version and head > before  # the taker committed, and nothing came after it
    assert takers == list(range(before + 1, head + 1))  # every commit since the takeover is the taker's
    assert set(saved) == {None}
    assert len(saved[None].rounds) == len(taker.history)  # the taker's saved progress, whole
    assert saved[None].commits == head - 1 == sum(r.committed for r in taker.history)


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


def test_a_cli_run_whose_lease_was_taken_over_fails_naming_the_holder(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    from agentdescent.cli.main import ARTIFACT_ID
    from agentdescent.testing.llmserver import LLMServer

    from .test_cli import KEY, _script, init, responder

    with LLMServer(responder=responder(delay=0.02)) as server:
        run_dir = init(tmp_path, server)
        ledger_file = run_dir / "ledger.sqlite"
        env = {**os.environ, "CLI_TEST_KEY": KEY, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([*_script(), "run", str(run_dir), "--rounds", "400", "--workers", "2"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            deadline = time.monotonic() + 60
            while _saved_rounds(ledger_file) < 2:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the run saved no round"
                time.sleep(0.05)
            _stop_outside_a_write(proc, ledger_file)
            with SqliteLedger(ledger_file) as ledger:
                before = ledger.head(ARTIFACT_ID)[0]
            deadline = time.monotonic() + 90
            while True:  # another driver (a script on the run's ledger) takes the artifact over
                try:
                    taker = evolve(**RouterDomain(seed=0).evolve_kwargs(), rounds=4, artifact_id=ARTIFACT_ID,
                                   resume=False, ledger=SqliteLedger(ledger_file, lease_seconds=2.0))
                    break
                except LedgerBusy:
                    assert time.monotonic() < deadline, "the stopped run's lease never expired"
                    time.sleep(0.2)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    failed = [line for line in err.splitlines() if line.startswith("agentdescent: the run failed:")]
    assert len(failed) == 1 and f"pid {os.getpid()}" in failed[0], err
    assert f"agentdescent resume {run_dir}" in failed[0]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and "taken over by holder" in status["error"]
    with SqliteLedger(ledger_file) as ledger:
        history = ledger.history(ARTIFACT_ID)
        saved = read_progress(ledger, ARTIFACT_ID)
    assert history[-1].version == taker.version > before  # the taker committed; the run wrote nothing after it
    assert [e.version for e in history if e.meta.get("holder") == ledger.holder] == \
        list(range(before + 1, taker.version + 1))
    assert saved is not None and saved.adopted == [] and saved.head_version <= before
