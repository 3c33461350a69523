"""Rewards that explain: `Score`, the reward contract, and built-in rewards with feedback.

A reward is ``reward(task, output) -> float | Score`` in [0, 1]. A `Score` is a float that
also carries **feedback**: a sentence saying what was expected and what came back. The
engines check the contract once per call (`check_reward`), and the feedback travels with
the score: into the proposal request (LLMAgent's ``{feedback}`` slot; a ``propose``
callable receives the `Score` itself as its ``reward`` argument, so ``reward.feedback``
reads it and every float operation still works), the evidence card, the commit's metadata
in the ledger, and the merge report. A float reward works exactly as before.

The built-in rewards read the expected answer from ``task.meta["answer"]`` (a task without
one is a `agentdescent.errors.RewardContractError` naming it), and each returns a `Score`
whose feedback names the expected answer and what came back:

- `exact_match` — the reply, stripped, equals the answer;
- `normalized_match` — equal after lower-casing and dropping punctuation, articles and
  extra spaces;
- `contains_answer` — the answer appears in the reply as a whole word (case-insensitive);
- `one_of` (choices) — the reply names exactly one of the choices, and it is the answer
  (so "positive or negative" fails for both labels); ``one_of()`` reads each task's own
  choices from ``task.meta["choices"]`` (BIG-bench multiple-choice tasks);
- `any_target` — any of ``task.meta["targets"]`` (every acceptable answer; else the
  answer) appears in the reply as a whole word (BIG-bench generative tasks);
- `number_within` (tolerance) — the first number in the reply is within ``tolerance`` of
  the answer (absolute, or relative with ``relative=True``);
- `answer_regex` (pattern) — a regular expression built from the task's own answer
  (``{answer}`` in the pattern is the answer, escaped) matches the reply.

`by_name` maps the command line's ``--reward`` names onto them. A judge reward (a model
that grades and explains) is `agentdescent.rewards.judge.judge`.

This module owns the contract and the built-ins; it must not call a model.
"""

from __future__ import annotations

import math
import numbers
import re
import string
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InvalidArgument, InvalidArgumentType, RewardContractError
from ..types import Task, sanitize_text

__all__ = [
    "FEEDBACK_LIMIT",
    "REWARD_NAMES",
    "Score",
    "answer_regex",
    "any_target",
    "by_name",
    "check_reward",
    "contains_answer",
    "exact_match",
    "named_choices",
    "normalized_match",
    "number_within",
    "one_of",
]

#: Feedback longer than this many characters is cut (with "...") when it is checked: a
#: proposal prompt, a card and the ledger's metadata carry it.
FEEDBACK_LIMIT = 2000


class Score(float):
    """A reward in [0, 1] with the feedback that explains it: a float, so it compares and formats as one.

    Built as ``Score(value, feedback="")``: ``value`` is the reward, a real number
    (checked against [0, 1] by `check_reward`); ``feedback`` says what was expected and
    what came back, in a sentence or two.

    Raises:
        InvalidArgumentType: ``value`` is not a real number (or is a bool), ``feedback`` is
            not a string.
    """

    __slots__ = ("_feedback",)

    def __new__(cls, value: float, feedback: str = "") -> Score:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise InvalidArgumentType(f"Score(value={value!r}): give a real number in [0, 1]")
        if not isinstance(feedback, str):
            raise InvalidArgumentType(f"Score(feedback={feedback!r:.80}): give a string")
        obj = super().__new__(cls, float(value))
        object.__setattr__(obj, "_feedback", feedback)
        return obj

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Score is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Score is immutable: cannot delete {name!r}")

    @property
    def value(self) -> float:
        """The reward as a plain float."""
        return float(self)

    @property
    def feedback(self) -> str:
        """The feedback text ('' when the reward gave none)."""
        return self._feedback

    def __reduce__(self) -> tuple[Any, ...]:
        return (Score, (float(self), self._feedback))

    def __repr__(self) -> str:
        return f"Score({float(self)!r}, feedback={self._feedback!r})"

    def __str__(self) -> str:
        return float.__repr__(self)


