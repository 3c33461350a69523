"""Value-directed budget allocation: which candidates still earn their self-verify rollout.

This module owns the allocator seam (`AllocatorPolicy`), the context it decides
on (`AllocatorContext`, built by `pre_spend_context` only from what a
worker knows *before* the optional spend), a small online logistic model, and the
learning `ValueBudgetAllocator` with counterfactual exploration. It must not
read the clock or the global RNG: its only randomness is its own seeded
``random.Random``.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import InvalidArgumentType
from ..seams import Seam
from ..types import EvidenceCard
from ..validation import check_fraction, check_int, check_real

__all__ = [
    "AllocateDecision",
    "AllocatorContext",
    "AllocatorPolicy",
    "LearningValueModel",
    "ValueBudgetAllocator",
    "pre_spend_context",
]

#: Diff sizes at or beyond this many ops saturate the size feature at 1.0.
SIZE_CEILING = 100
#: Inputs are clipped to this magnitude before the model sees them (outlier guard).
FEATURE_CLIP = 5.0


@dataclass(frozen=True)
class AllocatorContext:
    """What the allocator may know about a candidate.

    Only `features` feed the model, and they use only pre-spend knowledge; the
    other fields are audit data (they may be filled in after the spend for logs).

    Args:
        before_after_delta: the self-verify delta, when measured (audit only).
        advantage: group-relative z-score of the prompting rollout.
        size: number of ops in the worker's own diff.
        p_improve: the acceptance confidence ``1 - 1/E``, when measured (audit only).
        uncertainty: any spread the caller wants logged (audit only).
        stable_distance: versions between the card's base and the head (audit only).
        blast_radius: the artifact's blast radius, in [0, 1].

    Raises:
        InvalidArgumentType: ``size`` is not an int, or ``blast_radius`` not a number.
        InvalidArgument: ``size`` is negative, or ``blast_radius`` outside [0, 1] (or NaN):
            a feature the model learns from must be one a real card can have.
    """

    before_after_delta: float | None = None
    advantage: float | None = None
    size: int = 0
    p_improve: float | None = None
    uncertainty: float | None = None
    stable_distance: float = 0.0
    blast_radius: float = 0.2

    def __post_init__(self) -> None:
        check_int(self.size, "size", low=0, owner="AllocatorContext",
                  hint="the number of ops in the worker's own diff")
        check_fraction(self.blast_radius, "blast_radius", owner="AllocatorContext",
                       hint="the artifact's blast radius, as the ledger holds it")

    def features(self) -> tuple[float, float, float]:
        """``(advantage or 0.0, min(1, log1p(size) / log1p(100)), blast_radius)``."""
        size_feature = min(1.0, math.log1p(max(0, self.size)) / math.log1p(SIZE_CEILING))
        return (self.advantage or 0.0, size_feature, float(self.blast_radius))


def pre_spend_context(card: EvidenceCard, blast_radius: float) -> AllocatorContext:
    """The allocator context of a card, from its pre-spend fields only.

    The worker calls this before its self-verify rollout to ask the governor, and the
    aggregator calls it again on the same (original) card to report the outcome: one
    function, so the decision vector and the training vector cannot drift apart.
    """
    return AllocatorContext(
        advantage=card.advantage, size=card.diff.size(), blast_radius=float(blast_radius)
    )


@dataclass(frozen=True)
class AllocateDecision:
    """What the allocator decided for one candidate.

    Args:
        deep_eval: spend the optional evaluation (self-verify) on this candidate.
        counterfactual: the model would have skipped it; evaluated anyway to keep learning.
        predicted_value: the model's P(commit) for the candidate.
        n_observed: outcomes the allocator had learned from when it decided.
    """

    deep_eval: bool = True
    counterfactual: bool = False
    predicted_value: float = 0.0
    n_observed: int = 0


class AllocatorPolicy(Seam):
    """Decides which candidates earn optional spend, and learns from merge outcomes.

    ``decide`` is called by workers (any thread) through
    `agentdescent.budget.governor.BudgetGovernor.candidate_worth`; ``observe`` is called by
    the aggregator's ``_decide`` exactly once per measured merge outcome, from the
    merging thread. Implementations must be thread-safe.

    ``decide`` and ``observe`` are required; ``budget_start``, ``stats``, ``state_dict``
    and ``load_state_dict`` are optional, with the defaults below. Subclass this class to
    inherit them, or give any object with the two required methods: the engines and the
    governor wrap it (`agentdescent.seams.adopt`), taking whichever optional members it
    has as its own.
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("decide", "observe")
    OPTIONAL: ClassVar[tuple[str, ...]] = ("budget_start", "stats", "state_dict", "load_state_dict")

    def decide(self, ctx: AllocatorContext) -> AllocateDecision:
        """Decide for one candidate."""
        raise NotImplementedError

    def observe(self, ctx: AllocatorContext, committed: bool) -> None:
        """Learn from one measured outcome (True = committed)."""
        raise NotImplementedError

    #: The governor consults `decide` only once the remaining budget fraction falls below
    #: this; above it every candidate gets its optional spend without asking.
    budget_start: float = 0.5

    def stats(self) -> dict[str, Any]:
        """Counters for the run's budget summary (``result.budget["allocator"]``); default none."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """What the allocator has learned, JSON-ready, for a resumed run; default nothing.

        The engines save it with the run's progress after every round and hand it back
        to `load_state_dict` when the run resumes, so a resumed run keeps what it learned.
        """
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned (the default ignores it)."""


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


