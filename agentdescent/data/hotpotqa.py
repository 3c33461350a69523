"""HotpotQA rows in one shape, whichever source they came from.

This module owns `normalize_hotpotqa_row`: the original HotpotQA files (and so ModelScope)
store ``context`` and ``supporting_facts`` as lists of pairs, the Hugging Face
datasets-server column-wise; both loaders return the datasets-server's shape, so rewards
and prompts are written once. It is pure: it must not do I/O, and must never mutate the
row it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["normalize_hotpotqa_row"]


def normalize_hotpotqa_row(row: dict[str, Any]) -> dict[str, Any]:
    """A HotpotQA row in the datasets-server shape, whichever source it came from.

    The original HotpotQA files (and so ModelScope) store ``context`` as
    ``[[title, [sentence, ...]], ...]`` and ``supporting_facts`` as
    ``[[title, sentence_index], ...]``; the Hugging Face datasets-server stores them
    column-wise as ``{"title": [...], "sentences": [[...], ...]}`` and
    ``{"title": [...], "sent_id": [...]}``. Normalising to one shape lets rewards and
    prompts be written once. Only fields in exactly the list-of-pairs shape change; any
    other row (another dataset, or one already normalised) comes back unchanged.

    Args:
        row: one dataset row.

    Returns:
        A new dict when something changed, else ``row`` itself. The input is never mutated.
    """
    if not isinstance(row, dict):
        return row
    out = row
    context = row.get("context")
    if _is_pairs(context, lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v)):
        out = dict(out)
        out["context"] = {
            "title": [title for title, _ in context],
            "sentences": [list(sentences) for _, sentences in context],
        }
    facts = row.get("supporting_facts")
    if _is_pairs(facts, lambda v: isinstance(v, int) and not isinstance(v, bool)):
        out = dict(out) if out is row else out
        out["supporting_facts"] = {
            "title": [title for title, _ in facts],
            "sent_id": [index for _, index in facts],
        }
    return out


def _is_pairs(value: object, second_ok: Callable[[object], bool]) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(pair, (list, tuple))
            and len(pair) == 2
            and isinstance(pair[0], str)
            and second_ok(pair[1])
            for pair in value
        )
    )