def _cut(text: str) -> str:
    text = sanitize_text(text).strip()
    return text if len(text) <= FEEDBACK_LIMIT else text[: FEEDBACK_LIMIT - 3] + "..."


def check_reward(task: Task, value: Any) -> Score:
    """The reward contract: a finite real number in [0, 1], or a `Score`; returned as a `Score`.

    The feedback is sanitised like any reply and cut to `FEEDBACK_LIMIT` characters.

    Raises:
        RewardContractError: not a number (a bool is not one), not finite, or outside [0, 1];
            the message names the task.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RewardContractError(
            f"reward for task {task.id!r} returned {value!r:.80} ({type(value).__name__}); "
            "return a float in [0, 1] or a Score(value, feedback)"
        )
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise RewardContractError(
            f"reward for task {task.id!r} returned {value!r:.80}; return a finite float in [0, 1]"
        )
    feedback = value.feedback if isinstance(value, Score) else ""
    return Score(number, _cut(feedback) if feedback else "")


# --------------------------------------------------------------------------- the built-ins


def _answer(task: Task) -> str:
    answer = task.meta.get("answer") if isinstance(task.meta, dict) or hasattr(task.meta, "get") else None
    if answer is None:
        raise RewardContractError(
            f"task {task.id!r} has no meta['answer']: the built-in rewards compare the reply with it; "
            "give every task an answer, or write your own reward"
        )
    return str(answer)


def _show(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


_ARTICLES = {"a", "an", "the"}
_PUNCT = str.maketrans({c: " " for c in string.punctuation})


def _normal(text: str) -> str:
    words = text.lower().translate(_PUNCT).split()
    return " ".join(w for w in words if w not in _ARTICLES)


def exact_match(task: Task, output: str) -> Score:
    """1.0 when the reply, stripped of surrounding whitespace, equals ``task.meta["answer"]``."""
    answer = _answer(task)
    if output.strip() == answer.strip():
        return Score(1.0, f"correct: the reply is exactly {_show(answer)}")
    return Score(0.0, f"expected exactly {_show(answer)}; the reply was {_show(output)}")


def normalized_match(task: Task, output: str) -> Score:
    """1.0 when reply and answer are equal once lower-cased, without punctuation, articles or extra spaces."""
    answer = _answer(task)
    if _normal(output) == _normal(answer):
        return Score(1.0, f"correct: the reply matches {_show(answer)} (ignoring case and punctuation)")
    return Score(0.0, f"expected {_show(answer)} (case and punctuation ignored); the reply was {_show(output)}")


def _word_pattern(answer: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(answer.strip())}(?!\w)", re.IGNORECASE)


def named_choices(choices: Sequence[str], text: str) -> list[str]:
    """The choices ``text`` names as whole words (case ignored), in the order of ``choices``.

    A longer choice's match hides the shorter ones inside it: "implausible" does not also
    name "plausible", "C#" does not name "C". The one matcher behind `one_of`, the answer
    distribution of a test set (`agentdescent.engine.answers`) and the benchmarks.
    """
    taken: list[tuple[int, int]] = []
    named: set[str] = set()
    for label in sorted({c for c in choices if c.strip()}, key=len, reverse=True):
        for m in _word_pattern(label).finditer(text):
            if not any(m.start() < b and a < m.end() for a, b in taken):
                taken.append(m.span())
                named.add(label)
    return [c for c in dict.fromkeys(choices) if c in named]


def contains_answer(task: Task, output: str) -> Score:
    """1.0 when the answer appears in the reply as a whole word or phrase (case-insensitive).

    It rewards a reply that hedges ("positive or negative") as much as a committed one: for
    labels, use `one_of`.
    """
    answer = _answer(task)
    if _word_pattern(answer).search(output):
        return Score(1.0, f"correct: the reply contains {_show(answer)}")
    return Score(0.0, f"expected the reply to contain {_show(answer)}; it was {_show(output)}")


def one_of(choices: Sequence[str] | None = None) -> Callable[[Task, str], Score]:
    """A reward for labelling tasks: the reply must name exactly one of the choices, and the right one.

    Choices are matched as whole words, case-insensitively; a longer choice's match hides
    the shorter ones inside it ("implausible" does not also name "plausible", "C#" does not
    name "C"). Naming two (a hedge) or none scores 0, with feedback saying which were named.

    Args:
        choices: the labels, the same for every task. None (``one_of()``): each task's own
            ``task.meta["choices"]`` (a list of labels, such as `agentdescent.data.bigbench.bigbench_tasks`
            gives), read per task.

    Raises:
        InvalidArgument: fewer than two distinct, non-empty choices (for ``one_of()``, a
            `agentdescent.errors.RewardContractError` at scoring time naming the task whose
            ``meta["choices"]`` is missing or has fewer than two).
    """
    if choices is None:
        return _one_of_per_task()
    if isinstance(choices, str) or not isinstance(choices, Sequence):
        raise InvalidArgumentType(f"one_of(choices={choices!r:.80}): give a list of labels, or None to read each "
                                  "task's meta['choices']")
    labels = [str(c).strip() for c in choices]
    if len({c.lower() for c in labels if c}) < 2 or any(not c for c in labels):
        raise InvalidArgument(f"one_of(choices={list(choices)!r:.80}): give at least two distinct, non-empty labels")
    reward = _labels_reward(labels)
    reward.__name__ = "one_of"
    reward.__qualname__ = f"one_of({labels!r})"
    return reward


def _labels_reward(labels: list[str]) -> Callable[[Task, str], Score]:
    """The one-of reward for one fixed list of labels (checked by the caller)."""
    def named_in(output: str) -> list[str]:
        return named_choices(labels, output)

    def reward(task: Task, output: str) -> Score:
        answer = _answer(task)
        if answer.strip().lower() not in {c.lower() for c in labels}:
            raise RewardContractError(
                f"task {task.id!r}: its answer {answer!r} is not one of the choices {labels!r}"
            )
        named = named_in(output)
        if len(named) == 1 and named[0].lower() == answer.strip().lower():
            return Score(1.0, f"correct: the reply names {_show(named[0])} and no other choice")
        if not named:
            return Score(0.0, f"expected exactly one of {labels}, the right one being {_show(answer)}; "
                              f"the reply named none: {_show(output)}")
        if len(named) > 1:
            return Score(0.0, f"expected exactly one choice, {_show(answer)}; the reply named {len(named)}: "
                              f"{', '.join(named)}")
        return Score(0.0, f"expected {_show(answer)}; the reply named {_show(named[0])}")

    return reward


#: How many distinct choice lists ``one_of()`` keeps compiled (tasks of one benchmark share a few).
_PER_TASK_CACHE = 256


def _one_of_per_task() -> Callable[[Task, str], Score]:
    """``one_of()``: the same reward as ``one_of(choices)``, with each task's ``meta["choices"]``."""
    compiled: dict[tuple[str, ...], Callable[[Task, str], Score]] = {}

    def reward(task: Task, output: str) -> Score:
        meta = task.meta if hasattr(task.meta, "get") else {}
        raw = meta.get("choices")
        if isinstance(raw, str) or not isinstance(raw, Sequence):
            raise RewardContractError(
                f"task {task.id!r} has no meta['choices'] list: one_of() reads each task's choices from it; give "
                "every task its choices (bigbench_tasks does), or pass them: one_of(['yes', 'no'])"
            )
        labels = tuple(str(c).strip() for c in raw)
        if len({c.lower() for c in labels if c}) < 2 or any(not c for c in labels):
            raise RewardContractError(
                f"task {task.id!r}: its meta['choices'] {list(raw)!r:.80} are not at least two distinct, "
                "non-empty labels"
            )
        scorer = compiled.get(labels)
        if scorer is None:
            if len(compiled) >= _PER_TASK_CACHE:
                compiled.clear()
            scorer = compiled[labels] = _labels_reward(list(labels))
        return scorer(task, output)

    reward.__name__ = "one_of"
    reward.__qualname__ = "one_of(None)"
    return reward


