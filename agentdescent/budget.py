"""The budget governor: which optional spend a run can still afford as tokens run out.

This module owns the token-budget floors, the next-round projection, the optional
diminishing-returns stop, and the single question workers ask before their optional
self-verify rollout (`BudgetGovernor.candidate_worth`). The governor only ever
*removes* optional spend; it never adds work. Without ``max_tokens`` it is inert: every
question gets the answer a run without a budget would get. It must not read the clock
or any RNG (the allocator it consults owns its own seeded RNG).
"""

from __future__ import annotations

import math
import threading
from typing import Any

from .allocator import AllocatorContext, AllocatorPolicy

__all__ = ["BudgetGovernor"]


class BudgetGovernor:
    """Thin optional spend as a token budget runs out.

    Below ``soft_floor`` of the budget spent, everything is allowed; from there the
    fusion tournament stops; from ``hard_floor`` the self-verify rollout stops too. In
    between, a learning allocator (if given) decides per candidate once the remaining
    fraction falls below its ``budget_start``; without one, the clock alone decides
    (``allow_self_verify``).

    Args:
        max_tokens: the budget; None makes the governor inert.
        soft_floor: spent fraction from which the fusion tournament is refused (strict).
        hard_floor: spent fraction from which self-verify is refused whatever the allocator says.
        allocator: an `AllocatorPolicy`, or None for the clock.
        stop_on_diminishing: let the engines stop when reward per token stalls.
        efficiency_floor: reward gain per 1k tokens, relative to the run's early rate,
            under which returns count as diminishing.
        min_efficiency_samples: rounds observed before returns can be judged.
    """

    def __init__(
        self,
        max_tokens: int | None = None,
        soft_floor: float = 0.75,
        hard_floor: float = 0.90,
        allocator: AllocatorPolicy | None = None,
        stop_on_diminishing: bool = False,
        efficiency_floor: float = 0.25,
        min_efficiency_samples: int = 4,
    ) -> None:
        if max_tokens is not None and (isinstance(max_tokens, bool) or int(max_tokens) < 1):
            raise ValueError(f"max_tokens={max_tokens!r}: use a positive token count or None")
        if not 0.0 < soft_floor <= hard_floor <= 1.0:
            raise ValueError(
                f"soft_floor={soft_floor!r}, hard_floor={hard_floor!r}: "
                "use 0 < soft_floor <= hard_floor <= 1"
            )
        if efficiency_floor < 0 or min_efficiency_samples < 1:
            raise ValueError(
                f"efficiency_floor={efficiency_floor!r} must be >= 0 and "
                f"min_efficiency_samples={min_efficiency_samples!r} >= 1"
            )
        if allocator is not None and not isinstance(allocator, AllocatorPolicy):
            raise TypeError(
                f"allocator={allocator!r} is not an AllocatorPolicy (it needs decide(), observe(), "
                "budget_start and stats()); subclass agentdescent.AllocatorPolicy to inherit the defaults"
            )
        self.max_tokens = int(max_tokens) if max_tokens is not None else None
        self.soft_floor = soft_floor
        self.hard_floor = hard_floor
        self.allocator = allocator
        self.stop_on_diminishing = stop_on_diminishing
        self.efficiency_floor = efficiency_floor
        self.min_efficiency_samples = min_efficiency_samples
        self._lock = threading.Lock()
        self.spent = 0
        self._round_spend: list[int] = []
        self._rewards: list[tuple[int, float]] = []
        self.n_consulted = 0
        self.n_denied = 0
        self.n_hard_floor_denied = 0

    # ------------------------------------------------------------------ accounting

    def spend(self, cumulative_tokens: int) -> None:
        """Record the run's cumulative token count (monotone: a lower value is ignored)."""
        with self._lock:
            self.spent = max(self.spent, int(cumulative_tokens))

    def end_round(self, round_tokens: int) -> None:
        """Record one round's spend, for the next-round projection."""
        with self._lock:
            self._round_spend.append(max(0, int(round_tokens)))

    def spent_fraction(self) -> float:
        """Spent share of the budget (0.0 without a budget)."""
        if self.max_tokens is None:
            return 0.0
        return self.spent / self.max_tokens

    def remaining_fraction(self) -> float:
        """Remaining share of the budget, clamped to [0, 1]; 1.0 without a budget."""
        if self.max_tokens is None:
            return 1.0
        return min(1.0, max(0.0, 1.0 - self.spent / self.max_tokens))

    def over_budget(self) -> bool:
        """True once the spend reaches the budget."""
        return self.max_tokens is not None and self.spent >= self.max_tokens

    def affords_next_round(self) -> bool:
        """True when the mean per-round spend so far still fits in the remaining budget."""
        if self.max_tokens is None:
            return True
        if not self.rounds_recorded():
            return self.spent < self.max_tokens
        return self.affords(self.mean_round_tokens())

    def rounds_recorded(self) -> int:
        """Rounds whose spend `end_round` recorded."""
        with self._lock:
            return len(self._round_spend)

    def mean_round_tokens(self) -> float:
        """Mean spend of the rounds recorded so far (0.0 before the first)."""
        with self._lock:
            return sum(self._round_spend) / len(self._round_spend) if self._round_spend else 0.0

    def affords(self, projected_tokens: float) -> bool:
        """True when ``projected_tokens`` more still fit in the budget (always without one).

        The async runtime asks before each admission with the expected spend of the work in
        flight plus the rollout it would start, so it stops admitting before that work
        would pass the budget.
        """
        if self.max_tokens is None:
            return True
        with self._lock:
            return self.spent + max(0.0, float(projected_tokens)) <= self.max_tokens

    # ------------------------------------------------------------------ optional spend

    def allow_fusion_tournament(self) -> bool:
        """The fusion tournament is affordable while less than ``soft_floor`` is spent."""
        return self.max_tokens is None or self.spent_fraction() < self.soft_floor

    def allow_self_verify(self) -> bool:
        """Self-verify is affordable while less than ``hard_floor`` is spent (the clock rule)."""
        return self.max_tokens is None or self.spent_fraction() < self.hard_floor

    def candidate_worth(self, ctx: AllocatorContext) -> bool:
        """Should this candidate get its self-verify rollout?

        No budget: yes. No allocator: the clock (`allow_self_verify`). At or past
        the hard floor: no, whatever the allocator says. With remaining budget at or
        above the allocator's ``budget_start``: yes, without consulting it. Otherwise
        the allocator's ``decide(ctx).deep_eval``.
        """
        if self.max_tokens is None:
            return True
        if self.allocator is None:
            return self.allow_self_verify()
        if not self.allow_self_verify():
            with self._lock:
                self.n_hard_floor_denied += 1
            return False
        start = float(self.allocator.budget_start)
        if self.remaining_fraction() >= start:
            return True
        decision = self.allocator.decide(ctx)
        with self._lock:
            self.n_consulted += 1
            if not decision.deep_eval:
                self.n_denied += 1
        return bool(decision.deep_eval)

    # ------------------------------------------------------------------ returns

    def observe(self, reward: float) -> None:
        """Record the held-out reward after a merge, with the spend at that time."""
        with self._lock:
            self._rewards.append((self.spent, float(reward)))

    def diminishing_returns(self) -> bool:
        """True when the recent reward gain per token fell below ``efficiency_floor`` of the early rate.

        Needs ``min_efficiency_samples`` observations and a budget; a run that has not
        improved at all since its start is not judged (there is no early rate).
        """
        if self.max_tokens is None:
            return False
        with self._lock:
            pts = list(self._rewards)
        n = self.min_efficiency_samples
        if len(pts) < 2 * n:
            return False
        (t0, r0), (tm, rm), (t1, r1) = pts[0], pts[len(pts) - n], pts[-1]
        early = (rm - r0) / max(1, tm - t0)
        recent = (r1 - rm) / max(1, t1 - tm)
        if early <= 0 or not math.isfinite(early):
            return False
        return recent < self.efficiency_floor * early

    def state_dict(self) -> dict[str, Any]:
        """The per-round spend and the reward trace, for a resumed run (JSON-ready)."""
        with self._lock:
            return {"round_spend": list(self._round_spend), "rewards": [list(r) for r in self._rewards]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict`: the projection and the diminishing-returns test go on from it."""
        with self._lock:
            self._round_spend = [int(x) for x in state.get("round_spend", [])]
            self._rewards = [(int(t), float(r)) for t, r in state.get("rewards", [])]

    def summary(self) -> dict[str, Any]:
        """The governor's state and counters, JSON-ready."""
        with self._lock:
            data: dict[str, Any] = {
                "max_tokens": self.max_tokens,
                "spent": self.spent,
                "spent_fraction": self.spent_fraction(),
                "remaining_fraction": self.remaining_fraction(),
                "rounds_recorded": len(self._round_spend),
                "allocator_consulted": self.n_consulted,
                "allocator_denied": self.n_denied,
                "hard_floor_denied": self.n_hard_floor_denied,
            }
        if self.allocator is not None:
            data["allocator"] = self.allocator.stats()
        return data

    def __repr__(self) -> str:
        return f"BudgetGovernor(max_tokens={self.max_tokens!r}, spent={self.spent})"
