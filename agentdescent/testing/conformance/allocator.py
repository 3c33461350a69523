"""`AllocatorConformance`: the behaviour every `agentdescent.budget.allocator.AllocatorPolicy` must have.

Subclass it under a ``Test`` name and define ``make_allocator()`` (seeded, so two calls
build twins). Plain Python (no pytest import).
"""

from __future__ import annotations

import json
import threading

from ...budget.allocator import AllocateDecision, AllocatorContext, AllocatorPolicy
from ...seams import adopt, missing_members
from ._checks import check

__all__ = ["AllocatorConformance"]


def _contexts() -> list[AllocatorContext]:
    return [AllocatorContext(advantage=a, size=s, blast_radius=b)
            for a in (-1.5, 0.0, 0.8) for s in (1, 3) for b in (0.1, 0.5)]


class AllocatorConformance:
    """What the budget governor and the aggregator rely on of an allocator.

    The checks: ``decide`` and ``observe`` exist; ``decide`` returns an
    `agentdescent.budget.allocator.AllocateDecision`; ``observe`` takes both outcomes; the
    optional members (the allocator's own, or the defaults) behave: ``budget_start`` is a
    fraction, ``stats()`` and ``state_dict()`` are JSON; ``load_state_dict`` of a twin's
    state makes the twin decide exactly as the original from then on (resume); and
    ``decide``/``observe`` from several threads at once lose no update.
    """

    #: Outcomes fed to the allocator before the checks compare decisions.
    warmup = 40

    def make_allocator(self) -> AllocatorPolicy:
        """Return a new allocator, seeded (two calls give twins); every check calls this.

        Raises:
            NotImplementedError: always, here; a subclass must override it.
        """
        raise NotImplementedError(f"{type(self).__name__}.make_allocator(self) is not defined; return it")

    def _allocator(self) -> AllocatorPolicy:
        return adopt(self.make_allocator(), AllocatorPolicy, "make_allocator()")

    def _train(self, allocator: AllocatorPolicy) -> None:
        contexts = _contexts()
        for i in range(self.warmup):
            ctx = contexts[i % len(contexts)]
            allocator.observe(ctx, (ctx.advantage or 0.0) > 0)

    def test_has_the_required_members(self) -> None:
        """``decide`` and ``observe`` exist (the rest has defaults)."""
        missing = missing_members(self.make_allocator(), AllocatorPolicy)
        check(not missing, f"an AllocatorPolicy needs decide() and observe(); it lacks {', '.join(missing)}")

    def test_decide_returns_a_decision_and_observe_takes_both_outcomes(self) -> None:
        """``decide`` gives an `AllocateDecision`; ``observe(ctx, True/False)`` returns quietly."""
        allocator = self._allocator()
        for ctx in _contexts():
            decision = allocator.decide(ctx)
            check(isinstance(decision, AllocateDecision),
                  f"decide must return an AllocateDecision, got {type(decision).__name__}")
            allocator.observe(ctx, True)
            allocator.observe(ctx, False)

    def test_optional_members_behave(self) -> None:
        """``budget_start`` is a fraction; ``stats()`` and ``state_dict()`` are JSON objects."""
        allocator = self._allocator()
        start = allocator.budget_start
        check(isinstance(start, (int, float)) and not isinstance(start, bool) and 0.0 <= start <= 1.0,
              f"budget_start must be a fraction in [0, 1], got {start!r}")
        self._train(allocator)
        for name in ("stats", "state_dict"):
            value = getattr(allocator, name)()
            check(isinstance(value, dict), f"{name}() must return a dict, got {type(value).__name__}")
            try:
                json.dumps(value)
            except (TypeError, ValueError) as exc:
                raise AssertionError(f"{name}() must be JSON-ready (it is saved with a run): {exc}") from None

    def test_a_restored_twin_decides_alike(self) -> None:
        """``load_state_dict(state_dict())`` on a twin: the same decisions from then on."""
        original, twin = self._allocator(), self._allocator()
        self._train(original)
        twin.load_state_dict(json.loads(json.dumps(original.state_dict())))
        for ctx in _contexts() * 3:
            a, b = original.decide(ctx), twin.decide(ctx)
            check(a == b, f"a restored allocator decides {b!r} where the original decides {a!r}")

    def test_concurrent_calls_lose_nothing(self) -> None:
        """``decide`` and ``observe`` from several threads at once raise nothing."""
        allocator = self._allocator()
        errors: list[BaseException] = []

        def work() -> None:
            try:
                for ctx in _contexts():
                    allocator.decide(ctx)
                    allocator.observe(ctx, bool(ctx.size % 2))
            except BaseException as exc:  # collected, reported below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        check(not errors, f"decide/observe from several threads raised {errors[:1]!r}")
