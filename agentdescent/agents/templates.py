"""The templates of `LLMAgent`'s calls, their fields, and the text that fills them.

This module owns the default solve, propose, rewrite and edit templates, the fields each
template may use (checked at construction, so a typo fails before a run), and the text
the fields are filled with: the reward's feedback (`feedback_paragraph`), the other failed
rollouts a proposal reflects on (`others_paragraph`), and the readable form of an artifact
that holds demonstrations, as a proposer is shown it (`shown_artifact`). Pure text: it must
not call a model, log, or hold state.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidArgument, InvalidArgumentType
from ..types import Task, clip_middle, one_line, sanitize_text

__all__ = [
    "DEFAULT_EDIT_TEMPLATE",
    "DEFAULT_PROPOSE_TEMPLATE",
    "DEFAULT_REWRITE_TEMPLATE",
    "DEFAULT_SOLVE_TEMPLATE",
    "PROPOSE_FIELDS",
    "PROPOSE_REQUIRED",
    "REWRITE_REQUIRED",
    "SOLVE_FIELDS",
    "SOLVE_REQUIRED",
    "check_template",
    "feedback_of",
    "feedback_paragraph",
    "others_paragraph",
    "shown_artifact",
    "uses_field",
]

#: The user message of a solve call. Fields: ``{prompt}`` (required), ``{task_id}``, and
#: ``{artifact}``: a template that uses it puts the artifact in the user message and sends
#: no system message.
DEFAULT_SOLVE_TEMPLATE = "{prompt}"

#: The user message of a propose call in rule mode (the default). Fields: ``{artifact}``,
#: ``{prompt}`` (required), ``{output}`` (required), ``{reward}`` (a float, so
#: ``{reward:.2f}`` works), ``{task_id}``, ``{feedback}`` (the reward's feedback as a
#: paragraph — a blank line, then ``Feedback on the answer: ...`` — or nothing when the
#: reward gave none, so a float reward's prompt is unchanged), ``{feedback_text}`` (the
#: feedback itself, or ``""``) and ``{others}`` (the other failed rollouts a proposal
#: reflects on, ``LLMAgent(reflect_on=k)``, as a paragraph: see `others_paragraph`; ``""``
#: when there are none, so with ``reflect_on=1`` the prompt is unchanged).
def _failed_task(improving: str, current: str) -> str:
    """The part every non-edit propose template shares: what is improved, the task, the answer, its score."""
    return (f"You are improving the {improving} an assistant follows. The assistant answered a task below and "
            f"did not fully succeed.\n\nCurrent {current}:\n{{artifact}}\n\nTask:\n{{prompt}}\n\n"
            "The assistant's answer:\n{output}\n\nScore: {reward:.2f} out of 1.{feedback}{others}\n\n")


DEFAULT_PROPOSE_TEMPLATE = _failed_task("playbook", "playbook") + (
    "Write ONE general rule, a single sentence, that would have helped the assistant on tasks like this one. It "
    "must be general (not the answer to this task) and must not repeat a rule already in the playbook. Reply with "
    "the rule only. If no rule would help, reply NONE.")

#: The user message of a propose call in rewrite mode (``proposal="rewrite"``, for
#: `agentdescent.SingleSlot`): the model returns the whole new text. Same fields as
#: `DEFAULT_PROPOSE_TEMPLATE`; ``{artifact}`` is required too.
DEFAULT_REWRITE_TEMPLATE = _failed_task("instructions", "instructions") + (
    "Rewrite the instructions so that the assistant does better on tasks like this one. Keep what works, change "
    "as little as needed, and keep them general (never put the answer to this task in them). Reply with the "
    "complete new instructions only. If no change would help, reply NONE.")

#: The user message of a propose call in edit mode (``proposal="edit"``, for
#: `agentdescent.code.FileTree`): the model returns search/replace blocks. Same fields as
#: `DEFAULT_PROPOSE_TEMPLATE`; ``{artifact}`` is required too. ``{prompt}`` is the failing
#: test (its id and source), ``{output}`` what the test run reported (its assertion
#: message: the same text as the reward's feedback, so ``{feedback}`` is left out).
DEFAULT_EDIT_TEMPLATE = """\
You are fixing the code of a project so that its tests pass. One test fails.

The project's files:
{artifact}

The failing test:
{prompt}

What the test run reported:
{output}

Fix the code (never the tests) with the smallest change that makes this test pass \
without breaking the others. Reply with one or more edits, each in exactly this form:

path/of/the/file.py
<<<<<<< SEARCH
the exact current lines to replace
=======
the new lines
>>>>>>> REPLACE

