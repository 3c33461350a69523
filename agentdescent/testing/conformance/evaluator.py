"""`EvaluatorConformance`: the behaviour every `agentdescent.merge.aggregator.Evaluator` must have.

Subclass it under a ``Test`` name and define ``make_evaluator()`` and ``states()``.
Plain Python (no pytest import).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ...merge.aggregator import Evaluator
from ...seams import adopt, missing_members
from ...types import Task
from ._checks import check

__all__ = ["EvaluatorConformance"]


def _is_reward(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and 0.0 <= x <= 1.0


class EvaluatorConformance:
    """What the aggregator relies on of an evaluator (the acceptance test pairs its scores task by task).

    The checks: ``held_out`` and ``cheap`` exist; ``held_out`` gives one reward in [0, 1]
    per held-out task, the same number of them for every state, the same scores when asked
    again; ``held_out_subset`` agrees with ``held_out`` at those indices, also after a
    ``prefetch``; ``cheap`` is a reward; ``verify`` is None or one reward per task given.
    """

    artifact_id = "artifact"

    def make_evaluator(self) -> Evaluator:
        """Return a new evaluator; every check calls this once.

        Raises:
            NotImplementedError: always, here; a subclass must override it.
        """
        raise NotImplementedError(f"{type(self).__name__}.make_evaluator(self) is not defined; return it")

    def states(self) -> Sequence[Mapping[str, str]]:
        """Artifact states to score (at least two that score differently make a better check)."""
        return ({}, {"rule": "always answer"})

    def tasks(self) -> Sequence[Task]:
        """Tasks for the ``verify`` check."""
        return (Task("conformance-1", "a task"), Task("conformance-2", "another task"))

    def _evaluator(self) -> Evaluator:
        return adopt(self.make_evaluator(), Evaluator, "make_evaluator()")

    def test_has_the_required_members(self) -> None:
        """``held_out`` and ``cheap`` exist (``verify`` and ``held_out_subset`` have defaults)."""
        missing = missing_members(self.make_evaluator(), Evaluator)
        check(not missing, f"an Evaluator needs held_out() and cheap(); it lacks {', '.join(missing)}")

    def test_held_out_is_one_repeatable_reward_per_task(self) -> None:
        """Same length for every state, rewards in [0, 1], the same when asked again."""
        evaluator = self._evaluator()
        lengths = set()
        for state in self.states():
            scores = list(evaluator.held_out(self.artifact_id, state))
            check(scores and all(_is_reward(s) for s in scores),
                  f"held_out must give rewards in [0, 1], got {scores!r:.100}")
            again = list(evaluator.held_out(self.artifact_id, dict(state)))
            check(scores == again, "held_out must score a state the same way every time (deterministic)")
            lengths.add(len(scores))
        check(len(lengths) == 1, f"held_out must score the same tasks for every state; lengths were {sorted(lengths)}")

    def test_held_out_subset_agrees_with_held_out(self) -> None:
        """``held_out_subset(indices)`` is ``held_out`` picked at ``indices``."""
        evaluator = self._evaluator()
        for state in self.states():
            full = list(evaluator.held_out(self.artifact_id, state))
            indices = list(range(len(full)))[::-2]
            part = list(evaluator.held_out_subset(self.artifact_id, state, indices))
            check(part == [full[i] for i in indices],
                  f"held_out_subset({indices}) gave {part!r:.80}, held_out gives {[full[i] for i in indices]!r:.80}")

    def test_cheap_and_verify_are_rewards(self) -> None:
        """``cheap`` is a reward; ``verify`` is None or one reward per task."""
        evaluator = self._evaluator()
        tasks = list(self.tasks())
        for state in self.states():
            cheap = evaluator.cheap(self.artifact_id, state)
            check(_is_reward(cheap), f"cheap must be a reward in [0, 1], got {cheap!r}")
            verified = evaluator.verify(self.artifact_id, state, tasks)
            check(verified is None or (len(list(verified)) == len(tasks) and all(_is_reward(s) for s in verified)),
                  f"verify must return None or one reward per task, got {verified!r:.80}")

    def test_prefetch_changes_no_score(self) -> None:
        """``prefetch`` (optional) only moves work earlier: the batches read after it are ``held_out``'s."""
        states = list(self.states())
        fulls = [list(self._evaluator().held_out(self.artifact_id, state)) for state in states]
        evaluator = self._evaluator()
        indices = list(range(len(fulls[0])))[::2]
        evaluator.prefetch(self.artifact_id, [(state, indices) for state in states])
        for state, full in zip(states, fulls):
            part = list(evaluator.held_out_subset(self.artifact_id, state, indices))
            check(part == [full[i] for i in indices],
                  f"after prefetch, held_out_subset({indices}) gave {part!r:.80}, held_out gives "
                  f"{[full[i] for i in indices]!r:.80}")
