"""The paired sequential acceptance test (`agentdescent.merge.acceptance`).

Unit tests of `PairedTest` (the e-value arithmetic, the regression guard, exact
curtailment, the deterministic shortcut, the junk case) and of `evaluation_order`, then
seeded simulations of the error rate: under the null (candidate and head scores drawn
i.i.d. from the same distribution) the sequential test, looked at after every batch and
stopped as the library stops, must accept no more often than ``false_accept_rate`` allows,
and a truly better candidate must accept in most runs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent.errors import InvalidArgument
from agentdescent.merge.acceptance import (
    DEFAULT_BETS,
    AcceptanceDecision,
    PairedTest,
    evaluation_order,
)

scores01 = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


def full_gain_e(k: int) -> float:
    """The e-value after ``k`` pairs that each gain 1.0: the mean over the stakes of ``(1 + lam)^k``."""
    return sum((1.0 + lam) ** k for lam in DEFAULT_BETS) / len(DEFAULT_BETS)


# --------------------------------------------------------------------------- PairedTest: basics


def test_a_fresh_test_has_e_value_one_and_is_undecided():
    test = PairedTest(10)
    assert test.e_value() == 1.0
    assert test.threshold == pytest.approx(20.0)
    decision = test.verdict([1.0] * 10)
    assert not decision.settled and not decision.accept
    assert decision.scored == 0 and decision.e_value == 1.0
    assert decision.confidence == 0.0
    assert "undecided" in decision.reason


@settings(max_examples=200, deadline=None)
@given(st.lists(scores01, min_size=1, max_size=60), st.booleans())
def test_identical_score_lists_never_accept(scores, certain):
    """The tie case: every pair is a tie, so E stays exactly 1 and nothing is accepted, ever."""
    n = len(scores)
    test = PairedTest(n)
    for i, s in enumerate(scores):
        test.add(i, s, s)
        rest = n - i - 1
        decision = test.verdict([1.0 - x for x in scores[i + 1:]] if rest else None,
                                certain=certain, covered=True)
        assert test.e_value() == 1.0
        assert decision.e_value == 1.0
        assert not decision.accept
        assert decision.gains == decision.losses == decision.regressions == 0
        assert decision.net_gain == 0.0
    assert decision.settled
    assert "no held-out gain" in decision.reason


def test_full_gains_accept_exactly_when_the_hand_computed_e_value_reaches_the_threshold():
    """E after k full gains is mean((1.5^k, 1.8^k, 1.95^k)): 18.2 at k=5, 33.5 at k=6 vs 1/0.05 = 20."""
    assert DEFAULT_BETS == (0.5, 0.8, 0.95)
    assert full_gain_e(5) == pytest.approx((1.5**5 + 1.8**5 + 1.95**5) / 3)
    assert full_gain_e(5) < 20.0 <= full_gain_e(6)
    n = 30
    test = PairedTest(n, false_accept_rate=0.05)
    for k in range(1, n + 1):
        test.add(k - 1, 1.0, 0.0)
        decision = test.verdict([1.0] * (n - k))
        assert decision.e_value == pytest.approx(full_gain_e(k), rel=1e-12)
        if k < 6:
            assert not decision.settled, k
        else:
            assert decision.settled and decision.accept
            break
    assert k == 6
    assert decision.gains == 6 and decision.losses == 0 and decision.regressions == 0
    assert decision.net_gain == pytest.approx(6.0)
    assert decision.candidate_mean == 1.0 and decision.head_mean == 0.0
    assert decision.confidence == pytest.approx(1.0 - 1.0 / full_gain_e(6))
    assert "paired test passed" in decision.reason


@pytest.mark.parametrize("rate", [0.01, 0.05, 0.1, 0.2, 0.5])
def test_the_number_of_full_gains_needed_follows_the_threshold(rate):
    needed = next(k for k in range(1, 100) if full_gain_e(k) >= 1.0 / rate)
    test = PairedTest(200, false_accept_rate=rate)
    for k in range(1, needed + 1):
        test.add(k, 1.0, 0.0)
        assert test.verdict([1.0] * (200 - k)).accept is (k == needed)


def test_graded_differences_move_the_wealth_by_one_plus_lam_d():
    test = PairedTest(5, bets=(0.5,))
    test.add(0, 0.7, 0.2)  # d = +0.5
    test.add(1, 0.4, 0.6)  # d = -0.2
    assert test.e_value() == pytest.approx((1 + 0.5 * 0.5) * (1 - 0.5 * 0.2))
    assert test.gains == 1 and test.losses == 1
    assert test.regressions == 1  # the head passes task 1 (0.6 >= 0.5) and the candidate fails it
    assert test.net_gain == pytest.approx(0.3)


def test_a_loss_above_the_pass_mark_is_not_a_regression():
    test = PairedTest(40)
    test.add(0, 0.6, 0.9)
    test.add(1, 0.1, 0.4)  # the head fails it anyway
    assert test.losses == 2 and test.regressions == 0
    assert not test.verdict([1.0] * 38).settled  # the guard (max_regressions=0) did not fire
    strict = PairedTest(4, pass_mark=0.95)
    strict.add(0, 0.2, 1.0)
    strict.add(1, 0.2, 0.9)  # below this pass mark: the head does not pass it
    assert strict.regressions == 1


def test_whether_a_loss_is_a_regression_is_decided_by_the_scores_alone():
    """No caller overrides the guard: a re-drawn pair counts with its means, and the means decide."""
    test = PairedTest(4)
    with pytest.raises(TypeError):
        test.add(0, 0.0, 1.0, regression=False)
    assert test.scored == {}
    test.add(0, 1 / 3, 2 / 3)  # means of three draws: the head passes, the candidate fails
    test.add(1, 0.5, 1.0)  # the candidate's mean reaches the pass mark: a loss, not a regression
    assert test.losses == 2 and test.regressions == 1


def test_scores_are_clipped_to_the_unit_interval():
    test = PairedTest(2)
    test.add(0, 1.7, -0.3)
    assert test.scored[0] == (1.0, 0.0)
    assert test.net_gain == 1.0
    assert test.e_value() == pytest.approx(full_gain_e(1))


def test_means_are_over_the_scored_tasks_only():
    test = PairedTest(10)
    test.add(3, 1.0, 0.5)
    test.add(7, 0.5, 0.0)
    decision = test.verdict([1.0] * 8)
    assert not decision.settled
    assert decision.scored == 2
    assert decision.candidate_mean == pytest.approx(0.75)
    assert decision.head_mean == pytest.approx(0.25)
    settled = test.verdict([1.0] * 8, "futility: no gain elsewhere")
    assert "2 gain(s), 0 loss(es) on 2 of 10 task(s)" in settled.reason


def test_confidence_is_one_minus_the_inverse_e_value():
    def at(e: float) -> AcceptanceDecision:
        return AcceptanceDecision(True, True, e, 20.0, 1, 1, 0, 0, 1.0, 1.0, 0.0, "")

    assert at(4.0).confidence == pytest.approx(0.75)
    assert at(1.0).confidence == 0.0
    assert at(0.3).confidence == 0.0
    assert at(0.0).confidence == 0.0


# --------------------------------------------------------------------------- the regression guard


def test_a_regression_over_the_limit_rejects_even_with_a_passing_e_value():
    test = PairedTest(40, max_regressions=0)
    for i in range(10):
        test.add(i, 1.0, 0.0)
    test.add(10, 0.0, 1.0)
    assert test.e_value() >= test.threshold  # the e-value alone would accept
    decision = test.verdict([1.0] * 29)
    assert decision.settled and not decision.accept
    assert decision.regressions == 1
    assert "regresses 1" in decision.reason


def test_max_regressions_tolerates_that_many():
    test = PairedTest(40, max_regressions=1)
    for i in range(10):
        test.add(i, 1.0, 0.0)
    test.add(10, 0.0, 1.0)
    assert test.verdict([1.0] * 29).accept
    test.add(11, 0.0, 1.0)
    decision = test.verdict([1.0] * 28)
    assert decision.settled and not decision.accept and decision.regressions == 2


def test_max_regressions_none_disables_the_guard():
    test = PairedTest(40, max_regressions=None)
    for i in range(5):
        test.add(i, 0.0, 1.0)
    assert not test.verdict([1.0] * 35).settled  # five regressions, and still open
    for i in range(5, 40):
        test.add(i, 1.0, 0.0)
        decision = test.verdict([1.0] * (39 - i) or None)
        if decision.settled:
            break
    assert decision.accept and decision.regressions == 5


# --------------------------------------------------------------------------- exact curtailment


def test_curtailment_rejects_once_even_full_gains_cannot_reach_the_threshold():
    n = 8
    test = PairedTest(n)
    test.add(0, 0.0, 0.4)  # a loss of 0.4, not a regression (the head fails it too)
    assert not test.verdict([1.0] * 7).settled
    test.add(1, 0.5, 0.5)
    # Six tasks to go: full gains everywhere would still make it (E ~ 22.1 >= 20).
    assert test.best_completion([1.0] * 6) >= 20.0
    assert not test.verdict([1.0] * 6).settled
    test.add(2, 0.5, 0.5)
    # Five to go: the best completion (E ~ 12.1) is below the threshold -> a settled rejection.
    assert test.best_completion([1.0] * 5) < 20.0
    decision = test.verdict([1.0] * 5)
    assert decision.settled and not decision.accept
    assert "cannot pass" in decision.reason
    # The same scores with a head known to pass two of the unscored tasks (no room) reject too,
    # while six unknown tasks would not have.
    assert test.verdict([1.0, 1.0, 1.0, 0.0, 0.0]).settled


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(scores01, scores01), max_size=10), st.lists(scores01, max_size=10), st.booleans())
def test_room_logs_give_the_same_verdict_as_the_room(prefix, room, certain):
    test = PairedTest(len(prefix) + len(room), max_regressions=None)
    for i, (c, h) in enumerate(prefix):
        test.add(i, c, h)
    logs = test.room_logs(room)
    assert test.best_completion_logs(logs) == pytest.approx(test.best_completion(room), rel=1e-12)
    by_room = test.verdict(room or None, certain=certain, covered=True)
    by_logs = test.verdict(None, room_logs=logs if room else None, certain=certain, covered=True)
    assert by_room == by_logs


def test_best_completion_uses_the_room_of_each_task():
    test = PairedTest(4, bets=(0.5,))
    test.add(0, 1.0, 0.0)
    assert test.best_completion([0.5, 0.0, 1.0]) == pytest.approx(1.5 * 1.25 * 1.5)
    assert test.best_completion([]) == pytest.approx(test.e_value())
    # A head that already scores 1 leaves no room: the task cannot help.
    assert test.best_completion([0.0, 0.0]) == pytest.approx(1.5)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(scores01, scores01), min_size=0, max_size=14),
       st.lists(scores01, min_size=1, max_size=14))
def test_curtailment_is_exact(prefix, rest_heads):
    """Curtailment rejects exactly the tests that could not pass even if every unscored task gained its room.

    Undecided => completing with full gains accepts; settled reject (not by the guard) =>
    even that best completion does not accept (and so no completion does: the wealth of
    every stake grows with each difference).
    """
    n = len(prefix) + len(rest_heads)
    test = PairedTest(n, max_regressions=None)
    for i, (c, h) in enumerate(prefix):
        test.add(i, c, h)
    room = [1.0 - h for h in rest_heads]
    decision = test.verdict(room)
    if decision.accept:
        return
    best = PairedTest(n, max_regressions=None)
    for i, (c, h) in enumerate(prefix):
        best.add(i, c, h)
    for j, h in enumerate(rest_heads):
        best.add(len(prefix) + j, 1.0, h)
    assert best.e_value() == pytest.approx(test.best_completion(room), rel=1e-9)
    final = best.verdict(None)
    assert final.accept is (not decision.settled)


# --------------------------------------------------------------------------- the deterministic shortcut


def test_certain_and_covered_accepts_a_net_gain_without_the_e_value():
    test = PairedTest(20)
    test.add(0, 1.0, 0.0)
    for i in range(1, 5):
        test.add(i, 0.5, 0.5)
    room = [1.0] * 15
    assert not test.verdict(room).settled  # not certain: E = 1.75, undecided
    assert not test.verdict(room, certain=True, covered=False).settled
    decision = test.verdict(room, certain=True, covered=True)
    assert decision.settled and decision.accept
    assert decision.e_value < decision.threshold
    assert "deterministic evaluation" in decision.reason


def test_certain_accepts_at_completion_even_when_not_covered():
    test = PairedTest(2)
    test.add(0, 1.0, 0.0)
    test.add(1, 0.2, 0.2)
    assert test.verdict(None, certain=True, covered=False).accept
    assert not test.verdict(None).accept


def test_a_certain_test_is_curtailed_only_when_no_task_has_room_left():
    """In a deterministic evaluation a net gain accepts without E: a low best completion is no reason to stop."""
    test = PairedTest(8)
    test.add(0, 0.0, 0.4)
    test.add(1, 0.5, 0.5)
    test.add(2, 0.5, 0.5)
    assert test.best_completion([1.0] * 5) < test.threshold
    assert test.verdict([1.0] * 5).settled  # not certain: curtailed
    open_ = test.verdict([1.0] * 5, certain=True, covered=False)
    assert not open_.settled
    closed = test.verdict([0.0] * 5, certain=True)  # the head passes every unscored task: nothing to gain
    assert closed.settled and not closed.accept and "cannot pass" in closed.reason
    # ... and the gain that comes later is accepted by the deterministic rule.
    test.add(3, 1.0, 0.0)
    assert test.verdict([1.0] * 4, certain=True, covered=True).accept


def test_certain_and_covered_does_not_accept_a_regression():
    test = PairedTest(20, max_regressions=0)
    for i in range(3):
        test.add(i, 1.0, 0.0)
    test.add(3, 0.0, 1.0)  # net gain 2, one regression
    decision = test.verdict([1.0] * 16, certain=True, covered=True)
    assert decision.settled and not decision.accept
    assert "regresses" in decision.reason


def test_certain_and_covered_does_not_accept_without_a_net_gain():
    test = PairedTest(20, max_regressions=None)
    test.add(0, 1.0, 0.0)
    test.add(1, 0.0, 1.0)
    decision = test.verdict([1.0] * 18, certain=True, covered=True)
    assert not decision.accept


# --------------------------------------------------------------------------- the junk case


@pytest.mark.parametrize("flipped_at", range(8))
@pytest.mark.parametrize("covered", [False, True])
def test_one_flipped_task_in_eight_never_accepts_when_not_certain(flipped_at, covered):
    """8 held-out tasks, one gain of 1.0 and seven ties: E never passes 1.75, far below 20."""
    n = 8
    test = PairedTest(n, false_accept_rate=0.05)
    for i in range(n):
        if i == flipped_at:
            test.add(i, 1.0, 0.0)
        else:
            test.add(i, 0.5, 0.5)
        rest = n - i - 1
        futile = "futility: a sample showed no gain" if i >= flipped_at else None
        for f in (None, futile):
            decision = test.verdict([1.0] * rest if rest else None, f, certain=False, covered=covered)
            assert not decision.accept
    assert test.e_value() == pytest.approx(full_gain_e(1))
    final = test.verdict(None)
    assert final.settled and not final.accept
    assert "not enough held-out evidence" in final.reason


def test_futility_settles_a_rejection_that_could_still_pass():
    test = PairedTest(20)
    test.add(0, 1.0, 0.0)
    decision = test.verdict([1.0] * 19, "futility: the affected tasks are scored")
    assert decision.settled and not decision.accept
    assert "futility" in decision.reason
    assert "not enough held-out evidence" in decision.reason


# --------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize("rate", [0.0, 1.0, -0.1, 1.5])
def test_a_bad_false_accept_rate_is_refused_naming_it(rate):
    with pytest.raises(InvalidArgument, match=f"false_accept_rate={rate!r}"):
        PairedTest(10, false_accept_rate=rate)


@pytest.mark.parametrize("bets", [(), (0.0,), (1.0,), (0.5, 1.2), (-0.5,)])
def test_bad_bets_are_refused_naming_them(bets):
    with pytest.raises(InvalidArgument, match="bets="):
        PairedTest(10, bets=bets)


@pytest.mark.parametrize("mark", [1.5, -0.1, float("nan")])
def test_a_pass_mark_out_of_range_is_refused_naming_it(mark):
    with pytest.raises(InvalidArgument, match="pass_mark"):
        PairedTest(10, pass_mark=mark)


def test_adding_a_task_twice_is_refused():
    test = PairedTest(10)
    test.add(3, 1.0, 0.0)
    with pytest.raises(InvalidArgument, match="task 3"):
        test.add(3, 0.0, 0.0)
    assert test.scored == {3: (1.0, 0.0)}
    assert test.gains == 1


# --------------------------------------------------------------------------- evaluation_order


relevances = st.lists(st.sampled_from([0.0, 0.0, 0.0, 0.5, 1.0, 2.0, 3.5]), min_size=0, max_size=40)
shares = st.sampled_from([0.0, 0.1, 0.25, 0.29, 0.5, 0.7, 0.9])


@settings(max_examples=300, deadline=None)
@given(relevances, st.integers(min_value=0, max_value=2**63 - 1), shares)
def test_evaluation_order_is_a_seeded_permutation(relevance, seed, share):
    n = len(relevance)
    order = evaluation_order(n, relevance, seed, share)
    assert sorted(order) == list(range(n))
    assert evaluation_order(n, list(relevance), seed, share) == order


@settings(max_examples=300, deadline=None)
@given(relevances, st.integers(min_value=0, max_value=2**32), shares)
def test_evaluation_order_puts_affected_tasks_first_with_the_random_share_interleaved(relevance, seed, share):
    n = len(relevance)
    order = evaluation_order(n, relevance, seed, share)
    affected = [i for i in order if relevance[i] > 0]
    rest = [i for i in order if relevance[i] <= 0]
    # The affected tasks, most relevant first.
    assert [relevance[i] for i in affected] == sorted((relevance[i] for i in affected), reverse=True)
    # While both kinds remain, the rest tasks are floor(random_share * L) of every prefix of length L.
    if affected and rest:
        last_affected = max(order.index(i) for i in affected)
        last_rest = max(order.index(i) for i in rest)
        for length in range(1, min(last_affected, last_rest) + 2):
            taken = sum(relevance[i] <= 0 for i in order[:length])
            assert taken == math.floor(share * length), (length, taken)
            assert share * length - 1 < taken <= share * length
        # Whichever kind runs out first, the other follows as one block.
        tail = order[min(last_affected, last_rest) + 1:]
        assert len({relevance[i] > 0 for i in tail}) <= 1


def test_evaluation_order_without_a_share_scores_every_affected_task_first():
    relevance = [0.0, 2.0, 0.0, 1.0, 0.0, 3.0, 0.0, 0.0]
    order = evaluation_order(8, relevance, seed=7, random_share=0.0)
    assert order[:3] == [5, 1, 3]
    assert sorted(order[3:]) == [0, 2, 4, 6, 7]


def test_evaluation_order_with_no_affected_task_is_a_seeded_shuffle():
    orders = {tuple(evaluation_order(20, [0.0] * 20, seed, 0.25)) for seed in range(10)}
    assert all(sorted(o) == list(range(20)) for o in orders)
    assert len(orders) > 1  # the seed matters
    assert evaluation_order(20, [0.0] * 20, 3) == evaluation_order(20, [0.0] * 20, 3)


def test_evaluation_order_breaks_relevance_ties_by_the_seed():
    relevance = [1.0] * 12
    orders = {tuple(evaluation_order(12, relevance, seed)) for seed in range(10)}
    assert len(orders) > 1
    assert all(sorted(o) == list(range(12)) for o in orders)


def test_evaluation_order_refuses_a_relevance_of_the_wrong_length():
    with pytest.raises(InvalidArgument, match="relevance has 3 value"):
        evaluation_order(4, [0.0, 1.0, 0.0], seed=1)


@pytest.mark.parametrize("share", [1.0, -0.1, 1.5])
def test_evaluation_order_refuses_a_bad_random_share(share):
    with pytest.raises(InvalidArgument, match=f"random_share={share!r}"):
        evaluation_order(4, [0.0] * 4, seed=1, random_share=share)


# --------------------------------------------------------------------------- error rate (simulated)


Pair = Callable[[random.Random], tuple[float, float]]
RUNS = 2000


def bernoulli_null(rng: random.Random) -> tuple[float, float]:
    """Pass/fail scores, both sides Bernoulli(p) with a per-task difficulty p ~ U(0, 1)."""
    p = rng.random()
    return float(rng.random() < p), float(rng.random() < p)


def graded_null(rng: random.Random) -> tuple[float, float]:
    """Graded scores on a 0.1 grid: a per-task level plus independent Gaussian noise on each side."""
    q = rng.random()

    def draw() -> float:
        return min(1.0, max(0.0, round(q + rng.gauss(0.0, 0.2), 1)))

    return draw(), draw()


def better(rng: random.Random) -> tuple[float, float]:
    """A truly better candidate: 40% of tasks discordant, a discordant task a gain with probability 0.8."""
    if rng.random() < 0.4:
        return (1.0, 0.0) if rng.random() < 0.8 else (0.0, 1.0)
    tie = float(rng.random() < 0.5)
    return tie, tie


def simulate(seed: int, pair: Pair, rate: float, max_regressions: int | None, n: int = 100) -> bool:
    """One simulated candidate through the library's stop rule: score a batch (1..8 tasks), look, stop once settled."""
    rng = random.Random(seed)
    pairs = [pair(rng) for _ in range(n)]
    test = PairedTest(n, rate, max_regressions)
    start = 0
    while start < n:
        end = min(n, start + rng.randint(1, 8))
        for i in range(start, end):
            test.add(i, *pairs[i])
        start = end
        rest = n - start
        decision = test.verdict([1.0] * rest if rest else None)  # head scores unknown: room 1
        if decision.settled:
            return decision.accept
    raise AssertionError("the test never settled although every task was scored")


