"""`StrategyConformance`: the behaviour every `agentdescent.merge.strategies.Strategy` must have.

Subclass it under a ``Test`` name and define ``make_strategy()``; pytest runs every check
against a fresh strategy. Plain Python (no pytest import).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ...merge.strategies import Strategy
from ...seams import adopt, missing_members
from ...types import Diff
from ._checks import check

__all__ = ["StrategyConformance"]


class StrategyConformance:
    """What the engines rely on of a strategy, checked on the proposals of `proposals`.

    The checks: the required members exist; ``initial()`` is a flat ``dict[str, str]``
    and ``render`` returns a ``str``; ``to_diff`` returns a `agentdescent.types.Diff`
    (targeting the artifact it was asked for, with string keys) or None; it never changes
    the state it was given; the same proposal on the same state gives the same ops (so
    workers in different processes that propose the same change fuse instead of
    duplicating); a proposal already applied changes nothing; and calls from several
    threads at once agree with serial calls (workers call it concurrently).
    """

    def make_strategy(self) -> Strategy:
        """Return a new strategy; every check calls this once.

        Raises:
            NotImplementedError: always, here; a subclass must override it.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.make_strategy(self) is not defined; return the strategy to check"
        )

    def proposals(self) -> Sequence[str]:
        """Proposals the checks feed to ``to_diff`` (override for a strategy with its own syntax)."""
        return ("Always check the label before answering.", "Prefer the shortest correct answer.")

    def _strategy(self) -> Strategy:
        return adopt(self.make_strategy(), Strategy, "make_strategy()")

    def test_has_the_required_members(self) -> None:
        """``initial``, ``render`` and ``to_diff`` exist."""
        strategy = self.make_strategy()
        missing = missing_members(strategy, Strategy)
        check(not missing, f"a Strategy needs {', '.join(Strategy.REQUIRED)}; it lacks {', '.join(missing)}")

    def test_initial_is_a_flat_str_dict_and_renders_to_str(self) -> None:
        """``initial()`` is ``dict[str, str]``; ``render`` of it is a ``str``, the same twice."""
        strategy = self._strategy()
        state = strategy.initial()
        check(isinstance(state, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in state.items()),
              f"initial() must be a flat dict of str to str, got {state!r:.100}")
        text = strategy.render(state)
        check(isinstance(text, str), f"render(state) must be a str, got {type(text).__name__}")
        check(strategy.render(dict(state)) == text, "render must be a pure function of the state")

    def test_to_diff_returns_a_diff_for_the_target_or_none(self) -> None:
        """Each proposal gives a `Diff` aimed at the artifact asked for, or None."""
        strategy = self._strategy()
        state = strategy.initial()
        for proposal in self.proposals():
            diff = strategy.to_diff(state, proposal, "worker-0", 1, "artifact-x")
            if diff is None:
                continue
            check(isinstance(diff, Diff), f"to_diff must return a Diff or None, got {type(diff).__name__}")
            check(diff.target == "artifact-x", f"to_diff(target='artifact-x') made a diff for {diff.target!r}")
            check(bool(diff.ops), f"a diff must change something; to_diff({proposal!r}) returned one with no ops")

    def test_to_diff_never_changes_the_state_it_is_given(self) -> None:
        """The state passed to ``to_diff`` is left as it was (workers share snapshots)."""
        strategy = self._strategy()
        state = strategy.initial()
        before = dict(state)
        for proposal in self.proposals():
            strategy.to_diff(state, proposal, "worker-0", 1, "artifact")
        check(state == before, f"to_diff changed the state it was given: {before!r:.80} -> {state!r:.80}")

    def test_the_same_proposal_gives_the_same_ops(self) -> None:
        """Two workers proposing the same change build the same ops (so they fuse)."""
        strategy = self._strategy()
        state = strategy.initial()
        for proposal in self.proposals():
            a = strategy.to_diff(state, proposal, "worker-0", 1, "artifact")
            b = strategy.to_diff(dict(state), proposal, "worker-1", 1, "artifact")
            check((a is None) == (b is None) and (a is None or a.ops == b.ops),
                  f"to_diff({proposal!r}) gave different ops for two workers: "
                  f"{None if a is None else a.ops!r:.80} vs {None if b is None else b.ops!r:.80}")

    def test_a_proposal_already_applied_changes_nothing(self) -> None:
        """Once a proposal's diff is applied, proposing it again is None or a no-op."""
        strategy = self._strategy()
        state = strategy.initial()
        for proposal in self.proposals():
            diff = strategy.to_diff(state, proposal, "worker-0", 1, "artifact")
            if diff is None:
                continue
            applied = diff.apply(state)
            again = strategy.to_diff(applied, proposal, "worker-0", 2, "artifact")
            if again is not None and not again.is_noop(applied):
                raise AssertionError(
                    f"to_diff({proposal!r}) on a state that already holds it still changes {again.ops!r:.80}")

    def test_concurrent_calls_agree_with_serial_ones(self) -> None:
        """Several threads calling ``to_diff`` and ``render`` at once get what one thread gets."""
        strategy = self._strategy()
        state = strategy.initial()
        proposals = list(self.proposals())
        serial = [(d.ops if d is not None else None) for d in
                  (strategy.to_diff(state, p, "w", 1, "artifact") for p in proposals)]
        results: list[list[object]] = []
        lock = threading.Lock()

        def work() -> None:
            got = [(d.ops if d is not None else None) for d in
                   (strategy.to_diff(state, p, "w", 1, "artifact") for p in proposals)]
            strategy.render(state)
            with lock:
                results.append(got)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        check(len(results) == 4 and all(r == serial for r in results),
              "to_diff from several threads at once disagrees with serial calls")
