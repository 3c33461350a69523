"""The value model and the learning allocator (SPEC §6)."""

from __future__ import annotations

import math
import random
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentdescent import (
    AllocateDecision,
    AllocatorContext,
    LearningValueModel,
    ValueBudgetAllocator,
)
from agentdescent.budget.allocator import pre_spend_context
from agentdescent.types import Diff, EvidenceCard


def ctx(advantage: float | None = 0.0, size: int = 1, blast: float = 0.2) -> AllocatorContext:
    return AllocatorContext(advantage=advantage, size=size, blast_radius=blast)


# ----------------------------------------------------------------------------- features


def test_features_use_only_pre_spend_fields() -> None:
    a = AllocatorContext(before_after_delta=0.9, advantage=1.5, size=3, p_improve=0.99,
                         uncertainty=0.1, stable_distance=4.0, blast_radius=0.4)
    b = AllocatorContext(advantage=1.5, size=3, blast_radius=0.4)
    assert a.features() == b.features()
    assert a.features()[0] == 1.5
    assert a.features()[1] == pytest.approx(math.log1p(3) / math.log1p(100))
    assert a.features()[2] == 0.4


def test_size_feature_saturates_at_the_ceiling_and_none_advantage_is_zero() -> None:
    assert ctx(size=100).features()[1] == 1.0
    assert ctx(size=10_000).features()[1] == 1.0
    assert ctx(size=0).features()[1] == 0.0
    assert ctx(advantage=None).features()[0] == 0.0


def test_pre_spend_context_ignores_the_self_verify_delta() -> None:
    diff = Diff("d", "a", {"k1": "v", "k2": "w"})
    before = EvidenceCard(diff, {"a": 1}, None, 0.7, [])
    after = EvidenceCard(diff, {"a": 1}, 1.0, 0.7, [])
    assert pre_spend_context(before, 0.2).features() == pre_spend_context(after, 0.2).features()
    assert pre_spend_context(before, 0.2).size == 2


# ----------------------------------------------------------------------------- value model


def test_model_learns_that_high_advantage_predicts_a_commit() -> None:
    model = LearningValueModel()
    rng = random.Random(0)
    for _ in range(300):
        adv = rng.uniform(-2, 2)
        model.update(ctx(adv).features(), adv > 0)
    assert model.weights[0] > 0.5
    assert model.predict(ctx(1.5).features()) > 0.7
    assert model.predict(ctx(-1.5).features()) < 0.3


def test_model_stays_finite_after_an_outlier() -> None:
    model = LearningValueModel()
    model.update(ctx(1e300).features(), False)
    model.update((float("nan"), float("inf"), -float("inf")), True)
    for _ in range(50):
        model.update((1e12, ctx(size=10**9).features()[1], 1e9), True)  # no context holds blast_radius=1e9
    assert all(math.isfinite(w) for w in [*model.weights, model.bias])
    p = model.predict(ctx(1e300).features())
    assert 0.0 < p < 1.0
    assert abs(model.logit(ctx(1e300).features())) <= model.max_logit


def test_bias_learns_on_all_zero_features() -> None:
    model = LearningValueModel()
    for _ in range(100):
        model.update((0.0, 0.0, 0.0), True)
    assert model.bias > 0.5
    assert model.weights == [0.0, 0.0, 0.0]
    assert model.predict((0.0, 0.0, 0.0)) > 0.6


def test_blast_radius_moves_its_own_weight() -> None:
    model = LearningValueModel()
    for i in range(200):
        blast = 0.1 if i % 2 else 0.9
        model.update(AllocatorContext(advantage=0.0, size=0, blast_radius=blast).features(), blast < 0.5)
    assert model.weights[2] < -0.1
    assert model.weights[0] == 0.0 and model.weights[1] == 0.0


def test_large_size_cannot_dominate_a_high_advantage() -> None:
    model = LearningValueModel()
    rng = random.Random(1)
    for _ in range(400):
        # training signal: large diffs fail, small ones commit when their advantage is high
        size = rng.choice([1, 2, 40, 60, 80])
        adv = rng.uniform(-2, 2)
        model.update(ctx(adv, size).features(), size < 10 and adv > 0)
    high_adv_large = model.predict(ctx(2.5, 50).features())
    low_adv_large = model.predict(ctx(-2.5, 50).features())
    assert high_adv_large > low_adv_large
    # the size feature is bounded by 1, so a high advantage still counts
    assert high_adv_large >= 0.5


@given(st.lists(st.tuples(st.floats(allow_nan=True, allow_infinity=True), st.integers(0, 10**6),
                          st.floats(0, 1), st.booleans()), max_size=60))
def test_model_is_always_finite(updates: list[tuple[float, int, float, bool]]) -> None:
    model = LearningValueModel()
    for adv, size, blast, y in updates:
        model.update(ctx(adv, size, blast).features(), y)
    assert all(math.isfinite(w) for w in [*model.weights, model.bias])


