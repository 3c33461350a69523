"""One conformance suite per seam: each passes on the shipped implementations and fails on a broken one.

The suites live in `agentdescent.testing.conformance` (the ledger's has its own tests in
tests/test_ledger.py and tests/test_testing.py). Here every other seam's suite runs
against what the package ships — strategies, staleness policies, the learning allocator
and a duck-typed one, the engines' evaluator and a duck-typed one, the providers (fakes,
the simulator, a callable, both SDK adapters against a loopback server), the ledgers'
run-state pair — and each suite is run once more against an implementation with one rule
broken, which must fail the check for that rule.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from agentdescent import (
    AllocateDecision,
    AppendRules,
    Completion,
    Diff,
    FullStaleness,
    GuardedStaleness,
    KeyedRules,
    MemoryLedger,
    ReflectiveStaleness,
    SingleSlot,
    SqliteLedger,
    StaleAction,
    Usage,
    ValueBudgetAllocator,
)
from agentdescent.budget.pricing import MEASURED_RATE_CARD
from agentdescent.clock import MonotonicClock
from agentdescent.engine.counters import Counters
from agentdescent.engine.evaluation import RolloutEvaluator
from agentdescent.engine.executors import CallRunner, DaemonPool
from agentdescent.providers import from_callable
from agentdescent.testing import (
    AllocatorConformance,
    CachingProviderSim,
    EvaluatorConformance,
    FakeProvider,
    ManualClock,
    ProviderConformance,
    RunStateConformance,
    StalenessConformance,
    StrategyConformance,
)
from agentdescent.testing.llmserver import LLMServer, Reply, anthropic_body, openai_body

from .ledger_files import flipped, stored_bytes, write_bytes
from .toy import echo_run, toy_reward, toy_tasks

# --------------------------------------------------------------------------- strategies


class TestAppendRules(StrategyConformance):
    def make_strategy(self):
        return AppendRules()


class TestKeyedRules(StrategyConformance):
    def make_strategy(self):
        return KeyedRules(["label", "tone"])

    def proposals(self):
        return ("label: always name the department", "tone: be brief", "A free-standing rule.")


class TestSingleSlot(StrategyConformance):
    def make_strategy(self):
        return SingleSlot("Answer the question.")

    def proposals(self):
        return ("Answer the question in one word.",)


class _DuckRules:
    """A strategy that subclasses nothing: the engines adopt it."""

    def initial(self):
        return {}

    def render(self, state):
        return "\n".join(f"- {v}" for _, v in sorted(state.items()))

    def to_diff(self, state, proposal, author, base_version, target):
        key = f"r{sum(map(ord, proposal))}"
        if state.get(key) == proposal:
            return None
        return Diff(f"{target}-{key}", target, {key: proposal}, author=author)


class TestDuckTypedStrategy(StrategyConformance):
    def make_strategy(self):
        return _DuckRules()


class _MutatingRules(_DuckRules):
    def to_diff(self, state, proposal, author, base_version, target):
        state["touched"] = "yes"  # writes into the caller's snapshot
        return super().to_diff(state, proposal, author, base_version, target)


class _RandomKeyRules(_DuckRules):
    def to_diff(self, state, proposal, author, base_version, target):
        key = f"r{random.random()}"  # two workers proposing the same rule never fuse
        return Diff(f"{target}-{key}", target, {key: proposal}, author=author)


class _ReappliedRules(_DuckRules):
    def to_diff(self, state, proposal, author, base_version, target):
        return Diff(f"{target}-{len(state)}", target, {f"r{len(state)}": proposal}, author=author)


# --------------------------------------------------------------------------- staleness


class TestFullStaleness(StalenessConformance):
    def make_policy(self):
        return FullStaleness()


class TestGuardedStaleness(StalenessConformance):
    def make_policy(self):
        return GuardedStaleness()


class TestReflectiveStaleness(StalenessConformance):
    def make_policy(self):
        return ReflectiveStaleness()


class _DuckPolicy:
    name = "duck"

    def decide(self, eta, alpha, contract_breaking):
        if eta == 0:
            return StaleAction.ACCEPT
        return StaleAction.DISCARD if contract_breaking or eta > alpha else StaleAction.REBASE


class TestDuckTypedPolicy(StalenessConformance):
    def make_policy(self):
        return _DuckPolicy()


class _AcceptsBreaking(_DuckPolicy):
    def decide(self, eta, alpha, contract_breaking):
        return StaleAction.ACCEPT


class _Moody(_DuckPolicy):
    def __init__(self):
        self.calls = 0

    def decide(self, eta, alpha, contract_breaking):
        self.calls += 1
        if eta == 0 and not contract_breaking:
            return StaleAction.ACCEPT
        return StaleAction.DISCARD if contract_breaking or self.calls % 2 else StaleAction.REBASE


class _Unnamed:
    def decide(self, eta, alpha, contract_breaking):
        return StaleAction.ACCEPT


# --------------------------------------------------------------------------- allocators


class TestValueBudgetAllocator(AllocatorConformance):
    def make_allocator(self):
        return ValueBudgetAllocator(seed=7, min_observations=2)


class _DuckAllocator:
    """Only the two required methods (and budget_start), as the budget page describes."""

    budget_start = 0.6

    def __init__(self):
        self.seen = []

    def decide(self, ctx):
        return AllocateDecision(deep_eval=(ctx.advantage or 0.0) >= 0)

    def observe(self, ctx, committed):
        self.seen.append(committed)


class TestDuckTypedAllocator(AllocatorConformance):
    def make_allocator(self):
        return _DuckAllocator()


class _StatefulDuck(_DuckAllocator):
    """Learns, but its state_dict leaves out what it learned."""

    def __init__(self):
        super().__init__()
        self.threshold = 0.0

    def observe(self, ctx, committed):
        self.threshold += 0.1 if committed else -0.1

    def decide(self, ctx):
        return AllocateDecision(deep_eval=(ctx.advantage or 0.0) >= self.threshold)

    def state_dict(self):
        return {}


class _NotJSON(_DuckAllocator):
    def stats(self):
        return {"when": object()}


class _BadStart(_DuckAllocator):
    budget_start = 1.5


# --------------------------------------------------------------------------- evaluators


def _rollout_evaluator() -> RolloutEvaluator:
    tasks = toy_tasks(9)
    pool = DaemonPool(2)
    runner = CallRunner(executor=pool, remote=False, pool=pool, solve=echo_run, reward=toy_reward,
                        meters=(Usage(),), counters=Counters(), clock=MonotonicClock(), deadline=None,
                        call_attempts=3, failure_limit=3, max_seconds=None, grace_seconds=2.0)
    return RolloutEvaluator(runner, AppendRules(), Counters(), tasks[:6], tasks[:3])


def _states() -> list[dict[str, str]]:
    rules = AppendRules()
    state = rules.initial()
    diff = rules.to_diff(state, "solve g0", "w", 1, "artifact")
    assert diff is not None
    return [state, diff.apply(state)]


class TestRolloutEvaluator(EvaluatorConformance):
    def make_evaluator(self):
        return _rollout_evaluator()

    def states(self):
        return _states()


class _DuckEvaluator:
    """Only ``held_out`` and ``cheap``: the optional members come from the base class."""

    def held_out(self, artifact_id, state):
        return [1.0 if "solve" in v else 0.0 for v in state.values()][:1] + [0.5, 0.25]

    def cheap(self, artifact_id, state):
        return sum(self.held_out(artifact_id, state)) / 3


class TestDuckTypedEvaluator(EvaluatorConformance):
    def make_evaluator(self):
        return _DuckEvaluator()

    def states(self):
        return [{"a": "x"}, {"a": "solve it"}]


class _NoisyEvaluator(_DuckEvaluator):
    def held_out(self, artifact_id, state):
        return [random.random(), 0.5, 0.25]


class _RaggedEvaluator(_DuckEvaluator):
    def held_out(self, artifact_id, state):
        return [0.5] * (1 + len(state))


class _OutOfRangeEvaluator(_DuckEvaluator):
    def cheap(self, artifact_id, state):
        return 1.5


# --------------------------------------------------------------------------- providers


class TestFakeProvider(ProviderConformance):
    def make_provider(self):
        return FakeProvider(lambda messages, **options: "hello")


class TestCachingProviderSim(ProviderConformance):
    def make_provider(self):
        return CachingProviderSim(MEASURED_RATE_CARD, clock=ManualClock())


class TestCallableProvider(ProviderConformance):
    def make_provider(self):
        return from_callable(lambda prompt, **options: "hi there")


def _replying(kind: str):
    def respond(path: str, body: Any) -> Reply:
        return Reply(200, openai_body("hello") if kind == "openai" else anthropic_body("hello"))
    return respond


class TestOpenAICompatibleAdapter(ProviderConformance):
    def make_provider(self):
        from agentdescent.providers import openai_compatible

        pytest.importorskip("openai", reason="the openai extra is not installed")
        self._server = LLMServer(_replying("openai"))
        return openai_compatible("test-model", base_url=self._server.openai_base_url, api_key="sk-test-key")

    def close_provider(self, provider):
        self._server.close()


class TestAnthropicAdapter(ProviderConformance):
    def make_provider(self):
        from agentdescent.providers import anthropic

        pytest.importorskip("anthropic", reason="the anthropic extra is not installed")
        self._server = LLMServer(_replying("anthropic"))
        return anthropic("claude-test", base_url=self._server.base_url, api_key="sk-ant-test")

    def close_provider(self, provider):
        self._server.close()


class _Lenient:
    """Drops options it does not know, silently."""

    usage = None

    def complete(self, messages, **options):
        return Completion("ok")


class _DoubleCounter(FakeProvider):
    def complete(self, messages, **options):
        reply = super().complete(messages, **options)
        self.usage.record(1, 1)  # counts the call a second time
        return reply


class _Surrogate(FakeProvider):
    def complete(self, messages, **options):
        reply = super().complete(messages, **options)
        return Completion("bad \ud83d reply", reply.usage)


# --------------------------------------------------------------------------- run state


class TestMemoryRunState(RunStateConformance):
    def make_ledger(self, tmp_path):
        return MemoryLedger()


class TestSqliteRunState(RunStateConformance):
    def make_ledger(self, tmp_path):
        return SqliteLedger(tmp_path / "ledger.sqlite")

    def reopen(self, ledger, tmp_path):
        ledger.close()
        return SqliteLedger(tmp_path / "ledger.sqlite")

    def damage_saved(self, ledger, tmp_path, run_id, index):
        where = ("run_state", "state_json", "run_id = ?") if index is None else (
            "run_rounds", "round_json", f"run_id = ? AND idx = {index}")
        path = tmp_path / "ledger.sqlite"
        write_bytes(path, *where, (run_id,), flipped(stored_bytes(path, *where, (run_id,)), 8 * 3 + 3))
        return True


class _DamagedUncheckedStore(RunStateConformance):
    """A MemoryLedger keeps its progress as text it never checks: changed behind its back, it hands the change back."""

    def make_ledger(self, tmp_path):
        return MemoryLedger()

    def damage_saved(self, ledger, tmp_path, run_id, index):
        if index is None:
            text = ledger._run_states[run_id]
            ledger._run_states[run_id] = text.replace("account", "accouft")
        else:
            text = ledger._run_rounds[run_id][index]
            ledger._run_rounds[run_id][index] = text.replace("account", "accouft")
        return True


def test_the_run_state_suite_fails_a_store_that_returns_damaged_progress(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="expected RunStateDamaged, nothing was raised"):
        _DamagedUncheckedStore().test_progress_changed_behind_the_ledgers_back_is_refused(tmp_path)


class _ForgetfulRounds(MemoryLedger):
    """Keeps only the rounds of the last save (last-writer-wins on the history)."""

    def save_run_state(self, run_id, state, rounds=()):
        with self._lock:
            self._run_rounds.pop(run_id, None)
        super().save_run_state(run_id, state, rounds)


class _AliasingState(MemoryLedger):
    """Hands out its own stored object, so a caller's change rewrites the saved progress."""

    def save_run_state(self, run_id, state, rounds=()):
        self._kept = {"state": dict(state), "rounds": [dict(r) for r in rounds]}
        self._kept["state"]["history"] = self._kept["rounds"]

    def load_run_state(self, run_id):
        kept = getattr(self, "_kept", None)
        return None if kept is None else kept["state"]


