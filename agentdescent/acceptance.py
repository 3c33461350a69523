"""Statistical acceptance: does a candidate beat the head on the held-out set?

This module owns the Beta posterior over held-out successes and failures, the annealed
threshold, the regression guard and the self-verify tie-breaker. Everything is a pure,
deterministic computation (numerical integration with numpy, no sampling): the same
scores give the same decision on every machine. It must not touch the ledger, an
evaluator or any RNG.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "AcceptanceDecision",
    "BetaPosterior",
    "decide_acceptance",
    "delta_for_version",
    "required_probability",
    "tie_break_weight",
]

_GRID = 4001
# The integration grid is fixed, so its logs are computed once.
_X = (np.arange(_GRID) + 0.5) / _GRID
_LOG_X = np.log(_X)
_LOG_1MX = np.log1p(-_X)


@dataclass(frozen=True)
class BetaPosterior:
    """Beta posterior of a success rate: ``Beta(prior + successes, prior + failures)``.

    Rewards in [0, 1] count fractionally: a reward of 0.7 adds 0.7 successes and
    0.3 failures, so graded rewards need no threshold.

    Args:
        successes: summed success mass.
        failures: summed failure mass.
        prior: the symmetric prior pseudo-count (1.0 is uniform).
    """

    successes: float
    failures: float
    prior: float = 1.0

    def __post_init__(self) -> None:
        for name in ("successes", "failures", "prior"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"BetaPosterior {name}={value!r}: use a finite number >= 0")
        if self.prior <= 0:
            raise ValueError(f"BetaPosterior prior={self.prior!r}: use a number > 0")

    @classmethod
    def from_scores(cls, scores: Sequence[float], prior: float = 1.0) -> BetaPosterior:
        """Posterior from per-task rewards in [0, 1]."""
        clipped = np.clip(np.asarray(scores, dtype=float), 0.0, 1.0)
        total = float(clipped.sum())
        return cls(successes=total, failures=len(clipped) - total, prior=prior)

    @property
    def a(self) -> float:
        """The first Beta shape parameter."""
        return self.prior + self.successes

    @property
    def b(self) -> float:
        """The second Beta shape parameter."""
        return self.prior + self.failures

    @property
    def mean(self) -> float:
        """Posterior mean success rate."""
        return self.a / (self.a + self.b)

    def _density(self) -> np.ndarray:
        """Normalised posterior mass on the fixed grid (the normalising constant cancels)."""
        logp = (self.a - 1) * _LOG_X + (self.b - 1) * _LOG_1MX
        p = np.exp(logp - logp.max())
        return p / p.sum()

    def prob_greater(self, other: BetaPosterior) -> float:
        """P(X > Y) for independent X ~ self and Y ~ other, by integration on a fixed grid.

        Symmetric by construction: identical posteriors give exactly 0.5.
        """
        px = self._density()
        py = other._density()
        below_y = np.cumsum(py) - py  # mass of Y strictly below each cell
        below_x = np.cumsum(px) - px
        # P(X>Y) - P(Y>X), ties split evenly: exactly antisymmetric, so equal posteriors give 0.5
        diff = float(np.dot(px, below_y) - np.dot(py, below_x))
        return min(1.0, max(0.0, 0.5 + 0.5 * diff))


def delta_for_version(version: int, base_delta: float = 0.5) -> float:
    """The annealed risk budget: ``max(0.01, base_delta * 0.5 ** (version / 64))``.

    The head gets harder to move as it matures: a young artifact accepts any
    candidate slightly more likely better than not, a mature one needs strong evidence.
    """
    if version < 1:
        raise ValueError(f"version={version!r}: versions start at 1")
    return max(0.01, base_delta * 0.5 ** (version / 64))


def required_probability(version: int, base_delta: float = 0.5) -> float:
    """The posterior probability of improvement a candidate must exceed at ``version``.

    0.505 at version 1, 0.75 at version 64, never above 0.99.
    """
    return 1.0 - delta_for_version(version, base_delta)


def tie_break_weight(delta: float | None) -> float:
    """Weight of the self-verify evidence: ``min(1, 4 * |delta|)`` (0 when never measured)."""
    if delta is None or not math.isfinite(delta):
        return 0.0
    return min(1.0, 4.0 * abs(delta))


@dataclass(frozen=True)
class AcceptanceDecision:
    """The outcome of the acceptance test.

    Args:
        accept: commit-worthy (beats the threshold and regresses nothing).
        p_improve: posterior P(candidate > head).
        required: the threshold ``p_improve`` had to exceed.
        regressions: held-out tasks the head passed and the candidate fails.
        candidate_mean: mean held-out reward of the candidate.
        head_mean: mean held-out reward of the head.
        reason: a sentence saying why.
    """

    accept: bool
    p_improve: float
    required: float
    regressions: int
    candidate_mean: float
    head_mean: float
    reason: str


def decide_acceptance(
    candidate_scores: Sequence[float],
    head_scores: Sequence[float],
    version: int,
    *,
    base_delta: float = 0.5,
    self_verify_delta: float | None = None,
    max_regressions: int | None = 0,
    pass_mark: float = 0.5,
) -> AcceptanceDecision:
    """Decide whether a candidate may replace the head.

    The candidate is accepted when ``P(candidate > head) > 1 - delta(version)`` under
    Beta posteriors of the two held-out score lists, and it regresses no more than
    ``max_regressions`` held-out tasks (a task regresses when the head scored at least
    ``pass_mark`` on it and the candidate below). The self-verify delta adds one
    pseudo-observation of weight ``min(1, 4*|delta|)`` to the candidate (a success when
    positive, a failure when negative): it breaks ties, it cannot outvote the held-out set.

    Args:
        candidate_scores: per-task held-out rewards of the candidate state.
        head_scores: per-task held-out rewards of the head, same tasks, same order.
        version: the head version the candidate would replace.
        base_delta: the risk budget at version 0.
        self_verify_delta: the candidate's self-verify delta, if measured.
        max_regressions: regressions tolerated; None disables the guard.
        pass_mark: the reward at which a task counts as passed.

    Raises:
        ValueError: the score lists differ in length or are empty.
    """
    if len(candidate_scores) != len(head_scores):
        raise ValueError(
            f"candidate has {len(candidate_scores)} held-out scores but the head has "
            f"{len(head_scores)}: score both on the same held-out tasks"
        )
    if not head_scores:
        raise ValueError("no held-out scores: acceptance needs a non-empty held-out set")
    cand = BetaPosterior.from_scores(candidate_scores)
    head = BetaPosterior.from_scores(head_scores)
    w = tie_break_weight(self_verify_delta)
    if w > 0:
        assert self_verify_delta is not None
        if self_verify_delta > 0:
            cand = BetaPosterior(cand.successes + w, cand.failures)
        else:
            cand = BetaPosterior(cand.successes, cand.failures + w)
    p = cand.prob_greater(head)
    required = required_probability(version, base_delta)
    cand_arr = np.asarray(candidate_scores, dtype=float)
    head_arr = np.asarray(head_scores, dtype=float)
    regressions = int(np.count_nonzero((head_arr >= pass_mark) & (cand_arr < pass_mark)))
    c_mean = float(cand_arr.mean())
    h_mean = float(head_arr.mean())
    if max_regressions is not None and regressions > max_regressions:
        return AcceptanceDecision(
            False, p, required, regressions, c_mean, h_mean,
            f"regresses {regressions} held-out task(s) the head passes "
            f"(tolerated: {max_regressions})",
        )
    if p > required:
        return AcceptanceDecision(
            True, p, required, regressions, c_mean, h_mean,
            f"P(improve)={p:.3f} > {required:.3f} at v{version}",
        )
    return AcceptanceDecision(
        False, p, required, regressions, c_mean, h_mean,
        f"P(improve)={p:.3f} <= {required:.3f} at v{version}",
    )
