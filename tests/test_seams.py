"""Seams take what they document: duck-typed implementations run end to end in both engines.

An allocator with only ``decide``/``observe`` (and ``budget_start``), an evaluator with
only ``held_out``/``cheap``, a ledger with only its six required methods, a strategy and a
staleness policy that subclass nothing, a provider without ``usage``: each is adopted
(`agentdescent.seams.adopt`) and gets the optional members it lacks from the base class.
One tuple of required names drives both the check and its error message.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentdescent import (
    AggregatorConfig,
    AllocateDecision,
    AllocatorPolicy,
    Completion,
    Evaluator,
    InvalidArgumentType,
    LLMAgent,
    MemoryLedger,
    MergeOutcome,
    Provider,
    StaleAction,
    async_evolve,
    evolve,
)
from agentdescent.domains.router import RouterDomain
from agentdescent.merge.aggregator import Aggregator
from agentdescent.seams import adopt, unwrap

from .toy import echo_run, toy_propose, toy_reward, toy_tasks


@pytest.fixture(params=["sync", "async"])
def engine(request: pytest.FixtureRequest):
    def run(tasks: Any, reward: Any, *, rounds: int = 6, **kwargs: Any):
        kwargs.setdefault("n_workers", 2)
        if request.param == "sync":
            return evolve(tasks, reward, rounds=rounds, **kwargs)
        return async_evolve(tasks, reward, max_rollouts=rounds * kwargs["n_workers"], max_seconds=30, **kwargs)
    return run


class RecordingAllocator:
    """The seam the budget page describes: decide, observe, budget_start, nothing else."""

    budget_start = 1.0  # consulted on every candidate once any budget is spent

    def __init__(self) -> None:
        self.decided = 0
        self.outcomes: list[bool] = []

    def decide(self, ctx):
        self.decided += 1
        return AllocateDecision(deep_eval=True)

    def observe(self, ctx, committed):
        self.outcomes.append(committed)


def test_a_duck_typed_allocator_runs_end_to_end(engine):
    d = RouterDomain(seed=0)
    allocator = RecordingAllocator()
    result = engine(**d.evolve_kwargs(), allocator=allocator, max_tokens=400_000)
    assert result.error is None
    assert allocator.decided > 0 and allocator.outcomes, "the governor consulted it and the merge fed it back"
    assert result.budget["allocator"] == {}  # its stats() is the base class's default
    assert len(allocator.outcomes) == result.counters["merge_allocator_observations"]


class DuckEvaluator:
    """Only held_out and cheap: verify and held_out_subset come from the base class."""

    def __init__(self) -> None:
        self.tasks = toy_tasks(9)[6:]
        self.calls = 0

    def held_out(self, artifact_id, state):
        self.calls += 1
        rendered = "\n".join(state.values())
        return [toy_reward(t, echo_run(rendered, t)) for t in self.tasks]

    def cheap(self, artifact_id, state):
        scores = self.held_out(artifact_id, state)
        return sum(scores) / len(scores)


def test_a_duck_typed_evaluator_runs_end_to_end(engine):
    """An evaluator with only ``held_out`` and ``cheap`` is adopted and commits in both engines.

    It has no ``rescore`` (it cannot draw a score again), so the run cannot learn by itself
    that its table of rewards is deterministic, and three held-out tasks could never reach
    the paired test's threshold (E >= 20) on the e-value alone. Its owner knows it is a
    table and says so, ``rescore="deterministic"``: its scores are then facts, and a gain
    the unscored tasks cannot undo is accepted for certain.
    """
    evaluator = DuckEvaluator()

    def factory(ledger, _evaluator, config, policy, allocator, *, budget):
        return Aggregator(ledger, evaluator, config, policy, allocator, budget=budget)

    result = engine(toy_tasks(9), toy_reward, run=echo_run, propose=toy_propose, aggregator_factory=factory,
                    shuffle=False, agg_config=AggregatorConfig(rescore="deterministic"))
    assert result.error is None and evaluator.calls > 0
    assert result.committed > 0
    assert result.counters["noise"]["state"] == "deterministic"
    committed = [r for h in result.history for r in h.reports if r.outcome is MergeOutcome.COMMITTED]
    assert committed and all(r.evidence["sampling"] == "without-replacement" for r in committed)
    assert all(r.evidence["certain"] or r.evidence["e_value"] >= 20 for r in committed)


class SixMethodLedger:
    """A ledger with the six required methods only (no run state, no close)."""

    def __init__(self) -> None:
        self._inner = MemoryLedger()

    def register(self, artifact_id, state, blast_radius):
        self._inner.register(artifact_id, state, blast_radius)

    def head(self, artifact_id):
        return self._inner.head(artifact_id)

    def versions(self):
        return self._inner.versions()

    def commit(self, artifact_id, new_state, base_version, *, meta=None):
        return self._inner.commit(artifact_id, new_state, base_version, meta=meta)

    def history(self, artifact_id):
        return self._inner.history(artifact_id)

    def blast_radius(self, artifact_id):
        return self._inner.blast_radius(artifact_id)


def test_a_ledger_with_only_the_required_methods_runs_without_resume(engine):
    ledger = SixMethodLedger()
    result = engine(toy_tasks(9), toy_reward, run=echo_run, propose=toy_propose, ledger=ledger, shuffle=False)
    assert result.error is None and result.committed > 0
    assert ledger.versions()["artifact"] == result.version


class DuckPolicy:
    name = "always"

    def decide(self, eta, alpha, contract_breaking):
        return StaleAction.DISCARD if contract_breaking and eta else StaleAction.ACCEPT


class DuckRules:
    def initial(self):
        return {}

    def render(self, state):
        return "\n".join(v for _, v in sorted(state.items()))

    def to_diff(self, state, proposal, author, base_version, target):
        from agentdescent import Diff

        if proposal in state.values():
            return None
        return Diff(f"d-{proposal}", target, {proposal: proposal}, author=author)


def test_a_duck_typed_strategy_and_policy_run_end_to_end(engine):
    result = engine(toy_tasks(9), toy_reward, run=echo_run, propose=toy_propose, strategy=DuckRules(),
                    staleness_policy=DuckPolicy(), shuffle=False)
    assert result.error is None and result.committed > 0
    assert "solve g" in result.rendered


class NoMeterProvider:
    """complete() only: the agent counts its calls from each reply's own usage (or the estimate)."""

    def complete(self, messages, **options):
        return Completion("Paris")