# --------------------------------------------------------------------------- the meta-tests

BROKEN = [
    (StrategyConformance, "make_strategy", _MutatingRules, "test_to_diff_never_changes_the_state_it_is_given",
     "changed the state"),
    (StrategyConformance, "make_strategy", _RandomKeyRules, "test_the_same_proposal_gives_the_same_ops",
     "different ops"),
    (StrategyConformance, "make_strategy", _ReappliedRules, "test_a_proposal_already_applied_changes_nothing",
     "already holds it"),
    (StalenessConformance, "make_policy", _AcceptsBreaking, "test_a_stale_contract_breaking_diff_is_discarded",
     "contract-breaking"),
    (StalenessConformance, "make_policy", _Moody, "test_the_decision_is_pure", "pure"),
    (StalenessConformance, "make_policy", _Unnamed, "test_has_the_required_members_and_a_name", "name"),
    (AllocatorConformance, "make_allocator", _StatefulDuck, "test_a_restored_twin_decides_alike", "restored"),
    (AllocatorConformance, "make_allocator", _NotJSON, "test_optional_members_behave", "JSON"),
    (AllocatorConformance, "make_allocator", _BadStart, "test_optional_members_behave", "budget_start"),
    (EvaluatorConformance, "make_evaluator", _NoisyEvaluator, "test_held_out_is_one_repeatable_reward_per_task",
     "deterministic"),
    (EvaluatorConformance, "make_evaluator", _RaggedEvaluator, "test_held_out_is_one_repeatable_reward_per_task",
     "same tasks"),
    (EvaluatorConformance, "make_evaluator", _OutOfRangeEvaluator, "test_cheap_and_verify_are_rewards", "cheap"),
    (ProviderConformance, "make_provider", _Lenient, "test_unknown_and_bad_options_are_refused", "top_k"),
    (ProviderConformance, "make_provider", lambda: _DoubleCounter(lambda m, **o: "x"),
     "test_usage_counts_each_call_once", "count once"),
    (ProviderConformance, "make_provider", lambda: _Surrogate(lambda m, **o: "x"),
     "test_complete_returns_a_completion_with_utf8_text", "surrogate"),
    (RunStateConformance, "make_ledger", _ForgetfulRounds, "test_rounds_are_kept_apart_added_and_replaced",
     "index order"),
    (RunStateConformance, "make_ledger", _AliasingState, "test_runs_are_kept_apart_and_reads_are_copies",
     "apart"),
]


