"""What a test-set score is made of: the answers an artifact gives, beside the expected ones.

With a weak model, a gain on a labelling task can be a constant answer: the model replies
"plausible" to every question and scores the share of plausible questions. `answer_distribution`
labels each test reply of an `agentdescent.engine.testset.Evaluation` (its first draw's
output) and counts the labels beside the gold answers into an `AnswerDistribution`, whose
``constant`` flags an artifact that gives (nearly) one answer to every task, and whose
``best_constant_accuracy`` is what always giving the most frequent gold answer would score.

A reply is labelled by the choice it names when the task has ``meta["choices"]`` (as a
whole word, case-insensitive, the longest choice first, so "implausible" does not also
name "plausible"; ``"(none)"`` when it names none, ``"(several)"`` when it names more than
one), else by its own text, normalised (lower case, whitespace collapsed, cut to 40
characters). The gold answer, ``meta["answer"]``, is normalised the same way.

This module holds values and counts only: it must not call a model, score, or touch a ledger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..rewards.builtin import named_choices
from ..types import Task
from .testset import Evaluation

__all__ = ["CONSTANT_MIN_TASKS", "CONSTANT_SHARE", "NAMES_NONE", "NAMES_SEVERAL", "AnswerDistribution",
           "answer_distribution", "label_reply"]

#: The share of the test tasks one answer must reach for the artifact to count as answering constantly.
CONSTANT_SHARE = 0.9
#: The fewest test tasks on which a constant answer is flagged (fewer say too little).
CONSTANT_MIN_TASKS = 5
#: The label of a reply that names none of the task's choices.
NAMES_NONE = "(none)"
#: The label of a reply that names more than one of the task's choices.
NAMES_SEVERAL = "(several)"
#: The length a free-text label is cut to.
LABEL_CHARS = 40


def _normal(text: Any) -> str:
    """``text`` lower-cased, its whitespace collapsed, cut to `LABEL_CHARS` characters."""
    return " ".join(str(text).lower().split())[:LABEL_CHARS]


def _named(reply: str, choices: Sequence[str]) -> list[str]:
    """The choices ``reply`` names (`agentdescent.rewards.builtin.named_choices`), normalised."""
    return list(dict.fromkeys(_normal(c) for c in named_choices([c.strip() for c in choices], reply)))


def _choices(task: Task | None) -> list[str]:
    """The task's ``meta["choices"]`` as text, or [] when it has none (or not a list of labels)."""
    listed = task.meta.get("choices") if task is not None else None
    if isinstance(listed, (str, bytes)) or not isinstance(listed, Sequence):
        return []
    return [str(c) for c in listed if str(c).strip()]


def label_reply(reply: str, task: Task | None = None) -> str:
    """The label a reply gives: the choice it names (``task.meta["choices"]``), else its normalised text.

    With choices: the one choice named (normalised), `NAMES_NONE` when it names none,
    `NAMES_SEVERAL` when it names more than one. Without: the reply lower-cased, its
    whitespace collapsed, cut to 40 characters.
    """
    choices = _choices(task)
    if not choices:
        return _normal(reply)
    named = _named(reply, choices)
    return named[0] if len(named) == 1 else NAMES_NONE if not named else NAMES_SEVERAL


def _counts(data: Any, what: str) -> dict[str, int]:
    if not isinstance(data, Mapping):
        raise ValueError(f"{what}: expected an object of label -> count, got {type(data).__name__}")
    out = {}
    for label, count in data.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{what}[{label!r}]: a count is a non-negative integer, not {count!r}")
        out[str(label)] = count
    return out


def _most(counts: Mapping[str, int]) -> tuple[str | None, int]:
    """The most frequent label and its count (ties: the label first in sorted order); (None, 0) when empty."""
    if not counts:
        return None, 0
    label = min(counts, key=lambda k: (-counts[k], k))
    return label, counts[label]


