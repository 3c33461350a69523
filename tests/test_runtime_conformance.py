"""One conformance suite for both runtimes: the same behavioural tests against ``evolve`` and ``async_evolve``.

Each test runs once per runtime (the ``engine`` fixture). Time-dependent rules run on
`agentdescent.testing.ManualClock`: with ``autojump=True`` it jumps to the next deadline as
soon as every wait on it is idle, so a hung backend needs no cooperation and no test
sleeps to make time pass.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import pytest

from agentdescent import (
    InvalidArgument,
    LLMAgent,
    ProviderAuthError,
    Task,
    Usage,
    async_evolve,
    evolve,
)
from agentdescent.domains.router import RouterDomain
from agentdescent.engine.result import EvolutionResult
from agentdescent.engine.worker import GroupTracker
from agentdescent.testing import FakeProvider, ManualClock

from .toy import echo_run, never_propose, toy_propose, toy_reward, toy_tasks

N_WORKERS = 2


@pytest.fixture(params=["sync", "async"])
def engine(request: pytest.FixtureRequest) -> Callable[..., EvolutionResult]:
    """``engine(tasks, reward, *, rounds, **kwargs)``: a run of ``rounds`` rounds' worth of rollouts."""

    def run(tasks: Any, reward: Any, *, rounds: int = 4, **kwargs: Any) -> EvolutionResult:
        kwargs.setdefault("n_workers", N_WORKERS)
        if request.param == "sync":
            return evolve(tasks, reward, rounds=rounds, **kwargs)
        kwargs.setdefault("max_seconds", 30.0)
        return async_evolve(tasks, reward, max_rollouts=rounds * kwargs["n_workers"], **kwargs)

    run.runtime = request.param  # type: ignore[attr-defined]
    return run


# --------------------------------------------------------------------------- budget


def test_the_budget_binds_on_a_meter_the_run_was_not_given(engine):
    d = RouterDomain(seed=0, noise=0.25)
    mine = Usage()  # the domain records into its own meter, never into this one
    result = engine(d.tasks, d.reward, run=d.run, propose=d.propose, strategy=d.strategy,
                    rounds=200, usage=mine, max_tokens=20_000)
    assert result.stop_reason == "max_tokens", (result.stop_reason, result.error)
    spent = result.usage.total_tokens
    assert spent == result.budget["spent"] == sum(h.tokens for h in result.history)
    assert mine.total_tokens >= spent  # usage= receives every call too
    # the overshoot stays within one round's (one sweep's) spend
    assert spent - 20_000 <= max(h.tokens for h in result.history)


def test_the_budget_binds_an_llm_agent_whose_provider_keeps_its_own_meter(engine):
    provider = FakeProvider(lambda messages, **options: "unsolved")
    agent = LLMAgent(provider, usage=Usage())  # three meters: the provider's, the agent's, the run's
    result = engine(toy_tasks(), toy_reward, agent=agent, rounds=100, max_tokens=500)
    assert result.stop_reason == "max_tokens"
    assert result.usage.total_tokens == provider.usage.total_tokens  # each call counted once
    assert result.usage.total_tokens == sum(h.tokens for h in result.history)
    # and the calls add up as the tokens do, round by round
    assert result.usage.calls == provider.usage.calls == sum(h.calls for h in result.history) > 0
    assert all(h.calls >= 0 for h in result.history)


# --------------------------------------------------------------------------- failures


def test_a_proposer_that_always_raises_ends_the_run_with_an_error(engine):
    def propose(rendered, task, output, reward):
        raise RuntimeError("the proposer is broken")

    result = engine(toy_tasks(), toy_reward, run=echo_run, propose=propose, rounds=20)
    assert result.stop_reason == "error"
    assert "proposal" in result.error and "the proposer is broken" in result.error
    assert result.version == 1


def test_a_run_whose_calls_all_fail_ends_with_an_error(engine):
    def run(rendered, task):
        raise ConnectionError("nothing answers")

    result = engine(toy_tasks(), toy_reward, run=run, propose=toy_propose, rounds=20)
    assert result.stop_reason == "error" and "nothing answers" in result.error
    assert result.initial_reward is None and math.isnan(result.final_reward)


def test_a_failure_that_retrying_cannot_fix_ends_the_run_at_once(engine):
    calls = []

    def run(rendered, task):
        calls.append(task.id)
        raise ProviderAuthError("endpoint http://127.0.0.1:9/v1 rejected the credentials; check the key")

    result = engine(toy_tasks(), toy_reward, run=run, propose=toy_propose, rounds=20)
    assert result.stop_reason == "error"
    assert "ProviderAuthError" in result.error and "http://127.0.0.1:9/v1" in result.error
    assert len(calls) <= N_WORKERS  # no retry, and the evaluation stops at its first failure


