"""Statistical acceptance: the annealed threshold, the Beta posterior, the guards."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent.acceptance import (
    BetaPosterior,
    decide_acceptance,
    delta_for_version,
    evaluation_order,
    required_gain,
    required_probability,
    sequential_verdict,
    tie_break_weight,
)

# --------------------------------------------------------------------------- threshold


def test_required_probability_at_v1_and_v64():
    assert required_probability(1) == pytest.approx(0.50539, abs=1e-5)
    assert required_probability(1) > 0.505
    assert required_probability(64) == pytest.approx(0.75, abs=1e-12)
    assert delta_for_version(64) == pytest.approx(0.25, abs=1e-12)


def test_required_probability_formula():
    for v in (1, 2, 10, 64, 100, 300, 1000):
        assert delta_for_version(v) == pytest.approx(max(0.01, 0.5 * 0.5 ** (v / 64)))
    assert required_probability(64, base_delta=0.2) == pytest.approx(0.9)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=10**9))
def test_required_probability_never_above_099(version):
    p = required_probability(version)
    assert 0.5 < p <= 0.99


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=5000), st.integers(min_value=0, max_value=500))
def test_required_probability_never_decreases_with_the_version(version, step):
    assert required_probability(version + step) >= required_probability(version)


def test_required_probability_saturates_at_099():
    assert required_probability(10_000) == pytest.approx(0.99)


def test_negative_version_is_refused():
    with pytest.raises(ValueError, match="version"):
        delta_for_version(-1)


# --------------------------------------------------------------------------- posterior


def test_identical_posteriors_give_one_half():
    for a, b in [(0, 0), (3, 4), (10, 0), (0.5, 7.25), (60, 40)]:
        p = BetaPosterior(a, b).prob_greater(BetaPosterior(a, b))
        assert p == pytest.approx(0.5, abs=1e-12)


def test_identical_score_lists_never_pass_the_threshold():
    for scores in ([1.0, 0.0, 1.0], [0.5] * 7, [1.0] * 12, [0.0] * 5):
        d = decide_acceptance(scores, scores, version=1)
        assert d.p_improve == pytest.approx(0.5, abs=1e-12)
        assert not d.accept


def test_prob_greater_is_complementary():
    x, y = BetaPosterior(5, 2), BetaPosterior(2, 5)
    assert x.prob_greater(y) + y.prob_greater(x) == pytest.approx(1.0, abs=1e-9)
    assert x.prob_greater(y) > 0.9


def test_from_scores_counts_graded_rewards_fractionally_and_clips():
    post = BetaPosterior.from_scores([0.7, 1.0, 0.0, 1.5, -2.0])
    assert post.successes == pytest.approx(0.7 + 1.0 + 0.0 + 1.0 + 0.0)
    assert post.failures == pytest.approx(5 - post.successes)
    assert post.a == pytest.approx(1 + post.successes)
    assert post.mean == pytest.approx(post.a / (post.a + post.b))


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_beta_posterior_rejects_bad_counts(bad):
    with pytest.raises(ValueError, match="successes"):
        BetaPosterior(bad, 1.0)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=60),
    data=st.data(),
)
def test_p_improve_is_monotone_in_candidate_successes(n, data):
    head_k = data.draw(st.integers(min_value=0, max_value=n), label="head successes")
    k1 = data.draw(st.integers(min_value=0, max_value=n), label="k1")
    k2 = data.draw(st.integers(min_value=k1, max_value=n), label="k2")
    head = [1.0] * head_k + [0.0] * (n - head_k)
    low = [1.0] * k1 + [0.0] * (n - k1)
    high = [1.0] * k2 + [0.0] * (n - k2)
    p_low = decide_acceptance(low, head, 1, max_regressions=None).p_improve
    p_high = decide_acceptance(high, head, 1, max_regressions=None).p_improve
    assert p_high >= p_low - 1e-12
    if k2 > k1 and 1e-9 < p_low < 1 - 1e-9:  # strictly, away from float saturation
        assert p_high > p_low


@settings(max_examples=100, deadline=None)
@given(
    s=st.floats(min_value=0, max_value=50),
    extra=st.floats(min_value=0.01, max_value=20),
    f=st.floats(min_value=0, max_value=50),
    other=st.tuples(st.floats(0, 50), st.floats(0, 50)),
)
def test_prob_greater_grows_with_fractional_successes(s, extra, f, other):
    y = BetaPosterior(*other)
    assert BetaPosterior(s + extra, f).prob_greater(y) >= BetaPosterior(s, f).prob_greater(y) - 1e-12


# --------------------------------------------------------------------------- decision


def test_clear_improvement_is_accepted_at_v1():
    head = [1.0] * 4 + [0.0] * 6
    cand = [1.0] * 8 + [0.0] * 2
    d = decide_acceptance(cand, head, version=1)
    assert d.accept
    assert d.p_improve > d.required
    assert d.regressions == 0
    assert d.candidate_mean == pytest.approx(0.8)
    assert d.head_mean == pytest.approx(0.4)


def test_a_held_out_regression_is_refused_even_when_p_is_high():
    head = [1.0] + [0.0] * 9
    cand = [0.0] + [1.0] * 9  # solves eight more, breaks one the head passed
    d = decide_acceptance(cand, head, version=1)
    assert d.p_improve > 0.99
    assert d.regressions == 1
    assert not d.accept
    assert "regresses 1" in d.reason
    # the guard is a knob: tolerate one regression and the same evidence passes
    assert decide_acceptance(cand, head, version=1, max_regressions=1).accept
    assert decide_acceptance(cand, head, version=1, max_regressions=None).accept


def test_graded_regression_uses_the_pass_mark():
    head = [0.6, 0.0, 0.0, 0.0]
    cand = [0.4, 1.0, 1.0, 1.0]
    assert decide_acceptance(cand, head, 1).regressions == 1
    assert decide_acceptance(cand, head, 1, pass_mark=0.7).regressions == 0


def test_same_inputs_same_decision():
    head = [1.0, 0.0, 0.5, 0.25, 1.0, 0.0]
    cand = [1.0, 0.5, 0.5, 0.75, 1.0, 0.0]
    first = decide_acceptance(cand, head, 7, self_verify_delta=0.1)
    second = decide_acceptance(list(cand), list(head), 7, self_verify_delta=0.1)
    assert first == second
    assert first.p_improve == second.p_improve  # bit for bit, no sampling


def test_score_lists_must_match_and_not_be_empty():
    with pytest.raises(ValueError, match="same held-out tasks"):
        decide_acceptance([1.0], [1.0, 0.0], 1)
    with pytest.raises(ValueError, match="non-empty"):
        decide_acceptance([], [], 1)


# --------------------------------------------------------------------------- tie-break


@pytest.mark.parametrize(
    ("delta", "weight"),
    [
        (None, 0.0),
        (math.nan, 0.0),
        (math.inf, 0.0),
        (0.0, 0.0),
        (0.1, 0.4),
        (-0.1, 0.4),
        (0.2, 0.8),
        (0.25, 1.0),
        (-0.6, 1.0),
        (1.0, 1.0),
    ],
)
def test_tie_break_weight(delta, weight):
    assert tie_break_weight(delta) == pytest.approx(weight)


def test_the_old_tie_break_is_an_explicit_opt_in():
    scores = [1.0, 0.0, 1.0, 0.0]
    without = decide_acceptance(scores, scores, 1)
    with_positive = decide_acceptance(scores, scores, 1, self_verify_delta=0.25, self_verify_counts=True)
    with_negative = decide_acceptance(scores, scores, 1, self_verify_delta=-0.25, self_verify_counts=True)
    assert not without.accept
    assert with_positive.accept
    assert with_positive.p_improve > required_probability(1)
    assert not with_negative.accept
    assert with_negative.p_improve < 0.5


def test_larger_self_verify_delta_helps_more_up_to_the_cap():
    scores = [1.0, 0.0] * 3
    ps = [
        decide_acceptance(scores, scores, 1, self_verify_delta=d, self_verify_counts=True).p_improve
        for d in (0.0, 0.05, 0.1, 0.25, 0.9)
    ]
    assert ps[0] < ps[1] < ps[2] < ps[3]
    assert ps[3] == pytest.approx(ps[4])  # the weight is capped at 1


def test_self_verify_delta_cannot_outvote_a_clear_held_out_loss():
    head = [1.0] * 6 + [0.0] * 2
    cand = [1.0] * 2 + [0.0] * 6
    d = decide_acceptance(cand, head, 1, self_verify_delta=1.0, max_regressions=None)
    assert not d.accept
    assert d.p_improve < 0.5


# --------------------------------------------------------------------------- the evidence rule


def test_the_reported_real_model_tie_does_not_commit():
    scores = [0, 0.5, 0, 0, 0.5, 0]
    assert not decide_acceptance(scores, scores, 1, self_verify_delta=0.5).accept


_score = st.sampled_from([0.0, 0.5, 1.0])


@given(st.lists(_score, min_size=1, max_size=40), st.integers(1, 500),
       st.one_of(st.none(), st.floats(-1, 1)))
@settings(max_examples=200, deadline=None)
def test_identical_held_out_scores_never_commit(scores, version, delta):
    assert not decide_acceptance(scores, list(scores), version, self_verify_delta=delta).accept


@given(st.lists(st.tuples(_score, _score), min_size=1, max_size=30), st.integers(1, 200))
@settings(max_examples=200, deadline=None)
def test_an_accepted_candidate_gains_on_held_out(pairs, version):
    cand, head = [c for c, _ in pairs], [h for _, h in pairs]
    d = decide_acceptance(cand, head, version, self_verify_delta=1.0)
    if d.accept:
        assert sum(cand) > sum(head)


# --------------------------------------------------------------------------- the sequential test


@given(st.lists(st.tuples(_score, _score), min_size=1, max_size=30), st.integers(1, 200),
       st.integers(0, 2**32), st.sampled_from([0, 1, None]), st.data())
@settings(max_examples=300, deadline=None)
def test_curtailed_decisions_equal_full_ones(pairs, version, seed, max_regressions, data):
    cand, head = [c for c, _ in pairs], [h for _, h in pairs]
    full = decide_acceptance(cand, head, version, max_regressions=max_regressions)
    order = evaluation_order(head, seed)
    assert sorted(order) == list(range(len(head)))
    k = data.draw(st.integers(1, len(head)))
    observed = {i: cand[i] for i in order[:k]}
    verdict = sequential_verdict(head, observed, version, max_regressions=max_regressions, futility=0.0)
    if verdict.settled:
        assert verdict.exact
        assert verdict.accept == full.accept  # an exact stop is the full evaluation's decision
    if verdict.accept:
        assert k == len(head)  # never an early acceptance


@given(st.lists(st.tuples(_score, _score), min_size=1, max_size=30), st.integers(1, 200),
       st.floats(0.0, 0.5), st.data())
@settings(max_examples=300, deadline=None)
def test_the_sequential_test_never_accepts_what_the_full_evaluation_refuses(pairs, version, futility, data):
    cand, head = [c for c, _ in pairs], [h for _, h in pairs]
    full = decide_acceptance(cand, head, version)
    k = data.draw(st.integers(1, len(head)))
    verdict = sequential_verdict(head, {i: cand[i] for i in range(k)}, version, futility=futility)
    if verdict.accept:
        assert full.accept and k == len(head)


def test_futility_stops_junk_early_and_rarely_stops_a_real_gain():
    """Under the model the test assumes, false rejects stay near the stated budget."""
    import random

    rng = random.Random(7)
    n, budget = 60, 0.05
    stopped_good = good = stopped_junk = junk = 0
    for _ in range(400):
        head = [1.0 if rng.random() < 0.5 else 0.0 for _ in range(n)]
        rate = rng.random() * 0.4  # the candidate fixes this share of the head's failures
        cand = [1.0 if h == 1.0 or rng.random() < rate else 0.0 for h in head]
        full = decide_acceptance(cand, head, 1).accept
        order = evaluation_order(head, rng.randrange(2**32))
        need = required_gain(head, 1)
        verdict = None
        for k in [*range(8, n, 8), n]:
            verdict = sequential_verdict(head, {i: cand[i] for i in order[:k]}, 1, futility=budget,
                                         min_observed=8, needed_gain=need)
            if verdict.settled:
                break
        early = verdict is not None and verdict.settled and not verdict.accept and not verdict.exact
        if full:
            good += 1
            stopped_good += early
        elif sum(cand) == sum(head):
            junk += 1
            stopped_junk += verdict.settled and not verdict.accept
    assert good > 100 and junk > 10
    assert stopped_good / good <= 2 * budget
    assert stopped_junk == junk  # a candidate that changes nothing never survives to the end


def test_a_regression_settles_at_once_under_max_regressions_zero():
    head = [1.0, 0.0, 1.0, 0.0]
    verdict = sequential_verdict(head, {0: 0.0}, 1)
    assert verdict.settled and verdict.accept is False and verdict.exact


def test_sequential_verdict_names_bad_arguments():
    with pytest.raises(ValueError, match="futility"):
        sequential_verdict([1.0], {}, 1, futility=1.0)
    with pytest.raises(ValueError, match="index"):
        sequential_verdict([1.0], {3: 1.0}, 1)