@dataclass(frozen=True)
class AnswerDistribution:
    """The labels an artifact's test replies give, beside the gold answers.

    Args:
        answers: label -> how many test tasks' first reply gives it (see `label_reply`).
        gold: normalised ``meta["answer"]`` -> how many test tasks expect it (empty when
            no task has an answer).
        tasks: the test tasks whose reply was labelled.
    """

    answers: dict[str, int] = field(default_factory=dict)
    gold: dict[str, int] = field(default_factory=dict)
    tasks: int = 0

    @property
    def top_label(self) -> str | None:
        """The most frequent answer (ties: the first in sorted order), or None with no task."""
        return _most(self.answers)[0]

    @property
    def top_share(self) -> float:
        """The share of the tasks that get the most frequent answer (0.0 with no task)."""
        return _most(self.answers)[1] / self.tasks if self.tasks else 0.0

    @property
    def constant(self) -> bool:
        """The artifact gives (nearly) one answer: `top_share` >= `CONSTANT_SHARE` on at least `CONSTANT_MIN_TASKS` tasks."""
        return self.tasks >= CONSTANT_MIN_TASKS and self.top_share >= CONSTANT_SHARE

    @property
    def best_constant_accuracy(self) -> float | None:
        """The share of the most frequent gold answer: what always answering it would score (None without gold)."""
        total = sum(self.gold.values())
        return _most(self.gold)[1] / total if total else None

    @property
    def top_label_accuracy(self) -> float | None:
        """The share of the gold answers that are `top_label`: what answering it to every task would score."""
        total = sum(self.gold.values())
        return self.gold.get(self.top_label or "", 0) / total if total and self.top_label is not None else None

    def warning(self, who: str = "the final artifact") -> str | None:
        """A sentence for a reader when the answers are `constant`, else None (``who`` names the artifact)."""
        if not self.constant:
            return None
        share = f"{self.top_share:.0%} of the {self.tasks} test tasks"
        if self.top_label == NAMES_NONE:
            return (f"{who}'s replies name none of the choices on {share}: its test score is not made of "
                    f"labels at all; read the replies before the score")
        if self.top_label == NAMES_SEVERAL:
            return (f"{who}'s replies name several choices at once on {share}: its test score is made of "
                    f"hedges, not answers")
        line = f"{who} gives one answer ({self.top_label!r}) to {share}"
        given, best = self.top_label_accuracy, self.best_constant_accuracy
        if given is not None and best is not None:
            line += f": always answering {self.top_label!r} scores {given:.2f} here"
            line += (", the most any constant answer scores" if given >= best else
                     f" (always answering {_most(self.gold)[0]!r}, {best:.2f})")
        return line + "; such a score is the labels' balance and the reply's format, not skill at the task"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (with the derived numbers, for readers of the file)."""
        return {"answers": dict(self.answers), "gold": dict(self.gold), "tasks": self.tasks,
                "top_label": self.top_label, "top_share": self.top_share, "constant": self.constant,
                "best_constant_accuracy": self.best_constant_accuracy}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AnswerDistribution:
        """Rebuild from `to_dict` output (the derived numbers are computed again).

        Raises:
            ValueError: ``data`` is not such an object.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"an answer distribution is an object, not {type(data).__name__}")
        tasks = data.get("tasks")
        if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 0:
            raise ValueError(f"tasks: a non-negative integer, not {tasks!r}")
        return cls(answers=_counts(data.get("answers", {}), "answers"), gold=_counts(data.get("gold", {}), "gold"),
                   tasks=tasks)


def answer_distribution(evaluation: Evaluation | None, tasks: Sequence[Task]) -> AnswerDistribution | None:
    """Label each reply of ``evaluation`` (its first draw's output) and count the labels beside the gold answers.

    Args:
        evaluation: an artifact's test-set evaluation, or None.
        tasks: the test tasks (their ``meta`` may hold ``"answer"`` and ``"choices"``);
            a task of the evaluation missing here is labelled by its text, without gold.

    Returns:
        The `AnswerDistribution`, or None when there is no evaluation.
    """
    if evaluation is None:
        return None
    by_id = {t.id: t for t in tasks}
    answers: dict[str, int] = {}
    gold: dict[str, int] = {}
    labelled = 0
    for task_id in evaluation.tasks:
        if task_id not in evaluation.outputs:
            continue
        task = by_id.get(task_id)
        label = label_reply(evaluation.outputs[task_id], task)
        answers[label] = answers.get(label, 0) + 1
        labelled += 1
        expected = task.meta.get("answer") if task is not None else None
        if expected is not None and _normal(expected):
            gold[_normal(expected)] = gold.get(_normal(expected), 0) + 1
    return AnswerDistribution(answers=answers, gold=gold, tasks=labelled)
