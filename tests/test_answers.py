"""What a test score is made of (`agentdescent.engine.answers`): labels, the constant flag, the result, the views.

A weak model can "gain" on a labelling task by answering one label to every question.
Here replies are labelled (a choice named as a whole word, the longest first; none;
several; free text), the flag's thresholds are pinned, the distribution round-trips
through JSON, both engines put it on the result (and ``save``/``load`` keep it, while an
older result file without it still loads), and the report and ``status`` of a real run
directory say so in words.
"""

from __future__ import annotations

import json
import math

import pytest

from agentdescent import EvolutionResult, Task, async_evolve, evolve
from agentdescent.cli.main import main as cli_main
from agentdescent.cli.report import build_report
from agentdescent.cli.runviews import answer_lines
from agentdescent.cli.runviews import test_summary as summary_of_test
from agentdescent.engine.answers import (
    CONSTANT_MIN_TASKS,
    CONSTANT_SHARE,
    NAMES_NONE,
    NAMES_SEVERAL,
    AnswerDistribution,
    answer_distribution,
    label_reply,
)
from agentdescent.engine.testset import Evaluation

from .test_report import parse, write_run

CHOICES = ["plausible", "implausible"]
RULE = "Answer plausible."


def _task(i: int | str, answer: str | None, choices: list[str] | None = CHOICES) -> Task:
    meta = {} if answer is None else {"answer": answer}
    if choices is not None:
        meta["choices"] = choices
    return Task(f"q{i}", f"Is sentence {i} plausible?", meta)


def _evaluation(outputs: dict[str, str]) -> Evaluation:
    return Evaluation(list(outputs), {t: [0.0] for t in outputs}, outputs=dict(outputs))


# --------------------------------------------------------------------------- labelling


@pytest.mark.parametrize(("reply", "label"), [
    ("plausible", "plausible"),
    ("Implausible.", "implausible"),            # not also "plausible": the longer choice is matched first
    ("The answer: IMPLAUSIBLE", "implausible"),
    ("It is Plausible, I think", "plausible"),
    ("I cannot tell", NAMES_NONE),
    ("plausibles", NAMES_NONE),                  # a whole word only
    ("plausible or implausible", NAMES_SEVERAL),
    ("implausible, no, plausible", NAMES_SEVERAL),
    ("implausible ... implausible", "implausible"),  # one choice named twice is still one
])
def test_a_reply_is_labelled_by_the_one_choice_it_names(reply: str, label: str) -> None:
    assert label_reply(reply, _task(0, "plausible")) == label


def test_without_choices_a_reply_is_its_normalised_text() -> None:
    task = _task(0, "Paris", choices=None)
    assert label_reply("  It is\n  PARIS  ", task) == "it is paris"
    assert label_reply("x" * 100, task) == "x" * 40
    assert label_reply("Lyon") == "lyon"  # no task at all


def test_choices_are_normalised_like_the_gold_answers() -> None:
    tasks = [_task(i, "Yes", choices=["Yes", "No"]) for i in range(3)]
    dist = answer_distribution(_evaluation({"q0": "YES", "q1": "no", "q2": "Yes!"}), tasks)
    assert dist.answers == {"yes": 2, "no": 1} and dist.gold == {"yes": 3}


# --------------------------------------------------------------------------- the distribution and its flag


def test_counts_top_label_and_what_a_constant_answer_scores() -> None:
    answers = ["plausible"] * 9 + ["implausible"]
    gold = ["plausible"] * 4 + ["implausible"] * 6
    tasks = [_task(i, g) for i, g in enumerate(gold)]
    dist = answer_distribution(_evaluation({f"q{i}": a for i, a in enumerate(answers)}), tasks)
    assert dist.tasks == 10
    assert dist.answers == {"plausible": 9, "implausible": 1}
    assert dist.gold == {"plausible": 4, "implausible": 6}
    assert (dist.top_label, dist.top_share, dist.constant) == ("plausible", 0.9, True)
    assert dist.best_constant_accuracy == 0.6 and dist.top_label_accuracy == 0.4
    warning = dist.warning()
    assert "gives one answer ('plausible') to 90% of the 10 test tasks" in warning
    assert "always answering 'plausible' scores 0.40 here (always answering 'implausible', 0.60)" in warning
    assert "not skill" in warning


