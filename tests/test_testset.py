"""`agentdescent.engine.testset`: `evaluate`, `Evaluation`, `paired_difference` and `bootstrap_interval`.

`evaluate` runs with plain ``run=`` callables and with an `agentdescent.LLMAgent` on a real
loopback OpenAI-compatible server (`agentdescent.testing.llmserver`).
"""

from __future__ import annotations

import json
import math
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent import LLMAgent, Task, evaluate, openai_compatible
from agentdescent.engine.testset import (
    RESAMPLES,
    Difference,
    Evaluation,
    bootstrap_interval,
    paired_difference,
)
from agentdescent.errors import (
    ContractError,
    InvalidArgument,
    InvalidArgumentType,
    RewardContractError,
)
from agentdescent.merge.strategies import AppendRules, SingleSlot
from agentdescent.rewards.builtin import Score, exact_match
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body
from agentdescent.usage import Usage

CITIES = {"France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi", "Peru": "Lima", "Chile": "Santiago"}
TASKS = [Task(f"cap-{c.lower()}", f"What is the capital of {c}?", {"answer": city}) for c, city in CITIES.items()]
RULE = "Reply with the bare city only."


def city_run(rendered: str, task: Task) -> str:
    """The bare city when the artifact says so, else a sentence."""
    answer = str(task.meta["answer"])
    return answer if "bare city" in rendered else f"I believe it is {answer}."


def float_reward(task: Task, output: str) -> float:
    return 1.0 if output == task.meta["answer"] else 0.0


# --------------------------------------------------------------------------- evaluate with run=


def test_evaluate_a_rendered_text_with_a_run_callable() -> None:
    seen: list[tuple[str, str]] = []

    def run(rendered: str, task: Task) -> str:
        seen.append((rendered, task.id))
        return city_run(rendered, task)

    good = evaluate(TASKS, exact_match, run=run, rendered=f"# Playbook\n- {RULE}")
    assert good.tasks == [t.id for t in TASKS] and good.repeats == 1
    assert good.per_task == dict.fromkeys(good.tasks, 1.0) and good.mean == 1.0
    assert good.outputs == {t.id: t.meta["answer"] for t in TASKS}
    assert good.feedback["cap-france"] == "correct: the reply is exactly 'Paris'"
    assert sorted(seen) == sorted((f"# Playbook\n- {RULE}", t.id) for t in TASKS)
    bad = evaluate(TASKS, exact_match, run=city_run, rendered="")
    assert bad.mean == 0.0 and bad.interval() == (0.0, 0.0)
    assert bad.feedback["cap-kenya"] == "expected exactly 'Nairobi'; the reply was 'I believe it is Nairobi.'"


def test_evaluate_a_state_with_its_strategy() -> None:
    strategy = AppendRules()
    state = strategy.to_diff(strategy.initial(), RULE, "me", 1, "artifact").apply(strategy.initial())
    assert evaluate(TASKS, float_reward, run=city_run, state=state).mean == 1.0  # AppendRules by default
    rendered: list[str] = []

    def run(text: str, task: Task) -> str:
        rendered.append(text)
        return city_run(text, task)

    single = evaluate(TASKS[:1], float_reward, run=run, state={"value": "say the bare city"},
                      strategy=SingleSlot())
    assert single.mean == 1.0 and rendered == [SingleSlot().render({"value": "say the bare city"})]


def test_evaluate_without_an_artifact_scores_the_empty_one() -> None:
    rendered: list[str] = []

    def run(text: str, task: Task) -> str:
        rendered.append(text)
        return "Paris"

    result = evaluate(TASKS[:2], float_reward, run=run)
    assert set(rendered) == {AppendRules().render(AppendRules().initial())}
    assert result.per_task == {"cap-france": 1.0, "cap-japan": 0.0} and result.mean == 0.5