def _targets(task: Task) -> list[str]:
    meta = task.meta if hasattr(task.meta, "get") else {}
    raw = meta.get("targets")
    if raw is None:
        return [_answer(task)]
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, Sequence) or not items:
        raise RewardContractError(f"task {task.id!r}: meta['targets'] is {raw!r:.80}; give a non-empty list of "
                                  "acceptable answers, or leave it out to use meta['answer']")
    targets = [str(t).strip() for t in items if str(t).strip()]
    if not targets:
        raise RewardContractError(f"task {task.id!r}: meta['targets'] holds only empty answers")
    return targets


def any_target(task: Task, output: str) -> Score:
    """1.0 when any of the task's acceptable answers appears in the reply as a whole word or phrase (case-insensitive).

    The answers are ``task.meta["targets"]`` (a list, as `agentdescent.data.bigbench.bigbench_tasks` gives
    for generative BIG-bench tasks: ``["three", "3"]`` accepts "3" and "Three."), or
    ``[task.meta["answer"]]`` when the task has no targets. A target matches as
    `contains_answer` matches, not inside a longer word; a number target not inside a longer
    number either ("3" is found in "I count 3." but not in "13", "3.5" or "0.3"). Like
    `contains_answer`, it rewards a reply that names several answers: use it where a hedge
    is not a concern, or pair it with a check of its own.

    Raises:
        RewardContractError: the task has neither targets nor an answer, or its targets are empty.
    """
    targets = _targets(task)
    for target in sorted(targets, key=len, reverse=True):
        if _target_pattern(target).search(output):
            return Score(1.0, f"correct: the reply contains {_show(target)}")
    shown = ", ".join(_show(t, 60) for t in targets[:8]) + (", ..." if len(targets) > 8 else "")
    return Score(0.0, f"expected the reply to contain one of {shown}; it was {_show(output)}")


