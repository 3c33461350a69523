"""Acceptance: the paired sequential test that decides whether a candidate replaces the head.

**The null is the full held-out mean.** A candidate is a false accept when its mean over
the *whole* held-out set is no better than the head's. `PairedTest` bounds the rate of
that at ``false_accept_rate``, at any stopping time, with one of two samplings:

- **Without replacement** (a deterministic evaluation: a score is a fact). The held-out
  units (tasks, or groups of correlated tasks) are a finite population of differences
  ``d = candidate - head``. The units the diff plausibly changes — the *stratum*, fixed
  from the diff's text before any score — are scored first and in full, so their sum
  ``S_A`` is known exactly. The others are scored in a uniformly random order (seeded,
  fixed before any score) and feed a betting e-process for sampling without replacement:
  under the null (their sum at most ``-S_A``), the next unit's conditional mean is at
  most ``m = (-S_A - seen) / left``, and a bettor staking ``lam`` on ``x - m`` grows a
  nonnegative supermartingale. By Ville's inequality it reaches ``1 / false_accept_rate``
  with probability at most ``false_accept_rate`` whatever the stopping rule. Once what is
  left cannot undo the gain (every unscored task at its worst), the full mean is better
  for certain.
- **With replacement** (a noisy evaluation: a score is one draw). Each look draws units
  uniformly with replacement and scores both sides afresh (a cached head score is never
  evidence), so every draw's difference has mean at most 0 under the null, given the
  past; the same betting e-process, with ``m = 0``.

The stratum is a **gate**, never unweighted evidence for the whole set: it enters the
without-replacement test as its exact sum, and in a noisy evaluation it is not evidence at
all. Rejections — a regression (a task the head passes and the candidate fails), exact
curtailment (the full evaluation could not show a gain), futility (no net gain after a
sample) — never raise the false-accept rate, whatever they look at.

``null="local"`` is the documented, opt-in alternative for domains whose edits are local
by construction: accept when the stratum gains (exactly: a deterministic evaluation) and a
fixed-size uniform sample of the other units shows no loss, sized so that when at least
``local_share`` of the other units lose, the sample shows a loss with probability at least
``1 - false_accept_rate``.

Everything here is a pure, deterministic computation on the scores it is given: it must
not touch the ledger, an evaluator or any RNG.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument

__all__ = [
    "DEFAULT_BETS",
    "NOISY_BETS",
    "AcceptanceDecision",
    "BettingTest",
    "PairedTest",
    "local_sample_size",
    "run_level",
]

#: Stakes for sampling without replacement, as fractions of the largest stake the null
#: allows (``1 / (1 + m)``): a bold one that certifies a clean run quickly, cautious ones
#: that survive a loss on a graded reward.
DEFAULT_BETS: tuple[float, ...] = (0.5, 0.8, 0.95)
#: Stakes for noisy draws (with replacement), where the log-optimal stake is smaller.
NOISY_BETS: tuple[float, ...] = (0.2, 0.45, 0.7)
#: In a noisy evaluation, at most this many draws per held-out unit, then a rejection.
DRAWS_PER_UNIT = 2


def _log_mean_exp(values: Sequence[float]) -> float:
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values) / len(values))


def run_level(false_accept_rate: float, decision: int) -> float:
    """The level of decision number ``decision`` (1, 2, ...) under per-run control.

    ``false_accept_rate / (j (j + 1))``: the levels sum to ``false_accept_rate`` over any
    number of decisions, so the chance that a run ever commits a candidate no better than
    its head stays below it (a union bound; it holds however the decisions depend on each
    other). Half of it goes to the first decision, a sixth to the second, and so on.
    """
    if decision < 1:
        raise InvalidArgument(f"decision={decision!r}: decisions are numbered from 1")
    return false_accept_rate / (decision * (decision + 1))


def local_sample_size(others: int, local_share: float, false_accept_rate: float) -> int:
    """Units outside the stratum the local null samples (without replacement) before it accepts.

    The smallest ``m`` such that, were ``ceil(local_share * others)`` of the ``others``
    units losses, a uniform sample of ``m`` would miss all of them with probability at most
    ``false_accept_rate`` (the hypergeometric zero-count tail); all of them when none is
    small enough.
    """
    if others <= 0:
        return 0
    bad = max(1, math.ceil(local_share * others - 1e-9))  # 0.07 * 100 is 7.000000000000001: 7 units
    miss = 1.0
    for m in range(1, others + 1):
        miss *= max(0.0, (others - bad - (m - 1)) / (others - (m - 1)))
        if miss <= false_accept_rate:
            return m
    return others


class BettingTest:
    """A betting e-process for "the mean difference is positive", for values in [-1, 1].

    With ``population`` (sampling without replacement from that many units) the null is
    "the population's values sum to at most ``null_total``"; without it (draws with
    replacement, or fresh noisy draws) each value's mean given the past is at most 0.
    The wealth of each stake ``c`` grows by ``1 + c * cap * (x - m)`` per value, ``m`` the
    largest conditional mean the null allows and ``cap = 1 / (1 + m)`` the largest stake
    that keeps the wealth nonnegative; the e-value is the mean wealth over the stakes.

    Args:
        population: units in all (None: with replacement).
        null_total: the largest population sum the null allows (without replacement only).
        bets: the stakes, fractions of ``cap`` in (0, 1).

    Raises:
        InvalidArgument: a stake out of range, or a ``null_total`` with replacement.
    """

    def __init__(self, population: int | None, null_total: float = 0.0,
                 bets: Sequence[float] = DEFAULT_BETS) -> None:
        if not bets or any(not 0.0 < b < 1.0 for b in bets):
            raise InvalidArgument(f"bets={tuple(bets)!r}: use stakes in (0, 1)")
        if population is None and null_total != 0.0:
            raise InvalidArgument("null_total needs a population (sampling without replacement)")
        self.population = population
        self.null_total = float(null_total)
        self.bets = tuple(bets)
        self.seen = 0
        self.total = 0.0
        self.log_wealth = [0.0] * len(self.bets)

    def null_mean(self) -> float | None:
        """The largest mean the null allows for the next value (None: no value is left)."""
        if self.population is None:
            return 0.0
        left = self.population - self.seen
        if left <= 0:
            return None
        return (self.null_total - self.total) / left

    def add(self, x: float) -> None:
        """The next value (clipped to [-1, 1])."""
        x = -1.0 if x < -1.0 else 1.0 if x > 1.0 else float(x)
        if self.population is None:
            m = 0.0
        else:
            left = self.population - self.seen
            if left <= 0:
                raise InvalidArgument(f"all {self.population} unit(s) were already added")
            m = (self.null_total - self.total) / left
        if -1.0 < m < 1.0:  # outside, the null forces or forbids every value: no stake
            scale = (x - m) / (1.0 + m)
            if scale:
                log1p = math.log1p
                wealth = self.log_wealth
                for k, c in enumerate(self.bets):
                    wealth[k] += log1p(c * scale)
        self.seen += 1
        self.total += x

    def log_e_value(self) -> float:
        """``log E``."""
        return _log_mean_exp(self.log_wealth)

    def e_value(self) -> float:
        """The e-value so far (1.0 before any value)."""
        return math.exp(min(700.0, self.log_e_value()))

    def best_log_e_value(self, values: int) -> float:
        """``log E`` were the next ``values`` values all +1 (with replacement: the curtailment bound)."""
        return _log_mean_exp([w + values * math.log1p(c) for w, c in zip(self.log_wealth, self.bets)])


@dataclass(frozen=True)
class AcceptanceDecision:
    """Where one candidate's paired test stands (the final one once ``settled``).

    Args:
        settled: the evaluation may stop: the decision is ``accept``.
        accept: commit-worthy (only meaningful once ``settled``).
        e_value: the test's e-value ``E`` (1.0 before any evidence).
        threshold: ``1 / level``, what ``E`` must reach.
        scored: held-out task scores behind the decision (draws, with replacement).
        gains: scored tasks where the candidate scored higher than the head.
        losses: scored tasks where it scored lower.
        regressions: tasks the head passes (``>= pass_mark``) and the candidate fails.
        net_gain: the summed difference over the scored tasks.
        candidate_mean: the candidate's mean over the scored tasks.
        head_mean: the head's mean over the same tasks.
        reason: a sentence saying why, with the numbers.
        null: ``"full"`` (the full held-out mean) or ``"local"``.
        sampling: ``"without-replacement"`` or ``"with-replacement"``.
        level: the false-accept rate this decision was tested at (``false_accept_rate``,
            or its share under per-run control).
        certain: accepted because the full held-out mean is better for certain (a
            deterministic evaluation, with what is unscored unable to undo the gain).
    """

    settled: bool
    accept: bool
    e_value: float
    threshold: float
    scored: int
    gains: int
    losses: int
    regressions: int
    net_gain: float
    candidate_mean: float
    head_mean: float
    reason: str
    null: str = "full"
    sampling: str = "without-replacement"
    level: float = 0.05
    certain: bool = False

    def evidence(self, held_out: int) -> dict[str, Any]:
        """The numbers behind the decision, JSON-ready (`agentdescent.MergeReport.evidence`)."""
        return {"scored": self.scored, "held_out": held_out, "gains": self.gains, "losses": self.losses,
                "regressions": self.regressions, "e_value": self.e_value, "threshold": self.threshold,
                "candidate_mean": self.candidate_mean, "head_mean": self.head_mean, "null": self.null,
                "sampling": self.sampling, "level": self.level, "certain": self.certain}

    @property
    def confidence(self) -> float:
        """``1 - 1 / E`` (0 when ``E <= 1``; 1 when ``certain``): what `agentdescent.MergeReport.p_improve` reports."""
        if self.certain:
            return 1.0
        return max(0.0, 1.0 - 1.0 / self.e_value) if self.e_value > 0 else 0.0


class PairedTest:
    """The paired sequential test of one candidate against the head (see the module docstring).

    Units are held-out tasks or groups of them (`agentdescent.merge.measurement` builds
    them); a unit's value is the sum of its tasks' differences over ``unit_size``, the
    largest unit, so it lies in [-1, 1]. Without replacement: feed the stratum's units
    with `add_stratum` (all of them, first), then the others in the random order with
    `add`; with replacement, every draw with `add`. Ask `verdict` after each look.

    Args:
        units: held-out units in all.
        false_accept_rate: this decision's level, in (0, 1); the threshold is its inverse.
        max_regressions: regressions tolerated; None disables the guard.
        pass_mark: the reward at which a task counts as passed.
        sampling: ``"without"`` (deterministic scores) or ``"with"`` (fresh noisy draws).
        stratum: units scored first and in full (without replacement only).
        unit_size: tasks in the largest unit (the scale of a unit's value).
        null: ``"full"`` or ``"local"`` (without replacement only).
        local_share: the local null's bound on the share of other units that lose.
        draw_limit: with replacement, draws before the test rejects (default
            `DRAWS_PER_UNIT` per unit).
        bets: the stakes (default `DEFAULT_BETS` without replacement, `NOISY_BETS` with).
        n_tasks: held-out tasks in all, for the reasons (default: one per unit).

    Raises:
        InvalidArgument: a rate, a mark, a sampling, a null or a stake out of range.
    """

    def __init__(self, units: int, false_accept_rate: float = 0.05, max_regressions: int | None = 0,
                 pass_mark: float = 0.5, *, sampling: str = "without", stratum: Sequence[int] = (),
                 unit_size: int = 1, null: str = "full", local_share: float = 0.3,
                 draw_limit: int | None = None, bets: Sequence[float] | None = None,
                 n_tasks: int | None = None) -> None:
        if not 0.0 < false_accept_rate < 1.0:
            raise InvalidArgument(f"false_accept_rate={false_accept_rate!r}: use a rate in (0, 1)")
        if not 0.0 < pass_mark <= 1.0:  # also refuses NaN
            raise InvalidArgument(f"pass_mark={pass_mark!r}: use a reward in (0, 1]")
        if sampling not in ("without", "with"):
            raise InvalidArgument(f"sampling={sampling!r}: use 'without' (deterministic) or 'with' (noisy)")
        if null not in ("full", "local"):
            raise InvalidArgument(f"null={null!r}: use 'full' (the held-out mean) or 'local'")
        if sampling == "with" and (stratum or null == "local"):
            raise InvalidArgument("a stratum and the local null need sampling without replacement")
        if unit_size < 1:
            raise InvalidArgument(f"unit_size={unit_size!r}: use the task count of the largest unit (>= 1)")
        if bets is not None and (not bets or any(not 0.0 < b < 1.0 for b in bets)):
            raise InvalidArgument(f"bets={tuple(bets)!r}: use stakes in (0, 1)")
        self.units = units
        self.n_tasks = units if n_tasks is None else n_tasks
        self.false_accept_rate = false_accept_rate
        self.max_regressions = max_regressions
        self.pass_mark = pass_mark
        self.sampling = sampling
        self.stratum = frozenset(stratum)
        self.unit_size = unit_size
        self.null = null
        self.local_share = local_share
        self.threshold = 1.0 / false_accept_rate
        self._log_threshold = math.log(self.threshold)
        self.bets = tuple(bets) if bets is not None else (NOISY_BETS if sampling == "with" else DEFAULT_BETS)
        self.draw_limit = draw_limit if draw_limit is not None else DRAWS_PER_UNIT * units
        others = units - len(self.stratum)
        self.local_sample = local_sample_size(others, local_share, false_accept_rate) if null == "local" else 0
        self.test: BettingTest | None = None if sampling == "without" else BettingTest(None, 0.0, self.bets)
        self.stratum_sum = 0.0  # in task units
        self.stratum_done: set[int] = set()
        self.rest_sum = 0.0  # in task units, the units fed with `add`
        self.rest_units = 0
        self.rest_losses = 0  # units outside the stratum with a net loss (the local null's count)
        self.scored = 0
        self.gains = 0
        self.losses = 0
        self.regressions = 0
        self.net_gain = 0.0
        self._sum_c = 0.0
        self._sum_h = 0.0

    def _pairs(self, pairs: Sequence[tuple[float, float]], regressions: int | None) -> float:
        total = sum_c = sum_h = 0.0
        found = gains = losses = 0
        mark = self.pass_mark
        for c, h in pairs:
            c = 0.0 if c < 0.0 else 1.0 if c > 1.0 else float(c)
            h = 0.0 if h < 0.0 else 1.0 if h > 1.0 else float(h)
            sum_c += c
            sum_h += h
            if c > h + 1e-12:
                gains += 1
            elif c < h - 1e-12:
                losses += 1
                found += h >= mark > c
        total = sum_c - sum_h
        self.scored += len(pairs)
        self._sum_c += sum_c
        self._sum_h += sum_h
        self.gains += gains
        self.losses += losses
        self.regressions += found if regressions is None else regressions
        self.net_gain += total
        return total

    def add_stratum(self, unit: int, pairs: Sequence[tuple[float, float]]) -> None:
        """A unit of the stratum, scored in full: ``(candidate, head)`` per task (without replacement).

        Raises:
            InvalidArgument: not a stratum unit, scored twice, or after the first `add`.
        """
        if self.test is not None:
            raise InvalidArgument("the stratum must be scored before the other units")
        if unit not in self.stratum or unit in self.stratum_done:
            raise InvalidArgument(f"unit {unit} is not an unscored unit of the stratum")
        self.stratum_done.add(unit)
        self.stratum_sum += self._pairs(pairs, None)

    @property
    def stratum_complete(self) -> bool:
        """Every stratum unit was scored."""
        return len(self.stratum_done) == len(self.stratum)

    def add(self, unit: int, pairs: Sequence[tuple[float, float]], regressions: int | None = None) -> None:
        """The next unit of the random order (without replacement) or the next draw (with).

        Args:
            unit: the unit's index (for messages).
            pairs: ``(candidate, head)`` per task of the unit, in [0, 1].
            regressions: regressions this unit shows, when the caller confirmed them by
                re-drawing (a noisy evaluation); None counts every pair where the head
                passes and the candidate fails.

        Raises:
            InvalidArgument: a stratum unit, or a stratum not yet complete.
        """
        if self.test is None:
            if not self.stratum_complete:
                raise InvalidArgument("score every stratum unit before the others")
            if unit in self.stratum:
                raise InvalidArgument(f"unit {unit} belongs to the stratum")
            self.test = BettingTest(self.units - len(self.stratum), -self.stratum_sum / self.unit_size, self.bets)
        total = self._pairs(pairs, regressions)
        self.rest_sum += total
        self.rest_units += 1
        self.rest_losses += total < -1e-12
        self.test.add(total / self.unit_size)

    def e_value(self) -> float:
        """The test's e-value so far."""
        return self.test.e_value() if self.test is not None else 1.0

    def verdict(self, high_rest: float | None = None, low_rest: float | None = None,
                futility_sample: int = 0) -> AcceptanceDecision:
        """Whether the evaluation can stop, given the pairs so far.

        Args:
            high_rest: without replacement, the largest gain the unscored tasks could
                still add together (``sum(1 - head)``, 1 where the head's score is
                unknown); None when every unit is scored.
            low_rest: the largest loss they could add together (``-sum(head)``, -1 where
                unknown); None when every unit is scored.
            futility_sample: reject once this many units outside the stratum (or draws)
                are scored and the net gain is not positive (0: never).
        """
        over = self.max_regressions is not None and self.regressions > self.max_regressions
        if self.sampling == "with":
            return self._with_replacement(over, futility_sample)
        complete = high_rest is None
        net = self.stratum_sum + self.rest_sum
        # certain only with a bound on what the unscored tasks could lose (or none left)
        certain_gain = net + (0.0 if complete else low_rest) > 1e-12 if complete or low_rest is not None else False
        log_e = self.test.log_e_value() if self.test is not None else 0.0
        passed = self.stratum_complete and log_e >= self._log_threshold and net > 1e-12
        if self.null == "full" and not (over or complete or certain_gain or passed):  # the common look
            curtailed = net + (high_rest or 0.0) <= 1e-12
            futile = futility_sample and self.stratum_complete and self.rest_units >= futility_sample and net <= 1e-12
            if not (curtailed or futile):
                return self._decision(False, False, log_e, "undecided")
        decide = functools.partial(self._decision, log_e=log_e)
        counts = functools.partial(self._counts, log_e)
        if over:
            return decide(True, False, reason=f"regresses {self.regressions} held-out task(s) the head passes "
                                              f"(tolerated: {self.max_regressions}); {counts()}")
        if self.null == "local":
            return self._local(decide, counts, complete)
        if certain_gain:
            what = "every held-out task scored" if complete else "the unscored tasks cannot undo it"
            return decide(True, True, reason=f"the full held-out mean is better for certain ({what}): a net gain "
                                             f"of {net:.3g}; {counts()}", certain=True)
        if passed:
            return decide(True, True, reason=f"paired test passed for the full held-out mean: {counts()} "
                                             f"(false-accept rate {self.false_accept_rate:.3g})")
        if complete:
            return decide(True, False, reason=f"no held-out gain over the full set: {counts()}")
        if net + (high_rest or 0.0) <= 1e-12:
            return decide(True, False, reason=f"cannot show a net gain even if every unscored task gains: {counts()}")
        return decide(True, False, reason=f"futility: no net gain after the affected tasks and {self.rest_units} "
                                          f"sampled unit(s): {counts()}")

    def _decision(self, settled: bool, accept: bool, log_e: float, reason: str, certain: bool = False,
                  sampling: str = "without-replacement") -> AcceptanceDecision:
        n = self.scored
        return AcceptanceDecision(settled, accept, math.exp(min(700.0, log_e)), self.threshold, n, self.gains,
                                  self.losses, self.regressions, self.net_gain, self._sum_c / n if n else 0.0,
                                  self._sum_h / n if n else 0.0, reason,
                                  "full" if sampling == "with-replacement" else self.null, sampling,
                                  self.false_accept_rate, certain)

    def _counts(self, log_e: float) -> str:
        grouped = f" in {self.units} unit(s)" if self.units != self.n_tasks else ""
        return (f"{self.gains} gain(s), {self.losses} loss(es) on {self.scored} of {self.n_tasks} task(s){grouped} "
                f"({len(self.stratum_done)} of {len(self.stratum)} affected units, {self.rest_units} sampled); "
                f"E={math.exp(min(700.0, log_e)):.3g} vs {self.threshold:.3g}")

    def _local(self, decide: Any, counts: Any, complete: bool) -> AcceptanceDecision:
        if self.stratum_complete and self.stratum_sum <= 1e-12:
            return decide(True, False, reason=f"local null: the affected tasks show no net gain ({self.stratum_sum:.3g}); "
                                       f"{counts()}")
        if self.rest_losses:
            return decide(True, False, reason=f"local null: {self.rest_losses} sampled unit(s) outside the affected ones "
                                       f"lose; {counts()}")
        if self.stratum_complete and (self.rest_units >= self.local_sample or complete):
            return decide(True, True, reason=f"local null: the affected tasks gain {self.stratum_sum:.3g} and "
                                      f"{self.rest_units} sampled other unit(s) show no loss (so fewer than "
                                      f"{self.local_share:.0%} of them lose, at rate {self.false_accept_rate:.3g}); "
                                      f"{counts()}")
        if complete:
            return decide(True, False, reason=f"local null: nothing left to score; {counts()}")
        return decide(False, False, reason="undecided")

    def _with_replacement(self, over: bool, futility_sample: int) -> AcceptanceDecision:
        assert self.test is not None
        log_e = self.test.log_e_value()
        draws = self.rest_units
        decide = functools.partial(self._decision, log_e=log_e, sampling="with-replacement")

        def counts() -> str:
            return (f"{self.gains} gain(s), {self.losses} loss(es) in {draws} fresh draw(s) of {self.units} "
                    f"unit(s); E={math.exp(min(700.0, log_e)):.3g} vs {self.threshold:.3g}")

        if over:
            return decide(True, False, reason=f"regresses {self.regressions} held-out task(s) the head passes, "
                                              f"confirmed by re-drawing (tolerated: {self.max_regressions}); "
                                              f"{counts()}")
        if log_e >= self._log_threshold and self.net_gain > 1e-12:
            return decide(True, True, reason=f"paired test passed for the full held-out mean (noisy draws): "
                                             f"{counts()} (false-accept rate {self.false_accept_rate:.3g})")
        left = self.draw_limit - draws
        if left <= 0:
            return decide(True, False, reason=f"not enough held-out evidence in {draws} draw(s): {counts()}")
        if self.test.best_log_e_value(left) < self._log_threshold:
            return decide(True, False, reason=f"cannot pass even if every remaining draw gains: {counts()}")
        if futility_sample and draws >= futility_sample and self.net_gain <= 1e-12:
            return decide(True, False, reason=f"futility: no net gain after {draws} draw(s): {counts()}")
        return decide(False, False, reason="undecided")