class LearningValueModel:
    """Online logistic regression of P(commit) on the three pre-spend features plus a bias.

    The logit is clipped to ``±max_logit`` so one lucky streak cannot make the model
    certain, inputs are clipped to ``±5`` so one outlier cannot blow a weight up, and
    every weight (bias included) carries L2 shrinkage ``reg``.

    Args:
        lr: SGD step size.
        reg: L2 coefficient.
        max_logit: logit clip.
    """

    def __init__(self, lr: float = 0.2, reg: float = 0.05, max_logit: float = 3.0) -> None:
        self.lr = check_real(lr, "lr", low=0.0, low_open=True, owner="LearningValueModel")
        self.reg = check_real(reg, "reg", low=0.0, owner="LearningValueModel")
        self.max_logit = check_real(max_logit, "max_logit", low=0.0, low_open=True, owner="LearningValueModel")
        self.weights = [0.0, 0.0, 0.0]
        self.bias = 0.0
        self.n_updates = 0

    @staticmethod
    def _clean(features: tuple[float, ...]) -> list[float]:
        out = []
        for x in features:
            x = float(x)
            if not math.isfinite(x):
                x = 0.0 if math.isnan(x) else math.copysign(FEATURE_CLIP, x)
            out.append(max(-FEATURE_CLIP, min(FEATURE_CLIP, x)))
        return out

    def logit(self, features: tuple[float, ...]) -> float:
        """The clipped logit for ``features``."""
        x = self._clean(features)
        z = self.bias + sum(w * xi for w, xi in zip(self.weights, x))
        return max(-self.max_logit, min(self.max_logit, z))

    def predict(self, features: tuple[float, ...]) -> float:
        """P(commit) for ``features``."""
        return _sigmoid(self.logit(features))

    def update(self, features: tuple[float, ...], committed: bool) -> None:
        """One SGD step on the logistic loss with L2 on every weight."""
        x = self._clean(features)
        err = (1.0 if committed else 0.0) - self.predict(features)
        self.weights = [
            w + self.lr * (err * xi - self.reg * w) for w, xi in zip(self.weights, x)
        ]
        self.bias += self.lr * (err - self.reg * self.bias)
        self.n_updates += 1

    def __repr__(self) -> str:
        w = ", ".join(f"{v:+.3f}" for v in self.weights)
        return f"LearningValueModel(weights=[{w}], bias={self.bias:+.3f}, n_updates={self.n_updates})"


