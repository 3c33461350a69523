"""Which tasks a diff most plausibly changes: the ranking behind "affected tasks first".

This module owns `Relevance`: a score per task for a diff and the tasks that prompted it.
A task scores when it shares the diff's meta group (the ``group_key`` value of a task the
diff was proposed from), and by the rarity-weighted words its prompt shares with the text
the diff writes (its keys and values): a rule that names "refund" scores the prompts that
say "refund", most where the word is rare. When the diff's text matches no prompt at all,
the prompts of the tasks it was proposed from are the fallback. A user hook
(``relevance(diff, trajectory_tasks, task) -> float``) replaces the ranking. The acceptance
test scores the held-out tasks in this order (`agentdescent.acceptance.evaluation_order`),
and the task walk uses it to skip train tasks a commit has most likely solved.

Pure and deterministic: it must not call anything but the user's hook, or read a score.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from .types import Diff, Task

__all__ = ["Relevance", "RelevanceHook", "words"]

#: ``relevance(diff, trajectory_tasks, task) -> float``: higher is more plausibly changed.
RelevanceHook = Callable[[Diff, Sequence[Task], Task], float]

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
        #: A word in every prompt says nothing; one in a few says a lot.
        self._idf = {w: math.log((n + 1) / c) for w, c in counts.items()}

    def _overlap(self, query: set[str], i: int) -> float:
        return sum(self._idf.get(w, 0.0) for w in query & self._words[i])

    def scores(self, diff: Diff, trajectory: Sequence[Task]) -> list[float]:
        """One non-negative score per task (0: not plausibly affected)."""
        if self.hook is not None:
            return [max(0.0, float(self.hook(diff, trajectory, task))) for task in self.tasks]
        text = " ".join(f"{k} {v or ''}" for k, v in diff.ops.items())
        query = words(text.replace(":", " ").replace("-", " "))
        lexical = [self._overlap(query, i) for i in range(len(self.tasks))]
        if not any(lexical) and trajectory:
            origin = set().union(*(words(t.prompt) for t in trajectory))
            lexical = [self._overlap(origin, i) for i in range(len(self.tasks))]
        if self.group_key is not None:
            groups = {t.meta.get(self.group_key) for t in trajectory} - {None}
            top = max(lexical, default=0.0) + 1.0
            lexical = [v + (top if t.meta.get(self.group_key) in groups else 0.0)
                       for v, t in zip(lexical, self.tasks)]
        return lexical
