"""`agentdescent.data.bigbench.bigbench_tasks`: BIG-bench JSON task files as tasks.

Every file here is written by the test itself, with invented examples in BIG-bench's JSON
shape: no BIG-bench data is ever part of this repository (its tasks carry a canary string
that must stay out of training corpora).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentdescent import Task
from agentdescent.data import bigbench_tasks as from_package
from agentdescent.data.loader import bigbench_tasks
from agentdescent.errors import DataLoadError, InvalidArgument, InvalidArgumentType
from agentdescent.rewards.builtin import any_target, one_of

CHOICE_TASK = {
    "name": "invented_weather",
    "description": "an invented task for the tests",
    "task_prefix": "Say whether the weather report is likely or unlikely.\n",
    "example_input_prefix": "\nReport: ",
    "example_output_prefix": "\nLikely? ",
    "examples": [
        {"input": "Snow in the desert at noon in July.", "target_scores": {"likely": 0, "unlikely": 1}},
        {"input": " Rain in a rainforest. ", "target_scores": {"likely": 1, "unlikely": 0}},
        {"input": "Fog over a harbour at dawn.", "target_scores": {"likely": 1.0, "unlikely": 0.0}},
    ],
}

COUNT_TASK = {
    "name": "invented_counting",
    "examples": [
        {"input": "I have a spoon, two forks and a knife. How many pieces of cutlery do I have?",
         "target": ["four", "4"]},
        {"input": "I have a cat. How many animals do I have?", "target": "1"},
    ],
}


def write(tmp_path: Path, data: Any, name: str = "task.json", folder: str = "invented") -> Path:
    path = tmp_path / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_a_multiple_choice_file_gives_tasks_with_answer_choices_and_a_documented_prompt(tmp_path: Path) -> None:
    tasks = bigbench_tasks(write(tmp_path, CHOICE_TASK))
    assert [t.id for t in tasks] == ["invented_weather-0", "invented_weather-1", "invented_weather-2"]
    first = tasks[0]
    assert isinstance(first, Task)
    assert first.prompt == ("Say whether the weather report is likely or unlikely.\n\n"
                            "Snow in the desert at noon in July.\n\nOptions: likely, unlikely")
    assert first.meta["answer"] == "unlikely"
    assert first.meta["choices"] == ["likely", "unlikely"]
    assert first.meta["targets"] == ["unlikely"]
    assert first.meta["kind"] == "multiple_choice"
    assert first.meta["task"] == "invented_weather" and first.meta["index"] == 0
    assert tasks[1].meta["input"] == " Rain in a rainforest. "
    assert tasks[1].prompt.split("\n\n")[1] == "Rain in a rainforest."
    assert tasks[2].meta["answer"] == "likely"  # float scores work too


def test_the_rewards_score_the_loaded_tasks(tmp_path: Path) -> None:
    choice, = bigbench_tasks(write(tmp_path, CHOICE_TASK), limit=1)
    reward = one_of()
    assert reward(choice, "Unlikely.") == 1.0
    assert reward(choice, "likely") == 0.0
    assert reward(choice, "likely or unlikely") == 0.0
    count, one = bigbench_tasks(write(tmp_path, COUNT_TASK, folder="count"))
    assert any_target(count, "You have 4 pieces.") == 1.0
    assert any_target(count, "Four") == 1.0
    assert any_target(one, "just 1") == 1.0 and any_target(one, "11") == 0.0


def test_show_choices_false_leaves_the_options_out(tmp_path: Path) -> None:
    task = bigbench_tasks(write(tmp_path, CHOICE_TASK), show_choices=False)[0]
    assert "Options" not in task.prompt
    assert task.meta["choices"] == ["likely", "unlikely"]


def test_prefixes_wrap_the_input_as_bigbench_does(tmp_path: Path) -> None:
    task = bigbench_tasks(write(tmp_path, CHOICE_TASK), prefixes=True, show_choices=False)[0]
    assert task.prompt == ("Say whether the weather report is likely or unlikely.\n\n"
                           "Report: Snow in the desert at noon in July.\nLikely?")


def test_choices_with_commas_are_listed_with_semicolons(tmp_path: Path) -> None:
    data = {"name": "commas", "examples": [{"input": "Pick one.", "target_scores": {"red, dark": 1, "blue": 0}}]}
    assert bigbench_tasks(write(tmp_path, data))[0].prompt == "Pick one.\n\nOptions: red, dark; blue"


def test_a_tie_for_the_best_score_keeps_every_best_choice_as_a_target(tmp_path: Path) -> None:
    data = {"name": "ties", "examples": [{"input": "Which?", "target_scores": {"a": 1, "b": 1, "c": 0}}]}
    task = bigbench_tasks(write(tmp_path, data))[0]
    assert task.meta["answer"] == "a" and task.meta["targets"] == ["a", "b"]


def test_a_generative_file_gives_the_shortest_target_as_answer_and_all_as_targets(tmp_path: Path) -> None:
    tasks = bigbench_tasks(write(tmp_path, COUNT_TASK))
    assert tasks[0].meta["answer"] == "4" and tasks[0].meta["targets"] == ["four", "4"]
    assert tasks[1].meta["answer"] == "1" and tasks[1].meta["targets"] == ["1"]
    assert tasks[0].meta["kind"] == "generative" and "choices" not in tasks[0].meta
    assert tasks[0].prompt == COUNT_TASK["examples"][0]["input"]


def test_ids_are_stable_with_a_limit_and_an_id_prefix(tmp_path: Path) -> None:
    path = write(tmp_path, CHOICE_TASK)
    assert [t.id for t in bigbench_tasks(path, limit=2)] == ["invented_weather-0", "invented_weather-1"]
    assert [t.id for t in bigbench_tasks(path, id_prefix="w")] == ["w-0", "w-1", "w-2"]
    assert bigbench_tasks(path) == bigbench_tasks(path)


def test_a_file_without_a_name_is_named_after_its_folder(tmp_path: Path) -> None:
    data = {"examples": [{"input": "2 + 2 =", "target": "4"}]}
    assert bigbench_tasks(write(tmp_path, data, folder="invented_sums"))[0].id == "invented_sums-0"


def test_the_package_exports_the_loader() -> None:
    import agentdescent.dataloader

    import agentdescent.data
    import agentdescent.data.loader

    assert from_package is bigbench_tasks is agentdescent.dataloader.bigbench_tasks
    assert "bigbench_tasks" in agentdescent.data.__all__ and "bigbench_tasks" in agentdescent.data.loader.__all__


# --------------------------------------------------------------------------- errors


def test_a_missing_file_names_the_path_and_where_to_get_one(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "task.json"
    with pytest.raises(DataLoadError, match=r"nowhere.*no such file.*benchmark_tasks/NAME/task\.json"):
        bigbench_tasks(missing)


def test_bad_json_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "{not json")
    with pytest.raises(DataLoadError, match=r"task\.json: not valid JSON"):
        bigbench_tasks(path)


def test_a_json_list_is_not_a_task(tmp_path: Path) -> None:
    with pytest.raises(DataLoadError, match="not an object with 'examples'"):
        bigbench_tasks(write(tmp_path, [1, 2]))


@pytest.mark.parametrize("data", [{"name": "x"}, {"name": "x", "examples": []}, {"examples": {"a": 1}}])
def test_no_examples_is_refused(tmp_path: Path, data: dict[str, Any]) -> None:
    with pytest.raises(DataLoadError, match="no 'examples' list"):
        bigbench_tasks(write(tmp_path, data))


def test_an_example_without_targets_names_the_example(tmp_path: Path) -> None:
    data = {"name": "x", "examples": [{"input": "ok", "target": "1"}, {"input": "no target here"}]}
    with pytest.raises(DataLoadError, match=r"example 1 has neither 'target_scores'.*nor 'target'"):
        bigbench_tasks(write(tmp_path, data))


@pytest.mark.parametrize("example, message", [
    ({"target": "1"}, "no 'input' text"),
    ({"input": "  ", "target": "1"}, "no 'input' text"),
    ({"input": "q", "target": ""}, "'target' is empty"),
    ({"input": "q", "target": []}, "'target' is empty"),
    ({"input": "q", "target": 3}, "must be a string or a list of strings"),
    ({"input": "q", "target_scores": {}}, "non-empty object"),
    ({"input": "q", "target_scores": {"only": 1}}, "fewer than two distinct choices"),
    ({"input": "q", "target_scores": {"a": "high", "b": 0}}, "not a number"),
    ("just text", "not an object"),
])
def test_a_malformed_example_is_refused_by_name(tmp_path: Path, example: Any, message: str) -> None:
    with pytest.raises(DataLoadError, match=message) as info:
        bigbench_tasks(write(tmp_path, {"name": "x", "examples": [example]}))
    assert "example 0" in str(info.value) and "task.json" in str(info.value)


@pytest.mark.parametrize("kwargs", [{"limit": 0}, {"limit": -1}, {"id_prefix": ""}, {"id_prefix": "  "}])
def test_bad_arguments_are_invalid(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        bigbench_tasks(write(tmp_path, CHOICE_TASK), **kwargs)


@pytest.mark.parametrize("kwargs", [{"limit": 1.5}, {"limit": True}, {"show_choices": "yes"}, {"prefixes": 1}])
def test_arguments_of_the_wrong_type_are_refused(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentType):
        bigbench_tasks(write(tmp_path, CHOICE_TASK), **kwargs)


def test_the_path_must_be_a_path() -> None:
    with pytest.raises(InvalidArgumentType):
        bigbench_tasks(3)  # type: ignore[arg-type]


def test_the_file_is_read_as_json_never_unpickled(tmp_path: Path) -> None:
    import pickle

    path = tmp_path / "task.json"
    path.write_bytes(pickle.dumps({"examples": [{"input": "q", "target": "1"}]}))
    with pytest.raises(DataLoadError):
        bigbench_tasks(path)
