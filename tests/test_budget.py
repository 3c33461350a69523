"""The budget governor (SPEC §6) and its wiring into both engines."""

from __future__ import annotations

import threading

import pytest

from agentdescent import (
    AggregatorConfig,
    AllocateDecision,
    AllocatorContext,
    AllocatorPolicy,
    BudgetGovernor,
    MergeOutcome,
    ValueBudgetAllocator,
    async_evolve,
    evolve,
)
from agentdescent.domains.router import RouterDomain

from .toy import replayable


class ScriptedAllocator(AllocatorPolicy):
    """An allocator that answers a fixed decision and records every call."""

    def __init__(self, deep_eval: bool = True, budget_start: float = 0.5) -> None:
        self.deep_eval = deep_eval
        self.budget_start = budget_start
        self.decided: list[tuple[float, float, float]] = []
        self.observed: list[tuple[tuple[float, float, float], bool]] = []
        self._lock = threading.Lock()

    def decide(self, ctx: AllocatorContext) -> AllocateDecision:
        with self._lock:
            self.decided.append(ctx.features())
        return AllocateDecision(deep_eval=self.deep_eval)

    def observe(self, ctx: AllocatorContext, committed: bool) -> None:
        with self._lock:
            self.observed.append((ctx.features(), committed))


# ----------------------------------------------------------------------------- unit


def test_inert_without_a_budget() -> None:
    alloc = ScriptedAllocator(deep_eval=False, budget_start=1.0)
    gov = BudgetGovernor(allocator=alloc)
    gov.spend(10**12)
    assert gov.remaining_fraction() == 1.0
    assert not gov.over_budget()
    assert gov.allow_fusion_tournament() and gov.allow_self_verify() and gov.affords_next_round()
    assert gov.candidate_worth(AllocatorContext())
    assert alloc.decided == []
    assert not gov.diminishing_returns()


def test_floors_are_strict_at_75_and_90_percent() -> None:
    gov = BudgetGovernor(max_tokens=1000)
    gov.spend(749)
    assert gov.allow_fusion_tournament()
    gov.spend(750)
    assert not gov.allow_fusion_tournament() and gov.allow_self_verify()
    gov.spend(899)
    assert gov.allow_self_verify()
    gov.spend(900)
    assert not gov.allow_self_verify()
    assert not gov.over_budget()
    gov.spend(1000)
    assert gov.over_budget()
    gov.spend(5000)
    assert gov.remaining_fraction() == 0.0


def test_spend_is_monotone() -> None:
    gov = BudgetGovernor(max_tokens=100)
    gov.spend(50)
    gov.spend(10)
    assert gov.spent == 50


def test_allocator_none_is_the_clock() -> None:
    gov = BudgetGovernor(max_tokens=1000)
    for spent in range(0, 1001, 50):
        gov.spend(spent)
        assert gov.candidate_worth(AllocatorContext(advantage=-5.0)) == gov.allow_self_verify()


def test_allocator_consulted_only_below_budget_start_and_never_past_the_hard_floor() -> None:
    alloc = ScriptedAllocator(deep_eval=False, budget_start=0.5)
    gov = BudgetGovernor(max_tokens=1000, allocator=alloc)
    gov.spend(400)  # remaining 0.6 >= 0.5: yes without asking
    assert gov.candidate_worth(AllocatorContext())
    assert alloc.decided == []
    gov.spend(500)  # remaining exactly 0.5: still >= budget_start
    assert gov.candidate_worth(AllocatorContext())
    assert alloc.decided == []
    gov.spend(600)  # remaining 0.4: the allocator decides
    assert not gov.candidate_worth(AllocatorContext())
    assert len(alloc.decided) == 1
    alloc.deep_eval = True
    gov.spend(900)  # hard floor: no, whatever the allocator says, and it is not asked
    assert not gov.candidate_worth(AllocatorContext())
    assert len(alloc.decided) == 1
    summary = gov.summary()
    assert summary["allocator_consulted"] == 1 and summary["hard_floor_denied"] == 1


def test_next_round_projection() -> None:
    gov = BudgetGovernor(max_tokens=1000)
    gov.spend(600)
    gov.end_round(300)
    gov.end_round(300)
    assert gov.affords_next_round()  # 600 + mean 300 fits in 1000
    gov.spend(800)
    assert not gov.affords_next_round()


def test_diminishing_returns_needs_samples_and_a_budget() -> None:
    gov = BudgetGovernor(max_tokens=10_000, min_efficiency_samples=2)
    for spent, reward in [(100, 0.1), (200, 0.3), (300, 0.5), (400, 0.5), (500, 0.5)]:
        gov.spend(spent)
        gov.observe(reward)
        assert not gov.diminishing_returns() or spent >= 400
    assert gov.diminishing_returns()


def test_bad_knobs_are_named() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        BudgetGovernor(max_tokens=0)
    with pytest.raises(ValueError, match="soft_floor"):
        BudgetGovernor(max_tokens=10, soft_floor=0.95, hard_floor=0.9)


# ----------------------------------------------------------------------------- engines


def _domain(**kw: object) -> RouterDomain:
    return RouterDomain(seed=3, noise=0.3, **kw)


def test_huge_budget_without_allocator_changes_nothing() -> None:
    plain = evolve(**_domain().evolve_kwargs(), rounds=6, n_workers=3)
    budgeted = evolve(**_domain().evolve_kwargs(), rounds=6, n_workers=3, max_tokens=10**12)
    assert plain.state == budgeted.state
    assert [replayable(h) for h in plain.history] == [replayable(h) for h in budgeted.history]
    assert plain.budget is None and budgeted.budget is not None


