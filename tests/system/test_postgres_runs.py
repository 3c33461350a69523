"""Runs on a `PostgresLedger`, end to end on the offline router domain, against the session's real server.

What the ledger seam promises a run, through a database: ``evolve(ledger="postgresql://...")``
resumes as it does on a file, round for round; sharing drivers in other processes (sync and
async) each keep every round and token they spent; a driver killed between a commit and its
save leaves neither and its resumed run equals an uninterrupted one; a server restarted in
the middle of a run is survived.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from agentdescent import evolve
from agentdescent.domains.router import RouterDomain
from agentdescent.engine.progress import read_all_progress, read_progress
from agentdescent.ledger import PostgresLedger

ROOT = Path(__file__).resolve().parents[2]
_names = itertools.count()

CHILD = r"""
import json, os, signal, sys
sys.path.insert(0, ROOT)
from agentdescent import evolve
from agentdescent.domains.router import RouterDomain
from agentdescent.engine.progress import ProgressStore
from agentdescent.ledger import PostgresLedger

args = json.loads(sys.argv[1])
if args.get("kill_after_commit_round"):
    save = ProgressStore.save
    def dying_save(self, state, history):  # die right after a round that committed, before its save lands
        if len(history) >= args["kill_after_commit_round"] and history and history[-1].committed:
            os.kill(os.getpid(), signal.SIGKILL)
        save(self, state, history)
    ProgressStore.save = dying_save
# a sharing driver names its run id on evolve (odd seeds) or on its ledger object (even seeds)
by_object = args.get("run_id") and args["seed"] % 2 == 0
ledger = PostgresLedger(args["dsn"], run_id=args["run_id"]) if by_object else args["dsn"]
length = dict(asynchronous=True, max_rollouts=4 * args["rounds"], max_seconds=3600.0) \
    if args.get("asynchronous") else dict(rounds=args["rounds"], max_concurrency=4)
result = evolve(**RouterDomain(seed=args["seed"], latency=0.002).evolve_kwargs(), **length, seed=args["seed"],
                ledger=ledger, run_id=None if by_object else args.get("run_id"))
print(json.dumps({"rounds": len(result.history), "tokens": result.usage.total_tokens,
                  "commits": sum(r.committed for r in result.history), "version": result.version,
                  "rewards": [r.held_out_reward for r in result.history]}))
""".replace("ROOT", repr(str(ROOT)))


def _database(server: Any) -> str:
    return server.create_database(f"runs_{os.getpid()}_{next(_names)}")


def _start(dsn: str, **args: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps({"dsn": dsn, "seed": 0, **args})],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str], timeout: float = 120.0) -> tuple[int, dict[str, Any]]:
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return proc.returncode, (json.loads(lines[-1]) if lines else {"stderr": err[-2000:]})


def test_a_run_on_a_dsn_resumes_round_for_round(postgres_server: Any) -> None:
    kwargs = dict(**RouterDomain(seed=3).evolve_kwargs(), seed=3, max_concurrency=1)
    whole = evolve(**kwargs, rounds=6, ledger=_database(postgres_server))
    dsn = _database(postgres_server)
    first = evolve(**kwargs, rounds=3, ledger=dsn)
    assert len(first.history) == 3
    again = evolve(**kwargs, rounds=3, ledger=dsn)  # resumes the saved progress
    assert len(again.history) == 6
    assert [r.held_out_reward for r in again.history] == [r.held_out_reward for r in whole.history]
    assert again.version == whole.version
    with PostgresLedger(dsn, read_only=True) as ledger:
        assert ledger.head("artifact")[1] == whole.state


def test_four_sharing_drivers_each_keep_every_round_and_token(postgres_server: Any) -> None:
    dsn = _database(postgres_server)
    PostgresLedger(dsn).close()
    procs = {f"d{i}": _start(dsn, rounds=5, seed=i, run_id=f"d{i}", asynchronous=i == 3) for i in range(4)}
    results = {rid: _finish(proc) for rid, proc in procs.items()}
    assert all(code == 0 for code, _ in results.values()), results
    with PostgresLedger(dsn, read_only=True) as ledger:
        saved = read_all_progress(ledger, "artifact")
        head = ledger.head("artifact")[0]
        history = ledger.history("artifact")
    assert set(saved) == set(procs)
    for rid, (_, out) in results.items():
        assert len(saved[rid].rounds) == out["rounds"]
        assert saved[rid].tokens == out["tokens"]
        assert saved[rid].commits == out["commits"] == sum(1 for e in history if e.meta.get("driver") == rid)
    assert sum(p.commits for p in saved.values()) == head - 1


def test_a_kill_between_commit_and_save_leaves_neither_and_the_resumed_run_equals_an_uninterrupted_one(
        postgres_server: Any) -> None:
    code, whole = _finish(_start(_database(postgres_server), rounds=8))
    assert code == 0, whole
    dsn = _database(postgres_server)
    code, out = _finish(_start(dsn, rounds=8, kill_after_commit_round=2))
    assert code == -signal.SIGKILL, out
    with PostgresLedger(dsn, read_only=True) as ledger:
        head = ledger.head("artifact")[0]
        progress = read_progress(ledger, "artifact")
    assert progress is not None and progress.adopted == [] and progress.head_version == head
    assert progress.commits == head - 1  # the commit went with the unsaved round
    code, out = _finish(_start(dsn, rounds=8 - len(progress.rounds)))
    assert code == 0, out
    assert out["rounds"] == 8 and out["commits"] == whole["commits"] and out["version"] == whole["version"]
    assert out["rewards"] == whole["rewards"]


def test_a_server_restarted_in_the_middle_of_a_run_is_survived(postgres_server: Any) -> None:
    dsn = _database(postgres_server)
    kwargs = dict(**RouterDomain(seed=1, latency=0.01).evolve_kwargs(), seed=1, max_concurrency=2)
    restarted = threading.Event()
    seen: list[int] = []

    def restart_after_two_rounds(info: Any) -> None:
        seen.append(info.index)
        if info.index == 2 and not restarted.is_set():
            postgres_server.restart()  # the run's connections are cut; the next calls reconnect
            restarted.set()

    result = evolve(**kwargs, rounds=6, ledger=dsn, on_round=restart_after_two_rounds)
    assert restarted.is_set() and len(result.history) == 6 and seen == list(range(1, 7))
    with PostgresLedger(dsn, read_only=True) as ledger:
        progress = read_progress(ledger, "artifact")
        assert progress is not None and len(progress.rounds) == 6
        assert progress.commits == ledger.head("artifact")[0] - 1 == sum(r.committed for r in result.history)
