"""The seed rules of issue 31 that were only partly true, each pinned where it used to fail.

1. Past the hard floor, the spend floors alone (no allocator: "the clock" of docs/budget.md)
   refuse the self-verify rollout, never the held-out evaluation.
2. A sync round reads the head once, for every worker of the round.
3. The async resync rule is SPEC §7's: a worker resyncs once the head is *more than*
   ``async_ratio`` versions past its snapshot (pinned, not changed: see the test).
4. (Not changed: under ``guarded`` a pooled card beyond alpha is still never drawn again;
   re-drawing it was measured to slow the default async configuration.)
5. ``examples/rq2_staleness.py --policy`` (in tests/test_examples.py).
6. Once the head cannot be beaten (held-out reward 1.0), the async stall guard neither forces
   nor counts refreshes in a fixed-length run; workers behind the head resync to it.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from agentdescent import MemoryLedger, Task, async_evolve, evolve
from agentdescent.clock import MonotonicClock
from agentdescent.domains.router import RouterDomain
from agentdescent.engine.async_scheduler import AsyncScheduler

from .toy import echo_run, toy_propose, toy_reward

# --------------------------------------------------------------------------- 1. the clock and held-out evaluation

BUDGET = 100_000


def _spends_past_the_hard_floor_at_its_first_proposal() -> dict[str, Any]:
    """The router domain, whose first proposal call records 91 % of ``BUDGET`` (the rest stays cheap)."""
    domain = RouterDomain(seed=0)
    kwargs = dict(domain.evolve_kwargs())
    inner = domain.propose
    calls = {"n": 0}

    def propose(rendered: str, task: Task, output: str, reward: float) -> str | None:
        calls["n"] += 1
        if calls["n"] == 1:
            domain.usage.record(int(BUDGET * 0.91), 0)
        return inner(rendered, task, output, reward)

    kwargs["propose"] = propose
    return kwargs


@pytest.mark.parametrize("engine", ["sync", "async"])
def test_past_the_hard_floor_the_clock_skips_the_self_verify_but_not_the_held_out_evaluation(engine: str) -> None:
    kwargs = _spends_past_the_hard_floor_at_its_first_proposal()
    if engine == "sync":
        result = evolve(**kwargs, rounds=1, n_workers=1, max_tokens=BUDGET)
    else:
        result = async_evolve(**kwargs, n_workers=1, max_rollouts=1, max_tokens=BUDGET, max_seconds=60)
    c = result.counters
    assert result.error is None and c["cards"] == 1
    assert c["self_verify_skipped"] == 1 and c.get("self_verify_rollouts", 0) == 0  # the optional spend
    # ... but the candidate is not dropped unevaluated: it gets its held-out evaluation
    assert c.get("not_allocated", 0) == 0 and c.get("merge_not_evaluated", 0) == 0
    assert c.get("merge_held_out_tasks_scored", 0) > 0
    (report,) = [r for h in result.history for r in h.reports]
    assert report.p_improve is not None
    assert result.budget["spent_fraction"] >= 0.9 and result.budget["allocator_consulted"] == 0


# --------------------------------------------------------------------------- 2. one head read per sync round


class CountingLedger(MemoryLedger):
    """A real `MemoryLedger` that counts its ``head`` reads by the module that made them."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()
        self._count_lock = threading.Lock()

    def head(self, artifact_id: str) -> tuple[int, dict[str, str]]:
        caller = sys._getframe(1).f_globals.get("__name__", "?")
        with self._count_lock:
            self.reads[caller] += 1
        return super().head(artifact_id)