def _target_pattern(target: str) -> re.Pattern[str]:
    """A target as a whole word; a number target also not part of a longer number ("3" is not in "3.5", "0.3")."""
    text = target.strip()
    if re.fullmatch(r"[-+]?\d+(?:[.,]\d+)?", text):
        return re.compile(rf"(?<!\w)(?<!\d[.,]){re.escape(text)}(?!\w)(?![.,]\d)")
    return _word_pattern(text)


_NUMBER = re.compile(r"[-+]?(?:\d+(?:[.,]\d+)*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")


def _first_number(text: str) -> float | None:
    for match in _NUMBER.finditer(text):
        token = match.group(0)
        try:
            return float(token.replace(",", "")) if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?", token) \
                else float(token.replace(",", "."))
        except ValueError:
            continue
    return None


def _num(x: float) -> str:
    """A number as a reader writes it: no exponent for what fits, the digits it has."""
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return format(x, ".12g")


def number_within(tolerance: float = 0.0, *, relative: bool = False) -> Callable[[Task, str], Score]:
    """A reward for numeric answers: the first number in the reply is within ``tolerance`` of the answer.

    Args:
        tolerance: the largest accepted difference (absolute; a fraction of the answer with
            ``relative=True``), >= 0.
        relative: read ``tolerance`` relative to the answer's magnitude.

    Raises:
        InvalidArgument: a negative or non-finite tolerance.
    """
    if isinstance(tolerance, bool) or not isinstance(tolerance, numbers.Real):
        raise InvalidArgumentType(f"number_within(tolerance={tolerance!r}): give a number >= 0")
    if not math.isfinite(tolerance) or tolerance < 0:
        raise InvalidArgument(f"number_within(tolerance={tolerance!r}): give a finite number >= 0")

    def reward(task: Task, output: str) -> Score:
        text = _answer(task)
        expected = _first_number(text)
        if expected is None:
            raise RewardContractError(f"task {task.id!r}: its answer {text!r} is not a number")
        got = _first_number(output)
        if got is None:
            return Score(0.0, f"expected the number {_num(expected)}; the reply has no number: {_show(output)}")
        limit = tolerance * abs(expected) if relative else tolerance
        if abs(got - expected) <= limit + 1e-12:
            return Score(1.0, f"correct: {_num(got)} is within {_num(limit)} of {_num(expected)}")
        return Score(0.0, f"expected {_num(expected)} (within {_num(limit)}); the reply's number was {_num(got)}")

    reward.__name__ = "number_within"
    reward.__qualname__ = f"number_within({tolerance!r}, relative={relative!r})"
    return reward


