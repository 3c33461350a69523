"""`result.final_reward` is the final artifact's held-out reward, measured on every held-out task.

A reward estimate inherits a task's score from the version before a commit when the
commit's diff looks unrelated to the task; the run's result does not: the final head is
scored on every held-out task it was not measured on before the result is returned.
"""

from __future__ import annotations

import pytest

from agentdescent import Task, async_evolve, evolve
from agentdescent.domains.router import RouterDomain
from agentdescent.domains.valuesim import ValueSim


def _year_case() -> dict:
    """12 tasks, one rule makes every reply right; the rule's words share nothing with the prompts."""
    tasks = [Task(f"t{i}", f"Give the code word number {i}.") for i in range(12)]

    def run(rendered: str, task: Task) -> str:
        return "answer 2026" if "2026" in rendered else "answer unknown"

    def reward(task: Task, output: str) -> float:
        return 1.0 if "2026" in output else 0.0

    def propose(rendered: str, task: Task, output: str, score: float) -> str | None:
        return None if "2026" in rendered else "Always state the current year, 2026."

    return dict(tasks=tasks, run=run, reward=reward, propose=propose)


@pytest.mark.parametrize("engine", ["sync", "async"])
def test_the_final_reward_is_the_final_artifacts_measured_held_out_mean(engine: str) -> None:
    case = _year_case()
    if engine == "sync":
        result = evolve(**case, rounds=6, n_workers=3, seed=0)
    else:
        result = async_evolve(**case, n_workers=3, max_rollouts=18, seed=0)
    assert "2026" in result.rendered
    assert result.final_reward == 1.0  # every held-out task scores 1 on the committed artifact
    shares = [h.measured_share for h in result.history]
    assert all(s is not None and 0.0 <= s <= 1.0 for s in shares)
    # the rounds' rewards were estimates (tasks the rule's words share nothing with were inherited), and say so
    assert any(s < 1.0 for s in shares), shares
    assert result.counters["final_reward_inherited"] == 0 and result.counters["final_reward_measured"] > 0


def _score(value: object) -> float:
    return float(getattr(value, "score", value))  # a reward returns a number or a scored feedback


@pytest.mark.parametrize("engine", ["sync", "async"])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_router_run_reports_a_full_rescoring_of_its_final_artifact(engine: str, seed: int) -> None:
    kwargs = RouterDomain(seed=seed, latency=0.0).evolve_kwargs()
    if engine == "sync":
        result = evolve(**kwargs, rounds=6, seed=seed)
    else:
        result = async_evolve(**kwargs, max_rollouts=24, seed=seed)
    by_id = {t.id: t for t in kwargs["tasks"]}
    held = [by_id[i] for i in result.held_out_samples["final"]["tasks"]]
    rescored = sum(_score(kwargs["reward"](t, kwargs["run"](result.rendered, t))) for t in held) / len(held)
    assert result.final_reward == pytest.approx(rescored, abs=1e-12)
    assert result.counters["final_reward_inherited"] == 0
    assert result.counters["final_reward_measured"] == len(held)


@pytest.mark.parametrize("engine", ["sync", "async"])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_valuesim_run_reports_a_full_rescoring_of_its_final_artifact(engine: str, seed: int) -> None:
    kwargs = dict(ValueSim(seed=seed).evolve_kwargs())
    kwargs.pop("seed")
    if engine == "sync":
        result = evolve(**kwargs, rounds=6, seed=seed)
    else:
        result = async_evolve(**kwargs, max_rollouts=24, seed=seed)
    assert result.committed > 0
    by_id = {t.id: t for t in kwargs["tasks"]}
    held = [by_id[i] for i in result.held_out_samples["final"]["tasks"]]
    rescored = sum(_score(kwargs["reward"](t, kwargs["run"](result.rendered, t))) for t in held) / len(held)
    assert result.final_reward == pytest.approx(rescored, abs=1e-12)
    assert result.counters["final_reward_inherited"] == 0