def test_a_float_reward_leaves_the_feedback_empty() -> None:
    result = evaluate(TASKS, float_reward, run=city_run, rendered=RULE)
    assert result.feedback == dict.fromkeys(result.tasks, "")


def test_repeats_draw_each_task_that_many_times_and_keep_the_first_draw() -> None:
    counts: dict[str, int] = {}
    lock = threading.Lock()

    def flaky(rendered: str, task: Task) -> str:
        with lock:
            n = counts[task.id] = counts.get(task.id, 0) + 1
        return str(task.meta["answer"]) if n % 2 == 1 else f"draw {n}"  # right on draws 1 and 3

    def reward(task: Task, output: str) -> Score:
        return Score(float_reward(task, output), f"{task.id} got {output}")

    result = evaluate(TASKS, reward, run=flaky, rendered="", repeats=3)
    assert counts == dict.fromkeys(result.tasks, 3)
    assert result.repeats == 3
    assert result.draws == {t.id: [1.0, 0.0, 1.0] for t in TASKS}
    assert result.per_task == {t.id: pytest.approx(2 / 3) for t in TASKS}
    assert result.mean == pytest.approx(2 / 3)
    assert result.feedback["cap-peru"] == "cap-peru got Lima" and result.outputs["cap-peru"] == "Lima"


def test_concurrent_scoring_gives_the_same_evaluation() -> None:
    running, peak = [0], [0]
    lock = threading.Lock()
    barrier = threading.Barrier(3, timeout=10)

    def run(rendered: str, task: Task) -> str:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        if task.id in ("cap-france", "cap-japan", "cap-kenya"):
            barrier.wait()  # three tasks in flight at once, or this times out
        with lock:
            running[0] -= 1
        return city_run(rendered, task)

    serial = evaluate(TASKS, exact_match, run=city_run, rendered=RULE, repeats=2)
    parallel = evaluate(TASKS, exact_match, run=run, rendered=RULE, repeats=2, max_concurrency=6)
    assert parallel == serial and peak[0] >= 3


def test_outputs_are_cut_to_500_characters() -> None:
    result = evaluate(TASKS[:1], float_reward, run=lambda r, t: "x" * 2000, rendered="")
    assert result.outputs["cap-france"] == "x" * 500


def test_the_usage_meter_records_under_phase_test() -> None:
    def run(rendered: str, task: Task) -> str:
        own = Usage()  # a callable recording into its own meter: evaluate's scope forwards it
        own.record(prompt_tokens=10, completion_tokens=5)
        return city_run(rendered, task)

    mine = Usage()
    evaluate(TASKS, float_reward, run=run, rendered=RULE, repeats=2, usage=mine)
    assert mine.total_tokens == 15 * len(TASKS) * 2
    assert mine.by_phase() == {"test": 15 * len(TASKS) * 2}


# --------------------------------------------------------------------------- evaluate with an LLMAgent


def answering(path: str, body: dict[str, Any]) -> Reply:
    """A model that answers with the bare city only when its system message says so."""
    system = " ".join(m["content"] for m in body["messages"] if m["role"] == "system")
    question = body["messages"][-1]["content"]
    country = question.rsplit(" ", 1)[1].rstrip("?")
    city = CITIES[country]
    text = city if "bare city" in system else f"The capital of {country} is {city}."
    return Reply(200, openai_body(text, prompt_tokens=20, completion_tokens=3))