def answer_regex(pattern: str = r"(?<!\w){answer}(?!\w)", *, flags: int = re.IGNORECASE) -> Callable[[Task, str], Score]:
    """A reward from a regular expression built from each task's own answer.

    ``{answer}`` in ``pattern`` is replaced by the task's answer, escaped; a pattern
    without it is used as it is (the same for every task). The default matches the answer
    as a whole word or phrase (not inside a longer word, whatever characters it ends
    with: "C++" matches in "use C++ here"), case-insensitively.

    Raises:
        InvalidArgument: the pattern does not compile (checked with a sample answer).
    """
    if not isinstance(pattern, str) or not pattern:
        raise InvalidArgumentType(f"answer_regex(pattern={pattern!r:.80}): give a regular expression")
    try:
        re.compile(pattern.replace("{answer}", "x"), flags)
    except re.error as exc:
        raise InvalidArgument(f"answer_regex(pattern={pattern!r:.80}): not a regular expression ({exc})") from None

    def reward(task: Task, output: str) -> Score:
        expression = pattern.replace("{answer}", re.escape(_answer(task).strip())) if "{answer}" in pattern \
            else pattern
        if re.search(expression, output, flags):
            return Score(1.0, f"correct: the reply matches {expression!r}")
        return Score(0.0, f"expected the reply to match {expression!r}; it was {_show(output)}")

    reward.__name__ = "answer_regex"
    reward.__qualname__ = f"answer_regex({pattern!r})"
    return reward


#: The command line's ``--reward`` names (``regex:PATTERN``, ``number:TOL`` and
#: ``choice:A,B,...`` take an argument after the colon).
REWARD_NAMES = ("exact", "normalized", "contains", "choice:A,B,...", "number:TOLERANCE", "regex:PATTERN")


def by_name(name: str) -> Callable[[Task, str], Score]:
    """The built-in reward a command-line name stands for (see `REWARD_NAMES`).

    ``exact``, ``normalized``, ``contains``; ``choice:positive,negative`` (`one_of`);
    ``number:0.01`` (`number_within`, absolute; ``number:1%`` relative); ``regex:PATTERN``
    (`answer_regex`: ``{answer}`` in the pattern is the task's answer, escaped; the pattern
    is searched as written, so case counts unless it starts with ``(?i)``).

    Raises:
        InvalidArgument: an unknown name, or a bad argument after the colon (the message lists the names).
    """
    if not isinstance(name, str):
        raise InvalidArgumentType(f"reward name {name!r}: give one of {', '.join(REWARD_NAMES)}")
    kind, sep, arg = name.partition(":")
    simple = {"exact": exact_match, "normalized": normalized_match, "contains": contains_answer}
    if kind in simple and not sep:
        return simple[kind]
    if kind == "choice" and arg:
        return one_of([c for c in arg.split(",")])
    if kind == "number" and arg:
        text = arg.strip()
        relative = text.endswith("%")
        try:
            tolerance = float(text[:-1]) / 100 if relative else float(text)
        except ValueError:
            raise InvalidArgument(f"--reward {name!r}: give number:TOLERANCE, e.g. number:0.01 or number:1%") from None
        return number_within(tolerance, relative=relative)
    if kind == "regex" and arg:
        return answer_regex(arg, flags=0)  # as written: case counts (write (?i) to ignore it)
    raise InvalidArgument(f"--reward {name!r}: use one of {', '.join(REWARD_NAMES)}, or MODULE:FUNCTION")
