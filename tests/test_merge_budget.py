"""The budget is the merge's one input: `Aggregator(budget=...)` asks it which cards get evaluated and
whether the tournament runs; the engines pass their governor; the stop rules no longer write into it."""

from __future__ import annotations

from typing import Any

import pytest

from agentdescent import (
    Aggregator,
    AggregatorConfig,
    BudgetGovernor,
    InvalidArgument,
    InvalidArgumentType,
    evolve,
)
from agentdescent.budget.merge_budget import NO_BUDGET, GateBudget, MergeBudget
from agentdescent.engine.stopping import StopRules
from agentdescent.fate import FateKind
from agentdescent.ledger import MemoryLedger

from .test_aggregator import (
    ART,
    GOOD_A,
    GOOD_B,
    TABLE,
    TableEvaluator,
    card,
    step_one,
    table_config,
)
from .toy import echo_run, toy_propose, toy_reward, toy_tasks


class RefusingBudget:
    """A merge budget that refuses the held-out evaluation of cards writing ``key``, and every tournament."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.asked: list[str] = []
        self.tournaments = 0

    def evaluates(self, card: Any) -> bool:
        self.asked.append(card.diff.diff_id)
        return self.key not in card.diff.ops

    def allows_tournament(self) -> bool:
        self.tournaments += 1
        return False


def _aggregator(**kwargs: Any) -> Aggregator:
    ledger = MemoryLedger()
    ledger.register(ART, {}, 0.2)
    return Aggregator(ledger, TableEvaluator(), kwargs.pop("config", TABLE), **kwargs)


def test_the_aggregator_asks_its_budget_which_cards_are_evaluated_and_whether_the_tournament_runs() -> None:
    budget = RefusingBudget("ka")
    agg = _aggregator(budget=budget, config=table_config(fusion_tournament=True))
    a, b, c = card({"ka": GOOD_A}), card({"kb": GOOD_B}), card({"kc": GOOD_A + "c"})
    assert a.allocated and b.allocated  # the card's own record says nothing against it: the budget decides
    report = step_one(agg, a, b, c)
    kinds = {f.diff_id: f.kind for f in report.fates}
    assert kinds[a.diff.diff_id] is FateKind.NOT_ALLOCATED
    assert set(budget.asked) >= {a.diff.diff_id, b.diff.diff_id, c.diff.diff_id}
    assert budget.tournaments == 1 and agg.counters["tournaments"] == 0  # asked, refused: no tournament
    assert report.fused  # b and c went forward as a union without it
    assert isinstance(budget, MergeBudget) and agg.budget is budget


def test_the_governor_is_a_merge_budget_and_the_engines_pass_it_to_the_factory() -> None:
    governor = BudgetGovernor(max_tokens=1000)
    assert isinstance(governor, MergeBudget) and governor.allows_tournament()
    seen: list[Any] = []

    def factory(ledger, evaluator, config, policy, allocator, *, budget):
        seen.append(budget)
        return Aggregator(ledger, evaluator, config, policy, allocator, budget=budget)

    result = evolve(toy_tasks(9), toy_reward, run=echo_run, propose=toy_propose, aggregator_factory=factory,
                    rounds=2, max_tokens=10**9)
    assert result.error is None and [type(b).__name__ for b in seen] == ["BudgetGovernor"]


def test_a_factory_written_for_tournament_gate_still_gets_the_gate() -> None:
    gates: list[Any] = []

    def factory(ledger, evaluator, config, policy, allocator, *, tournament_gate):
        gates.append(tournament_gate)
        return Aggregator(ledger, evaluator, config, policy, allocator, tournament_gate=tournament_gate)

    result = evolve(toy_tasks(9), toy_reward, run=echo_run, propose=toy_propose, aggregator_factory=factory, rounds=2)
    assert result.error is None and len(gates) == 1 and gates[0]() is True
    agg = _aggregator(tournament_gate=lambda: False)
    assert isinstance(agg.budget, GateBudget) and not agg.budget.allows_tournament()


def test_without_a_budget_a_card_is_evaluated_unless_its_record_says_the_budget_refused_it() -> None:
    agg = _aggregator()
    assert agg.budget is NO_BUDGET and NO_BUDGET.allows_tournament()
    refused = card({"ka": GOOD_A})
    refused.allocated = False
    report = step_one(agg, refused, card({"kb": GOOD_B}))
    assert [f.kind for f in report.fates if f.diff_id == refused.diff.diff_id] == [FateKind.NOT_ALLOCATED]


def test_a_budget_and_a_gate_together_or_a_budget_of_the_wrong_shape_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="budget= or tournament_gate="):
        _aggregator(budget=NO_BUDGET, tournament_gate=lambda: True)
    with pytest.raises(InvalidArgumentType, match="evaluates"):
        _aggregator(budget=object())


def test_the_governor_allocates_once_and_records_its_answer_on_the_card() -> None:
    from agentdescent import AllocateDecision, AllocatorPolicy
    from agentdescent.budget.allocator import pre_spend_context

    class No(AllocatorPolicy):
        budget_start = 2.0

        def decide(self, ctx):
            return AllocateDecision(deep_eval=False)

        def observe(self, ctx, committed):
            pass

    governor = BudgetGovernor(max_tokens=1000, allocator=No())
    c = card({"ka": GOOD_A})
    assert governor.allocate(c, pre_spend_context(c, 0.2)) is False
    assert c.allocated is False and governor.evaluates(c) is False and governor.n_consulted == 1
    floors = BudgetGovernor(max_tokens=1000)  # no allocator: the floors cut only the self-verify
    d = card({"kb": GOOD_B})
    assert floors.allocate(d, pre_spend_context(d, 0.2)) is True and floors.evaluates(d)


def test_the_stop_rules_read_the_governor_and_never_write_into_it() -> None:
    from agentdescent.engine.families import Limits
    from agentdescent.testing.fakes import ManualClock

    governor = BudgetGovernor(max_tokens=1000, stop_on_diminishing=True)
    rules = StopRules(Limits(max_tokens=1000, stop_on_diminishing_returns=True), 2, governor, ManualClock())
    before = governor.state_dict()
    for reward in (0.1, 0.2, 0.3):
        rules.after_merge(reward, 2)
    assert governor.state_dict() == before


def test_a_run_with_a_budget_tells_its_governor_each_rounds_reward_once() -> None:
    result = evolve(toy_tasks(9), toy_reward, run=echo_run, propose=toy_propose, rounds=3, max_tokens=10**9,
                    agg_config=AggregatorConfig())
    assert result.error is None
    assert result.budget["rounds_recorded"] == len(result.history)
