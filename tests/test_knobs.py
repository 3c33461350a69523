"""Every bad knob raises an `AgentDescentError` naming it, before anything runs.

Swept over the engines' whole signature (written from `RunConfig` and its families, so a
new knob is swept without touching this file), and over `AggregatorConfig`,
`BudgetGovernor`, `ValueBudgetAllocator`, `SqliteLedger`, `Task` and `Diff`: a string
where a number goes, a bool where an int goes, NaN, out-of-range values. "Before
anything runs" is checked by a backend that counts its calls and a ledger path that must
not appear.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from pathlib import Path
from typing import Any

import pytest

from agentdescent import (
    AgentDescentError,
    AggregatorConfig,
    BudgetGovernor,
    Diff,
    InvalidArgument,
    InvalidArgumentType,
    Limits,
    Retry,
    Schedule,
    Split,
    SqliteLedger,
    Task,
    ValueBudgetAllocator,
    async_evolve,
    evolve,
)

from .toy import toy_reward, toy_tasks

#: Bad values per knob kind; each must be refused.
_BAD_INT = ("3", True, 2.5, float("nan"), -10**9)
_BAD_REAL = ("0.5", True, float("nan"), float("inf"), -10**9)
_BAD_BOOL = (1, "yes", None)


def _bad_values(name: str, default: Any, annotation: str) -> tuple[Any, ...]:
    text = str(annotation)
    if isinstance(default, bool) or text.startswith("bool"):
        return _BAD_BOOL if "None" not in text else (1, "yes")
    if "int" in text and "float" not in text and "Sequence" not in text:
        return _BAD_INT
    if "float" in text:
        return _BAD_REAL
    return ()


def _family_knobs() -> list[tuple[str, Any]]:
    out = []
    for family in (Split, Limits, Retry, Schedule):
        for fld in dataclasses.fields(family):
            for value in _bad_values(fld.name, fld.default, fld.type):
                out.append((fld.name, value))
    return out


_OTHER_KNOBS = [
    ("seed", "0"), ("seed", True), ("seed", 1.5),
    ("blast_radius", "0.2"), ("blast_radius", 1.5), ("blast_radius", float("nan")),
    ("self_verify", 1), ("progress", "yes"), ("resume", 0), ("fusion_tournament", "on"),
    ("artifact_id", ""), ("artifact_id", 7), ("artifact_id", "reward"),
    ("strategy", "append"), ("staleness_policy", "stale"), ("staleness_policy", 3),
    ("agg_config", {"cas_attempts": 3}), ("allocator", object()), ("ledger", 42),
    ("usage", 5), ("executor", "threads"), ("on_round", 5), ("clock", 3),
    ("initial_state", {"k": 3}), ("initial_state", "text"),
    ("limits", {"rounds": 2}), ("cheap_eval_tasks", "all"), ("cheap_eval_tasks", []),
    ("stratify", ""), ("not_a_knob", 1), ("roudns", 3),
]


class _Counting:
    def __init__(self) -> None:
        self.calls = 0

    def run(self, rendered: str, task: Task) -> str:
        self.calls += 1
        return "solved"

    def propose(self, rendered: str, task: Task, output: str, reward: float) -> str | None:
        self.calls += 1
        return None


@pytest.mark.parametrize(("engine", "name", "value"),
                         [(e, n, v) for e in ("sync", "async") for n, v in _family_knobs() + _OTHER_KNOBS
                          if not (e == "async" and n in ("rounds", "max_concurrency", "refresh_interval")
                                  and isinstance(v, str))],
                         ids=lambda x: repr(x)[:30])
def test_every_bad_knob_raises_before_anything_runs(engine: str, name: str, value: Any, tmp_path: Path) -> None:
    backend = _Counting()
    path = tmp_path / "ledger.sqlite"
    kwargs: dict[str, Any] = {"run": backend.run, "propose": backend.propose, name: value}
    if name != "ledger":
        kwargs["ledger"] = path
    engine_fn = evolve if engine == "sync" else async_evolve
    if engine == "async" and name not in ("max_seconds", "max_rollouts"):
        kwargs.setdefault("max_rollouts", 2)
    with pytest.raises(AgentDescentError) as info:
        engine_fn(toy_tasks(8), toy_reward, **kwargs)
    assert isinstance(info.value, (InvalidArgument, AgentDescentError))
    text = str(info.value)
    assert name.split("_")[0] in text or "keyword" in text or "reserved" in text, text
    assert backend.calls == 0 and not path.exists()


def test_sync_only_knobs_are_refused_by_the_async_engine() -> None:
    for name, value in (("rounds", 3), ("max_concurrency", 2), ("refresh_interval", 2)):
        with pytest.raises(InvalidArgument, match=name):
            async_evolve(toy_tasks(8), toy_reward, run=lambda r, t: "", propose=lambda *a: None,
                         max_rollouts=2, **{name: value})
        with pytest.raises(InvalidArgument, match=name):
            evolve(toy_tasks(8), toy_reward, run=lambda r, t: "", propose=lambda *a: None,
                   asynchronous=True, max_rollouts=2, **{name: value})


def test_a_family_given_whole_and_by_its_fields_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="not both"):
        evolve(toy_tasks(8), toy_reward, run=lambda r, t: "", propose=lambda *a: None,
               limits=Limits(rounds=2), rounds=3)


def test_an_unknown_keyword_suggests_the_closest_knob() -> None:
    with pytest.raises(InvalidArgumentType, match="did you mean rounds="):
        evolve(toy_tasks(8), toy_reward, run=lambda r, t: "", propose=lambda *a: None, roudns=3)


def test_the_engines_signatures_come_from_the_config_with_one_default_each() -> None:
    sync, asyn = inspect.signature(evolve), inspect.signature(async_evolve)
    assert sync.parameters["rounds"].default == 15 and "rounds" not in asyn.parameters
    assert sync.parameters["max_seconds"].default is None and asyn.parameters["max_seconds"].default == 20.0
    assert asyn.parameters["max_iters"].default is None and "asynchronous" in sync.parameters
    for name in ("held_out_frac", "n_workers", "call_attempts", "max_tokens", "allocator", "ledger"):
        assert sync.parameters[name].default == asyn.parameters[name].default


@pytest.mark.parametrize(("knob", "value"), [
    ("false_accept_rate", 0), ("false_accept_rate", 0.6), ("false_accept_rate", True),
    ("false_accept_rate", "0.05"), ("false_accept_rate", float("nan")), ("alpha_head", 2.7),
    ("alpha_head", "x"), ("alpha_head", -1), ("alpha_tail", True), ("cas_attempts", "3"),
    ("cas_attempts", 0), ("trust_region_ops", 1.0), ("max_regressions", "0"), ("max_regressions", -1),
    ("pool_draw", True), ("pool_retries", 0), ("eval_batch", 0), ("eval_batch", "4"), ("sequential", 1),
    ("fusion_tournament", "yes"), ("fusion_requires_evidence", 1), ("evidence_pool_size", 0),
    ("error_control", "per_round"), ("acceptance_null", "half"), ("local_regression_share", 0.0), ("evidence_groups", ""), ("evidence_groups", 3), ("group_key", ""), ("group_key", 3),
    ("relevance", "by words"), ("relevance", lambda diff: 0.0),
    ("rescore", "sometimes"), ("rescore", -1), ("rescore", 21), ("rescore", True), ("noise_probe", 0),
    ("rescore_draws", 0), ("self_verify_gate", 1), ("rank_by", "best"),
    ("head_sample", 0), ("futility_sample", -1), ("futility_sample", 1.5),
])
def test_aggregator_config_refuses_bad_knobs(knob: str, value: Any) -> None:
    with pytest.raises(InvalidArgument, match=knob):
        AggregatorConfig(**{knob: value})


@pytest.mark.parametrize("knob", ["base_delta", "self_verify_counts", "futility", "min_eval_fraction"])
def test_the_knobs_of_the_old_acceptance_rule_are_gone(knob: str) -> None:
    with pytest.raises(TypeError, match=knob):
        AggregatorConfig(**{knob: 0.5})


@pytest.mark.parametrize(("knob", "value"), [
    ("false_accept_rate", 0.5), ("false_accept_rate", 1e-6), ("rescore", "deterministic"), ("rescore", 0),
    ("rescore", 20), ("error_control", "per_run"), ("acceptance_null", "local"), ("local_regression_share", 1.0), ("evidence_groups", "group"), ("rank_by", "cheap"), ("futility_sample", 0),
    ("max_regressions", None), ("relevance", lambda diff, trajectory, task: 1.0),
])
def test_aggregator_config_takes_the_edges_of_each_range(knob: str, value: Any) -> None:
    assert getattr(AggregatorConfig(**{knob: value}), knob) == value


@pytest.mark.parametrize(("kwargs", "knob"), [
    ({"max_tokens": "100"}, "max_tokens"), ({"max_tokens": True}, "max_tokens"),
    ({"max_tokens": float("inf")}, "max_tokens"), ({"max_tokens": 0}, "max_tokens"),
    ({"soft_floor": "0.5"}, "soft_floor"), ({"soft_floor": 0.95, "hard_floor": 0.9}, "soft_floor"),
    ({"hard_floor": 1.5}, "hard_floor"), ({"allocator": object()}, "allocator"),
    ({"stop_on_diminishing": 1}, "stop_on_diminishing"), ({"efficiency_floor": -1}, "efficiency_floor"),
    ({"min_efficiency_samples": 0}, "min_efficiency_samples"),
])
def test_budget_governor_refuses_bad_knobs(kwargs: dict[str, Any], knob: str) -> None:
    with pytest.raises(InvalidArgument, match=knob):
        BudgetGovernor(**kwargs)
    with pytest.raises(InvalidArgument, match="max_tokens"):
        BudgetGovernor("100")  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "knob"), [
    ({"budget_start": 1.5}, "budget_start"), ({"budget_start": "0.5"}, "budget_start"),
    ({"epsilon_start": -0.1}, "epsilon_start"), ({"epsilon_end": True}, "epsilon_end"),
    ({"epsilon_anneal": 2.5}, "epsilon_anneal"), ({"min_observations": "5"}, "min_observations"),
    ({"min_weight": float("nan")}, "min_weight"), ({"seed": "7"}, "seed"), ({"model": 3}, "model"),
])
def test_value_budget_allocator_refuses_bad_knobs(kwargs: dict[str, Any], knob: str) -> None:
    with pytest.raises(InvalidArgument, match=knob):
        ValueBudgetAllocator(**kwargs)


@pytest.mark.parametrize(("args", "kwargs", "knob"), [
    ((3,), {}, "path"), (("",), {}, "path"), ((":memory:",), {}, "path"),
    (("x.sqlite",), {"timeout": "5"}, "timeout"), (("x.sqlite",), {"timeout": 0}, "timeout"),
    (("x.sqlite",), {"timeout": math.nan}, "timeout"), (("x.sqlite",), {"check_history": "no"}, "check_history"),
])
def test_sqlite_ledger_refuses_bad_arguments(args: tuple[Any, ...], kwargs: dict[str, Any], knob: str,
                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgument, match=knob):
        SqliteLedger(*args, **kwargs)
    assert not (tmp_path / "x.sqlite").exists()


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"id": 3, "prompt": "p"}, "id"), ({"id": "", "prompt": "p"}, "id"),
    ({"id": "t", "prompt": None}, "prompt"), ({"id": "t", "prompt": "p", "meta": "x"}, "meta"),
    ({"id": "t\ud800", "prompt": "p"}, "surrogate"),
])
def test_task_refuses_bad_fields(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidArgument, match=says):
        Task(**kwargs)


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"diff_id": "d", "target": None, "ops": {}}, "target"), ({"diff_id": 1, "target": "a", "ops": {}}, "diff_id"),
    ({"diff_id": "d", "target": "a", "ops": "k=v"}, "ops"), ({"diff_id": "d", "target": "a", "ops": {1: "v"}}, "key"),
    ({"diff_id": "d", "target": "a", "ops": {"k": 3}}, "value"),
    ({"diff_id": "d", "target": "a", "ops": {}, "contract_breaking": "no"}, "contract_breaking"),
])
def test_diff_refuses_bad_fields(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidArgumentType, match=says):
        Diff(**kwargs)


def test_errors_are_also_the_builtin_a_caller_would_catch() -> None:
    with pytest.raises(ValueError):
        AggregatorConfig(cas_attempts=0)
    with pytest.raises(TypeError):
        AggregatorConfig(cas_attempts="3")  # type: ignore[arg-type]
