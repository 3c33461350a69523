"""Held-out scoring for the aggregator: the engines' `agentdescent.merge.aggregator.Evaluator`.

This module owns `RolloutEvaluator`: a state's score on a task is one run of the agent on
the state's rendered text, scored by the reward, through the run's call runner (so every
evaluation is metered, retried under the failure rule and bounded by the deadline).
Every call it needs for one request (a batch of the paired test: the candidate's tasks
and the head's, through `RolloutEvaluator.prefetch`) starts at once on the run's pool,
so a batch waits for its slowest call, not for each in turn; which tasks are scored,
and the order the scores are read in, are the caller's and fixed before. Scores are
cached per (state digest, task id), so the cheap subset (drawn from the held-out set),
repeated head evaluations and rebase checks cost nothing twice; each cached score keeps
a sample of its output and the reward's feedback (`samples`, for the result's per-task
view). It must not decide anything: the aggregator does.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import BackendFailure
from ..merge.aggregator import Evaluator
from ..merge.aggregator_config import AggregatorConfig
from ..merge.strategies import Strategy
from ..types import Task, stable_hash
from .counters import Counters
from .executors import CallRunner

__all__ = ["SAMPLE_CHARS", "RolloutEvaluator", "look_width"]

#: An output or a feedback kept as a sample is cut to this many characters.
SAMPLE_CHARS = 300


def look_width(config: AggregatorConfig) -> int:
    """Calls one look of the paired test can have running at once: the candidate's batch and the head's.

    The async engine's merger gets a pool at least this wide (its workers run their own
    calls on their own threads), so a look with one worker is not scored call by call.
    """
    return 2 * config.eval_batch


def _digest(state: Mapping[str, str]) -> int:
    """The cache key of a state: its items hashed (once per request)."""
    return stable_hash(sorted(state.items()))


def _raise_first_failure(scores: Sequence[Any]) -> None:
    """Raise the first `BackendFailure` among a batch's results (the scores that succeeded were kept)."""
    failure = next((s for s in scores if isinstance(s, BackendFailure)), None)
    if failure is not None:
        raise failure


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

    def _fill(self, wanted: Sequence[tuple[Mapping[str, str], Sequence[Task]]]) -> list[int]:
        """Score every ``(state, tasks)`` of ``wanted`` the cache lacks, all at once on the run's pool.

        The same calls as scoring each request in turn (a task a request names twice is
        scored twice, one an earlier request scored is not), only started together. The
        scores that succeed are cached before the first failure is raised.

        Returns:
            Each request's state digest (the cache key), in order.

        Raises:
            BackendFailure: a call failed for good.
        """
        keys: list[tuple[int, str]] = []
        jobs: list[tuple[str, Task]] = []
        digests: list[int] = []
        for state, tasks in wanted:
            digest = _digest(state)
            digests.append(digest)
            earlier = set(keys)
            with self._lock:
                missing = [t for t in tasks if (digest, t.id) not in self._cache and (digest, t.id) not in earlier]
            if missing:
                rendered = self.strategy.render(state)
                keys += [(digest, t.id) for t in missing]
                jobs += [(rendered, t) for t in missing]
        if not jobs:
            return digests
        samples: list[tuple[str, str] | None] = [None] * len(jobs)
        scores = self.runner.score_jobs(jobs, samples)
        with self._lock:
            for key, score, sample in zip(keys, scores, samples):
                if isinstance(score, float):
                    self._cache[key] = score
                    output, feedback = sample if sample is not None else ("", "")
                    self._samples[key] = (_cut(output), _cut(feedback))
        self.counters.add("eval_rollouts", sum(isinstance(s, float) for s in scores))
        _raise_first_failure(scores)
        return digests

    def _scores(self, state: Mapping[str, str], tasks: list[Task]) -> list[float]:
        digest, = self._fill([(state, tasks)])
        with self._lock:
            return [self._cache[(digest, t.id)] for t in tasks]

    def prefetch(self, artifact_id: str, batches: Sequence[tuple[Mapping[str, str], Sequence[int]]]) -> None:
        """Score several states' held-out batches in one go on the run's pool (a look's candidate and head).

        The `held_out_subset` reads that follow are served from the cache.

        Raises:
            BackendFailure: a call failed for good (the scores that succeeded are cached).
        """
        self._fill([(state, [self.held_out_tasks[i] for i in indices]) for state, indices in batches])

    def remember(self, state: Mapping[str, str], tasks: Sequence[Task], scores: Sequence[float]) -> None:
        """Seed the cache with scores measured earlier (a resumed run's head)."""
        digest = _digest(state)
        with self._lock:
            for task, score in zip(tasks, scores):
                self._cache[(digest, task.id)] = float(score)

    def samples(self, state: Mapping[str, str]) -> dict[str, dict[str, Any]]:
        """Task id -> ``{"score", "output", "feedback"}`` of every held-out task ``state`` was scored on here.

        Outputs and feedback are cut to `SAMPLE_CHARS`; a task scored only in an earlier
        process (a resumed run's head) has a score and no sample.
        """
        digest = _digest(state)
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
        rendered = self.strategy.render(state)
        scores = self.runner.score_jobs([(rendered, self.held_out_tasks[i]) for i in indices])
        self.counters.add("eval_rollouts", sum(isinstance(s, float) for s in scores))
        _raise_first_failure(scores)
        return [float(s) for s in scores]

    def held_out_subset(self, artifact_id: str, state: Mapping[str, str], indices: Sequence[int]) -> list[float]:
        """Scores of ``state`` on the held-out tasks at ``indices`` (one batch of a sequential evaluation)."""
        return self._scores(state, [self.held_out_tasks[i] for i in indices])
