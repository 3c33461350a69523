"""`LLMAgent`: the agent built on a `Provider` (templates, proposal parsing, conversations).

This module owns how an agent turns a task and an artifact into model messages, and how a
model's reply becomes a proposal: exactly one rule (or, in rewrite mode, one whole new
text) or ``None``, with every refusal counted by kind. The model seam it builds on
(`Usage`, `Completion`, `Provider`, `Agent`, the phase and worker scopes) lives in
`agentdescent.model` and is re-exported here for the public ``agentdescent.agents``
names. It must not import a provider SDK: the adapters live in `agentdescent.providers`
and load their SDKs lazily.
"""

from __future__ import annotations

import logging
import math
import numbers
import re
import string
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .context import ContextManager
from .model import (
    Agent,
    Completion,
    Provider,
    Usage,
    current_worker,
    estimate_tokens,
    thread_tokens,
    usage_phase,
    worker_scope,
)
from .types import Task

__all__ = [
    "DEFAULT_PROPOSE_TEMPLATE",
    "DEFAULT_REWRITE_TEMPLATE",
    "DEFAULT_SOLVE_TEMPLATE",
    "REFUSAL_KINDS",
    "TRUNCATED_FINISH_REASONS",
    "Agent",
    "Completion",
    "LLMAgent",
    "ParsedProposal",
    "Provider",
    "Usage",
    "current_worker",
    "estimate_tokens",
    "is_blank_artifact",
    "parse_proposal",
    "thread_tokens",
    "usage_phase",
    "worker_scope",
]

log = logging.getLogger("agentdescent.agents")

# --------------------------------------------------------------------------- templates

#: The user message of a solve call. Fields: ``{prompt}`` (required), ``{task_id}``, and
#: ``{artifact}``: a template that uses it puts the artifact in the user message and sends
#: no system message.
DEFAULT_SOLVE_TEMPLATE = "{prompt}"

#: The user message of a propose call in rule mode (the default). Fields: ``{artifact}``,
#: ``{prompt}`` (required), ``{output}`` (required), ``{reward}`` (a float, so
#: ``{reward:.2f}`` works), ``{task_id}``.
DEFAULT_PROPOSE_TEMPLATE = """\
You are improving the playbook an assistant follows. The assistant answered a task \
below and did not fully succeed.

Current playbook:
{artifact}

Task:
{prompt}

The assistant's answer:
{output}

Score: {reward:.2f} out of 1.

Write ONE general rule, a single sentence, that would have helped the assistant on \
tasks like this one. It must be general (not the answer to this task) and must not \
repeat a rule already in the playbook. Reply with the rule only. If no rule would \
help, reply NONE."""

#: The user message of a propose call in rewrite mode (``proposal="rewrite"``, for
#: `agentdescent.SingleSlot`): the model returns the whole new text. Same fields as
#: `DEFAULT_PROPOSE_TEMPLATE`; ``{artifact}`` is required too.
DEFAULT_REWRITE_TEMPLATE = """\
You are improving the instructions an assistant follows. The assistant answered a task \
below and did not fully succeed.

Current instructions:
{artifact}

Task:
{prompt}

The assistant's answer:
{output}

Score: {reward:.2f} out of 1.

Rewrite the instructions so that the assistant does better on tasks like this one. Keep \
what works, change as little as needed, and keep them general (never put the answer to \
this task in them). Reply with the complete new instructions only. If no change would \
help, reply NONE."""

_SOLVE_FIELDS = {"artifact", "prompt", "task_id"}
_SOLVE_REQUIRED = ("prompt",)
_PROPOSE_FIELDS = {"artifact", "prompt", "output", "reward", "task_id"}
_PROPOSE_REQUIRED = ("prompt", "output")
_REWRITE_REQUIRED = ("artifact", "prompt", "output")
_SAMPLE = {"artifact": "a", "prompt": "p", "output": "o", "reward": 0.5, "task_id": "t"}

#: ``Completion.finish_reason`` values that mean the per-call limit cut the reply off:
#: ``"length"`` (OpenAI-compatible servers) and ``"max_tokens"`` (Anthropic).
TRUNCATED_FINISH_REASONS = frozenset({"length", "max_tokens"})

#: Why `LLMAgent.propose` returned ``None`` for a reply, one counter each in
#: `LLMAgent.stats` (``"declined"``, the model answering NONE, is counted apart: it is the
#: model's choice, not a refusal).
REFUSAL_KINDS = ("truncated", "empty", "restated", "echoed", "too_long", "not_a_rule")

