"""When a run stops: each stop rule a small object, asked in a fixed order, the same in both engines.

This module owns the stop rules and the state they read (`StopRules`: the run's clock
and start, the best held-out reward so far, the rollouts merged since it). Two moments
ask them, in this order:

- **before admitting work** (a sync round, one async rollout): `RolloutCap`
  (``"max_rollouts"``), `TimeLimit` (``"max_seconds"``), `TokenBudget` (``"max_tokens"``,
  with the projected spend of the work about to start and still in flight);
- **after every merge**: `TargetReward` (``"target_reward"``), `TokenBudget`,
  `DiminishingReturns` (``"diminishing_returns"``), `Patience` (``"patience"``, counted in
  rounds' worth of rollouts), `TimeLimit`.

The first rule that binds names the stop reason. It must not wait, commit or call anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..budget.governor import BudgetGovernor
from ..clock import Clock
from .config import Limits

__all__ = [
    "DiminishingReturns",
    "Patience",
    "RolloutCap",
    "StopRule",
    "StopRules",
    "TargetReward",
    "TimeLimit",
    "TokenBudget",
]


@dataclass(frozen=True)
class Moment:
    """What a stop rule may read when it is asked."""

    admitted: int = 0
    projected_tokens: float = 0.0
    held_out_reward: float | None = None
    measured: bool = True
    elapsed: float = 0.0
    since_best: int = 0


class StopRule:
    """One reason to stop. ``reason`` is the ``stop_reason`` it gives; both checks default to "go on"."""

    reason: str = ""

    def before_admission(self, moment: Moment) -> bool:
        """True: admit no more work."""
        return False

    def after_merge(self, moment: Moment) -> bool:
        """True: the run stops now."""
        return False


@dataclass(frozen=True)
class RolloutCap(StopRule):
    """``max_rollouts`` admitted: admit no more."""

    cap: int | None
    reason: str = "max_rollouts"

    def before_admission(self, moment: Moment) -> bool:
        return self.cap is not None and moment.admitted >= self.cap


@dataclass(frozen=True)
class TimeLimit(StopRule):
    """``max_seconds`` of the run's clock passed: admit nothing more, stop after the merge."""

    max_seconds: float | None
    reason: str = "max_seconds"

    def before_admission(self, moment: Moment) -> bool:
        return self.max_seconds is not None and moment.elapsed >= self.max_seconds

    def after_merge(self, moment: Moment) -> bool:
        return self.before_admission(moment)


@dataclass(frozen=True)
class TokenBudget(StopRule):
    """The budget is spent, or the projected work would not fit in what is left."""

    governor: BudgetGovernor
    reason: str = "max_tokens"

    def before_admission(self, moment: Moment) -> bool:
        return self.governor.over_budget() or not self.governor.affords(moment.projected_tokens)

    def after_merge(self, moment: Moment) -> bool:
        return self.governor.over_budget()


@dataclass(frozen=True)
class TargetReward(StopRule):
    """The held-out reward, measured on every held-out task, reached ``target_reward``.

    An estimate (some tasks' scores inherited from earlier versions) never meets the target:
    the runtime measures the head in full when an estimate reaches it
    (`agentdescent.engine.fullscore.confirm_target`).
    """

    target: float | None
    reason: str = "target_reward"

    def after_merge(self, moment: Moment) -> bool:
        return self.target is not None and moment.held_out_reward is not None and moment.measured and (
            moment.held_out_reward >= self.target
        )


@dataclass(frozen=True)
class DiminishingReturns(StopRule):
    """With a budget and ``stop_on_diminishing_returns``, reward per token stalled."""

    governor: BudgetGovernor
    reason: str = "diminishing_returns"

    def after_merge(self, moment: Moment) -> bool:
        return self.governor.stop_on_diminishing and self.governor.diminishing_returns()


