"""The evidence pool: cards a merge set aside, kept so that later merges can re-try them.

Cards the staleness filter discarded, the weaker sides of contradictions, survivors that
lost to a better single and cards the budget governor did not allocate are not thrown
away: they go to a bounded pool (oldest evicted first), and each later merge re-tries a
few of them (`agentdescent.merge.aggregator.AggregatorConfig.pool_draw`) through the same
pipeline as new cards. This module owns which pooled cards a decision may draw and how a
finished decision books them back; the aggregator decides what happens to them.

It must not evaluate, commit, or read anything but the cards, the head and the policy.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..budget.merge_budget import NO_BUDGET
from ..types import EvidenceCard, Task, vv_staleness
from .staleness import StaleAction, StalenessPolicy

__all__ = ["EvidencePool", "PoolEntry"]


@dataclass(frozen=True)
class PoolEntry:
    """A card in the evidence pool and what the pool remembers of it.

    Args:
        card: the original card (its ``base_version`` is kept, so staleness on a re-try
            is measured from where the diff was built).
        retries: times it has been drawn and came back.
        rejected_on: the head version whose rebase re-verification rejected it, if that
            is why it is here (a deterministic evaluator would say the same again there).
        stale: it was counted as a stale discard when it arrived (so a later commit of
            it recovers a rollout counted as wasted: the ``pool_recovered`` counter).
    """

    card: EvidenceCard
    retries: int = 0
    rejected_on: int | None = None
    stale: bool = False



class EvidencePool:
    """The bounded pool of set-aside cards, oldest first (read and written from the merging thread).

    Args:
        size: entries kept; the oldest is evicted first.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: collections.deque[PoolEntry] = collections.deque(maxlen=size)

    def cards(self) -> tuple[EvidenceCard, ...]:
        """The pooled cards, oldest first (a snapshot)."""
        return tuple(entry.card for entry in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def draw(self, artifact_id: str, version: int, head_state: Mapping[str, str],
             head_versions: Mapping[str, int], alpha: int, batch: Sequence[EvidenceCard], *,
             policy: StalenessPolicy, draw: int, max_retries: int,
             evaluates: Callable[[EvidenceCard], bool] = NO_BUDGET.evaluates,
             ) -> tuple[list[PoolEntry], dict[int, StaleAction]]:
        """The pooled cards one decision re-tries; reads the pool, never changes it.

        A card qualifies when it targets ``artifact_id``, gets its held-out evaluation
        (``evaluates(card)``, the merge's budget; by default the budget's answer recorded on
        the card, ``card.allocated``: the governor's call stands), has been re-tried fewer than ``max_retries`` times, did not fail
        the rebase re-verification on this very head ``version``, writes no key the
        batch (or a card drawn before it) writes, is not already in the head, and is not
        discarded outright by ``policy`` (eta measured from the card's own base version).

        Returns:
            The drawn entries, oldest first, and the staleness action of each drawn card
            (keyed by ``id(card)``), so the policy decides once per card per decision.
        """
        drawn: list[PoolEntry] = []
        actions: dict[int, StaleAction] = {}
        if draw == 0:
            return drawn, actions
        taken = {key for c in batch for key in c.diff.ops}
        for entry in self._entries:
            if len(drawn) >= draw:
                break
            diff = entry.card.diff
            if (
                diff.target != artifact_id
                or not evaluates(entry.card)  # the budget's call stands
                or entry.retries >= max_retries
                or entry.rejected_on == version
                or not taken.isdisjoint(diff.ops)
                or diff.is_noop(head_state)
            ):
                continue
            eta = vv_staleness(head_versions, entry.card.base_version)
            action = policy.decide(eta, alpha, diff.contract_breaking)
            if action is StaleAction.DISCARD:
                continue
            drawn.append(entry)
            actions[id(entry.card)] = action
            taken.update(diff.ops)
        return drawn, actions

    def settle(self, drawn: Sequence[PoolEntry], back: Iterable[EvidenceCard], *,
               rejected: Iterable[EvidenceCard], stale: Iterable[EvidenceCard], head_version: int) -> int:
        """Book a finished decision: drawn cards leave, ``back`` (set aside again, or new) enters.

        A drawn card comes back one retry older if it is in ``back``, and not at all if it
        was measured (committed, or rejected on held-out evidence). Returns how many drawn
        cards came back.
        """
        by_id = {id(entry.card): entry for entry in drawn}
        if by_id:
            kept = [entry for entry in self._entries if id(entry.card) not in by_id]
            self._entries = collections.deque(kept, maxlen=self.size)
        rejected_ids = {id(card) for card in rejected}
        stale_ids = {id(card) for card in stale}
        returned = 0
        for card in back:
            prior = by_id.get(id(card))
            returned += prior is not None
            self._entries.append(PoolEntry(
                card,
                retries=prior.retries + 1 if prior is not None else 0,
                rejected_on=head_version if id(card) in rejected_ids else None,
                stale=prior.stale if prior is not None else id(card) in stale_ids,
            ))
        return returned

    def state(self) -> list[dict[str, Any]]:
        """The pool, JSON-ready, oldest first (saved with a run's progress)."""
        return [
            {"card": e.card.to_json(), "retries": e.retries, "rejected_on": e.rejected_on, "stale": e.stale}
            for e in self._entries
        ]

    def restore(self, entries: Sequence[Mapping[str, Any]], tasks: Mapping[str, Task]) -> None:
        """Put back a `state` (a resumed run draws on what the killed one had pooled)."""
        self._entries.extend(
            PoolEntry(EvidenceCard.from_json(e["card"], tasks), retries=int(e["retries"]),
                      rejected_on=e["rejected_on"], stale=bool(e["stale"]))
            for e in entries
        )
