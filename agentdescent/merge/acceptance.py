"""Acceptance: the paired sequential test that decides whether a candidate replaces the head.

A candidate and the head are scored on the **same** held-out tasks, task by task. The
evidence is in the discordant pairs: tasks the candidate gains and tasks it loses, each
weighted by the size of the change (``d = candidate - head`` in [-1, 1]). The test is a
betting **e-process** (Ville's inequality): after each scored pair the wealth of a bettor
who stakes a fraction ``lam`` of it on "the candidate is better" grows by ``1 + lam * d``;
the e-value ``E`` is the mean wealth over a few fixed stakes (`DEFAULT_BETS`). If the
candidate is no better than the head (the discordant pairs are no more likely to be gains
than losses, whatever their size), ``E`` is a nonnegative supermartingale, so

    P(E ever reaches 1 / false_accept_rate) <= false_accept_rate

at any stopping time: the evaluation may stop for acceptance after any batch, in any
order chosen without looking at the scores, and may look as often as it likes, without
inflating the stated rate. Two identical score lists never commit (``E`` stays 1).

`PairedTest` holds one candidate's evidence and says after each batch whether the decision
is settled: **accept** once ``E >= 1 / false_accept_rate`` with a net gain and no more than
``max_regressions`` regressions (a task the head passes and the candidate fails);
**reject** once the regressions are over the limit, or once even the best completion (every
unscored task a full gain) cannot reach the threshold (exact curtailment of the test), or
when every task is scored. `evaluation_order` puts the tasks the diff most plausibly changes
first, interleaved with a seeded sample of the rest (where regressions show).

Everything here is a pure, deterministic computation on the scores it is given: it must not
touch the ledger, an evaluator or any RNG but the seeded one `evaluation_order` builds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument

__all__ = [
    "DEFAULT_BETS",
    "AcceptanceDecision",
    "PairedTest",
    "evaluation_order",
]

#: The stakes the e-value averages over: a bold one that accepts a clean run of gains
#: quickly, a cautious one that survives a few losses (graded or noisy rewards).
DEFAULT_BETS: tuple[float, ...] = (0.5, 0.8, 0.95)


def _log_mean_exp(values: Sequence[float]) -> float:
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values) / len(values))


@dataclass(frozen=True)
class AcceptanceDecision:
    """Where one candidate's paired test stands (the final one once ``settled``).

    Args:
        settled: the evaluation may stop: the decision is ``accept``.
        accept: commit-worthy (only meaningful once ``settled``).
        e_value: the test's e-value ``E`` (1.0 before any discordant pair).
        threshold: ``1 / false_accept_rate``, what ``E`` must reach.
        scored: held-out tasks scored for this candidate.
        gains: tasks where the candidate scored higher than the head.
        losses: tasks where it scored lower.
        regressions: tasks the head passes (``>= pass_mark``) and the candidate fails.
        net_gain: the summed difference over the scored tasks.
        candidate_mean: the candidate's mean over the scored tasks.
        head_mean: the head's mean over the same tasks.
        reason: a sentence saying why, with the numbers.
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

    def evidence(self, held_out: int) -> dict[str, Any]:
        """The numbers behind the decision, JSON-ready (`agentdescent.MergeReport.evidence`)."""
        return {"scored": self.scored, "held_out": held_out, "gains": self.gains, "losses": self.losses,
                "regressions": self.regressions, "e_value": self.e_value, "threshold": self.threshold,
                "candidate_mean": self.candidate_mean, "head_mean": self.head_mean}

    @property
    def confidence(self) -> float:
        """``1 - 1 / E`` (0 when ``E <= 1``): what `agentdescent.MergeReport.p_improve` reports."""
        return max(0.0, 1.0 - 1.0 / self.e_value) if self.e_value > 0 else 0.0


