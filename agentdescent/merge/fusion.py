"""Conflict resolution and fusion of concurrent diffs.

This module owns three pure operations on evidence cards: find contradictions (the
same key written with different values), keep the better side of each contradiction on
the cheap score, and fuse the survivors into one union diff; plus the ranking used by
the fusion tournament. Scores come in through a callable; this module never evaluates,
reads the ledger or draws a random number, and ties always break the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ..errors import InvalidArgument
from ..textedits import merge_writes
from ..types import Diff, EvidenceCard, stable_hash
from .strategies import same_value

__all__ = ["contradicts", "fusable", "rank_cards", "resolve_conflicts", "union_diff", "union_members"]


def _agree(key: str, a: Diff, b: Diff) -> bool:
    """Do ``a`` and ``b`` write ``key`` compatibly: the same value, or disjoint edits of it?"""
    x, y = a.ops[key], b.ops[key]
    if same_value(key, x, y):
        return True
    return (isinstance(x, str) and isinstance(y, str)
            and merge_writes(x, a.edits.get(key, ()), y, b.edits.get(key, ())) is not None)


def contradicts(a: Diff, b: Diff) -> bool:
    """True when the two diffs write at least one common key with different values.

    Values under a content-addressed rule key that differ only in case are the same rule
    (`agentdescent.merge.strategies.same_value`), not a contradiction; nor are two edited
    writes of one key whose edits are disjoint (`agentdescent.textedits.merge_writes`:
    two code edits in different places of one file).
    """
    small, large = (a, b) if len(a.ops) <= len(b.ops) else (b, a)
    return any(k in large.ops and not _agree(k, small, large) for k in small.ops)


def _delta_key(card: EvidenceCard) -> float:
    d = card.before_after_delta
    return d if d is not None and math.isfinite(d) else -math.inf


def rank_cards(
    cards: Sequence[EvidenceCard], score: Callable[[Diff], float]
) -> list[tuple[float, EvidenceCard]]:
    """Rank cards best first: cheap score, then self-verify delta, then arrival order.

    Args:
        cards: the candidates, in arrival order.
        score: the cheap score of the head with a diff applied.

    Returns:
        ``(score, card)`` pairs, best first.
    """
    scored = [(score(c.diff), _delta_key(c), -i, c) for i, c in enumerate(cards)]
    scored.sort(key=lambda t: (t[0], t[1], t[2]), reverse=True)
    return [(s, c) for s, _, _, c in scored]


def resolve_conflicts(
    cards: Sequence[EvidenceCard], score: Callable[[Diff], float]
) -> tuple[list[EvidenceCard], list[EvidenceCard]]:
    """Keep the better card of every contradicting pair.

    Cards are visited in arrival order. A card that contradicts survivors replaces
    them only if it beats every one of them (cheap score, then self-verify delta; the
    earlier card wins an exact tie); otherwise it is dropped.

    Args:
        cards: the candidates, in arrival order.
        score: the cheap score of the head with a diff applied.

    Returns:
        ``(survivors, dropped)``, each in arrival order.
    """
    cache: dict[str, float] = {}

    def key(card: EvidenceCard) -> tuple[float, float]:
        if card.diff.diff_id not in cache:
            cache[card.diff.diff_id] = score(card.diff)
        return (cache[card.diff.diff_id], _delta_key(card))

    survivors: list[EvidenceCard] = []
    dropped: list[EvidenceCard] = []
    writers: dict[str, list[EvidenceCard]] = {}  # key -> survivors writing it
    for card in cards:
        candidates = {id(s): s for k in card.diff.ops for s in writers.get(k, ())}
        rivals = [s for s in candidates.values() if contradicts(s.diff, card.diff)]
        if rivals and not all(key(card) > key(r) for r in rivals):
            dropped.append(card)
            continue
        for r in rivals:
            survivors = [s for s in survivors if s is not r]
            dropped.append(r)
            for k in r.diff.ops:
                writers[k] = [s for s in writers[k] if s is not r]
        survivors.append(card)
        for k in card.diff.ops:
            writers.setdefault(k, []).append(card)
    order = {id(c): i for i, c in enumerate(cards)}
    survivors.sort(key=lambda c: order[id(c)])
    dropped.sort(key=lambda c: order[id(c)])
    return survivors, dropped


def union_diff(diffs: Sequence[Diff], target: str) -> Diff:
    """Fuse non-contradicting diffs into one diff (first writer's value kept on equal keys).

    Two edited writes of one key with disjoint edits fuse into the text holding both, and
    the union keeps both edit lists (in order) for that key.

    Args:
        diffs: the diffs to fuse, in arrival order; they must not contradict.
        target: the artifact id.

    Raises:
        ValueError: two of the diffs contradict (resolve conflicts first).
    """
    ops: dict[str, str | None] = {}
    edits: dict[str, tuple[tuple[str, str], ...]] = {}
    for d in diffs:
        for k, v in d.ops.items():
            if k in ops and not same_value(k, ops[k], v):
                held = ops[k]
                merged = (merge_writes(held, edits.get(k, ()), v, d.edits.get(k, ()))
                          if isinstance(held, str) and isinstance(v, str) else None)
                if merged is None:
                    raise InvalidArgument(
                        f"cannot fuse: diffs write key {k!r} with different values; "
                        "run resolve_conflicts() first"
                    )
                ops[k], edits[k] = merged, edits[k] + d.edits[k]
                continue
            if k not in ops and k in d.edits:
                edits[k] = d.edits[k]
            ops.setdefault(k, v)
    diff_id = f"u{stable_hash(target, [d.diff_id for d in diffs]):016x}"
    breaking = any(d.contract_breaking for d in diffs)
    return Diff(diff_id, target, ops, contract_breaking=breaking, author="fusion", edits=edits)


def fusable(cards: Sequence[EvidenceCard]) -> tuple[list[EvidenceCard], list[EvidenceCard]]:
    """``(fitting, left_out)``: each card, in order, that fuses with the fitting ones before it.

    Non-contradicting pairs always fuse, except edited writes of one key: two edits may
    each be disjoint from a third and still overlap each other's result once all three
    are applied (`agentdescent.textedits.merge_writes` decides pairs). A card left out
    keeps its evidence for a later merge.
    """
    fitting: list[EvidenceCard] = []
    left_out: list[EvidenceCard] = []
    union: Diff | None = None
    for card in cards:
        try:  # the union so far, fused with one more: each card is merged once
            union = card.diff if union is None else union_diff([union, card.diff], card.diff.target)
        except InvalidArgument:
            left_out.append(card)
            continue
        fitting.append(card)
    return fitting, left_out


def union_members(survivors: Sequence[EvidenceCard]) -> list[EvidenceCard]:
    """The survivors that may join a union.

    When some survivor's self-verify measured a gain, a survivor whose self-verify ran
    and measured no gain (delta <= 0) stays out: it brought no evidence of helping, and
    inside a union that beats the head it would ride in on its partners' evidence
    (neutral-looking wrong rules do exactly that). Cards whose self-verify was skipped
    or never run are not judged by it.
    """
    def measured_no_gain(c: EvidenceCard) -> bool:
        d = c.before_after_delta
        return c.self_verified and d is not None and d <= 0

    if not any(c.self_verified and (c.before_after_delta or 0) > 0 for c in survivors):
        return list(survivors)
    return [c for c in survivors if not measured_no_gain(c)]
