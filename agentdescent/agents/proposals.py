"""Reply parsing: how a model's reply becomes exactly one proposal, or ``None`` with the reason.

This module owns what counts as a proposal in each mode — one general rule (``"rule"``,
for `agentdescent.AppendRules` and `agentdescent.KeyedRules`), one whole new text
(``"rewrite"``, for `agentdescent.SingleSlot`), or code edits (``"edit"``, for
`agentdescent.code.FileTree`, which parses the blocks itself) — and the refusal kinds a reply that is
neither is counted under (`REFUSAL_KINDS`). Pure text processing: it must not call a
model, log, or hold state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidArgument

#: Default ``max_chars`` per proposal mode.
DEFAULT_MAX_CHARS = {"rule": 400, "rewrite": 4000, "edit": 20000}

__all__ = ["DEFAULT_MAX_CHARS", "REFUSAL_KINDS", "TRUNCATED_FINISH_REASONS", "ParsedProposal", "is_blank_artifact", "parse_proposal"]

#: ``Completion.finish_reason`` values that mean the per-call limit cut the reply off:
#: ``"length"`` (OpenAI-compatible servers) and ``"max_tokens"`` (Anthropic).
TRUNCATED_FINISH_REASONS = frozenset({"length", "max_tokens"})

#: Why `LLMAgent.propose` returned ``None`` for a reply, one counter each in
#: `LLMAgent.stats` (``"declined"``, the model answering NONE, is counted apart: it is the
#: model's choice, not a refusal).
REFUSAL_KINDS = ("truncated", "empty", "restated", "echoed", "too_long", "not_a_rule")

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
        example: for a refused reply, the reply itself on one line, cut short (what
            `agentdescent.LLMAgent.explain_proposal` hands the run's card fates); else "".
    """

    text: str | None
    kind: str
    cleaned: bool = False
    example: str = ""


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
    wrapping quotes go; headings stay. In ``"edit"`` mode (code edits for
    `agentdescent.code.FileTree`) the reply is passed on as it is, to be parsed strictly
    by the tree (an edit that does not apply is refused there, counted as
    ``edits_refused``); only a cut-off, empty, NONE or over-long reply is stopped here.

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
        mode: ``"rule"``, ``"rewrite"`` or ``"edit"``.
        max_chars: the size limit (default 400 for a rule, 4000 for a rewrite, 20000 for
            edits).

    Returns:
        A `ParsedProposal`.
    """
    if mode not in DEFAULT_MAX_CHARS:
        raise InvalidArgument(f"parse_proposal(mode={mode!r}): use 'rule', 'rewrite' or 'edit'")
    limit = DEFAULT_MAX_CHARS[mode] if max_chars is None else max_chars
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
    if mode == "edit":
        return ParsedProposal(None, "too_long") if len(stripped) > limit else ParsedProposal(stripped, "rule")
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