#: Default ``max_proposal_chars`` per proposal mode.
_DEFAULT_MAX_CHARS = {"rule": 400, "rewrite": 4000}


def _is_power_of_ten(n: int) -> bool:
    """1, 10, 100, ...: the occurrences a repeated condition is worth a log line at."""
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1


def _check_template(template: Any, knob: str, fields: set[str], required: tuple[str, ...]) -> str:
    """Validate a ``str.format`` template now, so a typo fails at construction, not mid-run."""
    if not isinstance(template, str):
        raise TypeError(f"LLMAgent({knob}=...): expected a str.format template, got {type(template).__name__}")
    known = ", ".join("{" + f + "}" for f in sorted(fields))
    used: set[str] = set()
    try:
        for _, name, _, _ in string.Formatter().parse(template):
            if name is None:
                continue
            root = re.split(r"[.\[]", name, maxsplit=1)[0]
            if root == "" or root.isdigit():
                raise ValueError(
                    f"LLMAgent({knob}=...): positional field {{{name}}} in the template; "
                    f"use named fields ({known}), and double literal braces as {{{{ }}}}"
                )
            if root not in fields:
                raise ValueError(
                    f"LLMAgent({knob}=...): unknown field {{{root}}} in the template; the "
                    f"fields are {known} (double literal braces as {{{{ }}}})"
                )
            used.add(root)
    except ValueError as exc:
        if str(exc).startswith("LLMAgent("):
            raise
        raise ValueError(f"LLMAgent({knob}=...): not a valid str.format template: {exc}") from None
    for name in required:
        if name not in used:
            raise ValueError(
                f"LLMAgent({knob}=...): the template has no {{{name}}} field, so the model "
                f"would never see it; add {{{name}}} (fields: {known})"
            )
    try:
        template.format(**_SAMPLE)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise ValueError(f"LLMAgent({knob}=...): the template does not format: {exc!r}") from None
    return template


def _uses_field(template: str, field: str) -> bool:
    return any(
        name is not None and re.split(r"[.\[]", name, maxsplit=1)[0] == field
        for _, name, _, _ in string.Formatter().parse(template)
    )


# --------------------------------------------------------------------------- parsing