def test_evaluate_an_llm_agent_on_a_loopback_server() -> None:
    with LLMServer(responder=answering) as server:
        provider = openai_compatible("test-model", base_url=server.openai_base_url, api_key="sk-local",
                                     max_retries=0)
        agent = LLMAgent(provider, call_tokens=16)
        mine = Usage()
        before = evaluate(TASKS, exact_match, agent=agent, repeats=2, usage=mine)
        after = evaluate(TASKS, exact_match, agent=agent, rendered=f"# Playbook\n- {RULE}", max_concurrency=3)
        requests = list(server.requests)
    assert before.mean == 0.0 and after.mean == 1.0
    assert before.feedback["cap-japan"] == ("expected exactly 'Tokyo'; the reply was "
                                            "'The capital of Japan is Tokyo.'")
    assert len(requests) == 2 * len(TASKS) + len(TASKS)
    blank, with_rule = requests[: 2 * len(TASKS)], requests[2 * len(TASKS):]
    assert all([m["role"] for m in r.body["messages"]] == ["user"] for r in blank)  # empty artifact: no system
    assert all(r.body["messages"][0] == {"role": "system", "content": f"# Playbook\n- {RULE}"} for r in with_rule)
    assert all(r.body["max_tokens"] == 16 for r in requests)
    # every call is metered under phase "test": in the provider's meter, and in usage= when given
    assert provider.usage.by_phase() == {"test": 23 * len(requests)}
    assert mine.by_phase() == {"test": 23 * 2 * len(TASKS)} and mine.calls == 2 * len(TASKS)
    assert agent.stats()["solves"] == len(requests)
    difference = paired_difference(before, after)
    assert difference.mean == 1.0 and difference.tasks == len(TASKS)


# --------------------------------------------------------------------------- intervals


def evaluation_of(per_task: dict[str, list[float]]) -> Evaluation:
    return Evaluation(list(per_task), {k: list(v) for k, v in per_task.items()},
                      repeats=max(len(v) for v in per_task.values()))


def test_an_evaluations_interval_brackets_its_mean_and_repeats() -> None:
    result = evaluation_of({f"t{i}": [float(i % 2)] for i in range(20)})
    low, high = result.interval()
    assert 0.0 <= low < result.mean == 0.5 < high <= 1.0
    assert result.interval() == (low, high)  # seeded
    narrow_low, narrow_high = result.interval(level=0.5)
    assert low <= narrow_low <= narrow_high <= high


def test_an_evaluation_of_one_task_has_a_zero_width_interval() -> None:
    assert evaluation_of({"t": [0.25, 0.75]}).interval() == (0.5, 0.5)


@settings(max_examples=40)  # each draw runs 2000 resamples
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30), st.integers(0, 2**31))
def test_bootstrap_interval_lies_within_the_values(values: list[float], seed: int) -> None:
    low, high = bootstrap_interval(values, seed=seed)
    eps = 1e-12  # a resample's mean is computed in floating point
    assert min(values) - eps <= low <= high <= max(values) + eps


@settings(max_examples=40)  # each draw runs 2000 resamples
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30), st.integers(0, 1000))
def test_bootstrap_interval_is_deterministic_for_a_seed(values: list[float], seed: int) -> None:
    assert bootstrap_interval(values, seed=seed) == bootstrap_interval(list(values), seed=seed)


@given(st.floats(0.0, 1.0))
def test_one_value_gives_a_zero_width_interval_at_it(value: float) -> None:
    assert bootstrap_interval([value]) == (value, value)


@settings(max_examples=40)  # each draw runs 2000 resamples
@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=20))
def test_a_wider_level_never_gives_a_narrower_interval(values: list[float]) -> None:
    low95, high95 = bootstrap_interval(values, level=0.95)
    low50, high50 = bootstrap_interval(values, level=0.5)
    assert low95 <= low50 and high50 <= high95


def test_bootstrap_interval_of_nothing_is_nan() -> None:
    low, high = bootstrap_interval([])
    assert math.isnan(low) and math.isnan(high)


def test_bootstrap_interval_of_equal_values_is_that_value() -> None:
    assert bootstrap_interval([0.5] * 7) == (0.5, 0.5)


def test_bootstrap_interval_depends_on_the_seed_and_covers_the_mean() -> None:
    values = [((i * 7) % 11) / 10 for i in range(15)]
    mean = sum(values) / len(values)
    intervals = {bootstrap_interval(values, seed=s) for s in range(8)}
    assert len(intervals) > 1  # the seed is used
    assert all(low < mean < high for low, high in intervals)
    assert RESAMPLES >= 1000


