"""The one budget input of a merge: `MergeBudget`, and the answers without a budget.

A merge decision asks a run's budget two things: does this card get its held-out
evaluation, and is the optional fusion tournament still affordable. This module owns that
question's shape (`MergeBudget`, which `agentdescent.budget.governor.BudgetGovernor`
answers), the answer without a budget (`NO_BUDGET`: the tournament always runs, and every
card is evaluated unless the budget it was made under refused it) and the adapter for the older ``tournament_gate`` callable
(`GateBudget`). It must not read the clock, hold a lock or call a model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

__all__ = ["NO_BUDGET", "GateBudget", "MergeBudget", "NoBudget"]


@runtime_checkable
class MergeBudget(Protocol):
    """What a merge may ask of the run's budget: its one budget input (`agentdescent.Aggregator`'s ``budget``).

    `agentdescent.BudgetGovernor` is one: it decided, when the worker asked
    (`agentdescent.BudgetGovernor.allocate`), whether each card is worth its held-out
    evaluation, and it knows how much of the budget is spent.
    """

    def evaluates(self, card: Any) -> bool:
        """Whether ``card`` gets its held-out evaluation (False: the merge leaves it out, pooled)."""
        ...

    def allows_tournament(self) -> bool:
        """Whether the optional fusion tournament is still affordable."""
        ...


class NoBudget:
    """The answers of an aggregator given no budget: the tournament always runs, and a card is evaluated
    unless the budget it was made under recorded a refusal on it (``card.allocated`` False)."""

    def evaluates(self, card: Any) -> bool:
        """The answer recorded on the card (True for a card no budget judged)."""
        return bool(getattr(card, "allocated", True))

    def allows_tournament(self) -> bool:
        """Always True."""
        return True

    def __repr__(self) -> str:
        return "NO_BUDGET"


#: The merge budget of an aggregator given none.
NO_BUDGET = NoBudget()


class GateBudget(NoBudget):
    """An aggregator's budget built from the older ``tournament_gate`` callable.

    The tournament asks ``gate()``; a card is evaluated as `NoBudget` evaluates it (unless
    the worker recorded the budget's refusal on it), as aggregators given a gate always did.
    """

    def __init__(self, gate: Callable[[], bool]) -> None:
        self.gate = gate

    def __repr__(self) -> str:
        return f"GateBudget({self.gate!r})"

    def allows_tournament(self) -> bool:
        """``gate()``."""
        return bool(self.gate())
