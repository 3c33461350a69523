"""A look of the paired test is scored at once, and read in its fixed order.

Concurrency changes when held-out calls run, never which scores the test uses or the
order they reach it: the `Measurer` names a look's tasks on both sides (the candidate's
batch, and the head's tasks whose score it does not know) before anything of the look is
scored, hands them to `Evaluator.prefetch`, then reads them one `held_out_subset` at a
time as before. The engines' evaluator starts a prefetch's calls together on the run's
pool (`CallRunner.score_jobs`); the async engine's merger gets a pool at least one look
wide even with one worker. No test here reads the clock: overlap is seen by counting the
calls in flight, each held at a rendezvous until a second one arrives.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping, Sequence

from agentdescent import async_evolve, evolve
from agentdescent.clock import MonotonicClock
from agentdescent.domains.router import RouterDomain
from agentdescent.engine.counters import Counters
from agentdescent.engine.evaluation import RolloutEvaluator, look_width
from agentdescent.engine.executors import CallRunner, DaemonPool
from agentdescent.merge.aggregator import AggregatorConfig
from agentdescent.merge.strategies import AppendRules
from agentdescent.types import Task
from agentdescent.usage import Usage

from .test_measurement import HEAD, TableEvaluator, diff, measurer, prepared
from .toy import replayable_result


class Rendezvous:
    """Counts the calls in flight; each waits (at most ``patience`` s) until ``want`` are in flight at once.

    Serial calls never meet: each waits out its patience, and the peak stays 1.
    """

    def __init__(self, want: int = 2, patience: float = 5.0) -> None:
        self.want = want
        self.patience = patience
        self.cond = threading.Condition()
        self.in_flight = 0
        self.peak = 0
        self.gave_up = False

    def __enter__(self) -> Rendezvous:
        with self.cond:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.cond.notify_all()
            if not self.gave_up and not self.cond.wait_for(lambda: self.peak >= self.want, self.patience):
                self.gave_up = True  # the next calls do not wait: a failing test fails fast
        return self

    def __exit__(self, *exc: object) -> None:
        with self.cond:
            self.in_flight -= 1


# --------------------------------------------------------------------------- the measurer


class PrefetchingTable(TableEvaluator):
    """`TableEvaluator` that logs each prefetch (the states by name, with the indices) among its reads."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, object]] = []

    def prefetch(self, artifact_id: str, batches: Sequence[tuple[Mapping[str, str], Sequence[int]]]) -> None:
        self.log.append(("prefetch", [(state.get("name", "head"), tuple(i)) for state, i in batches]))

    def held_out_subset(self, artifact_id, state, indices):
        self.log.append(("read", (state.get("name", "head"), tuple(indices))))
        return super().held_out_subset(artifact_id, state, indices)


def test_each_look_is_named_on_both_sides_before_it_is_read_and_read_as_without_prefetch():
    plain = TableEvaluator()
    expected = measurer(plain).measure(prepared(diff("refund-fix", "refund")))
    ev = PrefetchingTable()
    out = measurer(ev).measure(prepared(diff("refund-fix", "refund")))
    # the same scores, in the same order, the same decision: prefetch changes nothing the test sees
    assert ev.batches == plain.batches
    assert out == expected
    # every look: one prefetch naming the candidate's batch and the head's unknown tasks, then their reads
    looks = [k for k, (kind, _) in enumerate(ev.log) if kind == "prefetch"]
    assert len(looks) >= 2
    for k in looks:
        (cand_name, cand_idx), (head_name, head_idx) = ev.log[k][1]
        assert (cand_name, head_name) == ("refund-fix", "head")
        assert ev.log[k + 1] == ("read", (cand_name, cand_idx))
        if head_idx:
            assert ev.log[k + 2] == ("read", ("head", head_idx))
        else:
            assert k + 2 >= len(ev.log) or ev.log[k + 2][0] == "prefetch"


def test_a_second_candidate_does_not_name_the_heads_known_scores_again():
    """A second candidate on the same head: the head's known scores are not named again."""
    ev = PrefetchingTable()
    m = measurer(ev)
    m.measure(prepared(diff("refund-fix", "refund")))
    first = {i for kind, batches in ev.log if kind == "prefetch" for name, idx in batches if name == "head"
             for i in idx}
    ev.log.clear()
    m.measure(prepared(diff("junk", "refund")))
    named = [i for kind, batches in ev.log if kind == "prefetch" for name, idx in batches if name == "head"
             for i in idx]
    read = [i for kind, (name, idx) in ev.log if kind == "read" and name == "head" for i in idx]
    assert named == read  # exactly what the head is then scored on
    assert not set(named) & first  # known on this version: never scored twice