def test_a_flaky_callable_is_retried_and_the_run_goes_on(engine, caplog):
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def run(rendered, task):
        with lock:
            seen[task.id] = seen.get(task.id, 0) + 1
            first = seen[task.id] == 1
        if first:
            raise TimeoutError("first call of each task times out")
        return echo_run(rendered, task)

    with caplog.at_level("WARNING", logger="agentdescent"):
        result = engine(toy_tasks(), toy_reward, run=run, propose=toy_propose, rounds=4)
    assert result.error is None and result.committed > 0
    assert result.counters["backend_errors"] > 0 and result.counters.get("backend_failures", 0) == 0
    assert any("retrying" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- time


def test_a_hung_rollout_cannot_hold_the_call_past_max_seconds_plus_grace(engine):
    clock = ManualClock(autojump=True)
    release = threading.Event()
    tasks = toy_tasks()

    def run(rendered, task):
        if task.id in {"t0", "t1", "t2", "t3", "t4"}:  # some train tasks hang; the held-out evaluation answers
            release.wait(30)  # hung for real: nothing here moves the clock
        return echo_run(rendered, task)

    try:
        result = engine(tasks, toy_reward, run=run, propose=toy_propose, rounds=50,
                        max_seconds=10.0, grace_seconds=1.0, clock=clock, shuffle=False)
    finally:
        release.set()
    assert result.stop_reason == "max_seconds"
    assert result.error is None and result.initial_reward is not None
    assert clock.jumps >= 1 and clock.now() <= 10.0 + 1.0  # virtual time, bounded by max_seconds + grace


def test_the_first_evaluation_is_bounded_too(engine):
    clock = ManualClock(autojump=True)
    release = threading.Event()

    def run(rendered, task):
        release.wait(30)  # every call hangs, the first evaluation's included
        return "unsolved"

    try:
        result = engine(toy_tasks(), toy_reward, run=run, propose=toy_propose, rounds=5,
                        max_seconds=10.0, grace_seconds=1.0, clock=clock)
    finally:
        release.set()
    assert result.stop_reason == "max_seconds"
    assert result.history == [] and result.initial_reward is None and math.isnan(result.final_reward)


# --------------------------------------------------------------------------- replies and knobs


def test_a_reply_with_a_lone_surrogate_is_sanitised_before_the_ledger(engine, tmp_path):
    def propose(rendered, task, output, reward):
        return f"{toy_propose(rendered, task, output, reward)} \ud83d"

    result = engine(toy_tasks(), toy_reward, run=echo_run, propose=propose, rounds=3,
                    ledger=tmp_path / "ledger.sqlite")
    assert result.error is None and result.committed > 0
    assert all("\ufffd" in v for v in result.state.values())
    result.rendered.encode("utf-8")
    result.save(tmp_path / "result.json")


@pytest.mark.parametrize("knob, value, error, words", [
    ("artifact_id", 123, TypeError, "artifact_id"),
    ("grace_seconds", float("inf"), ValueError, "grace_seconds"),
    ("max_seconds", float("nan"), ValueError, "max_seconds"),
    ("n_workers", 10**6, ValueError, "n_workers"),
    ("failure_limit", 0, ValueError, "failure_limit"),
    ("clock", "now", TypeError, "clock"),
])
def test_bad_knobs_are_named_before_anything_runs(engine, knob, value, error, words):
    calls = []

    def run(rendered, task):
        calls.append(task)
        return "unsolved"

    with pytest.raises(error, match=words):
        engine(toy_tasks(), toy_reward, run=run, propose=toy_propose, **{knob: value})
    assert calls == []


# --------------------------------------------------------------------------- the evidence rule


def test_a_tie_cannot_commit(engine):
    """Each proposal solves its own train task (self-verify +1) and no held-out task."""
    tasks = [Task(f"u{i:02d}", f"prompt {i}") for i in range(16)]

    def run(rendered, task):
        return "solved" if f"solve {task.id}" in rendered else "unsolved"

    def propose(rendered, task, output, reward):
        return f"solve {task.id}"

    result = engine(tasks, toy_reward, run=run, propose=propose, rounds=4)
    assert result.committed == 0 and result.version == 1
    assert result.outcomes()["below-threshold"] > 0


# --------------------------------------------------------------------------- stop rules


def test_patience_counts_rounds_worth_of_rollouts(engine):
    result = engine(toy_tasks(), toy_reward, run=echo_run, propose=never_propose, rounds=100, patience=3)
    assert result.stop_reason == "patience"
    after_best = sum(h.rollouts for h in result.history[1:])
    assert after_best >= 3 * N_WORKERS
    assert after_best - result.history[-1].rollouts < 3 * N_WORKERS


def test_max_rollouts_is_exact(engine):
    result = engine(toy_tasks(), toy_reward, run=echo_run, propose=never_propose, rounds=3, n_workers=3)
    assert result.stop_reason == "max_rollouts" if engine.runtime == "async" else result.stop_reason == "rounds"
    assert result.rollouts == 9 == sum(h.rollouts for h in result.history)


def test_the_advantage_is_one_rule():
    groups = GroupTracker()
    groups.add(1, 0.0)
    assert groups.advantage(1, 0.0) == 0.0  # a group of one has no spread
    groups.add(1, 1.0)
    assert groups.advantage(1, 1.0) == pytest.approx(1.0)
    assert groups.advantage(1, 0.0) == pytest.approx(-1.0)
    assert groups.advantage(2, 1.0) == 0.0  # another version is another group


# --------------------------------------------------------------------------- one entry point


@pytest.mark.parametrize("call", [
    lambda tasks: async_evolve(tasks, toy_reward, run=echo_run, propose=toy_propose, max_seconds=None),
    lambda tasks: evolve(tasks, toy_reward, run=echo_run, propose=toy_propose, asynchronous=True, max_seconds=None),
], ids=["async_evolve", "evolve-asynchronous"])
def test_an_asynchronous_run_with_no_stop_rule_is_refused_whichever_door_it_came_by(call):
    with pytest.raises(InvalidArgument, match="needs a stop rule: give max_seconds"):
        call(toy_tasks())


def test_both_doors_run_the_same_asynchronous_run():
    kwargs = dict(run=echo_run, propose=toy_propose, n_workers=1, max_rollouts=6, seed=3)
    one = async_evolve(toy_tasks(), toy_reward, **kwargs)
    other = evolve(toy_tasks(), toy_reward, asynchronous=True, **kwargs)
    assert (one.stop_reason, one.rollouts) == (other.stop_reason, other.rollouts) == ("max_rollouts", 6)