def test_the_flag_needs_the_share_and_enough_tasks() -> None:
    assert CONSTANT_SHARE == 0.9 and CONSTANT_MIN_TASKS == 5
    just = AnswerDistribution({"plausible": 9, "implausible": 1}, tasks=10)
    below = AnswerDistribution({"plausible": 8, "implausible": 2}, tasks=10)
    few = AnswerDistribution({"plausible": 4}, tasks=4)
    enough = AnswerDistribution({"plausible": 5}, tasks=5)
    assert just.constant and not below.constant and not few.constant and enough.constant
    assert below.warning() is None and few.warning() is None
    assert enough.best_constant_accuracy is None and enough.top_label_accuracy is None  # no gold: no score to name
    assert enough.warning() == ("the final artifact gives one answer ('plausible') to 100% of the 5 test tasks; such "
                                "a score is the labels' balance and the reply's format, not skill at the task")


def test_a_constant_best_answer_and_replies_that_name_no_choice_are_worded_as_such() -> None:
    best = AnswerDistribution({"implausible": 6}, {"implausible": 4, "plausible": 2}, tasks=6)
    assert "scores 0.67 here, the most any constant answer scores" in best.warning()
    none = AnswerDistribution({NAMES_NONE: 6}, {"plausible": 6}, tasks=6)
    assert none.constant and "name none of the choices on 100% of the 6 test tasks" in none.warning()
    several = AnswerDistribution({NAMES_SEVERAL: 6}, tasks=6)
    assert "name several choices at once" in several.warning(who="the starting artifact")


def test_no_evaluation_no_gold_and_no_task() -> None:
    assert answer_distribution(None, [_task(0, "plausible")]) is None
    dist = answer_distribution(_evaluation({"q0": "plausible"}), [_task(0, None)])
    assert dist.gold == {} and dist.best_constant_accuracy is None
    empty = AnswerDistribution()
    assert (empty.top_label, empty.top_share, empty.constant) == (None, 0.0, False)
    unknown = answer_distribution(_evaluation({"zz": "Plausible"}), [])  # a task missing from tasks: its text
    assert unknown.answers == {"plausible": 1} and unknown.gold == {}


def test_to_dict_is_json_and_from_dict_rebuilds_it() -> None:
    dist = AnswerDistribution({"plausible": 9, "implausible": 1}, {"plausible": 4, "implausible": 6}, tasks=10)
    data = json.loads(json.dumps(dist.to_dict()))
    assert data == {"answers": {"plausible": 9, "implausible": 1}, "gold": {"plausible": 4, "implausible": 6},
                    "tasks": 10, "top_label": "plausible", "top_share": 0.9, "constant": True,
                    "best_constant_accuracy": 0.6}
    assert AnswerDistribution.from_dict(data) == dist
    for bad in ([], {"tasks": -1}, {"tasks": 3, "answers": {"a": "two"}}, {"tasks": True}):
        with pytest.raises(ValueError):
            AnswerDistribution.from_dict(bad)


# --------------------------------------------------------------------------- on the result, from both engines


def _labels(n: int, plausible: int, prefix: str) -> list[Task]:
    return [Task(f"{prefix}{i}", f"Is sentence {prefix}{i} plausible?",
                 {"answer": "plausible" if i < plausible else "implausible", "choices": CHOICES}) for i in range(n)]


def _run(rendered: str, task: Task) -> str:
    """A weak model: with the rule it answers 'plausible' to everything, without it names no choice."""
    return "plausible" if RULE in rendered else "I am not sure."


def _reward(task: Task, output: str) -> float:
    return 1.0 if label_reply(output, task) == task.meta["answer"] else 0.0


def _propose(rendered: str, task: Task, output: str, reward: float) -> str:
    return RULE


RUN_TASKS = _labels(16, 14, "r")
TEST_TASKS = _labels(10, 4, "t")


def _check_constant(result: EvolutionResult) -> None:
    assert result.error is None and RULE in result.rendered, (result.stop_reason, result.error)
    final, start = result.test_answers, result.test_answers_initial
    assert final.answers == {"plausible": 10} and final.gold == {"plausible": 4, "implausible": 6}
    assert final.constant and final.top_label == "plausible" and final.best_constant_accuracy == 0.6
    assert math.isclose(result.test_final, final.top_label_accuracy)  # the "gain" is the plausible share
    assert start.answers == {NAMES_NONE: 10} and result.test_initial == 0.0


