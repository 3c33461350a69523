"""Which tasks a diff most plausibly changes: the ranking behind "affected tasks first".

This module owns `Relevance`: a score per task for a diff and the tasks that prompted it.
A task scores when it shares the diff's meta group (the ``group_key`` value of a task the
diff was proposed from), and by the rarity-weighted words its prompt shares with the text
the diff writes (its keys and values): a rule that names "refund" scores the prompts that
say "refund", most where the word is rare. When the diff's text matches no prompt at all,
the prompts of the tasks it was proposed from are the fallback. A user hook
(``relevance(diff, trajectory_tasks, task) -> float``) replaces the ranking. The acceptance
test scores the held-out tasks in this order (`agentdescent.merge.acceptance.evaluation_order`),
and the task walk uses it to skip train tasks a commit has most likely solved.

Pure and deterministic: it must not call anything but the user's hook, or read a score.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..types import Diff, Task

__all__ = ["AFFECTED_SHARE", "EvidenceGroups", "Relevance", "RelevanceHook", "words"]

#: A task counts as *affected* by a diff when its score is at least this share of the best
#: score among the ranked tasks: a prompt that shares only a common word ("the") with the
#: diff is ranked, but not affected.
AFFECTED_SHARE = 0.5

#: ``relevance(diff, trajectory_tasks, task) -> float``: higher is more plausibly changed.
RelevanceHook = Callable[[Diff, Sequence[Task], Task], float]
#: How held-out tasks group into units of evidence (`AggregatorConfig.evidence_groups`): None
#: (duplicate prompts only), a ``task.meta`` key, or ``fn(task) -> hashable | None``.
EvidenceGroups = str | Callable[[Task], Any] | None

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    """The lower-cased word tokens of ``text`` (letters and digits; at least two characters)."""
    return {w for w in _WORD.findall(text.lower()) if len(w) > 1}


class Relevance:
    """Scores tasks by how plausibly a diff changes them (see the module docstring).

    Args:
        tasks: the tasks to rank (their prompts set the word rarities).
        group_key: a ``task.meta`` key naming a task's group, or None.
        hook: a user ranking that replaces this one, or None.
    """

    def __init__(self, tasks: Sequence[Task], group_key: str | None = None, hook: RelevanceHook | None = None) -> None:
        self.tasks = list(tasks)
        self.group_key = group_key
        self.hook = hook
        self._words = [words(t.prompt) for t in self.tasks]
        counts: dict[str, int] = {}
        for ws in self._words:
            for w in ws:
                counts[w] = counts.get(w, 0) + 1
        n = max(1, len(self.tasks))
        #: A word in every prompt says nothing (0); one in a few says a lot.
        self._idf = {w: math.log(n / c) for w, c in counts.items()}
        self._rare = math.log(n) if n > 1 else 1.0  # a word no ranked prompt uses

    def scores(self, diff: Diff, trajectory: Sequence[Task]) -> list[float]:
        """One non-negative score per task, higher for more plausibly changed (0: no link at all)."""
        return self._rank(diff, trajectory, self.tasks, self._words)

    def affected(self, diff: Diff, trajectory: Sequence[Task]) -> list[float]:
        """`scores`, with every task below `AFFECTED_SHARE` of the best one set to 0 (0: not affected)."""
        ranked = self.scores(diff, trajectory)
        return _cut(ranked, max(ranked, default=0.0))

    def affects_any(self, diff: Diff, trajectory: Sequence[Task], tasks: Sequence[Task]) -> bool:
        """Whether ``diff`` plausibly changes any of ``tasks`` (other tasks than the ranked ones).

        They are scored like the ranked tasks (a word the ranked prompts never use counts as
        rare) and affected when at least `AFFECTED_SHARE` of the best score over both.
        """
        if not tasks:
            return False
        own = self._rank(diff, trajectory, list(tasks), [words(t.prompt) for t in tasks])
        best = max(max(self.scores(diff, trajectory), default=0.0), max(own))
        return any(_cut(own, best))

    def _rank(self, diff: Diff, trajectory: Sequence[Task], tasks: Sequence[Task],
              prompt_words: Sequence[set[str]]) -> list[float]:
        if self.hook is not None:
            return [max(0.0, float(self.hook(diff, trajectory, task))) for task in tasks]
        rare = self._rare

        def overlap(query: set[str], ws: set[str]) -> float:
            return sum(self._idf.get(w, rare) for w in query & ws)

        text = " ".join(f"{k} {v or ''}" for k, v in diff.ops.items())
        query = words(text.replace(":", " ").replace("-", " "))
        lexical = [overlap(query, ws) for ws in prompt_words]
        if not any(lexical) and trajectory:
            origin = set().union(*(words(t.prompt) for t in trajectory))
            lexical = [overlap(origin, ws) for ws in prompt_words]
        if self.group_key is not None:
            groups = {t.meta.get(self.group_key) for t in trajectory} - {None}
            top = max(lexical, default=0.0) + 1.0
            lexical = [v + (top if t.meta.get(self.group_key) in groups else 0.0)
                       for v, t in zip(lexical, tasks)]
        return lexical


def _cut(scores: Sequence[float], best: float) -> list[float]:
    floor = AFFECTED_SHARE * best
    return [s if s > 0 and s >= floor else 0.0 for s in scores]
