"""A judge reward: a model grades an output against a rubric and says why.

``judge(provider, rubric)`` returns a reward, ``reward(task, output) -> Score``, that asks
the provider to grade one output: the rubric, the task's prompt, the expected answer when
the task has one (``task.meta["answer"]``), and the output go into one request (the
template is `DEFAULT_JUDGE_TEMPLATE`); the reply's ``SCORE:`` line is the value (a number
in [0, 1], or ``n/10``-style fractions, or a percentage) and its ``CRITIQUE:`` line the
feedback. A reply with no readable score scores 0 with feedback saying so, and is counted
(`JudgeReward.stats`).

In a run the judge is a call of the run like any other: the engines run it as its own
call, in phase ``judge``, under the run's failure rule (retried, dropped or ending the
run), and its tokens land in the run's meter, so they count in ``result.usage`` (by
phase) and against ``max_tokens``. Outside a run it records into the provider's meter.

This module owns the judge; it must not touch the engines.
"""

from __future__ import annotations

import re
import string
import threading
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidArgument, InvalidArgumentType
from ..model import Completion, Provider
from ..seams import adopt
from ..types import Task, sanitize_text
from ..validation import RENAMED, check_int, check_real, check_renamed
from .builtin import Score

__all__ = ["DEFAULT_JUDGE_TEMPLATE", "JudgeReward", "judge", "read_verdict"]

#: The judge's request. Fields: ``{rubric}``, ``{prompt}``, ``{output}`` (all required),
#: ``{answer}`` (the expected answer, or "(not given)"), ``{task_id}``.
DEFAULT_JUDGE_TEMPLATE = """\
You grade an assistant's answer to a task.

Rubric:
{rubric}

Task:
{prompt}

Expected answer: {answer}

The assistant's answer:
{output}

Reply with exactly two lines:
SCORE: a number from 0 (wrong) to 1 (fully correct)
CRITIQUE: one or two sentences saying what is right or wrong with the answer"""

_FIELDS = {"rubric", "prompt", "output", "answer", "task_id"}
_REQUIRED = ("rubric", "prompt", "output")
_SCORE = re.compile(r"score\s*[:=]\s*\**\s*([-+]?\d+(?:\.\d+)?)\s*(%|/\s*(\d+(?:\.\d+)?))?", re.IGNORECASE)
_CRITIQUE = re.compile(r"critique\s*[:=]\s*(.+?)(?=^\s*\**\s*score\s*[:=]|\Z)", re.IGNORECASE | re.DOTALL | re.MULTILINE)


def read_verdict(reply: str) -> tuple[float | None, str]:
    """``(score, critique)`` from a judge's reply; score None when there is no readable score.

    ``SCORE: 0.7``, ``SCORE: 7/10``, ``SCORE: 70%`` all read as 0.7; a score above 1
    without a scale is read out of 10 when it is at most 10 (``SCORE: 7``), else refused.
    """
    match = _SCORE.search(reply)
    critique_match = _CRITIQUE.search(reply)
    critique = " ".join(critique_match.group(1).split()) if critique_match else ""
    if match is None:
        return None, critique
    value = float(match.group(1))
    if match.group(2) == "%":
        value /= 100.0
    elif match.group(3) is not None:
        scale = float(match.group(3))
        if scale <= 0:
            return None, critique
        value /= scale
    elif value > 1.0:
        if value > 10.0:
            return None, critique
        value /= 10.0
    if not 0.0 <= value <= 1.0:
        return None, critique
    return value, critique


