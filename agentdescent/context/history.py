"""A compacting conversation's history: messages with stable ids, the summaries, the view.

This module owns `History`: the append-only list of messages a `ContextManager` keeps (each
with its id, ``"m1"``, ``"m2"``, ..., and its token count), the summaries that replace
spans of it (``"s1"``, ...), the view a request is built from (leading system messages,
then the summaries, then the messages not yet summarised), the grouping that keeps a tool
call with its results, and the choice of the span compaction takes. The summary call
itself, and how a summary is sized, are `agentdescent.context.summaryrequest`'s.

It must not call a model, log, or edit a message it holds: history only grows, and every
view is built from it. It takes no lock; its owner holds one around every call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..messages import call_ids, is_tool_call_message
from ..tokens import TokenCounter
from .summaryrequest import summary_budget

__all__ = ["History"]


@dataclass
class _Summary:
    id: str
    start: int  # first history index covered
    end: int  # one past the last history index covered
    message: dict[str, Any]
    tokens: int


class History:
    """The append-only history of one conversation, its summaries and its view.

    Messages are stored as given (already checked and copied by the caller) and never
    edited or removed; a summary covers a contiguous span of them, and every later view
    shows the summary in the span's place.

    Attributes:
        messages: every message, in order of arrival.
        ids: the id of each message (``"m1"``, ``"m2"``, ...).
        tokens: the token count of each message.
        summaries: the summaries made so far, oldest first.
        covered_upto: one past the last history index a summary covers.
    """

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.ids: list[str] = []
        self.tokens: list[int] = []
        self.summaries: list[_Summary] = []
        self.covered_upto = 0

    def add(self, stored: dict[str, Any], counter: TokenCounter) -> str:
        """Append ``stored``, counted by ``counter``, and return its new id."""
        message_id = f"m{len(self.messages) + 1}"
        self.messages.append(stored)
        self.ids.append(message_id)
        self.tokens.append(int(counter.count_message(stored)))
        return message_id

    def pinned_end(self) -> int:
        end = 0
        while end < len(self.messages) and self.messages[end].get("role") in ("system", "developer"):
            end += 1
        return end

    def raw_start(self) -> int:
        return max(self.pinned_end(), self.covered_upto)

    def view_entries(self) -> list[tuple[str, dict[str, Any], int]]:
        entries = [(self.ids[i], self.messages[i], self.tokens[i]) for i in range(self.pinned_end())]
        entries += [(s.id, s.message, s.tokens) for s in self.summaries]
        start = self.raw_start()
        entries += [(self.ids[i], self.messages[i], self.tokens[i]) for i in range(start, len(self.messages))]
        return entries

    def groups(self, start: int) -> tuple[list[list[int]], int | None]:
        """Contiguous groups of history indices from ``start``; a tool call and its results share one.

        Returns:
            The groups, and the index of the first group still holding an unanswered
            tool call (None if every call is answered).
        """
        groups: list[list[int]] = []
        owner: dict[str, int] = {}  # open call id -> group index
        for i in range(start, len(self.messages)):
            message = self.messages[i]
            if message.get("role") == "tool" and str(message.get("tool_call_id")) in owner:
                g = owner[str(message["tool_call_id"])]
                # Merge everything from the call's group up to here, so the pair is contiguous.
                merged = [idx for group in groups[g:] for idx in group] + [i]
                del groups[g:]
                groups.append(merged)
                for call_id, gi in list(owner.items()):
                    if gi >= g:
                        owner[call_id] = g
                del owner[str(message["tool_call_id"])]
                continue
            groups.append([i])
            if is_tool_call_message(message):
                for call_id in call_ids(message):
                    owner[call_id] = len(groups) - 1
        return groups, (min(owner.values()) if owner else None)

    def select_span(self, budget: float, target: float) -> list[int] | None:
        """The history indices compaction summarises next, or None when no span is eligible.

        Args:
            budget: the tokens of the recent tail that stay verbatim
                (``protected_recent × max_tokens``; the newest group always does).
            target: the view's size compaction aims for (``target_usage × max_tokens``).
        """
        start = self.raw_start()
        groups, open_group = self.groups(start)
        if not groups:
            return None
        limit = len(groups) - 1  # the newest group is always protected
        protected = sum(self.tokens[i] for i in groups[-1])
        while limit > 0:
            group_tokens = sum(self.tokens[i] for i in groups[limit - 1])
            if protected + group_tokens > budget:
                break
            protected += group_tokens
            limit -= 1
        if open_group is not None:
            # A group with an unanswered call stays: summarising it would orphan a late result.
            limit = min(limit, open_group)
        eligible = groups[:limit]
        if not eligible:
            return None
        need = sum(tokens for _, _, tokens in self.view_entries()) - target
        span: list[int] = []
        span_tokens = 0
        for group in eligible:
            span.extend(group)
            span_tokens += sum(self.tokens[i] for i in group)
            if span_tokens - summary_budget(span_tokens) >= need:
                break
        return span

    def cover(self, span: list[int], message: dict[str, Any], tokens: int) -> None:
        """Record ``message`` (of ``tokens``) as the summary of the history indices ``span``."""
        self.summaries.append(
            _Summary(
                id=f"s{len(self.summaries) + 1}", start=span[0], end=span[-1] + 1,
                message=message, tokens=tokens,
            )
        )
        self.covered_upto = span[-1] + 1