def test_budget_stop_says_max_tokens() -> None:
    result = evolve(**_domain().evolve_kwargs(), rounds=50, n_workers=3, max_tokens=40_000)
    assert result.stop_reason == "max_tokens"
    assert result.budget is not None and result.budget["max_tokens"] == 40_000
    assert result.usage.total_tokens <= 40_000 or result.stop_reason == "max_tokens"


def test_a_candidate_the_allocator_skips_gets_neither_self_verify_nor_evaluation() -> None:
    alloc = ScriptedAllocator(deep_eval=False, budget_start=1.0)
    result = evolve(**_domain().evolve_kwargs(), rounds=4, n_workers=3,
                    max_tokens=10**9, allocator=alloc)
    assert result.counters["self_verify_skipped"] > 0
    assert result.counters.get("self_verify_rollouts", 0) == 0
    assert sum(h.cards for h in result.history) == result.counters["cards"]  # the cards still merge
    # ... but a candidate that is not evaluated is not committed, and nothing was measured
    assert result.committed == 0 and result.counters["merge_not_evaluated"] > 0
    # the starting head's sample (its seeded head_sample of the held-out tasks) and, as the run
    # ends, the same head's other held-out tasks (the final reward is measured): the head never changed
    held_out = round(len(_domain().tasks) * 0.4)
    sample = min(AggregatorConfig().head_sample, held_out)
    assert result.counters["merge_head_tasks_scored"] == sample
    assert result.counters["merge_final_tasks_scored"] == held_out - sample
    assert result.counters["eval_rollouts"] == held_out
    assert result.counters.get("merge_held_out_tasks_scored", 0) == 0
    assert alloc.observed == []


def _measured(result) -> list:
    """Reports of decisions that measured the candidate: the ones the allocator learns from.

    A candidate scored on held-out tasks has a ``p_improve``; one the self-verify gate
    refused has none (no held-out call), but its self-verify was its measurement, and it is
    reported to the allocator too. An unevaluated candidate is neither.
    """
    return [r for h in result.history for r in h.reports
            if r.outcome.measured and (r.p_improve is not None or r.reason.startswith("self-verify gate"))]


@pytest.mark.parametrize("engine", ["sync", "async"])
def test_every_measured_outcome_is_observed_exactly_once(engine: str) -> None:
    alloc = ScriptedAllocator(deep_eval=True, budget_start=1.0)
    kwargs = dict(_domain().evolve_kwargs(), max_tokens=10**9, allocator=alloc)
    if engine == "sync":
        result = evolve(**kwargs, rounds=8, n_workers=4, refresh_interval=3)
    else:
        result = async_evolve(**kwargs, n_workers=4, max_iters=40, max_seconds=30)
    measured = _measured(result)
    assert len(alloc.observed) == len(measured) > 0
    committed = [r for r in measured if r.outcome is MergeOutcome.COMMITTED]
    assert sum(c for _, c in alloc.observed) == len(committed)
    unmeasured = [r for h in result.history for r in h.reports if r not in measured]
    assert len(alloc.observed) + len(unmeasured) == sum(len(h.reports) for h in result.history)
    # every training vector is a vector the allocator was asked about before the spend
    decided = set(alloc.decided)
    assert all(features in decided for features, _ in alloc.observed)


def test_fused_commit_trains_on_the_first_contributor_not_the_union() -> None:
    alloc = ScriptedAllocator(deep_eval=True, budget_start=1.0)
    result = evolve(**_domain().evolve_kwargs(), rounds=6, n_workers=4,
                    max_tokens=10**9, allocator=alloc)
    fused = [r for h in result.history for r in h.reports
             if r.outcome is MergeOutcome.COMMITTED and r.fused]
    assert fused, "the workload should fuse at least once"
    single_size = AllocatorContext(size=1).features()[1]
    # KeyedRules diffs have one op each; a union has more, and must never be the input
    assert all(features[1] == single_size for features, _ in alloc.observed)


def test_real_allocator_runs_under_a_tight_budget() -> None:
    alloc = ValueBudgetAllocator(seed=0, budget_start=0.9, min_observations=2)
    result = evolve(**_domain().evolve_kwargs(), rounds=40, n_workers=4,
                    max_tokens=150_000, allocator=alloc)
    assert result.stop_reason in {"max_tokens", "rounds"}
    assert alloc.n_observed == len(_measured(result))
    assert result.budget["allocator"]["n_observed"] == alloc.n_observed


def test_tournament_runs_only_when_configured_and_affordable() -> None:
    """The fusion tournament runs when asked for, and the governor removes it past the soft floor.

    The starved run's budget is set so that the starting head's sample (``head_sample``
    held-out tasks, not the whole held-out set) and round 1's worker steps already spend
    past the soft floor (75 %) when round 1 merges several cards, where a tournament would
    otherwise rank them. (The budget is spent during that merge's evaluation, which stops
    there: no call starts once the budget is spent.)
    """
    on = evolve(**_domain().evolve_kwargs(), rounds=5, n_workers=4, fusion_tournament=True)
    assert on.counters.get("merge_tournaments", 0) > 0
    off = evolve(**_domain().evolve_kwargs(), rounds=5, n_workers=4)
    assert off.counters.get("merge_tournaments", 0) == 0
    # past the soft floor from the first round on: the governor removes the tournament
    starved = evolve(**_domain().evolve_kwargs(), rounds=5, n_workers=4, fusion_tournament=True,
                     max_tokens=600)
    assert starved.history, "round 1 ran"
    assert starved.history[0].cards >= 2  # a merge a tournament would rank
    assert starved.counters["merges_cut_by_budget"] == 1  # it was prepared, then the budget ran out
    assert starved.counters.get("merge_tournaments", 0) == 0
