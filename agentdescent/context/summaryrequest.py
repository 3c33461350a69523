"""The summary call's request: standalone or forked off the prefix last sent, and its size.

This module owns what a `ContextManager` sends to have a span summarised: the tags that
mark a summary request and a summary message, the budget a summary gets, the record of the
request last reported through ``note_request_sent`` (the prefix a fork re-reads, with its
tools, model and tokens), why a fork cannot reuse that prefix (the first reason, or none),
and the two requests themselves: the span alone as a transcript, or the exact prefix plus
one instruction. Whether an aligned fork is worth it is `agentdescent.context.forkrule`'s.

It is pure: it must not call the provider, log, count anything, or edit a message it was
given (a request holds copies).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..messages import clone, render_for_transcript, unanswered_calls
from ..tokens import TokenCounter, tools_tokens

__all__ = [
    "SUMMARY_MESSAGE_HEADER",
    "SUMMARY_REQUEST_TAG",
    "fork_misalignment",
    "fork_request",
    "header_tokens",
    "record_sent",
    "standalone_request",
    "summary_budget",
]

#: Every summary request's instruction starts with this tag, so a transcript, a log or a
#: simulator can tell summarizer calls from the agent's own turns.
SUMMARY_REQUEST_TAG = "[context compaction]"

#: Header of the user message that replaces a summarised span in every later view.
SUMMARY_MESSAGE_HEADER = "[Summary of earlier conversation]"


@dataclass
class _Sent:
    """The request last reported through ``note_request_sent``."""

    messages: list[dict[str, Any]]
    ids: list[str | None]
    tools: Any
    model: str | None
    tokens: int


def summary_budget(span_tokens: int) -> int:
    """The ``max_tokens`` a summary of ``span_tokens`` gets: a quarter, at least 32."""
    return max(32, span_tokens // 4)


def header_tokens(counter: TokenCounter) -> int:
    """Tokens of a summary message's header, as ``counter`` counts it."""
    return int(counter.count_message({"role": "user", "content": SUMMARY_MESSAGE_HEADER}))


def record_sent(
    messages: Sequence[Mapping[str, Any]] | None,
    reference: list[tuple[str, dict[str, Any], int]],
    *,
    tools: Sequence[Mapping[str, Any]] | None,
    model: str | None,
    counter: TokenCounter,
) -> _Sent:
    """The record of a request that went out: ``messages`` matched against the view ``reference``.

    Args:
        messages: the messages sent; None means every entry of ``reference``.
        reference: the view the request was built from (``(id, message, tokens)`` entries).
        tools: the ``tools`` option sent with them, if any.
        model: the ``model`` option sent with them, if any.
        counter: counts the messages that are not view entries, and the tools.
    """
    # Messages that are view entries are stored by reference (history is never
    # edited) with their known token counts; anything else is copied and counted.
    sent: list[dict[str, Any]] = []
    ids: list[str | None] = []
    tokens = 0
    if messages is None:
        for entry_id, message, message_tokens in reference:
            sent.append(message)
            ids.append(entry_id)
            tokens += message_tokens
    else:
        cursor = 0
        for message in messages:
            found = None
            for k in range(cursor, len(reference)):
                if reference[k][1] == message:
                    found, cursor = k, k + 1
                    break
            if found is None:
                sent.append(clone(dict(message)))
                ids.append(None)
                tokens += int(counter.count_message(sent[-1]))
            else:
                sent.append(reference[found][1])
                ids.append(reference[found][0])
                tokens += reference[found][2]
    tools_copy = clone(list(tools)) if tools is not None else None
    tokens += tools_tokens(tools_copy, counter)
    return _Sent(messages=sent, ids=ids, tools=tools_copy, model=model, tokens=tokens)


def fork_misalignment(sent: _Sent | None, span_ids: list[str], summary_model: str | None) -> tuple[str, str] | None:
    """The first reason a fork cannot reuse the recorded prefix, or None if it can."""
    if sent is None:
        return ("nothing-sent", "no request has been reported through note_request_sent(), "
                "so there is no cached prefix to fork from; call it after every request")
    missing = [i for i in span_ids if i not in sent.ids]
    if missing:
        return ("span-not-in-prefix", f"messages {missing[:5]} of the span were not in the last "
                "request reported through note_request_sent(); report each request after sending it")
    unanswered = unanswered_calls(sent.messages)
    if unanswered:
        return ("unanswered-tool-calls", f"the recorded prefix ends with unanswered tool calls "
                f"{unanswered[:5]}; a summarize instruction cannot follow them")
    if summary_model is not None and summary_model != sent.model:
        return ("model-mismatch", f"summary_model={summary_model!r} differs from the model "
                f"the prefix was sent to ({sent.model!r}); a cache is per model")
    return None


def standalone_request(
    span: Sequence[dict[str, Any]], budget: int, summary_model: str | None, sent: _Sent | None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The span's messages alone, as a transcript under one instruction (the model: ``summary_model``, else the prefix's)."""
    lines = []
    for message in span:
        lines.append(render_for_transcript(message))
    instruction = (
        f"{SUMMARY_REQUEST_TAG} Summarize the conversation excerpt below in at most {budget} "
        "tokens. Keep the facts, decisions, open questions, names, numbers and tool results "
        "that later turns may need. Reply with the summary only.\n\n<excerpt>\n"
        + "\n".join(lines)
        + "\n</excerpt>"
    )
    options: dict[str, Any] = {"max_tokens": budget}
    model = summary_model if summary_model is not None else (sent.model if sent else None)
    if model is not None:
        options["model"] = model
    return [{"role": "user", "content": instruction}], options


def fork_request(sent: _Sent | None, span_ids: list[str], budget: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The recorded prefix (same tools, same model) plus one instruction naming the span's positions in it."""
    assert sent is not None
    first = sent.ids.index(span_ids[0]) + 1
    last = sent.ids.index(span_ids[-1]) + 1
    instruction = (
        f"{SUMMARY_REQUEST_TAG} Summarize messages {first} to {last} of the conversation above "
        f"(counting from 1) in at most {budget} tokens. Keep the facts, decisions, open "
        "questions, names, numbers and tool results that later turns may need. Reply with the "
        "summary only."
    )
    messages = [clone(m) for m in sent.messages] + [{"role": "user", "content": instruction}]
    options: dict[str, Any] = {"max_tokens": budget}
    if sent.model is not None:
        options["model"] = sent.model
    if sent.tools is not None:
        options["tools"] = clone(sent.tools)
    return messages, options