def test_a_provider_without_a_meter_is_adopted_by_the_agent():
    agent = LLMAgent(NoMeterProvider())
    assert agent.provider.usage is None  # the declared default
    from agentdescent import Task

    assert agent.solve("", Task("q", "Capital of France?")) == "Paris"
    assert agent.usage.calls == 1


def test_the_required_names_write_the_error_message():
    class HalfAllocator:
        def decide(self, ctx):
            return AllocateDecision()

    with pytest.raises(InvalidArgumentType) as info:
        evolve(toy_tasks(8), toy_reward, run=echo_run, propose=toy_propose, allocator=HalfAllocator())
    text = str(info.value)
    assert "lacks observe()" in text and "decide(), observe()" in text
    assert "budget_start" in text and "agentdescent.AllocatorPolicy" in text
    with pytest.raises(InvalidArgumentType, match=r"lacks cheap\(\)"):
        adopt(type("E", (), {"held_out": lambda self, a, s: [0.0]})(), Evaluator, "evaluator")
    with pytest.raises(InvalidArgumentType, match=r"lacks complete\(\)"):
        LLMAgent(object())


def test_an_adopted_object_keeps_its_own_optional_members_and_identity():
    duck = RecordingAllocator()
    adopted = adopt(duck, AllocatorPolicy, "allocator")
    assert isinstance(adopted, AllocatorPolicy) and unwrap(adopted) is duck
    assert adopted.budget_start == 1.0  # its own, not the default 0.5
    assert adopted.stats() == {} and adopted.state_dict() == {}  # the defaults
    assert adopted.decided == 0  # anything else it carries is still reachable
    subclassed = type("Sub", (Provider,), {"complete": lambda self, m, **o: Completion("x")})()
    assert adopt(subclassed, Provider, "provider") is subclassed  # a subclass is taken as it is