def test_evolve_puts_the_answers_on_the_result_and_save_load_keeps_them(tmp_path) -> None:
    result = evolve(RUN_TASKS, _reward, run=_run, propose=_propose, rounds=2, n_workers=1, seed=0,
                    test_tasks=TEST_TASKS)
    _check_constant(result)
    path = result.save(tmp_path / "result.json")
    saved = json.loads(path.read_text())
    assert saved["test_answers"]["constant"] is True and saved["test_answers_initial"]["top_label"] == NAMES_NONE
    again = EvolutionResult.load(path)
    assert again.test_answers == result.test_answers and again.test_answers_initial == result.test_answers_initial
    del saved["test_answers"], saved["test_answers_initial"]  # a result file written before the field existed
    path.write_text(json.dumps(saved))
    older = EvolutionResult.load(path)
    assert older.test_answers is None and older.test_answers_initial is None and older.test_final == result.test_final


def test_async_evolve_puts_the_answers_on_the_result_too() -> None:
    result = async_evolve(RUN_TASKS, _reward, run=_run, propose=_propose, max_rollouts=8, n_workers=2, seed=0,
                          test_tasks=TEST_TASKS)
    _check_constant(result)


def test_a_run_without_a_test_set_has_no_answers() -> None:
    result = evolve(RUN_TASKS, _reward, run=_run, propose=_propose, rounds=1, n_workers=1, seed=0)
    assert result.test_answers is None and result.test_answers_initial is None


# --------------------------------------------------------------------------- the report and status


def _run_dir(tmp_path, result: EvolutionResult | None):
    status = {"state": "finished", "round": 2, "head_version": 2, "held_out_reward": 0.875, "initial_reward": 0.0,
              "tokens": 0, "stop_reason": "rounds", "error": None}
    if result is not None:
        status["test"] = summary_of_test(result.test)
    run = write_run(tmp_path / "run", rows=[], status=status, result=None, versions=[{"rule": RULE}])
    if result is not None:
        result.save(run.result_file)
    return run


def test_the_report_and_status_warn_of_a_constant_answer(tmp_path, capsys) -> None:
    result = evolve(RUN_TASKS, _reward, run=_run, propose=_propose, rounds=2, n_workers=1, seed=0,
                    test_tasks=TEST_TASKS)
    run = _run_dir(tmp_path, result)
    warning = result.test_answers.warning()
    html = build_report(run)
    page = parse(html)
    reward = page.section("reward")
    assert f"Warning: {warning}." in reward
    assert "Answers on the test set" in reward
    assert "answer expected given at the start given at the end" in reward
    assert "plausible 4 0 10" in reward and "implausible 6 0 0" in reward and f"{NAMES_NONE} 0 10 0" in reward
    assert html.count('<p class="warn">Warning: ') == 2  # in the test set's part, and at a glance
    assert f"Warning: {warning} (see the test set )." in " ".join(page.all_text().split())

    assert cli_main(["status", str(run.path)]) == 0
    out = capsys.readouterr().out
    lines = answer_lines(result.test_answers)
    assert lines == ["answers on the test set (the final head's first reply to each of 10 tasks): 'plausible' 10",
                     "expected answers: 'implausible' 6, 'plausible' 4", f"warning: {warning}"]
    assert "\n".join(lines) in out and out.index("test set: 0.000 -> 0.400") < out.index(lines[0])


def test_a_varied_or_older_run_shows_no_warning(tmp_path, capsys) -> None:
    varied = AnswerDistribution({"plausible": 4, "implausible": 6}, {"plausible": 4, "implausible": 6}, tasks=10)
    assert answer_lines(varied)[-1] == "expected answers: 'implausible' 6, 'plausible' 4"
    result = evolve(RUN_TASKS, _reward, run=_run, propose=_propose, rounds=1, n_workers=1, seed=0,
                    test_tasks=TEST_TASKS)
    result.test_answers, result.test_answers_initial = varied, None
    run = _run_dir(tmp_path, result)
    reward = parse(build_report(run)).section("reward")
    assert "Answers on the test set" in reward and "Warning" not in reward
    assert cli_main(["status", str(run.path)]) == 0
    assert "warning" not in capsys.readouterr().out
    data = json.loads(run.result_file.read_text())  # an older result.json, and a damaged one, show no part
    for value in (None, {"tasks": "many"}):
        data["test_answers"] = value
        run.result_file.write_text(json.dumps(data))
        assert "Answers on the test set" not in parse(build_report(run)).section("reward")
        assert cli_main(["status", str(run.path)]) == 0
        assert "answers on the test set" not in capsys.readouterr().out