# --------------------------------------------------------------------------- paired_difference


def test_paired_difference_of_a_clear_gain_is_separated() -> None:
    before = evaluation_of({f"t{i}": [0.0] for i in range(10)})
    after = evaluation_of({f"t{i}": [1.0 if i < 8 else 0.0] for i in range(10)})
    difference = paired_difference(before, after)
    assert isinstance(difference, Difference)
    assert difference.mean == pytest.approx(0.8) and difference.tasks == 10
    assert 0 < difference.low <= difference.mean <= difference.high <= 1
    assert difference.separated
    reverse = paired_difference(after, before)
    assert reverse.mean == pytest.approx(-0.8) and reverse.high < 0 and reverse.separated


def test_paired_difference_of_mixed_changes_is_not_separated() -> None:
    before = evaluation_of({f"t{i}": [float(i % 2)] for i in range(10)})
    after = evaluation_of({f"t{i}": [float((i + 1) % 2)] for i in range(10)})
    difference = paired_difference(before, after)
    assert difference.mean == 0.0 and difference.low < 0 < difference.high
    assert not difference.separated


def test_paired_difference_of_one_task_is_never_separated() -> None:
    difference = paired_difference(evaluation_of({"t": [0.0]}), evaluation_of({"t": [1.0]}))
    assert (difference.mean, difference.low, difference.high, difference.tasks) == (1.0, 1.0, 1.0, 1)
    assert not difference.separated


def test_paired_difference_pairs_only_the_shared_tasks_by_their_means() -> None:
    before = evaluation_of({"a": [0.0, 1.0], "b": [0.0], "only-before": [1.0]})
    after = evaluation_of({"b": [1.0], "a": [1.0, 1.0], "only-after": [0.0]})
    difference = paired_difference(before, after)
    assert difference.tasks == 2 and difference.mean == pytest.approx((0.5 + 1.0) / 2)


def test_paired_difference_is_seeded() -> None:
    before = evaluation_of({f"t{i}": [0.0] for i in range(12)})
    after = evaluation_of({f"t{i}": [float(i % 3 != 0)] for i in range(12)})
    assert paired_difference(before, after) == paired_difference(before, after)
    assert paired_difference(before, after, seed=3) == paired_difference(before, after, seed=3)


def test_paired_difference_needs_a_shared_task() -> None:
    with pytest.raises(InvalidArgument, match="share no task"):
        paired_difference(evaluation_of({"a": [1.0]}), evaluation_of({"b": [1.0]}))


def test_a_difference_as_json() -> None:
    difference = Difference(0.25, 0.1, 0.4, 6)
    assert difference.to_json() == {"mean": 0.25, "low": 0.1, "high": 0.4, "tasks": 6, "separated": True}
    assert Difference(0.25, 0.0, 0.4, 6).to_json()["separated"] is False  # 0 on the edge is not excluded
    json.dumps(difference.to_json())


# --------------------------------------------------------------------------- JSON


def test_an_evaluation_round_trips_through_json() -> None:
    def reward(task: Task, output: str) -> Score:
        return Score(float_reward(task, output), f"wanted {task.meta['answer']}")

    calls = {"n": 0}

    def run(rendered: str, task: Task) -> str:
        calls["n"] += 1
        return str(task.meta["answer"]) if calls["n"] % 3 else "no"

    original = evaluate(TASKS, reward, run=run, rendered="", repeats=2)
    data = json.loads(json.dumps(original.to_json()))
    assert data["mean"] == pytest.approx(original.mean)
    assert data["interval"] == list(original.interval())
    assert data["repeats"] == 2 and data["feedback"]["cap-chile"] == "wanted Santiago"
    back = Evaluation.from_json(data)
    assert back == original
    assert back.mean == original.mean and back.interval() == original.interval()