class ValueBudgetAllocator(AllocatorPolicy):
    """A learning allocator: skip self-verify for candidates unlikely to commit.

    It evaluates everything until it has seen ``min_observations`` outcomes, and
    while no feature weight has grown past ``min_weight`` (the model has learned
    nothing but a base rate), and whenever the model predicts P(commit) >= 0.5.
    Otherwise it skips, except with probability epsilon (annealed linearly from
    ``epsilon_start`` to ``epsilon_end`` over the first ``epsilon_anneal``
    observations) when it evaluates anyway and marks the decision counterfactual, so
    the model keeps seeing what it would have skipped.

    Args:
        budget_start: the governor consults the allocator only once the remaining budget
            fraction falls below this.
        epsilon_start: exploration probability at the first observation.
        epsilon_end: exploration probability after the anneal.
        epsilon_anneal: observations over which epsilon anneals.
        min_observations: outcomes to see before any skip.
        min_weight: a non-bias weight must reach this magnitude before any skip.
        seed: seed of the allocator's private RNG.
        model: the value model (a fresh `LearningValueModel` by default).
    """

    def __init__(
        self,
        budget_start: float = 0.5,
        epsilon_start: float = 0.3,
        epsilon_end: float = 0.05,
        epsilon_anneal: int = 40,
        min_observations: int = 5,
        min_weight: float = 0.01,
        seed: int | None = None,
        model: LearningValueModel | None = None,
    ) -> None:
        owner = "ValueBudgetAllocator"
        budget_start = check_fraction(budget_start, "budget_start", owner=owner,
                                      hint="the remaining budget fraction below which it is consulted")
        epsilon_start = check_fraction(epsilon_start, "epsilon_start", owner=owner)
        epsilon_end = check_fraction(epsilon_end, "epsilon_end", owner=owner)
        epsilon_anneal = check_int(epsilon_anneal, "epsilon_anneal", low=0, owner=owner)
        min_observations = check_int(min_observations, "min_observations", low=0, owner=owner)
        min_weight = check_real(min_weight, "min_weight", low=0.0, owner=owner)
        check_int(seed, "seed", optional=True, owner=owner)
        if model is not None and not isinstance(model, LearningValueModel):
            raise InvalidArgumentType(f"{owner}(model={model!r:.60}): pass a LearningValueModel or None")
        self.budget_start = budget_start
        self.epsilon_start = epsilon_start
        self.epsilon_end = epsilon_end
        self.epsilon_anneal = epsilon_anneal
        self.min_observations = min_observations
        self.min_weight = min_weight
        self.seed = seed
        self.model = model if model is not None else LearningValueModel()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.n_observed = 0
        self.n_skipped = 0
        self.n_counterfactual = 0
        self.n_committed = 0
        self.n_decisions = 0
        self._predicted_sum = 0.0

    def epsilon(self) -> float:
        """The current exploration probability."""
        if self.epsilon_anneal == 0:
            return self.epsilon_end
        frac = min(1.0, self.n_observed / self.epsilon_anneal)
        return self.epsilon_start + (self.epsilon_end - self.epsilon_start) * frac

    def decide(self, ctx: AllocatorContext) -> AllocateDecision:
        """Decide whether ``ctx``'s candidate earns its self-verify rollout."""
        features = ctx.features()
        with self._lock:
            self.n_decisions += 1
            p = self.model.predict(features)
            self._predicted_sum += p
            n = self.n_observed
            learned = any(abs(w) >= self.min_weight for w in self.model.weights)
            if n < self.min_observations or not learned or p >= 0.5:
                return AllocateDecision(True, False, p, n)
            if self._rng.random() < self.epsilon():
                self.n_counterfactual += 1
                return AllocateDecision(True, True, p, n)
            self.n_skipped += 1
            return AllocateDecision(False, False, p, n)

    def observe(self, ctx: AllocatorContext, committed: bool) -> None:
        """Train on one measured merge outcome."""
        features = ctx.features()
        with self._lock:
            self.model.update(features, bool(committed))
            self.n_observed += 1
            if committed:
                self.n_committed += 1

    def stats(self) -> dict[str, Any]:
        """The counters, for summaries and the A/B harness (``result.budget["allocator"]``)."""
        with self._lock:
            return {
                "n_decisions": self.n_decisions,
                "n_observed": self.n_observed,
                "n_skipped": self.n_skipped,
                "n_counterfactual": self.n_counterfactual,
                "n_committed": self.n_committed,
                "epsilon": self.epsilon(),
                # the model's mean predicted P(commit) at decision time, to set against the
                # observed commit rate n_committed / n_observed (calibration at a glance)
                "mean_predicted_value": self._predicted_sum / self.n_decisions if self.n_decisions else None,
            }

    def state_dict(self) -> dict[str, Any]:
        """The model's weights, the counters and the private RNG's state (JSON-ready)."""
        with self._lock:
            version, internal, gauss = self._rng.getstate()
            return {
                "weights": list(self.model.weights), "bias": self.model.bias,
                "n_updates": self.model.n_updates, "n_observed": self.n_observed,
                "n_skipped": self.n_skipped, "n_counterfactual": self.n_counterfactual,
                "n_committed": self.n_committed, "n_decisions": self.n_decisions,
                "predicted_sum": self._predicted_sum, "rng": [version, list(internal), gauss],
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict`: the resumed allocator decides as the saved one would have."""
        with self._lock:
            self.model.weights = [float(w) for w in state["weights"]]
            self.model.bias = float(state["bias"])
            self.model.n_updates = int(state["n_updates"])
            for name in ("n_observed", "n_skipped", "n_counterfactual", "n_committed", "n_decisions"):
                setattr(self, name, int(state[name]))
            self._predicted_sum = float(state["predicted_sum"])
            version, internal, gauss = state["rng"]
            self._rng.setstate((version, tuple(internal), gauss))

    def __repr__(self) -> str:
        return (
            f"ValueBudgetAllocator(seed={self.seed!r}, n_observed={self.n_observed}, "
            f"n_skipped={self.n_skipped}, n_counterfactual={self.n_counterfactual})"
        )
