"""Statistical acceptance: the evidence rule, and the sequential test that stops an evaluation early.

This module owns the Beta posterior over held-out successes and failures, the annealed
threshold, the regression guard, the **evidence rule** (a candidate commits only on
held-out evidence of a gain: two identical held-out score lists never commit, whatever
the self-verify says) and the **sequential test** (`sequential_verdict`): a candidate's
held-out evaluation runs in batches and stops as soon as the outcome is settled. Everything
is a pure, deterministic computation (numerical integration with numpy, exact
beta-binomial sums, no sampling): the same scores give the same decision on every
machine. It must not touch the ledger, an evaluator or any RNG.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import InvalidArgument

__all__ = [
    "AcceptanceDecision",
    "BetaPosterior",
    "SequentialVerdict",
    "decide_acceptance",
    "delta_for_version",
    "evaluation_order",
    "required_gain",
    "required_probability",
    "sequential_verdict",
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
                raise InvalidArgument(f"BetaPosterior {name}={value!r}: use a finite number >= 0")
        if self.prior <= 0:
            raise InvalidArgument(f"BetaPosterior prior={self.prior!r}: use a number > 0")

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
        raise InvalidArgument(f"version={version!r}: versions start at 1")
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
    self_verify_counts: bool = False,
) -> AcceptanceDecision:
    """Decide whether a candidate may replace the head: the evidence rule.

    The candidate is accepted when its held-out mean is strictly above the head's, when
    ``P(candidate > head) > 1 - delta(version)`` under Beta posteriors of the two
    held-out score lists, and when it regresses no more than ``max_regressions``
    held-out tasks (a task regresses when the head scored at least ``pass_mark`` on it
    and the candidate below). Two identical score lists are never accepted.

    The self-verify delta (one re-run of the proposing task) is not held-out evidence and
    does not count, unless ``self_verify_counts=True`` (the rule before 0.2): then it adds
    one pseudo-observation of weight ``min(1, 4*|delta|)`` to the candidate and the
    strict-gain requirement is dropped. **That opt-in commits ties**: a candidate whose
    held-out scores equal the head's passes at a young version on a single lucky re-run
    (with a weak model proposing, most such commits are junk).

    Args:
        candidate_scores: per-task held-out rewards of the candidate state.
        head_scores: per-task held-out rewards of the head, same tasks, same order.
        version: the head version the candidate would replace.
        base_delta: the risk budget at version 0.
        self_verify_delta: the candidate's self-verify delta, if measured (used only
            with ``self_verify_counts``).
        max_regressions: regressions tolerated; None disables the guard.
        pass_mark: the reward at which a task counts as passed.
        self_verify_counts: let the self-verify delta count as evidence (see above).

    Raises:
        ValueError: the score lists differ in length or are empty.
    """
    if len(candidate_scores) != len(head_scores):
        raise InvalidArgument(
            f"candidate has {len(candidate_scores)} held-out scores but the head has "
            f"{len(head_scores)}: score both on the same held-out tasks"
        )
    if not head_scores:
        raise InvalidArgument("no held-out scores: acceptance needs a non-empty held-out set")
    cand = BetaPosterior.from_scores(candidate_scores)
    head = BetaPosterior.from_scores(head_scores)
    w = tie_break_weight(self_verify_delta) if self_verify_counts else 0.0
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
    if not self_verify_counts and not c_mean > h_mean:
        return AcceptanceDecision(
            False, p, required, regressions, c_mean, h_mean,
            f"no held-out gain: mean {c_mean:.4f} vs the head's {h_mean:.4f}",
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


# --------------------------------------------------------------------------- sequential test


def required_gain(head_scores: Sequence[float], version: int, base_delta: float = 0.5) -> float:
    """The smallest summed held-out gain over the head that the evidence rule accepts.

    With ``n`` tasks and the head's summed score ``S``, a candidate whose scores sum to
    ``S + g`` (and that regresses nothing) is accepted iff ``g`` exceeds this value
    (``math.inf`` when even a perfect candidate would not be). Found by bisection on the
    posterior, which is monotone in ``g``.
    """
    n = len(head_scores)
    s_head = float(np.clip(np.asarray(head_scores, dtype=float), 0.0, 1.0).sum())
    head = BetaPosterior(s_head, n - s_head)
    required = required_probability(version, base_delta)

    def passes(g: float) -> bool:
        return g > 0 and BetaPosterior(s_head + g, n - s_head - g).prob_greater(head) > required

    room = n - s_head
    if room <= 0 or not passes(room):
        return math.inf
    low, high = 0.0, room
    for _ in range(24):  # to room / 2**24: far finer than one task's score
        mid = (low + high) / 2
        if passes(mid):
            high = mid
        else:
            low = mid
    return high


def evaluation_order(head_scores: Sequence[float], seed: int, pass_mark: float = 0.5) -> list[int]:
    """The order a candidate's held-out tasks are evaluated in: the informative ones first.

    Tasks the head fails are where a candidate can show a gain; tasks the head passes are
    where it can show a regression (which settles a ``max_regressions=0`` decision at
    once). The two kinds alternate, each shuffled by ``seed``, so both kinds of evidence
    arrive from the first batch on. Deterministic for a given seed.
    """
    rng = np.random.default_rng(seed % (2**63))
    fails = [i for i, h in enumerate(head_scores) if h < pass_mark]
    passes = [i for i, h in enumerate(head_scores) if h >= pass_mark]
    fails = [fails[j] for j in rng.permutation(len(fails))]
    passes = [passes[j] for j in rng.permutation(len(passes))]
    order: list[int] = []
    for a, b in zip(fails, passes):
        order += [a, b]
    longer = fails if len(fails) > len(passes) else passes
    order += longer[min(len(fails), len(passes)):]
    return order


@dataclass(frozen=True)
class SequentialVerdict:
    """Where a held-out evaluation stands after a batch.

    Args:
        settled: stop evaluating now.
        accept: the decision once settled (None while not): True only after the full
            held-out set was scored, so an early stop is always a rejection.
        reason: a sentence saying why.
        p_accept: the predictive probability that the full evaluation would accept
            (None when the verdict is exact).
        exact: the verdict cannot differ from the full evaluation's (curtailment, or the
            full set was scored); False for a futility stop, which may be wrong with
            probability up to the error budget.
    """

    settled: bool
    accept: bool | None
    reason: str
    p_accept: float | None = None
    exact: bool = True


def _beta_binomial_tail(m: int, a: float, b: float, k: int) -> float:
    """P(X >= k) for X ~ BetaBinomial(m, a, b), by an exact sum in log space."""
    if k <= 0:
        return 1.0
    if k > m:
        return 0.0
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) - math.lgamma(a + b + m)
    total = 0.0
    for x in range(k, m + 1):
        log_choose = math.lgamma(m + 1) - math.lgamma(x + 1) - math.lgamma(m - x + 1)
        total += math.exp(log_choose + math.lgamma(x + a) + math.lgamma(m - x + b) + log_norm)
    return min(1.0, total)


def sequential_verdict(
    head_scores: Sequence[float],
    observed: dict[int, float],
    version: int,
    *,
    base_delta: float = 0.5,
    max_regressions: int | None = 0,
    pass_mark: float = 0.5,
    futility: float = 0.05,
    min_observed: int = 0,
    needed_gain: float | None = None,
) -> SequentialVerdict:
    """Whether a candidate's held-out evaluation can stop, given the tasks scored so far.

    Three rules, in order:

    1. **Exact curtailment.** If even the best completion (every task not yet scored at
       1.0) would be refused — more regressions than ``max_regressions`` already, or not
       enough room left for the gain the evidence rule needs — the evaluation stops with a
       rejection. It is the decision the full evaluation would reach, always.
    2. **Futility** (the sequential test, error budget ``futility``). Once at least
       ``min_observed`` tasks are scored, the gain still to come on the unscored tasks is
       predicted from the gain seen so far — a beta-binomial over the room left (the
       summed ``1 - head score`` of the unscored tasks, in whole units), with a uniform
       prior on the gain rate, assuming no further losses (optimistic, so it errs towards
       going on). If the predictive probability that the full evaluation accepts is below
       ``futility``, the evaluation stops with a rejection. A candidate the full
       evaluation would accept is stopped this way with probability at most about
       ``futility`` under that model.
    3. Otherwise it goes on; once every task is scored, `decide_acceptance` decides.

    There is no early *acceptance*: a candidate commits only on its full held-out scores,
    so the sequential test never accepts what the full evaluation would refuse.

    Args:
        head_scores: the head's per-task held-out scores (all of them: they are cached).
        observed: task index -> the candidate's score, for the tasks scored so far.
        version: the head version the candidate would replace.
        base_delta: see `decide_acceptance`.
        max_regressions: see `decide_acceptance`.
        pass_mark: see `decide_acceptance`.
        futility: the futility error budget in [0, 1); 0 keeps only exact curtailment.
        min_observed: tasks to score before the futility rule may stop.
        needed_gain: `required_gain` of ``head_scores`` at ``version``, if already known.

    Raises:
        ValueError: an index outside the held-out set, or ``futility`` outside [0, 1).
    """
    n = len(head_scores)
    if not 0.0 <= futility < 1.0:
        raise InvalidArgument(f"futility={futility!r}: use an error budget in [0, 1)")
    if any(not 0 <= i < n for i in observed):
        raise InvalidArgument(f"observed holds an index outside the {n} held-out task(s)")
    head = np.clip(np.asarray(head_scores, dtype=float), 0.0, 1.0)
    if len(observed) == n:
        cand = [observed[i] for i in range(n)]
        full = decide_acceptance(cand, list(head_scores), version, base_delta=base_delta,
                                 max_regressions=max_regressions, pass_mark=pass_mark)
        return SequentialVerdict(True, full.accept, full.reason)
    regressions = sum(1 for i, c in observed.items() if head[i] >= pass_mark and c < pass_mark)
    if max_regressions is not None and regressions > max_regressions:
        return SequentialVerdict(
            True, False, f"regresses {regressions} held-out task(s) the head passes "
            f"(tolerated: {max_regressions}) after {len(observed)} of {n} task(s)",
        )
    unscored = [i for i in range(n) if i not in observed]
    best = [observed.get(i, 1.0) for i in range(n)]  # the best completion: every unscored task at 1.0
    best_case = decide_acceptance(best, list(head_scores), version, base_delta=base_delta,
                                  max_regressions=max_regressions, pass_mark=pass_mark)
    if not best_case.accept:  # any real completion scores less and regresses more: refused too
        return SequentialVerdict(
            True, False, f"cannot be accepted even if all {len(unscored)} unscored task(s) pass "
            f"({best_case.reason} at best)",
        )
    if futility > 0 and len(observed) >= min_observed:
        need = required_gain(head_scores, version, base_delta) if needed_gain is None else needed_gain
        net = sum(min(1.0, max(0.0, c)) - head[i] for i, c in observed.items())
        room = float(sum(1.0 - head[i] for i in unscored))
        gained = sum(max(0.0, min(1.0, c) - head[i]) for i, c in observed.items())
        tried = sum(1.0 - head[i] for i in observed)
        p = _beta_binomial_tail(int(round(room)), 1.0 + gained, 1.0 + max(0.0, tried - gained),
                                math.floor(need - net) + 1)
        if p < futility:
            return SequentialVerdict(
                True, False, f"futility: P(the full evaluation accepts)={p:.3f} < {futility:g} "
                f"after {len(observed)} of {n} task(s) ({net:+.2f} gained so far, {need:.2f} needed)",
                p_accept=p, exact=False,
            )
        return SequentialVerdict(False, None, "undecided", p_accept=p, exact=False)
    return SequentialVerdict(False, None, "undecided")
