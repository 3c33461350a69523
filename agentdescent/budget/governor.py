"""The budget governor: which optional spend a run can still afford as tokens run out.

This module owns the token-budget floors, the next-round projection, the optional
diminishing-returns stop, and the single question workers ask before their optional
spend (`BudgetGovernor.candidate_worth`, which `BudgetGovernor.allocate` asks once per card
and records on it). It is also the merge's one budget input
(`agentdescent.budget.merge_budget.MergeBudget`: `evaluates`, `allows_tournament`), and it
learns each round's spend and reward from the run's recorder alone. The governor only ever *removes* optional
spend; it never adds work. Without ``max_tokens`` it is inert: every question gets the
answer a run without a budget would get. A run binds it to its meter
(`BudgetGovernor.bind`), so the spend it judges is always the meter's current total;
nothing has to push it. It must not read the clock or any RNG (the allocator it consults
owns its own seeded RNG).
"""

from __future__ import annotations

import math
import threading
from typing import Any

from ..errors import InvalidArgument, InvalidArgumentType
from ..seams import adopt
from ..usage import Usage
from ..validation import check_bool, check_fraction, check_int, check_real
from .allocator import AllocatorContext, AllocatorPolicy
from .merge_budget import NO_BUDGET

__all__ = ["BudgetGovernor"]


class BudgetGovernor:
    """Thin optional spend as a token budget runs out.

    Below ``soft_floor`` of the budget spent, everything is allowed; from there the
    fusion tournament stops; from ``hard_floor`` the self-verify rollout stops too. In
    between, a learning allocator (if given) decides per candidate once the remaining
    fraction falls below its ``budget_start``; without one, the spend floors alone decide
    (``allow_self_verify``).

    Args:
        max_tokens: the budget; None makes the governor inert.
        soft_floor: spent fraction from which the fusion tournament is refused (strict).
        hard_floor: spent fraction from which self-verify is refused whatever the allocator says.
        allocator: an `AllocatorPolicy` (or any object with ``decide`` and ``observe``),
            or None for the spend floors alone.
        stop_on_diminishing: let the engines stop when reward per token stalls.
        efficiency_floor: reward gain per 1k tokens, relative to the run's early rate,
            under which returns count as diminishing.
        min_efficiency_samples: rounds observed before returns can be judged.

    Raises:
        InvalidArgument: a knob out of range (named); a string or a bool is not a number.
        InvalidArgumentType: an allocator without ``decide``/``observe``.
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
        owner = "BudgetGovernor"
        self.max_tokens = check_int(max_tokens, "max_tokens", low=1, optional=True, owner=owner,
                                    hint="the token budget; None makes the governor inert")
        self.soft_floor = check_fraction(soft_floor, "soft_floor", low_open=True, owner=owner)
        self.hard_floor = check_fraction(hard_floor, "hard_floor", low_open=True, owner=owner)
        if self.soft_floor > self.hard_floor:
            raise InvalidArgument(
                f"BudgetGovernor(soft_floor={soft_floor!r}, hard_floor={hard_floor!r}): "
                "use 0 < soft_floor <= hard_floor <= 1"
            )
        self.allocator = adopt(allocator, AllocatorPolicy, "allocator") if allocator is not None else None
        self.stop_on_diminishing = check_bool(stop_on_diminishing, "stop_on_diminishing", owner=owner)
        self.efficiency_floor = check_real(efficiency_floor, "efficiency_floor", low=0.0, owner=owner)
        self.min_efficiency_samples = check_int(min_efficiency_samples, "min_efficiency_samples", low=1,
                                                owner=owner)
        self._meter: Usage | None = None
        self._excluded: tuple[str, ...] = ()
        self._pushed = 0
        self._lock = threading.Lock()
        self._round_spend: list[int] = []
        self._rewards: list[tuple[int, float]] = []
        self.n_consulted = 0
        self.n_denied = 0
        self.n_hard_floor_denied = 0

    # ------------------------------------------------------------------ accounting

    def bind(self, meter: Usage, *, exclude_phases: tuple[str, ...] = ()) -> None:
        """Read the spend from ``meter`` from now on (the run's meter: what every call recorded).

        ``exclude_phases``: phases of the meter that do not count as spend (a run's test
        set, phase ``test``, unless the user puts it in the budget).

        Raises:
            InvalidArgumentType: ``meter`` is not a `Usage`.
        """
        if not isinstance(meter, Usage):
            raise InvalidArgumentType(f"BudgetGovernor.bind({meter!r}): pass an agentdescent.Usage meter")
        with self._lock:
            self._meter = meter
            self._excluded = tuple(exclude_phases)

    @property
    def spent(self) -> int:
        """Tokens spent so far: the bound meter's total (less its excluded phases), or the most `spend` was told."""
        meter = self._meter
        if meter is None:
            return self._pushed
        total = meter.total_tokens
        if self._excluded:
            phases = meter.by_phase()
            total -= sum(phases.get(p, 0) for p in self._excluded)
        return max(self._pushed, total)

    def spend(self, cumulative_tokens: int) -> None:
        """Record a cumulative token count, for a governor bound to no meter (monotone).

        Raises:
            InvalidArgument: not a count.
        """
        count = check_int(cumulative_tokens, "cumulative_tokens", low=0, owner="BudgetGovernor.spend")
        with self._lock:
            self._pushed = max(self._pushed, count)

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
        return self.spent + max(0.0, float(projected_tokens)) <= self.max_tokens

    # ------------------------------------------------------------------ optional spend

    def allow_fusion_tournament(self) -> bool:
        """The fusion tournament is affordable while less than ``soft_floor`` is spent."""
        return self.max_tokens is None or self.spent_fraction() < self.soft_floor

    def allow_self_verify(self) -> bool:
        """Self-verify is affordable while less than ``hard_floor`` is spent (the spend-floor rule)."""
        return self.max_tokens is None or self.spent_fraction() < self.hard_floor

    def allows_tournament(self) -> bool:
        """`allow_fusion_tournament`, as the merge asks it (`agentdescent.budget.merge_budget.MergeBudget`)."""
        return self.allow_fusion_tournament()

    def allocate(self, card: Any, ctx: AllocatorContext) -> bool:
        """Decide, once per card, its optional spend; record on the card whether it gets its held-out evaluation.

        Asks `candidate_worth` (the self-verify answer, returned). With an allocator the same
        answer is the card's held-out evaluation: ``card.allocated`` records it, and
        `evaluates` reads it back at the merge; the spend floors alone (no allocator) never
        refuse that evaluation.
        """
        worth = self.candidate_worth(ctx)
        card.allocated = worth or self.allocator is None
        return worth

    def evaluates(self, card: Any) -> bool:
        """Whether ``card`` gets its held-out evaluation: the answer `allocate` recorded on it."""
        return NO_BUDGET.evaluates(card)

    def candidate_worth(self, ctx: AllocatorContext) -> bool:
        """Should this candidate get its self-verify rollout?

        No budget: yes. No allocator: the spend floors (`allow_self_verify`). At or past
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
        spent = self.spent
        with self._lock:
            self._rewards.append((spent, float(reward)))

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
        spent = self.spent
        with self._lock:
            data: dict[str, Any] = {
                "max_tokens": self.max_tokens,
                "spent": spent,
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