@pytest.mark.parametrize("refresh_interval", [1, 3])
def test_a_sync_round_reads_the_head_once_for_all_its_workers(refresh_interval: int) -> None:
    ledger = CountingLedger()
    rounds, n_workers = 7, 3
    result = evolve(**RouterDomain(seed=0).evolve_kwargs(), rounds=rounds, n_workers=n_workers,
                    refresh_interval=refresh_interval, ledger=ledger)
    assert result.stop_reason == "rounds" and len(result.history) == rounds
    # the scheduler's snapshot: with 3 workers staggered over at most 3 rounds, some worker
    # refreshes in every round, and one read serves all of the round's refreshes
    assert ledger.reads["agentdescent.engine.sync_scheduler"] == rounds
    # every other read is the engine's own, outside the workers: the merge path (the aggregator
    # and its measurer), the run's set-up and its end
    outside = {m: n for m, n in ledger.reads.items() if m != "agentdescent.engine.sync_scheduler"}
    assert set(outside) <= {"agentdescent.merge.aggregator", "agentdescent.engine.runtime",
                            "agentdescent.engine.ending", "agentdescent.engine.progress"}, outside
    assert sum(ledger.reads.values()) == rounds + sum(outside.values())


# --------------------------------------------------------------------------- 3. the async resync rule (SPEC §7)


def _scheduler(ledger: MemoryLedger, async_ratio: int) -> AsyncScheduler:
    """An `AsyncScheduler` over a real ledger, with a run that admits everything (only `admit` is used)."""
    schedule = SimpleNamespace(n_workers=1, async_ratio=async_ratio, pacing=False, max_pending=None,
                               stall_sweeps=None)
    env = SimpleNamespace(
        config=SimpleNamespace(schedule=schedule, clock=MonotonicClock()), artifact_id="a", ledger=ledger,
        aggregator=SimpleNamespace(alpha_for=lambda aid: 1), admission_check=lambda admitted, spend: None,
        step_cost=lambda: 0.0, merge_cost=lambda merged: 0.0,
        stops=SimpleNamespace(admission_deadline=lambda: None),
    )
    return AsyncScheduler(env)  # type: ignore[arg-type]


@pytest.mark.parametrize("async_ratio", [0, 1, 3])
def test_an_async_worker_resyncs_once_the_head_is_more_than_async_ratio_versions_ahead(async_ratio: int) -> None:
    ledger = MemoryLedger()
    ledger.register("a", {}, 0.2)
    scheduler = _scheduler(ledger, async_ratio)
    snapshot = scheduler.admit(0, None)
    assert snapshot is not None and snapshot[0] == 1 and scheduler.stats.resyncs == 1
    for ahead in range(1, async_ratio + 2):
        ledger.commit("a", {"k": str(ahead)}, ledger.head("a")[0])
        seen = scheduler.admit(0, snapshot)
        assert seen is not None
        if ahead <= async_ratio:  # up to async_ratio versions behind: keep the snapshot
            assert seen == snapshot and scheduler.stats.resyncs == 1
        else:  # async_ratio + 1 behind: resync
            assert seen[0] == 1 + ahead and scheduler.stats.resyncs == 2
    assert scheduler.stats.forced_refreshes == 0


# --------------------------------------------------------------------------- 6. the stall guard after convergence


def _one_rule_tasks(n: int = 30) -> list[Task]:
    """Tasks all solved by one rule (``solve g0``): the first commit solves the whole held-out set."""
    return [Task(f"t{i}", f"prompt {i}", {"group": "g0"}) for i in range(n)]


def test_no_refresh_is_forced_or_counted_once_the_head_cannot_be_beaten() -> None:
    # One worker on a snapshot behind a solved head keeps failing there (async_ratio=3 never
    # resyncs it one version behind), so every sweep brings cards that cannot commit. Nothing
    # can beat a held-out reward of 1.0: that is convergence, not a stall, and the worker
    # resyncs to the head instead of being forced.
    result = async_evolve(_one_rule_tasks(), toy_reward, run=echo_run, propose=toy_propose, n_workers=1,
                          max_rollouts=40, max_seconds=60)
    assert result.stop_reason == "max_rollouts" and result.error is None
    assert result.version == 2 and result.final_reward == 1.0
    assert result.forced_refreshes == 0 and result.async_stats.forced_refreshes == 0
    assert result.counters["resyncs"] >= 2  # the first snapshot, and the catch-up to the solved head
    assert result.counters["resyncs_converged"] == 1  # the catch-up, counted as such
    assert result.history[-1].cards == 0  # caught up: its rollouts succeed, nothing left to propose
    assert result.counters["cards"] < 10