@pytest.mark.parametrize(("suite", "factory", "broken", "check", "says"), BROKEN,
                         ids=[f"{b[0].__name__}-{b[3]}" for b in BROKEN])
def test_each_suite_fails_a_broken_implementation(suite, factory, broken, check, says, tmp_path: Path) -> None:
    if factory == "make_ledger":
        namespace = {factory: lambda self, tmp_path: broken()}
    else:
        namespace = {factory: lambda self: broken()}
    instance = type("Broken", (suite,), namespace)()
    method = getattr(instance, check)
    with pytest.raises(AssertionError, match=says):
        method(tmp_path) if factory == "make_ledger" else method()


@pytest.mark.parametrize("suite", [StrategyConformance, StalenessConformance, AllocatorConformance,
                                   EvaluatorConformance, ProviderConformance, RunStateConformance])
def test_a_suite_without_its_factory_says_what_to_define(suite, tmp_path: Path) -> None:
    checks = [name for name in dir(suite) if name.startswith("test_")]
    assert checks
    method = getattr(suite(), checks[0])
    with pytest.raises(NotImplementedError, match="is not defined"):
        method(tmp_path) if suite is RunStateConformance else method()


def test_duck_typed_allocator_state_round_trips_through_json() -> None:
    state = json.loads(json.dumps(ValueBudgetAllocator(seed=1).state_dict()))
    ValueBudgetAllocator(seed=1).load_state_dict(state)
