"""Calls admitted against the token budget before they start: `BudgetGate`.

A budget read only before each call is overshot by every call in flight when it runs out:
a held-out evaluation fans a batch of calls out at once, and async workers call side by
side. This module owns the rule that keeps a run within one call of ``max_tokens``: each
call that the budget counts reserves the cost of the largest call seen so far, and it
starts only if the reservations of the calls in flight and its own still fit in what is
left (or nothing else is in flight). Otherwise it waits for a call to finish, and is
refused once the budget is spent. `agentdescent.engine.executors.CallRunner` passes
every attempt through it. It must not call a model, read the run's clock or write
counters.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BudgetGate", "Reservation"]

#: Seconds between two looks at a waiting call's stop signal (a finished call wakes it first).
_RECHECK = 0.05


@dataclass
class Reservation:
    """One admitted call's share of the budget: what it reserved."""

    tokens: int


class BudgetGate:
    """Admits the calls a budget counts so that the run ends at most one call past ``max_tokens``.

    Args:
        spent: the budget's spend so far (`agentdescent.budget.governor.BudgetGovernor.spent`).
        max_tokens: the budget.
        counts: ``counts(phase)``: whether the budget counts a call of ``phase``.

    A call whose phase the budget counts reserves the largest cost of a call seen so far
    (0 before any call has finished: the first calls are admitted freely, far from the end
    of the budget). It is admitted when nothing else is in flight, or when the spend, the
    reservations in flight and its own fit in ``max_tokens``; then, if every call costs
    at most the largest seen, the spend ends at most one call past the budget: the one
    admitted alone. The guarantee holds for calls of a size already seen; a call larger
    than any before it can overshoot by its excess once.
    """

    def __init__(self, spent: Callable[[], int], max_tokens: int, counts: Callable[[str], bool]) -> None:
        self._spent = spent
        self.max_tokens = max_tokens
        self._counts = counts
        self._cond = threading.Condition()
        self._reserved = 0
        self._in_flight = 0
        #: the largest cost of one call seen so far (each call's reservation)
        self.largest_call = 0
        #: times a call waited for others to finish before it could start
        self.waits = 0

    def admit(self, phase: str, stopped: Callable[[], bool]) -> Reservation | None:
        """Wait until a call of ``phase`` may start and reserve its share; None when it must not start.

        None means the budget is spent, or ``stopped()`` became true while it waited (the
        caller's stop signal, which also reads the budget). A phase the budget does not
        count is admitted at once with nothing reserved.
        """
        if not self._counts(phase):
            return Reservation(0)
        waited = False
        with self._cond:
            while True:
                if stopped() or self._spent() >= self.max_tokens:
                    return None
                share = self.largest_call
                if self._in_flight == 0 or self._spent() + self._reserved + share <= self.max_tokens:
                    self._reserved += share
                    self._in_flight += 1
                    return Reservation(share)
                if not waited:
                    waited = True
                    self.waits += 1
                self._cond.wait(_RECHECK)

    def release(self, reservation: Reservation | None, cost: int, phase: str) -> None:
        """The call admitted with ``reservation`` has ended, having cost ``cost`` tokens."""
        if reservation is None or not self._counts(phase):
            return
        with self._cond:
            self._reserved -= reservation.tokens
            self._in_flight -= 1
            self.largest_call = max(self.largest_call, cost)
            self._cond.notify_all()