_HEADING = re.compile(r"^#{1,6}(?:\s|$)")
_FENCE = re.compile(r"^(?:```|~~~)")
_FENCED = re.compile(r"^(?:```|~~~)[^\n]*\n(.*?)^(?:```|~~~)\s*$", re.S | re.M)
_HRULE = re.compile(r"^(?:[-*_=]\s*){3,}$")
_LIST_MARKER = re.compile(r"^(?:[-*+\u2022\u2023\u25e6\u2013\u2014]|\d{1,3}[.)])\s+")
_NONE_REPLY = re.compile(r"[\W_]*none[\W_]*", re.IGNORECASE)
_LABEL = re.compile(
    r"^(?:\*\*|__)?(?:(?:new|general|one|suggested|proposed|improved|additional|my|the)\s+)?"
    r"(?:rule|guideline|tip|suggestion|instruction|principle|lesson)(?:\s*#?\s*\d+)?"
    r"\s*(?:\*\*|__)?\s*:\s*(?:\*\*|__)?\s*",
    re.IGNORECASE,
)
_LEAD_IN = re.compile(
    r"^(?:(?:sure|okay|ok|certainly|of course|great|absolutely)\b[,.!]*\s*)?"
    r"(?:here(?:'s|\u2019s| is| are)|the following|below is|this is|"
    r"i (?:would |'d |\u2019d )?(?:suggest|propose|recommend)|my (?:suggestion|rule|proposal)|"
    r"(?:a|one|the|my) (?:good |general |helpful |useful |new |single )?(?:rule|guideline)\b"
    r"[^:\n]{0,60}?\b(?:would be|is|could be))\b[^:\n]{0,120}:\s*",
    re.IGNORECASE,
)
_PLEASANTRY = re.compile(
    r"^(?:sure|okay|ok|certainly|of course|great|absolutely)\b[^.\n]{0,80}[.!]?$", re.IGNORECASE
)
_META = re.compile(
    r"^(?:\*\*|__)?(?:explanation|reasoning|reason|rationale|note|because|why)\b\s*[:(-]|"
    r"^(?:this (?:rule|guideline|instruction|version|prompt|revision|rewrite|new|updated|revised|"
    r"improved|will|would|should|helps|ensures|way|change)|"
    r"that way|i hope|hope this|let me know|in this case|for this task)\b",
    re.IGNORECASE,
)
_ASSESSMENT = re.compile(
    r"^(?:the|this|your)\s+(?:assistant'?s\s+|assistant\u2019s\s+|model'?s\s+)?"
    r"(?:answer|response|output|reply)\b(?:\s+(?:is|was|seems|looks|does|did|has|had|lacks)\b|"
    r"[^.:\n]{0,60}(?:would have been|:))",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'\u201c])")
_WORD = re.compile(r"[^\W\d_]+")
_QUOTES = (('"', '"'), ("'", "'"), ("\u201c", "\u201d"), ("\u2018", "\u2019"), ("\u00ab", "\u00bb"),
           ("`", "`"), ("**", "**"), ("__", "__"), ("*", "*"), ("_", "_"))


def is_blank_artifact(rendered: str) -> bool:
    """Is this rendering an empty artifact?

    Empty means nothing but white space and markdown headings: ``""``, ``"  "``, or a
    strategy's title with no rules under it (``"# Playbook"`` from `AppendRules`,
    ``"# Rules"`` from `KeyedRules`). `LLMAgent` sends no system message for such an
    artifact, and shows ``(empty)`` in a propose prompt.
    """
    return all(not line.strip() or _HEADING.match(line.strip()) for line in rendered.splitlines())


def _norm(text: str) -> str:
    """Case-, punctuation- and spacing-blind form used to compare a reply with the artifact."""
    return " ".join(re.sub(r"[\W_]+", " ", text.casefold()).split())


def _unwrap(text: str) -> str:
    """Strip quotes, backticks and emphasis that wrap the whole text (repeatedly)."""
    text = text.strip()
    changed = True
    while changed and text:
        changed = False
        for left, right in _QUOTES:
            if len(text) > len(left) + len(right) and text.startswith(left) and text.endswith(right):
                inner = text[len(left): len(text) - len(right)].strip()
                if left not in inner or len(left) > 1:  # '"a" and "b"' is not one quoted rule
                    text, changed = inner, True
                    break
        # a label left behind inside the quotes: "**Rule:** Answer ..."
        stripped = _LABEL.sub("", text, count=1).strip()
        if stripped != text and stripped:
            text, changed = stripped, True
    return text


def _clean_line(line: str) -> str:
    line = _LIST_MARKER.sub("", line.strip(), count=1)
    for _ in range(3):
        before = line
        line = _LEAD_IN.sub("", line, count=1)
        line = _LABEL.sub("", line, count=1)
        line = _unwrap(line)
        if line == before:
            break
    return line.strip()


def _drop_meta_sentences(text: str) -> str:
    """Drop trailing sentences that talk about the rule instead of stating it."""
    sentences = _SENTENCE_END.split(text)
    while len(sentences) > 1 and _META.match(sentences[-1].strip()):
        sentences.pop()
    return " ".join(s.strip() for s in sentences)


@dataclass(frozen=True)
class ParsedProposal:
    """What `parse_proposal` made of one reply.

    Attributes:
        text: the rule (or the rewritten text), or None.
        kind: ``"rule"`` (``text`` is set), ``"declined"`` (the model said NONE), or one
            of `REFUSAL_KINDS`.
        cleaned: True when ``text`` differs from the stripped reply (headings, labels,
            quotes, list markers, meta-commentary or extra items were removed).
    """

    text: str | None
    kind: str
    cleaned: bool = False


def _artifact_lines(artifact: str) -> tuple[set[str], str]:
    lines = set()
    for raw in artifact.splitlines():
        line = raw.strip()
        if not line or _HEADING.match(line):
            continue
        norm = _norm(_LIST_MARKER.sub("", line, count=1))
        if norm:
            lines.add(norm)
    body = " ".join(_norm(line) for line in artifact.splitlines() if not _HEADING.match(line.strip()))
    return lines, " ".join(body.split())


def _restates(candidate: str, lines: set[str], body: str) -> bool:
    norm = _norm(candidate)
    if not norm:
        return False
    if norm in lines or norm == body:
        return True
    # a shorter fragment of a rule already there ("Answer with digits" inside
    # "- Answer with digits only, no words."); short fragments are too weak to judge on
    return len(norm) >= 12 and f" {norm} " in f" {body} "


def _echoes(candidate: str, prompt: str, output: str) -> bool:
    norm = _norm(candidate)
    if not norm:
        return False
    out = _norm(output)
    task = _norm(prompt)
    if norm in (out, task):
        return True
    if out and len(norm) >= 12 and f" {norm} " in f" {out} ":
        return True  # a piece of the answer handed back as a "rule"
    return bool(task) and len(task) >= 12 and task in norm and len(norm) <= len(task) + 20


def _not_a_rule(candidate: str) -> bool:
    words = _WORD.findall(candidate)
    return (
        len(words) < 2
        or candidate.rstrip().endswith("?")
        or bool(_ASSESSMENT.match(candidate))
    )


def _content_lines(text: str, *, keep_headings: bool) -> list[str]:
    """The reply's lines without fences, rules and (in rule mode) headings; blanks kept."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if _FENCE.match(line) or _HRULE.match(line):
            continue
        if not keep_headings and _HEADING.match(line):
            out.append("")  # a heading ends a paragraph
            continue
        out.append(line)
    return out


def _rule_candidates(text: str) -> tuple[list[str], bool]:
    """Candidate rules of a rule-mode reply: the list items, or else the first paragraph.

    Returns the candidates and whether anything but the first candidate was dropped.
    """
    lines = _content_lines(text, keep_headings=False)
    # lead-in lines ("Here is one general rule:", "Sure!") and pleasantries go first
    content = []
    for line in lines:
        if line and (_PLEASANTRY.match(line) or (_LEAD_IN.match(line) and not _LEAD_IN.sub("", line).strip())):
            content.append("")
            continue
        content.append(line)
    while content and not content[0]:
        content.pop(0)
    if not content:
        return [], False
    dropped = False
    if _LIST_MARKER.match(content[0]):
        items: list[list[str]] = []
        for line in content:
            if not line:
                continue
            if _LIST_MARKER.match(line):
                items.append([line])
            elif items and not _META.match(line):
                items[-1].append(line)  # a wrapped item
            else:
                dropped = True
        return [" ".join(item) for item in items], dropped or len(items) > 1
    paragraph: list[str] = []
    for i, line in enumerate(content):
        if not line or (paragraph and _LIST_MARKER.match(line)) or (paragraph and _META.match(line)):
            dropped = any(content[i:])
            break
        paragraph.append(line)
    return [" ".join(paragraph)], dropped


def parse_proposal(
    text: str,
    *,
    artifact: str = "",
    prompt: str = "",
    output: str = "",
    finish_reason: str | None = None,
    mode: str = "rule",
    max_chars: int | None = None,
) -> ParsedProposal:
    """Turn one model reply into exactly one proposal, or say why not.

    What `LLMAgent.propose` runs on every reply, exposed for your own proposers. In
    ``"rule"`` mode the reply is cleaned down to one rule: markdown headings (the
    ``# Playbook`` a small model copies from the prompt), code fences, horizontal rules,
    list markers, labels (``Rule:``, ``**New rule:**``), wrapping quotes and emphasis,
    lead-ins (``Here is one general rule:``) and trailing meta-commentary (``This rule
    helps because...``) go; of a list, the first item not already in the artifact is
    kept; of prose, the first paragraph. In ``"rewrite"`` mode (a whole new text for
    `agentdescent.SingleSlot`) only fences, a lead-in line, trailing commentary and
    wrapping quotes go; headings stay.

    Refusals, in the order they are checked: ``"truncated"`` (``finish_reason`` says
    the per-call limit cut the reply off: a half rule is worse than none), ``"empty"``,
    ``"restated"`` (the rule, or the rewrite, is already in the artifact), ``"echoed"``
    (the task or the answer handed back), ``"not_a_rule"`` (fewer than two words, a
    question, or an assessment such as "The answer is incorrect."), ``"too_long"``
    (over ``max_chars``). A reply of NONE is ``"declined"``.

    Args:
        text: the reply.
        artifact: the rendered artifact the proposal is for.
        prompt: the task's prompt (to catch a reply that repeats it).
        output: the answer being improved on (to catch a reply that repeats it).
        finish_reason: the `Completion`'s ``finish_reason``.
        mode: ``"rule"`` or ``"rewrite"``.
        max_chars: the size limit (default 400 for a rule, 4000 for a rewrite).

    Returns:
        A `ParsedProposal`.
    """
    if mode not in _DEFAULT_MAX_CHARS:
        raise ValueError(f"parse_proposal(mode={mode!r}): use 'rule' or 'rewrite'")
    limit = _DEFAULT_MAX_CHARS[mode] if max_chars is None else max_chars
    text = text if isinstance(text, str) else ""
    if finish_reason in TRUNCATED_FINISH_REASONS:
        return ParsedProposal(None, "truncated")
    stripped = text.strip()
    if not stripped:
        return ParsedProposal(None, "empty")
    first = next(line.strip() for line in stripped.splitlines() if line.strip())
    if _NONE_REPLY.fullmatch(first):
        return ParsedProposal(None, "declined")
    if mode == "rewrite":
        return _parse_rewrite(stripped, artifact, prompt, output, limit)
    lines, body = _artifact_lines(artifact)
    candidates, dropped = _rule_candidates(stripped)
    cleaned = [c for c in (_drop_meta_sentences(_clean_line(c)) for c in candidates) if c]
    if not cleaned:
        # nothing but headings, labels and lead-ins: "# Playbook", "Rule:"
        return ParsedProposal(None, "not_a_rule", True)
    if any(_NONE_REPLY.fullmatch(c) for c in cleaned[:1]):
        return ParsedProposal(None, "declined", True)
    fresh = [c for c in cleaned if not _restates(c, lines, body)]
    if not fresh:
        return ParsedProposal(None, "restated", True)
    rule = " ".join(fresh[0].split())
    was_cleaned = dropped or len(cleaned) > 1 or rule != " ".join(stripped.split())
    if was_cleaned and rule[:1].islower() and rule[:1] != stripped[:1]:
        rule = rule[0].upper() + rule[1:]  # "A good rule would be: answer ..." -> "Answer ..."
    if _echoes(rule, prompt, output):
        return ParsedProposal(None, "echoed", was_cleaned)
    if _not_a_rule(rule):
        return ParsedProposal(None, "not_a_rule", was_cleaned)
    if len(rule) > limit:
        return ParsedProposal(None, "too_long", was_cleaned)
    return ParsedProposal(rule, "rule", was_cleaned)


def _parse_rewrite(stripped: str, artifact: str, prompt: str, output: str, limit: int) -> ParsedProposal:
    fenced = _FENCED.search(stripped)
    # a fenced block is the new text; what is around it is the model talking about it
    lines = _content_lines(fenced.group(1) if fenced else stripped, keep_headings=True)
    while lines and not lines[0]:
        lines.pop(0)
    if lines and (_PLEASANTRY.match(lines[0]) or (_LEAD_IN.match(lines[0]) and not _LEAD_IN.sub("", lines[0]).strip())):
        lines.pop(0)
    # trailing commentary: a last paragraph that talks about the rewrite
    paragraphs = "\n".join(lines).strip().split("\n\n")
    while len(paragraphs) > 1 and _META.match(paragraphs[-1].strip()):
        paragraphs.pop()
    new = _unwrap("\n\n".join(p.strip("\n") for p in paragraphs).strip())
    cleaned = new != stripped
    if not new.strip():
        return ParsedProposal(None, "not_a_rule", True)
    if _norm(new) == _norm(artifact):
        return ParsedProposal(None, "restated", cleaned)
    if _norm(new) in (_norm(output), _norm(prompt)):
        return ParsedProposal(None, "echoed", cleaned)
    if len(_WORD.findall(new)) < 2 or _ASSESSMENT.match(new):
        return ParsedProposal(None, "not_a_rule", cleaned)
    if len(new) > limit:
        return ParsedProposal(None, "too_long", cleaned)
    return ParsedProposal(new, "rule", cleaned)


# --------------------------------------------------------------------------- LLMAgent

_STAT_NAMES = ("solves", "solves_truncated", "proposals", "rules", "declined", *REFUSAL_KINDS, "cleaned")


class LLMAgent:
    """An `Agent` whose rollouts and proposals are calls to a `Provider`.

    **Solve.** By default the rendered artifact is the system message and the task
    (through ``solve_template``) the user message. A ``solve_template`` that uses
    ``{artifact}`` puts the artifact in the user message instead and sends no system
    message: use it for chat templates that drop system messages. An empty artifact
    (only white space and markdown headings, such as an `AppendRules` playbook with no
    rules yet: see `is_blank_artifact`) sends no system message and fills ``{artifact}``
    with ``""``.

    **Propose.** ``propose`` shows the model the artifact, the task, the output and its
    reward (through ``propose_template``) and turns the reply into exactly one proposal
    or ``None`` (`parse_proposal`). In ``proposal="rule"`` mode (the default, for
    `AppendRules` and `KeyedRules`) that is one general rule; in ``"rewrite"`` mode (for
    `SingleSlot`) the whole new text. Proposals stay small because the strategies turn a
    proposal into one diff, and small diffs are what the aggregator can verify and fuse.
    A reply cut off by the per-call limit, one that restates the artifact or echoes the
    task, one over ``max_proposal_chars`` and one that is not a rule are refused (None),
    each kind counted in `stats`.

    Every call's tokens land in ``agent.usage``, so an engine's ``max_tokens`` budget
    binds with real models. By default that meter *is* the provider's run meter (the
    provider records and the agent does not record again); with ``usage=`` given, or a
    provider without a ``usage`` meter, the agent records each call's usage itself
    (an offline estimate when the provider reports none).

    Thread-safe: the engines call ``solve`` and ``propose`` from several workers at once.

    Args:
        provider: anything with ``complete(messages, **options) -> Completion``.
        solve_template: ``str.format`` template of the solve user message; fields
            ``{prompt}`` (required), ``{task_id}``, ``{artifact}`` (moves the artifact
            from the system message into this message). Default `DEFAULT_SOLVE_TEMPLATE`.
        propose_template: template of the propose user message; fields ``{artifact}``,
            ``{prompt}`` and ``{output}`` (both required; ``{artifact}`` too in rewrite
            mode), ``{reward}`` (a float), ``{task_id}``. Default
            `DEFAULT_PROPOSE_TEMPLATE` (`DEFAULT_REWRITE_TEMPLATE` in rewrite mode).
        proposal: ``"rule"`` (one rule per proposal) or ``"rewrite"`` (the whole text).
        max_proposal_chars: the longest proposal accepted, in characters (default 400
            for a rule, 4000 for a rewrite); a longer one is refused as ``too_long``.
        model: passed as ``model=`` on every call (``None``: the provider's default).
        max_tokens: the **per-call** limit on each reply's length, passed as
            ``max_tokens=`` (``None``: the provider's default); an int > 0. Not the run's
            token budget: that is ``evolve(max_tokens=...)``.
        temperature: passed as ``temperature=`` (``None``: the provider's default); a
            number >= 0.
        usage: the meter to record into (see above).
        conversation: keep one conversation per worker for proposals across rounds, so
            the proposer remembers what it suggested before; each conversation is a
            `ContextManager` that compacts itself.
        context_max_tokens: the window of each conversation.
        context_options: more ``ContextManager`` arguments (``summary_call_mode``,
            ``summary_fork_min_span_ratio``, ``summary_trigger``, ...).

    Attributes:
        usage: the agent's token meter.
        empty_replies: proposals that came back empty (``stats()["empty"]``).
        declined: proposals the model answered with NONE (``stats()["declined"]``).

    Raises:
        TypeError: ``provider`` has no ``complete`` method, a template is not a str, or
            ``max_tokens`` / ``temperature`` / ``max_proposal_chars`` has the wrong type.
        ValueError: a template uses an unknown field or lacks a required one; a limit
            is out of range; ``proposal`` is not ``"rule"`` or ``"rewrite"``.
    """

    def __init__(
        self,
        provider: Provider,
        *,
        solve_template: str | None = None,
        propose_template: str | None = None,
        proposal: str = "rule",
        max_proposal_chars: int | None = None,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        usage: Usage | None = None,
        conversation: bool = False,
        context_max_tokens: int = 16000,
        context_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not callable(getattr(provider, "complete", None)):
            raise TypeError(
                f"LLMAgent(provider={provider!r:.80}): a provider needs a "
                "complete(messages, **options) method; wrap a plain function with "
                "agentdescent.providers.from_callable(fn)"
            )
        if proposal not in _DEFAULT_MAX_CHARS:
            raise ValueError(
                f"LLMAgent(proposal={proposal!r}): use 'rule' (one rule per proposal, for "
                "AppendRules/KeyedRules) or 'rewrite' (the whole text, for SingleSlot)"
            )
        self.provider = provider
        self.proposal = proposal
        self.solve_template = _check_template(
            DEFAULT_SOLVE_TEMPLATE if solve_template is None else solve_template,
            "solve_template", _SOLVE_FIELDS, _SOLVE_REQUIRED,
        )
        self._artifact_in_user = _uses_field(self.solve_template, "artifact")
        default_propose = DEFAULT_PROPOSE_TEMPLATE if proposal == "rule" else DEFAULT_REWRITE_TEMPLATE
        self.propose_template = _check_template(
            default_propose if propose_template is None else propose_template,
            "propose_template", _PROPOSE_FIELDS,
            _PROPOSE_REQUIRED if proposal == "rule" else _REWRITE_REQUIRED,
        )
        self.max_proposal_chars = _check_limit(
            _DEFAULT_MAX_CHARS[proposal] if max_proposal_chars is None else max_proposal_chars,
            "max_proposal_chars", "the longest proposal accepted, in characters",
        )
        if max_tokens is not None:
            _check_limit(
                max_tokens, "max_tokens",
                "the per-call limit on each reply's length in tokens (None: the provider's "
                "default; the run's token budget is evolve(max_tokens=...), not this)",
            )
        if temperature is not None:
            if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
                raise TypeError(
                    f"LLMAgent(temperature={temperature!r}): use a number >= 0, or None for "
                    "the provider's default"
                )
            if not 0 <= temperature < math.inf:
                raise ValueError(
                    f"LLMAgent(temperature={temperature!r}): use a number >= 0, or None for "
                    "the provider's default"
                )
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        provider_usage = getattr(provider, "usage", None)
        self._provider_meter = provider_usage if isinstance(provider_usage, Usage) else None
        if usage is None and isinstance(provider_usage, Usage):
            self.usage = provider_usage
            self._provider_records = True
        else:
            self.usage = usage if usage is not None else Usage()
            self._provider_records = provider_usage is self.usage
        self._lock = threading.Lock()
        self._stats = dict.fromkeys(_STAT_NAMES, 0)
        self.conversation = bool(conversation)
        if isinstance(context_max_tokens, bool) or not isinstance(context_max_tokens, int) or context_max_tokens < 256:
            raise ValueError(f"context_max_tokens={context_max_tokens!r}: use an int >= 256")
        self.context_max_tokens = context_max_tokens
        self.context_options = dict(context_options or {})
        self.conversations: dict[Any, Any] = {}
        if self.conversation:
            self._conversation_for(None)  # fail fast on bad context_options

    # -- counters ------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """What the agent did with the replies it got, as a consistent copy of its counters.

        Keys: ``solves`` (solve calls), ``solves_truncated`` (solve replies cut off by
        ``max_tokens``: an answer cut short usually scores 0), ``proposals`` (propose
        calls that returned), ``rules`` (proposals returned as a rule or rewrite),
        ``declined`` (the model answered NONE), one key per refusal kind in
        `REFUSAL_KINDS` (``truncated``, ``empty``, ``restated``, ``echoed``,
        ``too_long``, ``not_a_rule``), ``refused`` (their sum), and ``cleaned`` (rules
        returned after something was stripped from the reply). ``proposals == rules +
        declined + refused``.
        """
        with self._lock:
            out = dict(self._stats)
        out["refused"] = sum(out[k] for k in REFUSAL_KINDS)
        return out

    @property
    def empty_replies(self) -> int:
        """Proposals that came back empty (each treated as no change)."""
        with self._lock:
            return self._stats["empty"]

    @property
    def declined(self) -> int:
        """Proposals the model answered with NONE."""
        with self._lock:
            return self._stats["declined"]

    def _bump(self, name: str) -> int:
        with self._lock:
            self._stats[name] += 1
            return self._stats[name]

    # -- calls ---------------------------------------------------------------------------

    def _conversation_for(self, key: Any) -> Any:
        """The compacting conversation of one worker (created on first use)."""
        with self._lock:
            if key not in self.conversations:
                self.conversations[key] = ContextManager(
                    self.provider, max_tokens=self.context_max_tokens, **self.context_options
                )
            return self.conversations[key]

    def __repr__(self) -> str:
        return f"LLMAgent(provider={self.provider!r}, model={self.model!r})"

    def _options(self) -> dict[str, Any]:
        opts = {"model": self.model, "max_tokens": self.max_tokens, "temperature": self.temperature}
        return {k: v for k, v in opts.items() if v is not None}

    def _call(self, messages: list[dict[str, str]]) -> Completion:
        result = self.provider.complete(messages, **self._options())
        if isinstance(result, str):
            result = Completion(result)
        if not isinstance(result, Completion):
            raise TypeError(
                f"LLMAgent: {self.provider!r:.80}.complete() returned a "
                f"{type(result).__name__}; a provider must return a Completion"
            )
        text = result.text if isinstance(result.text, str) else ""
        if not self._provider_records:
            call = result.usage
            if self._provider_meter is not None and call is not None:
                self.usage.mirror(call)  # the provider's own meter already counted it
            else:
                if call is None:
                    prompt = "\n\n".join(m["content"] for m in messages)
                    call = Usage(estimate_tokens(prompt), estimate_tokens(text), 0, 1)
                self.usage.add(call)
        return Completion(text, result.usage, result.finish_reason, tuple(result.tool_calls or ()))

    def _converse(self, user: str) -> Completion:
        """Send ``user`` inside this worker's conversation (compacted when it grows)."""
        worker = current_worker()
        key = worker if worker is not None else f"thread-{threading.get_ident()}"
        cm = self._conversation_for(key)
        cm.add_message({"role": "user", "content": user})
        view = cm.get_messages_for_request()
        reply = self._call(view)
        cm.note_request_sent(view, model=self.model)
        cm.add_message({"role": "assistant", "content": reply.text})
        return reply

    def messages_for_solve(self, rendered: str, task: Task) -> list[dict[str, str]]:
        """The messages ``solve`` sends for ``task`` (to check where the artifact goes).

        The artifact is the system message, unless ``solve_template`` uses
        ``{artifact}``; an empty artifact (`is_blank_artifact`) sends no system message.
        """
        blank = is_blank_artifact(rendered)
        fields = {"prompt": task.prompt, "task_id": task.id}
        if self._artifact_in_user:
            user = self.solve_template.format(artifact="" if blank else rendered, **fields)
            return [{"role": "user", "content": user.strip() if blank else user}]
        messages = [] if blank else [{"role": "system", "content": rendered}]
        messages.append({"role": "user", "content": self.solve_template.format(**fields)})
        return messages

    def solve(self, rendered: str, task: Task) -> str:
        """Run ``task`` with the rendered artifact (see `messages_for_solve` for where it goes).

        Returns:
            The model's reply (possibly empty). A reply cut off by ``max_tokens`` is
            returned as it is and counted (``stats()["solves_truncated"]``, with a
            warning at the 1st, 10th, 100th... one).

        Raises:
            ProviderError: the provider failed (after its own retries).
        """
        reply = self._call(self.messages_for_solve(rendered, task))
        self._bump("solves")
        if reply.finish_reason in TRUNCATED_FINISH_REASONS:
            n = self._bump("solves_truncated")
            if _is_power_of_ten(n):
                log.warning(
                    "LLMAgent: a solve reply was cut off by the per-call limit max_tokens=%s "
                    "(%d so far, model %r); a cut-off answer usually scores 0. Raise "
                    "LLMAgent(max_tokens=...) (the per-call limit, not evolve's budget)",
                    self.max_tokens, n, self.model,
                )
        return reply.text

    def propose(self, rendered: str, task: Task, output: str, reward: float) -> str | None:
        """Ask for one general rule (or, in rewrite mode, a new text) that would have helped.

        The reply goes through `parse_proposal`: a reply of NONE (any case, with
        punctuation or markup around it, or as its first line) is no change
        (``declined``); headings, list markers, labels, quotes and meta-commentary are
        stripped; a reply cut off by ``max_tokens``, one that restates the artifact or
        echoes the task, one over ``max_proposal_chars`` and one that is not a rule are
        refused. Every outcome is counted in `stats`. Empty and cut-off replies also log a
        warning at their 1st, 10th, 100th... occurrence (usually ``max_tokens`` is too
        small, for a reasoning model especially).

        Returns:
            The rule (or rewritten text), or ``None`` for no change.

        Raises:
            ProviderError: the provider failed (after its own retries).
        """
        blank = is_blank_artifact(rendered)
        user = self.propose_template.format(
            artifact="(empty)" if blank else rendered.strip(),
            prompt=task.prompt,
            output=output,
            reward=float(reward),
            task_id=task.id,
        )
        reply = self._converse(user) if self.conversation else self._call([{"role": "user", "content": user}])
        parsed = parse_proposal(
            reply.text, artifact="" if blank else rendered, prompt=task.prompt, output=output,
            finish_reason=reply.finish_reason, mode=self.proposal, max_chars=self.max_proposal_chars,
        )
        with self._lock:
            self._stats["proposals"] += 1
            self._stats["rules" if parsed.kind == "rule" else parsed.kind] += 1
            if parsed.kind == "rule" and parsed.cleaned:
                self._stats["cleaned"] += 1
            n = self._stats["rules" if parsed.kind == "rule" else parsed.kind]
        if parsed.kind in ("empty", "truncated") and _is_power_of_ten(n):
            what = "empty" if parsed.kind == "empty" else "cut off by the per-call limit"
            log.warning(
                "LLMAgent: %d proposal(s) so far came back %s (model %r, max_tokens=%s); "
                "each is treated as no change. If this keeps happening, raise "
                "LLMAgent(max_tokens=...), the per-call limit (a reasoning model may spend "
                "it all before answering), or check propose_template",
                n, what, self.model, self.max_tokens,
            )
        elif parsed.kind != "rule":
            log.debug("LLMAgent: proposal refused (%s): %.120r", parsed.kind, reply.text)
        return parsed.text


def _check_limit(value: Any, knob: str, meaning: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"LLMAgent({knob}={value!r}): {knob} is {meaning}; use an int > 0")
    if value < 1:
        raise ValueError(f"LLMAgent({knob}={value!r}): {knob} is {meaning}; use an int > 0")
    return value