def binomial_upper(n: int, p: float, level: float = 0.99) -> int:
    """The smallest k with P(Bin(n, p) <= k) >= level (the pmf in log space: no overflow)."""
    total = 0.0
    for k in range(n + 1):
        log_pmf = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                   + k * math.log(p) + (n - k) * math.log1p(-p))
        total += math.exp(log_pmf)
        if total >= level:
            return k
    return n


@pytest.mark.parametrize("pair", [bernoulli_null, graded_null], ids=["bernoulli", "graded"])
@pytest.mark.parametrize("rate,max_regressions", [(0.05, None), (0.2, None), (0.05, 0)])
def test_false_accept_rate_under_the_null_is_at_most_the_stated_rate(pair, rate, max_regressions):
    """Under the null the sequential test accepts at most ``false_accept_rate`` of the candidates.

    2000 seeded candidates per setting, each with 100 held-out tasks scored in batches of
    1-8 tasks (drawn per look) and looked at after every batch, stopped as soon as the
    verdict is settled (accept, or reject by the guard, curtailment, or completion). Tolerance: a one-sided 99% binomial
    bound. If the true rate were exactly ``false_accept_rate`` (the worst case Ville's
    inequality allows), the count of false accepts would be Bin(2000, rate), and it stays at
    or below its 99% quantile k99 with probability >= 0.99; so the observed rate must be <=
    k99 / 2000. Exact quantiles (computed below): rate 0.05 -> k99 = 123, bound 0.0615 (the
    normal approximation 0.05 + 2.326 * sqrt(0.05 * 0.95 / 2000) = 0.0613); rate 0.2 ->
    k99 = 442, bound 0.221. Measured with these seeds: bernoulli 0.0275 / 0.138 / 0.012 and
    graded 0.0135 / 0.107 / 0.0015 for (0.05, no guard) / (0.2, no guard) / (0.05, guard 0).
    """
    k99 = binomial_upper(RUNS, rate)
    bound = k99 / RUNS
    assert bound == pytest.approx(rate + 2.326 * math.sqrt(rate * (1 - rate) / RUNS), abs=1.5e-3)
    accepted = sum(simulate(seed, pair, rate, max_regressions) for seed in range(RUNS))
    observed = accepted / RUNS
    assert observed <= bound, f"false-accept rate {observed:.4f} > {bound:.4f} (stated {rate})"


def test_a_truly_better_candidate_accepts_in_most_runs():
    """Power: P(gain) = 0.8 on the (40%) discordant tasks of 100, no guard: accepted in >= 80% of 500 runs (measured 0.932)."""
    runs = 500
    accepted = sum(simulate(10_000 + seed, better, 0.05, None) for seed in range(runs))
    assert accepted / runs >= 0.8, accepted / runs


def test_the_simulated_null_does_produce_discordant_pairs():
    """The null simulations are not vacuous: both distributions give gains and losses in about equal numbers."""
    for pair in (bernoulli_null, graded_null):
        rng = random.Random(1)
        d = [c - h for c, h in (pair(rng) for _ in range(4000))]
        gains, losses = sum(x > 0 for x in d), sum(x < 0 for x in d)
        assert gains > 600 and losses > 600
        assert abs(gains - losses) < 0.1 * (gains + losses)