class JudgeReward:
    """The reward `judge` returns; callable as ``reward(task, output) -> Score`` (thread-safe).

    Attributes:
        calls_a_model: True: the engines run it as a call of its own (phase ``judge``).
        call_tokens: the per-call cap on the judge's reply (sent as ``max_tokens=``).

    Raises:
        InvalidArgument: ``max_tokens`` is given: the per-call cap is ``call_tokens``.
    """

    calls_a_model = True

    def __init__(self, provider: Provider, rubric: str, *, model: str | None, call_tokens: int | None,
                 temperature: float | None, template: str, max_tokens: Any = RENAMED) -> None:
        _refuse_max_tokens("JudgeReward", max_tokens)
        self.provider = provider
        self.rubric = rubric
        self.model = model
        self.call_tokens = call_tokens
        self.temperature = temperature
        self.template = template
        self._lock = threading.Lock()
        self._stats = {"calls": 0, "unreadable": 0}

    def messages(self, task: Task, output: str) -> list[dict[str, str]]:
        """The request the judge sends for one output."""
        meta = task.meta if isinstance(task.meta, Mapping) else {}
        answer = meta.get("answer")
        user = self.template.format(rubric=self.rubric, prompt=task.prompt, output=output,
                                    answer="(not given)" if answer is None else str(answer), task_id=task.id)
        return [{"role": "user", "content": user}]

    def __call__(self, task: Task, output: str) -> Score:
        options = {"model": self.model, "max_tokens": self.call_tokens, "temperature": self.temperature}
        reply = self.provider.complete(self.messages(task, output), **{k: v for k, v in options.items()
                                                                        if v is not None})
        text = sanitize_text(reply.text if isinstance(reply, Completion) else str(reply))
        value, critique = read_verdict(text)
        with self._lock:
            self._stats["calls"] += 1
            if value is None:
                self._stats["unreadable"] += 1
        if value is None:
            shown = " ".join(text.split())[:200]
            return Score(0.0, f"the judge's reply had no readable SCORE line: {shown!r}")
        return Score(value, critique or f"the judge gave {value:g} without a critique")

    def stats(self) -> dict[str, int]:
        """Calls made, and replies with no readable score (each scored 0)."""
        with self._lock:
            return dict(self._stats)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock")
        return state

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"judge({self.provider!r:.60}, rubric={self.rubric[:40]!r}, model={self.model!r})"


def _refuse_max_tokens(owner: str, value: Any) -> None:
    check_renamed(value, "max_tokens", "call_tokens", owner=owner, what="the per-call cap on the judge's reply",
                  why="max_tokens is the run's token budget, given to evolve(max_tokens=...)")


def judge(provider: Provider, rubric: str, *, model: str | None = None, call_tokens: int | None = 256,
          temperature: float | None = 0.0, template: str | None = None, max_tokens: Any = RENAMED) -> JudgeReward:
    """A reward that asks ``provider`` to grade an output against ``rubric`` and explain the grade.

    Args:
        provider: the grading model (anything with ``complete(messages, **options)``).
        rubric: what a good answer is, in words.
        model: ``model=`` for each grading call (None: the provider's default).
        call_tokens: the per-call cap on the judge's reply, in tokens (sent as the
            provider's ``max_tokens=`` option; None: the provider's default).
        temperature: the judge's temperature (0 by default: a grade should repeat).
        template: the request (default `DEFAULT_JUDGE_TEMPLATE`); fields ``{rubric}``,
            ``{prompt}``, ``{output}`` (required), ``{answer}``, ``{task_id}``.
        max_tokens: refused, whatever its value: the per-call cap's old name (now
            ``call_tokens``); ``max_tokens`` is the run's budget, given to `evolve`.

    Returns:
        A `JudgeReward`: ``reward(task, output) -> Score``, its feedback the judge's critique.

    Raises:
        InvalidArgument: an empty rubric, a template missing a required field or using an
            unknown one, a limit out of range, ``max_tokens`` given (named ``call_tokens`` now).
    """
    _refuse_max_tokens("judge", max_tokens)
    provider = adopt(provider, Provider, "provider",
                     fix="wrap a plain function with agentdescent.providers.from_callable(fn)")
    if not isinstance(rubric, str) or not rubric.strip():
        raise InvalidArgument(f"judge(rubric={rubric!r:.60}): say in words what a good answer is")
    text = DEFAULT_JUDGE_TEMPLATE if template is None else template
    if not isinstance(text, str):
        raise InvalidArgumentType(f"judge(template={text!r:.60}): give a str.format template")
    used = {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(text) if name}
    unknown = used - _FIELDS
    if unknown:
        raise InvalidArgument(f"judge(template=...): unknown field(s) {sorted(unknown)}; the fields are "
                              f"{sorted(_FIELDS)}")
    missing = [f for f in _REQUIRED if f not in used]
    if missing:
        raise InvalidArgument(f"judge(template=...): the template has no {{{missing[0]}}} field; add it")
    check_int(call_tokens, "call_tokens", low=1, optional=True, owner="judge",
              hint="the per-call cap on the judge's reply, in tokens")
    check_real(temperature, "temperature", low=0.0, optional=True, owner="judge")
    return JudgeReward(provider, rubric.strip(), model=model, call_tokens=call_tokens, temperature=temperature,
                       template=text)