The SEARCH part must copy the current lines exactly, whitespace included, and occur \
once in the file. If no change would help, reply NONE."""

SOLVE_FIELDS = {"artifact", "prompt", "task_id"}
SOLVE_REQUIRED = ("prompt",)
PROPOSE_FIELDS = {"artifact", "prompt", "output", "reward", "task_id", "feedback", "feedback_text", "others"}
PROPOSE_REQUIRED = ("prompt", "output")
REWRITE_REQUIRED = ("artifact", "prompt", "output")
_SAMPLE = {"artifact": "a", "prompt": "p", "output": "o", "reward": 0.5, "task_id": "t", "feedback": "",
           "feedback_text": "", "others": ""}


def feedback_paragraph(feedback: str) -> str:
    """The ``{feedback}`` field of a proposal template: a paragraph, or ``""`` when there is none."""
    return f"\n\nFeedback on the answer: {feedback}" if feedback else ""

def _is_power_of_ten(n: int) -> bool:
    """1, 10, 100, ...: the occurrences a repeated condition is worth a log line at."""
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1


def check_template(template: Any, knob: str, fields: set[str], required: tuple[str, ...]) -> str:
    """Validate a ``str.format`` template now, so a typo fails at construction, not mid-run."""
    if not isinstance(template, str):
        raise InvalidArgumentType(f"LLMAgent({knob}=...): expected a str.format template, got {type(template).__name__}")
    known = ", ".join("{" + f + "}" for f in sorted(fields))
    used: set[str] = set()
    try:
        for _, name, _, _ in string.Formatter().parse(template):
            if name is None:
                continue
            root = re.split(r"[.\[]", name, maxsplit=1)[0]
            if root == "" or root.isdigit():
                raise InvalidArgument(
                    f"LLMAgent({knob}=...): positional field {{{name}}} in the template; "
                    f"use named fields ({known}), and double literal braces as {{{{ }}}}"
                )
            if root not in fields:
                raise InvalidArgument(
                    f"LLMAgent({knob}=...): unknown field {{{root}}} in the template; the "
                    f"fields are {known} (double literal braces as {{{{ }}}})"
                )
            used.add(root)
    except InvalidArgument:
        raise
    except ValueError as exc:
        raise InvalidArgument(f"LLMAgent({knob}=...): not a valid str.format template: {exc}") from None
    for name in required:
        if name not in used:
            raise InvalidArgument(
                f"LLMAgent({knob}=...): the template has no {{{name}}} field, so the model "
                f"would never see it; add {{{name}}} (fields: {known})"
            )
    try:
        template.format(**_SAMPLE)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise InvalidArgument(f"LLMAgent({knob}=...): the template does not format: {exc!r}") from None
    return template


def uses_field(template: str, field: str) -> bool:
    """Does ``template`` use the field ``field`` (``{field}``, ``{field:...}``, ``{field.x}``)?"""
    return any(
        name is not None and re.split(r"[.\[]", name, maxsplit=1)[0] == field
        for _, name, _, _ in string.Formatter().parse(template)
    )


#: How much of each other failure a proposal prompt shows (characters): its prompt, its
#: answer and its feedback, each cut in the middle (head and tail kept) past this.
OTHERS_LIMITS = {"prompt": 1200, "output": 600, "feedback": 400}
#: How much of each demonstration's input and output a proposer is shown (characters).
EXAMPLE_LIMIT = 200


def feedback_of(reward: Any) -> str:
    """The feedback a reward carries (a `agentdescent.rewards.builtin.Score`'s), cleaned, or ``""``."""
    return sanitize_text(str(getattr(reward, "feedback", "") or "")).strip()


def others_paragraph(others: Sequence[tuple[Task, str, Any]]) -> str:
    """The ``{others}`` field of a proposal template: the other failed rollouts, or ``""``.

    Each failure shows its task's prompt, the answer, its score and, when the reward is a
    `agentdescent.rewards.builtin.Score` with feedback, what the reward said; long texts
    are cut in the middle (`OTHERS_LIMITS`). The paragraph starts with a blank line, like
    `feedback_paragraph`, so a template can put it right after the failure it adds to.
    """
    if not others:
        return ""
    parts = ["\n\nThe assistant did not fully succeed on these other tasks either:"]
    for task, output, reward in others:
        feedback = feedback_of(reward)
        block = (f"Another task:\n{clip_middle(str(task.prompt), OTHERS_LIMITS['prompt'])}\n\n"
                 f"The assistant's answer:\n{clip_middle(str(output), OTHERS_LIMITS['output'])}\n\n"
                 f"Score: {float(reward):.2f} out of 1.")
        if feedback:
            block += f"\nFeedback on the answer: {clip_middle(feedback, OTHERS_LIMITS['feedback'])}"
        parts.append(block)
    return "\n\n".join(parts)


def shown_artifact(instructions: str, pairs: Sequence[tuple[str, str]], *, blank: bool) -> str:
    """The ``{artifact}`` field of a proposal template: the instructions, then the demonstrations as a list.

    A proposer reads the artifact, it does not run it: the demonstrations are shown as a
    short ``input -> output`` list (each side on one line, cut to `EXAMPLE_LIMIT`
    characters), never as the raw block markers of `agentdescent.fewshot`. Blank
    instructions (``blank``) are shown as ``(empty)``.
    """
    text = "(empty)" if blank else instructions.strip()
    if not pairs:
        return text
    lines = [f"- {one_line(given, EXAMPLE_LIMIT)} -> {one_line(expected, EXAMPLE_LIMIT)}" for given, expected in pairs]
    return text + "\n\nExamples the assistant is shown:\n" + "\n".join(lines)