# --------------------------------------------------------------------------- the engines' evaluator


TASKS = [Task(f"h{i}", f"question {i}", {"answer": "yes"}) for i in range(8)]


def _evaluator(threads: int, meet: Rendezvous, calls: collections.Counter[str]) -> RolloutEvaluator:
    def solve(rendered: str, task: Task) -> str:
        with meet:
            calls[task.id] += 1
        return "yes" if "yes" in rendered else "no"

    pool = DaemonPool(threads)
    runner = CallRunner(executor=pool, remote=False, pool=pool, solve=solve,
                        reward=lambda task, output: float(output == task.meta["answer"]), meters=(Usage(),),
                        counters=Counters(), clock=MonotonicClock(), deadline=None, call_attempts=1,
                        failure_limit=3, max_seconds=None, grace_seconds=2.0)
    return RolloutEvaluator(runner, AppendRules(), Counters(), TASKS, TASKS[:2])


def test_a_prefetch_starts_both_states_calls_together_and_the_reads_cost_nothing():
    meet = Rendezvous(want=8)
    calls: collections.Counter[str] = collections.Counter()
    ev = _evaluator(8, meet, calls)
    head, cand = {}, {"r": "say yes"}
    ev.prefetch("a", [(cand, [0, 1, 2, 3]), (head, [0, 1, 2, 3])])
    assert meet.peak == 8 and not meet.gave_up  # all eight calls were in flight at once
    assert sum(calls.values()) == 8
    assert ev.held_out_subset("a", cand, [0, 1, 2, 3]) == [1.0] * 4
    assert ev.held_out_subset("a", head, [0, 1, 2, 3]) == [0.0] * 4
    assert sum(calls.values()) == 8  # read from what the prefetch scored
    assert ev.counters.get("eval_rollouts") == 8


def test_a_prefetch_is_bounded_by_the_pool():
    meet = Rendezvous(want=3, patience=0.5)
    calls: collections.Counter[str] = collections.Counter()
    ev = _evaluator(2, meet, calls)
    ev.prefetch("a", [({"r": "yes"}, range(6))])
    assert meet.peak == 2 and sum(calls.values()) == 6


# --------------------------------------------------------------------------- the engines


def test_the_async_merger_scores_a_look_at_once_with_one_worker():
    assert look_width(AggregatorConfig()) == 2 * AggregatorConfig().eval_batch
    domain = RouterDomain(seed=0)
    held_out = {t.id for t in domain.tasks[-24:]}
    meet = Rendezvous(want=2)

    def run(rendered: str, task: Task) -> str:
        if task.id not in held_out:
            return domain.run(rendered, task)
        with meet:
            return domain.run(rendered, task)

    result = async_evolve(**{**domain.evolve_kwargs(), "run": run}, shuffle=False, held_out_frac=24 / 288,
                          n_workers=1, async_ratio=1, max_rollouts=12, max_seconds=60)
    assert result.stop_reason == "max_rollouts" and result.error is None
    assert meet.peak >= 2 and not meet.gave_up


def test_a_sync_run_decides_the_same_whatever_its_concurrency():
    """``max_concurrency=1`` repeats bit for bit, and a concurrent held-out evaluation changes nothing of it."""
    def run(threads: int, workers: int) -> dict:
        domain = RouterDomain(seed=0, noise=0.25)
        return replayable_result(evolve(**domain.evolve_kwargs(), rounds=10, n_workers=workers,
                                        max_concurrency=threads, seed=0))

    for workers in (1, 3):
        serial = run(1, workers)
        assert serial == run(1, workers)
        assert serial == run(8, workers)
        assert serial["counters"]["eval_rollouts"] > 0


def test_head_state_shared_with_the_candidate_is_scored_once():
    """A prefetch naming one state twice (a no-op diff) makes each call once."""
    meet = Rendezvous(want=1)
    calls: collections.Counter[str] = collections.Counter()
    ev = _evaluator(4, meet, calls)
    ev.prefetch("a", [(HEAD, [0, 1]), (dict(HEAD), [0, 1])])
    assert sum(calls.values()) == 2
