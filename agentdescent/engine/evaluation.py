"""Held-out scoring for the aggregator: the engines' `agentdescent.merge.aggregator.Evaluator`.

This module owns `RolloutEvaluator`: a state's score on a task is one run of the agent on
the state's rendered text, scored by the reward, through the run's call runner (so every
evaluation is metered, retried under the failure rule and bounded by the deadline).
Scores are cached per (state digest, task id), so the cheap subset (drawn from the
held-out set), repeated head evaluations and rebase checks cost nothing twice; each
cached score keeps a sample of its output and the reward's feedback (`samples`, for the
result's per-task view). It must not decide anything: the aggregator does.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import BackendFailure
from ..merge.aggregator import Evaluator
from ..merge.strategies import Strategy
from ..types import Task, stable_hash
from .counters import Counters
from .executors import CallRunner

__all__ = ["SAMPLE_CHARS", "RolloutEvaluator"]

#: An output or a feedback kept as a sample is cut to this many characters.
SAMPLE_CHARS = 300


def _cut(text: str) -> str:
    return text if len(text) <= SAMPLE_CHARS else text[: SAMPLE_CHARS - 3] + "..."


class RolloutEvaluator(Evaluator):
    """Scores states by running the agent on held-out tasks (cached per state and task).

    An evaluation stops at its first failed task (a `BackendFailure`, raised after the
    scores that succeeded are cached, so a retry re-runs only what failed).

    Args:
        runner: the run's call runner.
        strategy: renders a state for the agent.
        counters: the run's counters (``eval_rollouts``).
        held_out: the held-out tasks, in their fixed order.
        cheap_tasks: the cheap scoring subset.
    """

    def __init__(self, runner: CallRunner, strategy: Strategy, counters: Counters,
                 held_out: Sequence[Task], cheap_tasks: Sequence[Task]) -> None:
        self.runner = runner
        self.strategy = strategy
        self.counters = counters
        self.held_out_tasks = list(held_out)
        self.cheap_tasks = list(cheap_tasks)
        self._cache: dict[tuple[int, str], float] = {}
        self._samples: dict[tuple[int, str], tuple[str, str]] = {}
        self._lock = threading.Lock()

    def _scores(self, state: Mapping[str, str], tasks: list[Task]) -> list[float]:
        digest = stable_hash(sorted(state.items()))
        with self._lock:
            missing = [t for t in tasks if (digest, t.id) not in self._cache]
        if missing:
            outputs: dict[str, tuple[str, str]] = {}
            scores = self.runner.score_tasks(self.strategy.render(state), missing, outputs)
            with self._lock:
                for t, s in zip(missing, scores):
                    if isinstance(s, float):
                        self._cache[(digest, t.id)] = s
                        output, feedback = outputs.get(t.id, ("", ""))
                        self._samples[(digest, t.id)] = (_cut(output), _cut(feedback))
            self.counters.add("eval_rollouts", sum(isinstance(s, float) for s in scores))
            failure = next((s for s in scores if isinstance(s, BackendFailure)), None)
            if failure is not None:
                raise failure
        with self._lock:
            return [self._cache[(digest, t.id)] for t in tasks]

    def remember(self, state: Mapping[str, str], tasks: Sequence[Task], scores: Sequence[float]) -> None:
        """Seed the cache with scores measured earlier (a resumed run's head)."""
        digest = stable_hash(sorted(state.items()))
        with self._lock:
            for task, score in zip(tasks, scores):
                self._cache[(digest, task.id)] = float(score)

    def samples(self, state: Mapping[str, str]) -> dict[str, dict[str, Any]]:
        """Task id -> ``{"score", "output", "feedback"}`` of every held-out task ``state`` was scored on here.

        Outputs and feedback are cut to `SAMPLE_CHARS`; a task scored only in an earlier
        process (a resumed run's head) has a score and no sample.
        """
        digest = stable_hash(sorted(state.items()))
        out: dict[str, dict[str, Any]] = {}
        with self._lock:
            for task in self.held_out_tasks:
                score = self._cache.get((digest, task.id))
                if score is not None:
                    output, feedback = self._samples.get((digest, task.id), (None, None))
                    out[task.id] = {"score": float(score), "output": output, "feedback": feedback}
        return out

    def held_out(self, artifact_id: str, state: Mapping[str, str]) -> list[float]:
        """Per-task rewards of ``state`` on the held-out tasks (in their fixed order)."""
        return self._scores(state, self.held_out_tasks)

    def cheap(self, artifact_id: str, state: Mapping[str, str]) -> float:
        """Mean reward of ``state`` on the cheap subset."""
        scores = self._scores(state, self.cheap_tasks)
        return sum(scores) / len(scores)

    def verify(self, artifact_id: str, state: Mapping[str, str], tasks: Sequence[Task]) -> list[float]:
        """Scores of ``state`` on ``tasks`` (the rebase re-verification)."""
        return self._scores(state, list(tasks))

    def rescore(self, artifact_id: str, state: Mapping[str, str], indices: Sequence[int]) -> list[float]:
        """Fresh draws of ``state`` on the held-out tasks at ``indices`` (repeats allowed), bypassing the cache."""
        tasks = [self.held_out_tasks[i] for i in indices]
        scores = self.runner.score_tasks(self.strategy.render(state), tasks)
        self.counters.add("eval_rollouts", sum(isinstance(s, float) for s in scores))
        failure = next((s for s in scores if isinstance(s, BackendFailure)), None)
        if failure is not None:
            raise failure
        return [float(s) for s in scores]

    def held_out_subset(self, artifact_id: str, state: Mapping[str, str], indices: Sequence[int]) -> list[float]:
        """Scores of ``state`` on the held-out tasks at ``indices`` (one batch of a sequential evaluation)."""
        return self._scores(state, [self.held_out_tasks[i] for i in indices])