class PairedTest:
    """The paired sequential test of one candidate against the head (see the module docstring).

    Feed it scored pairs with `add`, ask `verdict` after each batch. The arithmetic is
    incremental (one log per stake per pair), so a decision costs microseconds.

    Args:
        n_tasks: held-out tasks in all (for the best-completion bound).
        false_accept_rate: the rate of accepting a candidate that is no better than the
            head, in (0, 1); the threshold is ``1 / false_accept_rate``.
        max_regressions: regressions tolerated; None disables the guard.
        pass_mark: the reward at which a task counts as passed.
        bets: the stakes ``lam`` in (0, 1) the e-value averages over.

    Raises:
        InvalidArgument: a rate, a mark or a stake out of range.
    """

    def __init__(self, n_tasks: int, false_accept_rate: float = 0.05, max_regressions: int | None = 0,
                 pass_mark: float = 0.5, bets: Sequence[float] = DEFAULT_BETS) -> None:
        if not 0.0 < false_accept_rate < 1.0:
            raise InvalidArgument(f"false_accept_rate={false_accept_rate!r}: use a rate in (0, 1)")
        if not 0.0 < pass_mark <= 1.0:  # also refuses NaN
            raise InvalidArgument(f"pass_mark={pass_mark!r}: use a reward in (0, 1]")
        if not bets or any(not 0.0 < b < 1.0 for b in bets):
            raise InvalidArgument(f"bets={tuple(bets)!r}: use stakes in (0, 1)")
        self.n_tasks = n_tasks
        self.false_accept_rate = false_accept_rate
        self.max_regressions = max_regressions
        self.pass_mark = pass_mark
        self.bets = tuple(bets)
        self.threshold = 1.0 / false_accept_rate
        self._log_threshold = math.log(self.threshold)
        self._log_wealth = [0.0] * len(self.bets)
        self.scored: dict[int, tuple[float, float]] = {}
        self.gains = 0
        self.losses = 0
        self.regressions = 0
        self.net_gain = 0.0
        self._sum_c = 0.0
        self._sum_h = 0.0

    def add(self, index: int, candidate: float, head: float) -> None:
        """Record the pair of scores on held-out task ``index`` (each in [0, 1])."""
        if index in self.scored:
            raise InvalidArgument(f"task {index} was already scored for this candidate")
        c = float(candidate)
        c = 0.0 if c < 0.0 else 1.0 if c > 1.0 else c
        h = float(head)
        h = 0.0 if h < 0.0 else 1.0 if h > 1.0 else h
        self.scored[index] = (c, h)
        self._sum_c += c
        self._sum_h += h
        d = c - h
        self.net_gain += d
        if d > 1e-12:
            self.gains += 1
        elif d < -1e-12:
            self.losses += 1
            if h >= self.pass_mark > c:
                self.regressions += 1
        else:
            return
        log1p = math.log1p
        wealth = self._log_wealth
        for k, lam in enumerate(self.bets):
            wealth[k] += log1p(lam * d)

    def e_value(self) -> float:
        """The test's e-value so far."""
        return math.exp(_log_mean_exp(self._log_wealth))

    def best_completion(self, room: Sequence[float]) -> float:
        """The e-value if each unscored task gained its ``room`` (``1 - head``, or 1 when unknown)."""
        return self.best_completion_logs(self.room_logs(room))

    def room_logs(self, room: Sequence[float]) -> list[float]:
        """Per stake, ``sum(log(1 + lam * r))`` over ``room``: what `best_completion_logs` adds."""
        return [sum(math.log1p(lam * r) for r in room if r > 0) for lam in self.bets]

    def best_completion_logs(self, room_logs: Sequence[float]) -> float:
        """`best_completion` from the per-stake log sums of the room (a caller that keeps them summed)."""
        return math.exp(_log_mean_exp([w + r for w, r in zip(self._log_wealth, room_logs)]))

    def verdict(self, room: Sequence[float] | None = None, futile: str | None = None, *,
                certain: bool = False, covered: bool = False, room_logs: Sequence[float] | None = None
                ) -> AcceptanceDecision:
        """Whether the evaluation can stop, given the pairs so far.

        Args:
            room: for each unscored task, the largest gain it could still show (``1 -
                head score``, or 1.0 when the head's score is not known); None when every
                task is scored. Used for exact curtailment.
            room_logs: instead of ``room``, its per-stake log sums (`room_logs`), for a
                caller that keeps them incrementally; None with ``room`` None means every
                task is scored.
            futile: why the caller judges further tasks not worth scoring (the futility
                rule: the tasks the diff plausibly affects are all scored and a sample of
                the others showed no gain), or None. A futile evaluation that has not
                passed is a rejection; unlike curtailment it may differ from the full
                evaluation's decision, which the benchmark measures.
            certain: the evaluation is known to be deterministic (`agentdescent.merge.noise`):
                a discordant pair is a fact, not a draw, so no noise can make a candidate
                look better than it is. Then a net gain with no regression over the limit
                is accepted once ``covered`` (what the caller requires to have seen: the
                diff's affected tasks and a sample of the others), and the e-value is not
                needed; the false-accept rate, a statement about noise, holds trivially.
            covered: see ``certain``.
        """
        n = len(self.scored)
        e = self.e_value()
        if room_logs is None and room:
            room_logs = self.room_logs(room)
        complete = room_logs is None
        over = self.max_regressions is not None and self.regressions > self.max_regressions
        gain = self.net_gain > 1e-12
        if not (over or complete or gain or futile is not None):  # the common look: nothing settled yet?
            if certain:
                settled = not any(r > 0 for r in room_logs)
            else:
                settled = self.best_completion_logs(room_logs) < self.threshold
            if not settled:
                return AcceptanceDecision(False, False, e, self.threshold, n, self.gains, self.losses,
                                          self.regressions, self.net_gain, self._sum_c / n if n else 0.0,
                                          self._sum_h / n if n else 0.0, "undecided")

        def decide(settled: bool, accept: bool, reason: str) -> AcceptanceDecision:
            return AcceptanceDecision(settled, accept, e, self.threshold, n, self.gains, self.losses,
                                      self.regressions, self.net_gain, self._sum_c / n if n else 0.0,
                                      self._sum_h / n if n else 0.0, reason)

        def counts() -> str:
            return (f"{self.gains} gain(s), {self.losses} loss(es) on {n} of {self.n_tasks} task(s); "
                    f"E={e:.3g} vs {self.threshold:.3g}")

        if over:
            return decide(True, False, f"regresses {self.regressions} held-out task(s) the head passes "
                                       f"(tolerated: {self.max_regressions}); {counts()}")
        if e >= self.threshold and self.net_gain > 1e-12:
            return decide(True, True, f"paired test passed: {counts()} "
                                      f"(false-accept rate {self.false_accept_rate:g})")
        if certain and (covered or complete) and self.net_gain > 1e-12:
            return decide(True, True, f"deterministic evaluation: a net gain of {self.net_gain:.3g} with no "
                                      f"regression; {counts()}")
        if complete:
            what = "no held-out gain" if self.net_gain <= 1e-12 else "not enough held-out evidence"
            return decide(True, False, f"{what}: {counts()}")
        # Exact curtailment. In a deterministic evaluation a net gain accepts without E, so
        # there only a test with no gain and no room left on any unscored task is curtailed.
        if certain:
            curtailed = self.net_gain <= 1e-12 and not any(r > 0 for r in room_logs)
        else:
            curtailed = self.best_completion_logs(room_logs) < self.threshold
        if curtailed:
            return decide(True, False, f"cannot pass even if every unscored task gains: {counts()}")
        if futile is not None:
            what = "no held-out gain" if self.net_gain <= 1e-12 else "not enough held-out evidence"
            return decide(True, False, f"{what} ({futile}): {counts()}")
        return decide(False, False, "undecided")


