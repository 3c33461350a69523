"""The head's held-out scores per version: what was measured on it, and what it inherits.

The paired test scores a candidate and the head on the same tasks, but only the tasks it
needs: the head is scored task by task, when a candidate's evaluation reaches a task the
head has no score for (each measured once per version and cached here). When a candidate
is committed, its measured scores *are* the new head's (the same state), and the tasks it
was not scored on inherit the parent head's score, marked as inherited: an estimate, exact
for every task the diff does not change. The paired test uses measured scores only; the
round's reported held-out reward is the estimate over all tasks (measured where measured,
inherited elsewhere — or, for a task the accepted diff plausibly affects but that was not
scored before it was accepted, projected with the gain it showed on the affected tasks
that were — and the mean of what is known for a task never measured at all).

This module owns that bookkeeping (`Scoreboard`) and nothing else: it never calls an
evaluator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HeadEstimate", "Scoreboard"]


@dataclass(frozen=True)
class HeadEstimate:
    """The head's held-out reward as the scoreboard knows it.

    Args:
        reward: the mean over every held-out task (measured, else inherited, else imputed).
        measured: tasks scored on the head itself.
        inherited: tasks whose score comes from an ancestor version.
        tasks: held-out tasks in all.
    """

    reward: float
    measured: int
    inherited: int
    tasks: int

    @property
    def exact(self) -> bool:
        """Every task was scored on the head itself."""
        return self.measured == self.tasks


@dataclass
class _Version:
    measured: dict[int, float] = field(default_factory=dict)
    inherited: dict[int, float] = field(default_factory=dict)
    #: inherited scores that are earlier measurements no commit since plausibly changed
    clean: dict[int, float] = field(default_factory=dict)


class Scoreboard:
    """Per (artifact, version): the held-out scores measured on that state, and those it inherits.

    Args:
        n_tasks: held-out tasks (per artifact, the same tasks in the same order).
    """

    def __init__(self, n_tasks: int) -> None:
        self.n_tasks = n_tasks
        self._versions: dict[tuple[str, int], _Version] = {}

    def _entry(self, artifact_id: str, version: int) -> _Version:
        return self._versions.setdefault((artifact_id, version), _Version())

    def measured(self, artifact_id: str, version: int) -> dict[int, float]:
        """Task index -> score measured on this version (a copy)."""
        return dict(self._entry(artifact_id, version).measured)

    def inherited(self, artifact_id: str, version: int) -> dict[int, float]:
        """Task index -> score this version inherits (or projects), a copy."""
        return dict(self._entry(artifact_id, version).inherited)

    def known_on(self, artifact_id: str, version: int, indices: Iterable[int]) -> dict[int, float]:
        """Of ``indices``, those measured on this version, with their scores (no copy of the rest)."""
        measured = self._entry(artifact_id, version).measured
        return {i: measured[i] for i in indices if i in measured}

    def score(self, artifact_id: str, version: int, index: int) -> float | None:
        """The score measured on this version for task ``index``, or None."""
        return self._entry(artifact_id, version).measured.get(index)

    def record(self, artifact_id: str, version: int, scores: Mapping[int, float]) -> None:
        """Store scores measured on this version."""
        entry = self._entry(artifact_id, version)
        entry.measured.update({int(i): float(s) for i, s in scores.items()})
        for i in scores:
            entry.inherited.pop(int(i), None)

    def commit(self, artifact_id: str, parent: int, version: int, measured: Mapping[int, float],
               projected: Mapping[int, float] | None = None, affected: set[int] | None = None) -> None:
        """A candidate scored ``measured`` on its tasks became ``version``; it inherits the rest from ``parent``.

        ``projected`` are estimates for tasks the candidate's diff plausibly affects but that
        were not scored before it was accepted (its mean gain on the affected tasks that were);
        they count in `estimate` like inherited scores, never in a paired comparison.
        ``affected`` are the tasks the committed diff plausibly changes: an earlier
        measurement of any other task stays *clean* (`clean`), the pool the head estimate
        imputes a never-measured task from (never a score the paired test uses).
        """
        old = self._entry(artifact_id, parent)
        new = self._entry(artifact_id, version)
        new.measured.update({int(i): float(s) for i, s in measured.items()})
        for source in (old.inherited, old.measured):
            for i, s in source.items():
                if i not in new.measured:
                    new.inherited[i] = s
        for i, s in (projected or {}).items():
            if int(i) not in new.measured:
                new.inherited[int(i)] = min(1.0, max(0.0, float(s)))
        touched = affected or set()
        for source in (old.clean, old.measured):
            for i, s in source.items():
                if i not in new.measured and i not in touched:
                    new.clean[i] = s

    def clean(self, artifact_id: str, version: int, index: int) -> float | None:
        """An earlier measurement of task ``index`` that no commit since plausibly changed, or None."""
        return self._entry(artifact_id, version).clean.get(index)

    def estimate(self, artifact_id: str, version: int) -> HeadEstimate:
        """The head's held-out reward: measured, else inherited, else imputed.

        A task never scored on any version is one no committed diff plausibly changed
        (those are scored first), so it is imputed with the mean of the *clean* scores:
        earlier measurements no commit since plausibly changed (the starting head's sample,
        the random samples of later evaluations) — not with the mean of everything known,
        which the commits' gains would inflate. With no clean score, the mean of what is
        known.
        """
        entry = self._entry(artifact_id, version)
        known = {**entry.inherited, **entry.measured}
        untouched = [s for i, s in entry.clean.items() if i not in entry.measured] + [
            s for i, s in entry.measured.items() if i in entry.clean]
        pool = untouched or list(known.values())
        fill = sum(pool) / len(pool) if pool else 0.0
        total = sum(known.get(i, fill) for i in range(self.n_tasks))
        return HeadEstimate(total / self.n_tasks if self.n_tasks else 0.0, len(entry.measured),
                            len(entry.inherited), self.n_tasks)

    def state_dict(self, artifact_id: str, version: int) -> dict[str, Any]:
        """This version's scores, JSON-ready (a resumed run's head)."""
        entry = self._entry(artifact_id, version)
        return {"measured": {str(i): s for i, s in sorted(entry.measured.items())},
                "inherited": {str(i): s for i, s in sorted(entry.inherited.items())},
                "clean": {str(i): s for i, s in sorted(entry.clean.items())}}

    def load_state_dict(self, artifact_id: str, version: int, state: Mapping[str, Any]) -> None:
        """Put back a `state_dict`."""
        entry = self._entry(artifact_id, version)
        entry.measured.update({int(i): float(s) for i, s in state.get("measured", {}).items()})
        entry.inherited.update({int(i): float(s) for i, s in state.get("inherited", {}).items()})
        entry.clean.update({int(i): float(s) for i, s in state.get("clean", {}).items()})
