"""Staleness policies: what to do with a diff built on an old version of the artifact.

A policy is pure: ``decide(eta, alpha, contract_breaking)`` depends on nothing else.
``eta`` is the version-vector staleness of the card (`agentdescent.vv_staleness`)
and ``alpha`` the tolerance the aggregator picks for the artifact's governance layer.
This module must not read clocks, the environment or any RNG.

| policy     | eta == 0 | 0 < eta <= alpha   | eta > alpha |
|------------|----------|--------------------|-------------|
| full       | accept   | accept             | accept      |
| guarded    | accept   | rebase + re-verify | discard     |
| reflective | accept   | rebase             | rebase      |

A stale contract-breaking diff is discarded under every policy.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from ..errors import InvalidArgument
from ..seams import Seam

__all__ = [
    "FullStaleness",
    "GuardedStaleness",
    "ReflectiveStaleness",
    "StaleAction",
    "StalenessPolicy",
    "get_policy",
]


class StaleAction(str, enum.Enum):
    """What the aggregator does with a card."""

    ACCEPT = "accept"
    """Use the diff as it is."""
    REBASE = "rebase"
    """Re-apply the diff to the current head and keep it only if a cheap re-verification says it still helps."""
    DISCARD = "discard"
    """Drop the diff; its evidence card goes back to the pool."""


class StalenessPolicy(Seam):
    """Decides the fate of a possibly stale diff.

    Called by the aggregator, from the merging thread only, once per card per merge
    decision. Implementations must be pure functions of their arguments so that runs
    repeat and A/B comparisons stay honest. ``name`` and ``decide`` are required
    (`agentdescent.testing.StalenessConformance` checks the contract).
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("decide",)
    REQUIRED_ATTRIBUTES: ClassVar[tuple[str, ...]] = ("name",)

    name: str

    def decide(self, eta: int, alpha: int, contract_breaking: bool) -> StaleAction:
        """Return the action for a card ``eta`` versions behind, under tolerance ``alpha``."""
        raise NotImplementedError


def _check(eta: int, alpha: int) -> None:
    if eta < 0:
        raise InvalidArgument(f"eta={eta!r}: staleness cannot be negative")
    if alpha < 0:
        raise InvalidArgument(f"alpha={alpha!r}: the staleness tolerance cannot be negative")


class FullStaleness(StalenessPolicy):
    """Accept every diff however stale (only a stale contract-breaking diff is discarded)."""

    name = "full"

    def decide(self, eta: int, alpha: int, contract_breaking: bool) -> StaleAction:
        _check(eta, alpha)
        if eta > 0 and contract_breaking:
            return StaleAction.DISCARD
        return StaleAction.ACCEPT

    def __repr__(self) -> str:
        return "FullStaleness()"


class GuardedStaleness(StalenessPolicy):
    """The default: rebase and re-verify within ``alpha`` versions, discard beyond."""

    name = "guarded"

    def decide(self, eta: int, alpha: int, contract_breaking: bool) -> StaleAction:
        _check(eta, alpha)
        if eta == 0:
            return StaleAction.ACCEPT
        if contract_breaking or eta > alpha:
            return StaleAction.DISCARD
        return StaleAction.REBASE

    def __repr__(self) -> str:
        return "GuardedStaleness()"


class ReflectiveStaleness(StalenessPolicy):
    """Recover stale work: rebase every stale diff whatever ``alpha`` says."""

    name = "reflective"

    def decide(self, eta: int, alpha: int, contract_breaking: bool) -> StaleAction:
        _check(eta, alpha)
        if eta == 0:
            return StaleAction.ACCEPT
        if contract_breaking:
            return StaleAction.DISCARD
        return StaleAction.REBASE

    def __repr__(self) -> str:
        return "ReflectiveStaleness()"


_POLICIES: dict[str, type] = {
    "full": FullStaleness,
    "guarded": GuardedStaleness,
    "reflective": ReflectiveStaleness,
}


def get_policy(name: str) -> StalenessPolicy:
    """Return a fresh policy by name.

    Args:
        name: ``"full"``, ``"guarded"`` or ``"reflective"`` (case-insensitive).

    Raises:
        InvalidArgument: the name is unknown; the message lists the known ones (also a ValueError).
    """
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in _POLICIES:
        known = ", ".join(sorted(_POLICIES))
        raise InvalidArgument(f"unknown staleness policy {name!r}; known policies: {known}")
    return _POLICIES[key]()