def evaluation_order(n_tasks: int, relevance: Sequence[float], seed: int, random_share: float = 0.25) -> list[int]:
    """The order a candidate's held-out tasks are scored in: the affected ones first, with a random sample.

    Tasks with a positive ``relevance`` (the ones the diff most plausibly changes) come
    first, most relevant first (ties in a seeded order); the rest are shuffled (seeded) and
    interleaved so that about ``random_share`` of the tasks scored so far come from them:
    that sample is where a regression outside the diff's own tasks shows. Once the
    relevant tasks run out, the rest follow. Deterministic for a given seed; it never reads
    a score.

    Args:
        n_tasks: held-out tasks.
        relevance: one non-negative number per task (0: not plausibly affected).
        seed: seeds the tie-break and the shuffle.
        random_share: share of the interleaved sample, in [0, 1).

    Raises:
        InvalidArgument: ``relevance`` has the wrong length, or ``random_share`` is out of range.
    """
    if len(relevance) != n_tasks:
        raise InvalidArgument(f"relevance has {len(relevance)} value(s) for {n_tasks} task(s)")
    if not 0.0 <= random_share < 1.0:
        raise InvalidArgument(f"random_share={random_share!r}: use a share in [0, 1)")
    rng = random.Random(seed)
    keys = [rng.random() for _ in range(n_tasks)]
    affected = sorted((i for i in range(n_tasks) if relevance[i] > 0), key=lambda i: (-relevance[i], keys[i]))
    rest = [i for i in range(n_tasks) if relevance[i] <= 0]
    rng.shuffle(rest)
    order: list[int] = []
    taken_rest = 0
    a = r = 0
    while a < len(affected) or r < len(rest):
        want_rest = r < len(rest) and (a >= len(affected) or taken_rest + 1 <= random_share * (len(order) + 1))
        if want_rest:
            order.append(rest[r])
            r += 1
            taken_rest += 1
        else:
            order.append(affected[a])
            a += 1
    return order