@dataclass(frozen=True)
class Patience(StopRule):
    """``patience`` rounds' worth of rollouts (``n_workers`` each) merged without a new best."""

    patience: int | None
    n_workers: int
    reason: str = "patience"

    def after_merge(self, moment: Moment) -> bool:
        return self.patience is not None and moment.since_best >= self.patience * self.n_workers


class StopRules:
    """The run's stop rules, in their fixed order, and the state they read.

    Args:
        limits: the run's `agentdescent.engine.config.Limits`.
        n_workers: workers of the run (patience counts rounds of them).
        governor: the run's budget governor.
        clock: the run's clock; the run starts at the reading taken here.
    """

    def __init__(self, limits: Limits, n_workers: int, governor: BudgetGovernor, clock: Clock) -> None:
        self.limits = limits
        self.clock = clock
        self.governor = governor
        self.started = float(clock.now())
        self.best = -math.inf
        self.since_best = 0
        time_limit = TimeLimit(limits.max_seconds)
        budget = TokenBudget(governor)
        self.admission: tuple[StopRule, ...] = (RolloutCap(limits.max_rollouts), time_limit, budget)
        self.merge: tuple[StopRule, ...] = (
            TargetReward(limits.target_reward), budget, DiminishingReturns(governor),
            Patience(limits.patience, n_workers), time_limit,
        )

    def elapsed(self) -> float:
        """Seconds since the run started, on the run's clock."""
        return float(self.clock.now()) - self.started

    def out_of_time(self) -> bool:
        """True once ``max_seconds`` has passed: admit no more work."""
        return self.limits.max_seconds is not None and self.elapsed() >= self.limits.max_seconds

    def admission_deadline(self) -> float | None:
        """The clock reading at which admission closes (``started + max_seconds``), or None."""
        return None if self.limits.max_seconds is None else self.started + self.limits.max_seconds

    def hard_deadline(self) -> float | None:
        """The clock reading by which the run returns (``max_seconds + grace_seconds``), or None."""
        return self.limits.hard_deadline(self.started)

    def rollouts_left(self, admitted: int) -> int | None:
        """Rollouts still allowed (None: unbounded)."""
        cap = self.limits.max_rollouts
        return None if cap is None else max(0, cap - admitted)

    def before_admission(self, admitted: int, projected_tokens: float) -> str | None:
        """Why no more work may start, or None.

        Args:
            admitted: rollouts admitted so far.
            projected_tokens: what the work about to start, and work still in flight, is
                expected to spend.
        """
        moment = Moment(admitted=admitted, projected_tokens=projected_tokens, elapsed=self.elapsed())
        return next((rule.reason for rule in self.admission if rule.before_admission(moment)), None)

    def after_merge(self, held_out_reward: float, rollouts_merged: int, *, measured: bool = True) -> str | None:
        """The stop reason after a merge, or None to go on.

        Patience counts in rounds' worth of rollouts (``n_workers`` rollouts merged since
        the last new best held-out reward), so a sync round and any number of async
        sweeps that merge the same rollouts count the same.

        Args:
            held_out_reward: the head's held-out reward after the merge.
            rollouts_merged: rollouts whose results this merge took in.
            measured: whether ``held_out_reward`` was measured on every held-out task (the
                target rule reads only a measured reward).
        """
        if held_out_reward > self.best + 1e-12:
            self.best = held_out_reward
            self.since_best = 0
        else:
            self.since_best += rollouts_merged
        moment = Moment(held_out_reward=held_out_reward, measured=measured, elapsed=self.elapsed(),
                        since_best=self.since_best)
        return next((rule.reason for rule in self.merge if rule.after_merge(moment)), None)

    def state_dict(self) -> dict[str, Any]:
        """The best reward and the patience count, JSON-ready (for a resumed run)."""
        return {"best": self.best if math.isfinite(self.best) else None, "since_best": self.since_best}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Go on from a `state_dict`."""
        self.best = state["best"] if state.get("best") is not None else -math.inf
        self.since_best = int(state.get("since_best", 0))
