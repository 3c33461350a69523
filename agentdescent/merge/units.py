"""Units of evidence: which held-out tasks the acceptance test counts as one.

Near-duplicate held-out tasks that share one draw (one cached reward per prompt, one judge
call per group) are not independent, so the paired test (`agentdescent.merge.acceptance`)
samples *units*: tasks with the same prompt are always one; `AggregatorConfig.evidence_groups`
joins more (a ``task.meta`` key, or a function of the task). This module owns that grouping
and nothing else: it never scores anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..types import Task
from .relevance import EvidenceGroups

__all__ = ["evidence_units"]


def evidence_units(tasks: Sequence[Task] | None, n_tasks: int, groups: EvidenceGroups) -> list[list[int]]:
    """The held-out units the acceptance test samples: one per task, or per group of correlated tasks.

    Tasks with the same prompt always form one unit (a duplicate shares its draw);
    ``groups`` adds a grouping: a ``task.meta`` key (tasks with the same value are one
    unit; a task without the key is its own), or ``fn(task) -> hashable`` (None: its
    own unit). Units are in the order of their first task. Without tasks, one unit per
    index.
    """
    if tasks is None:
        return [[i] for i in range(n_tasks)]
    keys: dict[Any, int] = {}
    units: list[list[int]] = []
    for i, task in enumerate(tasks):
        key: Any = None
        if callable(groups):
            key = groups(task)
        elif isinstance(groups, str) and groups in task.meta:
            key = ("meta", str(task.meta[groups]))
        key = ("group", key) if key is not None else ("prompt", task.prompt)
        if key in keys:
            units[keys[key]].append(i)
        else:
            keys[key] = len(units)
            units.append([i])
    if isinstance(groups, str) or callable(groups):  # a prompt shared across groups still joins them
        by_prompt: dict[str, int] = {}
        parent = list(range(len(units)))

        def root(u: int) -> int:
            while parent[u] != u:
                parent[u] = parent[parent[u]]
                u = parent[u]
            return u

        for u, members in enumerate(units):
            for i in members:
                other = by_prompt.setdefault(tasks[i].prompt, u)
                parent[root(u)] = root(other)
        merged: dict[int, list[int]] = {}
        for u, members in enumerate(units):
            merged.setdefault(root(u), []).extend(members)
        units = [sorted(m) for m in sorted(merged.values(), key=min)]
    return units