def test_model_rejects_bad_knobs() -> None:
    with pytest.raises(ValueError, match="lr"):
        LearningValueModel(lr=-1)
    with pytest.raises(ValueError, match="max_logit"):
        LearningValueModel(max_logit=0)


# ----------------------------------------------------------------------------- allocator


def trained(seed: int | None = 0, **kwargs: object) -> ValueBudgetAllocator:
    alloc = ValueBudgetAllocator(seed=seed, **kwargs)
    for i in range(60):
        adv = 2.0 if i % 2 else -2.0
        alloc.observe(ctx(adv), adv > 0)
    return alloc


def test_no_skip_before_min_observations() -> None:
    alloc = ValueBudgetAllocator(seed=0, min_observations=5)
    for _ in range(4):
        alloc.observe(ctx(-3.0), False)
    for _ in range(50):
        d = alloc.decide(ctx(-3.0))
        assert d.deep_eval and not d.counterfactual
    assert alloc.n_skipped == 0 and alloc.n_counterfactual == 0


def test_no_skip_while_no_feature_weight_is_learned() -> None:
    alloc = ValueBudgetAllocator(seed=0, min_observations=1)
    for _ in range(30):
        alloc.observe(ctx(0.0, size=0, blast=0.0), False)  # only the bias can learn
    assert all(w == 0.0 for w in alloc.model.weights)
    assert all(alloc.decide(ctx(0.0, 0, 0.0)).deep_eval for _ in range(20))
    assert alloc.n_skipped == 0


def test_skips_low_value_after_learning_and_keeps_high_value() -> None:
    alloc = trained()
    decisions = [alloc.decide(ctx(-2.0)) for _ in range(200)]
    assert sum(not d.deep_eval for d in decisions) > 100
    assert all(alloc.decide(ctx(2.0)).deep_eval for _ in range(50))
    assert alloc.n_skipped == sum(not d.deep_eval for d in decisions)
    assert isinstance(decisions[0], AllocateDecision)
    assert decisions[0].n_observed == 60


def test_counterfactual_exploration_remeasures_and_corrects_the_model() -> None:
    # The model first learns that low advantage never commits; then the world changes.
    alloc = trained(seed=3, epsilon_start=0.5, epsilon_end=0.5)
    before = alloc.model.predict(ctx(-2.0).features())
    explored = 0
    for _ in range(400):
        d = alloc.decide(ctx(-2.0))
        if d.counterfactual:
            explored += 1
            assert d.deep_eval
            alloc.observe(ctx(-2.0), True)  # the re-measured truth: it does commit now
    assert explored > 0 and alloc.n_counterfactual == explored
    assert alloc.model.predict(ctx(-2.0).features()) > before
    assert alloc.decide(ctx(-2.0)).deep_eval


def test_epsilon_anneals_linearly_over_observations() -> None:
    alloc = ValueBudgetAllocator(seed=0)
    assert alloc.epsilon() == pytest.approx(0.3)
    for _ in range(20):
        alloc.observe(ctx(), True)
    assert alloc.epsilon() == pytest.approx(0.3 + (0.05 - 0.3) * 0.5)
    for _ in range(100):
        alloc.observe(ctx(), True)
    assert alloc.epsilon() == pytest.approx(0.05)


def test_same_seed_same_decisions_other_seed_differs_global_random_untouched() -> None:
    random.seed(1234)
    state = random.getstate()
    runs = []
    for seed in (7, 7, 8):
        alloc = trained(seed=seed)
        runs.append([(d.deep_eval, d.counterfactual) for d in (alloc.decide(ctx(-2.0)) for _ in range(300))])
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert random.getstate() == state


def test_concurrent_decide_and_observe_keep_counters_exact() -> None:
    alloc = trained(seed=5)
    base_observed = alloc.n_observed
    results: list[AllocateDecision] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        local = []
        for j in range(250):
            local.append(alloc.decide(ctx(-2.0 if j % 3 else 2.0)))
            alloc.observe(ctx(2.0), True)
        with lock:
            results.extend(local)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert alloc.n_observed == base_observed + 8 * 250
    assert alloc.n_decisions == 8 * 250
    assert alloc.n_skipped == sum(not d.deep_eval for d in results)
    assert alloc.n_counterfactual == sum(d.counterfactual for d in results)


def test_allocator_rejects_bad_knobs() -> None:
    with pytest.raises(ValueError, match="budget_start"):
        ValueBudgetAllocator(budget_start=1.5)
    with pytest.raises(ValueError, match="epsilon_start"):
        ValueBudgetAllocator(epsilon_start=-0.1)
    with pytest.raises(ValueError, match="min_observations"):
        ValueBudgetAllocator(min_observations=-1)