def test_explain_says_how_the_run_ended_and_why_nothing_committed() -> None:
    from agentdescent.cli.explain import likely_cause, round_record
    from agentdescent.engine.why import round_facts

    good = evolve(**RouterDomain(seed=0, latency=0.0).evolve_kwargs(), rounds=2, seed=0)
    text = good.explain()
    assert text.splitlines()[0].startswith(f"rounds after 2 round(s): {good.committed} commit(s); held-out 0.000 -> ")
    assert "(measured on all" in text and "why:" not in text and f"head v{good.version}" in text
    stuck = evolve(**RouterDomain(seed=0, noise=1.0, latency=0.0).evolve_kwargs(), rounds=2, seed=0)
    lines = stuck.explain().splitlines()
    assert stuck.committed == 0 and lines[-1].startswith("why: nothing committed in 2 round(s)")
    # the same sentence `agentdescent status` prints from the run directory's records
    records = [round_record(h, 0) for h in stuck.history]
    assert lines[-1] == "why: " + likely_cause(records) == "why: " + likely_cause([round_facts(h) for h in
                                                                                    stuck.history])


def test_explain_names_an_error_and_a_reward_never_measured() -> None:
    case = _year_case()

    def broken(rendered: str, task: Task) -> str:
        raise RuntimeError("the model server is down")

    result = evolve(**{**case, "run": broken}, rounds=2, seed=0, failure_limit=2)
    text = result.explain()
    assert result.stop_reason == "error" and "held-out none -> none" in text
    assert "\nerror: " in text and "(measured" not in text


def test_a_round_names_a_change_of_mind_and_an_idle_walk() -> None:
    # the router's evaluation is deterministic: the noise probe finds it so at the first decision
    result = evolve(**RouterDomain(seed=0, latency=0.0).evolve_kwargs(), rounds=3, seed=0)
    notes = [n for h in result.history for n in h.notes]
    assert result.counters["noise"]["state"] == "deterministic"
    found = [(h.index, n) for h in result.history for n in h.notes
             if n.startswith("the held-out evaluation was found deterministic")]
    assert [i for i, _ in found] == [1]  # said once, in the round whose first decision learned it
    assert notes == [n for _, n in found]
    # a walk with nothing left to fail on while held-out tasks fail: the model answers every training task
    # and no held-out one (the split is seeded: a first call finds it, the second runs on it)
    tasks = [Task(f"t{i}", f"Question {i}.") for i in range(12)]
    held: set[str] = set()

    def run(rendered: str, task: Task) -> str:
        return "wrong" if task.id in held else "right"

    def reward(task: Task, output: str) -> float:
        return 1.0 if output == "right" else 0.0

    kwargs = dict(run=run, propose=lambda *a: None, seed=0, held_out_frac=0.5)
    held.update(evolve(tasks, reward, rounds=1, **kwargs).held_out_samples["final"]["tasks"])
    idle = evolve(tasks, reward, rounds=2, **kwargs)
    assert idle.final_reward == 0.0 and idle.committed == 0
    assert all(any(n.startswith("every training task is solved") for n in h.notes) for h in idle.history[1:])
    assert "no worker is ever shown those" in idle.explain()


def test_an_estimate_never_meets_the_target_rule() -> None:
    from agentdescent.budget.governor import BudgetGovernor
    from agentdescent.clock import MonotonicClock
    from agentdescent.engine.config import Limits
    from agentdescent.engine.stopping import StopRules

    rules = StopRules(Limits(target_reward=0.5), 2, BudgetGovernor(), MonotonicClock())
    assert rules.after_merge(0.9, 2, measured=False) is None  # inherited scores: not a reason to stop
    assert rules.after_merge(0.9, 2, measured=True) == "target_reward"


@pytest.mark.parametrize("engine", ["sync", "async"])
def test_a_run_stops_on_its_target_only_once_the_head_is_measured_in_full(engine: str) -> None:
    kwargs = RouterDomain(seed=0, latency=0.0).evolve_kwargs()
    if engine == "sync":
        result = evolve(**kwargs, rounds=30, seed=0, target_reward=0.3)
    else:
        result = async_evolve(**kwargs, max_rollouts=200, seed=0, target_reward=0.3)
    assert result.stop_reason == "target_reward"
    last = result.history[-1]
    assert last.measured_share == 1.0 and last.held_out_reward >= 0.3
    # the round that stopped the run reports the head's full re-scoring
    by_id = {t.id: t for t in kwargs["tasks"]}
    held = [by_id[i] for i in result.held_out_samples["final"]["tasks"]]
    rescored = sum(_score(kwargs["reward"](t, kwargs["run"](result.rendered, t))) for t in held) / len(held)
    assert last.held_out_reward == pytest.approx(rescored, abs=1e-12)
    # no earlier round had a measured reward at the target (the run would have stopped there)
    assert not any(h.held_out_reward >= 0.3 and h.measured_share == 1.0 for h in result.history[:-1])
    assert sum(h.tokens for h in result.history) == result.usage.total_tokens