def test_from_json_takes_old_files_without_the_optional_fields() -> None:
    back = Evaluation.from_json({"tasks": ["a", "b"], "draws": {"a": [1], "b": [0]}})
    assert back.feedback == {} and back.outputs == {} and back.repeats == 1
    assert back.per_task == {"a": 1.0, "b": 0.0} and type(back.draws["a"][0]) is float


def test_an_empty_evaluation_has_a_nan_mean() -> None:
    empty = Evaluation([], {})
    assert math.isnan(empty.mean) and empty.per_task == {}


# --------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize("tasks", ["cap-france", TASKS[0], {"a": TASKS[0]}, None, 3, (t for t in TASKS)])
def test_tasks_must_be_a_list_of_tasks(tasks: Any) -> None:
    with pytest.raises(InvalidArgumentType, match="tasks"):
        evaluate(tasks, float_reward, run=city_run)


@pytest.mark.parametrize("tasks", [[], [TASKS[0], "cap-japan"]])
def test_tasks_must_be_a_non_empty_list_of_task_objects(tasks: list[Any]) -> None:
    with pytest.raises(InvalidArgumentType, match="non-empty list of agentdescent.Task"):
        evaluate(tasks, float_reward, run=city_run)


def test_tasks_must_have_their_own_ids() -> None:
    with pytest.raises(InvalidArgument, match="share an id"):
        evaluate([TASKS[0], Task("cap-france", "again?")], float_reward, run=city_run)


def test_exactly_one_of_agent_and_run() -> None:
    class Agent:
        def solve(self, rendered: str, task: Task) -> str:
            return "x"

    with pytest.raises(InvalidArgument, match="exactly one of agent"):
        evaluate(TASKS, float_reward)
    with pytest.raises(InvalidArgument, match="exactly one of agent"):
        evaluate(TASKS, float_reward, agent=Agent(), run=city_run)


def test_run_and_solve_must_be_callable() -> None:
    class NotAnAgent:
        solve = "not callable"

    with pytest.raises(InvalidArgumentType, match="callable"):
        evaluate(TASKS, float_reward, run="city_run")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentType, match="callable"):
        evaluate(TASKS, float_reward, agent=NotAnAgent())


def test_the_artifact_is_rendered_or_a_state_not_both() -> None:
    with pytest.raises(InvalidArgument, match="not both"):
        evaluate(TASKS, float_reward, run=city_run, rendered=RULE, state={})
    with pytest.raises(InvalidArgumentType, match="rendered"):
        evaluate(TASKS, float_reward, run=city_run, rendered={"rule": RULE})  # type: ignore[arg-type]


@pytest.mark.parametrize("knob, value", [("repeats", 0), ("repeats", 1.5), ("max_concurrency", 0),
                                         ("max_concurrency", "2")])
def test_repeats_and_concurrency_are_checked(knob: str, value: Any) -> None:
    with pytest.raises(InvalidArgument, match=knob):
        evaluate(TASKS, float_reward, run=city_run, **{knob: value})


def test_a_reward_out_of_range_breaks_the_contract_naming_the_task() -> None:
    with pytest.raises(RewardContractError, match="'cap-france'"):
        evaluate(TASKS, lambda task, output: 2.0, run=city_run)
    with pytest.raises(RewardContractError, match="'cap-france'"):
        evaluate(TASKS, lambda task, output: Score(math.nan, "?"), run=city_run, max_concurrency=2)


def test_a_run_returning_a_non_string_breaks_its_contract() -> None:
    with pytest.raises(ContractError, match="return the output as a str"):
        evaluate(TASKS, float_reward, run=lambda rendered, task: 42)


def test_what_run_raises_propagates() -> None:
    def broken(rendered: str, task: Task) -> str:
        raise ConnectionError("backend down")

    with pytest.raises(ConnectionError, match="backend down"):
        evaluate(TASKS, float_reward, run=broken, max_concurrency=3)
