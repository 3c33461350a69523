"""What became of each proposal and each evidence card, recorded once where it was decided: `CardFate`.

This module owns the one record of a card's end (`CardFate`, of a `FateKind`), the
thread-safe log workers write the refused proposals into (`FateLog`) and the counts every
view reads (`count_fates`). A card's fate is written by the step that decides it: a worker
for a proposal that never became a card, `agentdescent.merge.prepare` for the trust region,
staleness, no-op, veto, conflict and fusion steps, `agentdescent.merge.aggregator` for the
allocation, the self-verify gate and the measured outcome. `outcomes()`, ``AsyncStats``,
``RoundInfo.proposals``, ``rounds.jsonl``, ``agentdescent status`` and the report count
these records; none keeps a second counter of its own. It must not import any other module
of the package, hold global state, or do I/O.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PROPOSAL_FATES", "CardFate", "FateKind", "FateLog", "count_fates"]


class FateKind(str, enum.Enum):
    """How one proposal or card ended. Each card has exactly one fate per merge decision it entered.

    Two kinds end a proposal before it is a card (``refused``, ``declined``: a worker records
    them); the others end a card in a merge decision. A card pooled by its decision
    (``stale``, ``conflict-lost``, ``set-aside``, and ``below-test`` with gains and no loss)
    may be re-tried by a later decision, which records its fate there again with
    ``retried=True``; the views count a card once, by its first fate, unless asked for the
    re-tries.
    """

    REFUSED = "refused"  #: a reply or an edit that could not become a diff (``numbers["by"]``, ``["kind"]``)
    DECLINED = "declined"  #: the proposer chose no change (NONE, or ``None``)
    NOT_ALLOCATED = "not-allocated"  #: the budget governor judged it not worth its held-out evaluation
    OVERSIZED = "oversized"  #: its diff exceeds the trust region
    STALE = "stale"  #: the staleness policy dropped it, or its rebase no longer helped
    ALREADY_IN_HEAD = "already-in-head"  #: the head already holds its diff
    VETOED = "vetoed"  #: ``commit_veto`` refused it (alone, or in the union it joined)
    CONFLICT_LOST = "conflict-lost"  #: the weaker side of a contradiction
    SET_ASIDE = "set-aside"  #: survived, but fusion chose another candidate
    GATED = "gated"  #: the self-verify gate: it improved nothing it was proposed from
    BELOW_TEST = "below-test"  #: measured on held-out tasks, below the acceptance test
    ORACLE_REJECTED = "oracle-rejected"  #: passed the test, failed the L1 oracle gate
    COMMITTED = "committed"  #: in the head
    CAS_LOST = "cas-lost"  #: accepted, then lost the compare-and-swap to a concurrent writer


#: The kinds that end a proposal before it becomes a card.
PROPOSAL_FATES = (FateKind.REFUSED, FateKind.DECLINED)


@dataclass(frozen=True)
class CardFate:
    """The end of one proposal or card, with why and the numbers behind it.

    Args:
        kind: how it ended.
        reason: one sentence saying why.
        numbers: what the decision read, JSON-ready: for a measured card the paired test's
            ``scored``, ``gains``, ``losses``, ``e_value`` and ``threshold``; ``eta`` for a
            stale one; ``ops`` and ``chars`` for an oversized one; ``by`` (``"agent"``,
            ``"edit"`` or ``"guard"``) and ``kind`` for a refused proposal.
        diff_id: the card's diff, or None for a proposal that never became one.
        author: who proposed it (``"worker-3"``).
        fused: the card was one member of a fused candidate (its fate is the candidate's).
        retried: the card was drawn again from the evidence pool: its first fate was
            recorded by an earlier decision.
    """

    kind: FateKind
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)
    diff_id: str | None = None
    author: str | None = None
    fused: bool = False
    retried: bool = False

    @property
    def is_card(self) -> bool:
        """Whether this is the fate of an evidence card (not of a proposal that never became one)."""
        return self.kind not in PROPOSAL_FATES

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        data: dict[str, Any] = {"kind": self.kind.value, "reason": self.reason}
        if self.numbers:
            data["numbers"] = dict(self.numbers)
        for name in ("diff_id", "author"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        if self.fused:
            data["fused"] = True
        if self.retried:
            data["retried"] = True
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CardFate:
        """Rebuild from `to_json` output."""
        return cls(
            kind=FateKind(data["kind"]), reason=str(data.get("reason", "")),
            numbers=dict(data.get("numbers") or {}), diff_id=data.get("diff_id"), author=data.get("author"),
            fused=bool(data.get("fused", False)), retried=bool(data.get("retried", False)),
        )


def count_fates(fates: Iterable[CardFate], *, retried: bool = False) -> dict[str, int]:
    """How many fates of each kind (every `FateKind` value a key), first fates only unless ``retried``."""
    counts = {k.value: 0 for k in FateKind}
    for fate in fates:
        if retried or not fate.retried:
            counts[fate.kind.value] += 1
    return counts


class FateLog:
    """The fates of proposals that never became cards, written by the workers (any thread), drained per round."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fates: list[CardFate] = []

    def add(self, fate: CardFate) -> None:
        """Record one fate."""
        with self._lock:
            self._fates.append(fate)

    def drain(self) -> list[CardFate]:
        """The fates recorded since the last drain, in order (the log is then empty)."""
        with self._lock:
            out, self._fates = self._fates, []
        return out
