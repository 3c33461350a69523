"""A test set: score an artifact on tasks no decision ever saw, with an honest interval.

`evaluate` scores any artifact (a state with its strategy, or a rendered text) on any
tasks with the same ``agent`` or ``run`` callable and reward a run would use, each task
``repeats`` times, and returns an `Evaluation`: the mean, each task's draws and feedback,
and a 95 % interval for the mean (a seeded percentile bootstrap over tasks, each task
counting with the mean of its draws). `paired_difference` compares two evaluations of the
same tasks (before and after a run), task by task, with the same kind of interval: when it
contains 0, the tasks and draws cannot tell the two versions apart — more tasks, or more
``repeats`` with a sampled model, narrow it.

The engines use it for ``evolve(..., test_tasks=[...])``: the starting head and the final
head are scored on the test tasks (calls in phase ``test``, under the run's failure rule,
kept out of ``max_tokens`` unless ``test_in_budget=True``), into ``result.test_initial``,
``result.test_final`` and ``result.test`` (both evaluations and their paired difference).

This module owns the scoring loop and the statistics; it never touches a ledger.
"""

from __future__ import annotations

import concurrent.futures
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgument, InvalidArgumentType
from ..merge.strategies import AppendRules, Strategy
from ..rewards.builtin import Score
from ..types import Task
from ..usage import Usage, run_meters, usage_phase
from ..validation import check_int
from .calls import score_output

__all__ = ["Difference", "Evaluation", "bootstrap_interval", "evaluate", "paired_difference"]

#: Bootstrap resamples behind every interval (seeded: the same scores give the same interval).
RESAMPLES = 2000


def bootstrap_interval(values: Sequence[float], *, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """A percentile bootstrap interval for the mean of ``values`` (seeded, ``RESAMPLES`` draws).

    One value gives a zero-width interval at that value; none, ``(nan, nan)``.
    """
    n = len(values)
    if n == 0:
        return (math.nan, math.nan)
    if n == 1:
        return (float(values[0]), float(values[0]))
    rng = random.Random(seed)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(RESAMPLES))
    tail = (1.0 - level) / 2.0
    return (means[int(tail * (RESAMPLES - 1))], means[int(math.ceil((1.0 - tail) * (RESAMPLES - 1)))])


@dataclass
class Evaluation:
    """One artifact scored on a set of tasks.

    Args:
        tasks: the task ids, in order.
        draws: task id -> its scores, one per repeat.
        feedback: task id -> the reward's feedback on the first draw ('' for a float reward).
        outputs: task id -> the first draw's output, cut to 500 characters.
        repeats: draws per task.
    """

    tasks: list[str]
    draws: dict[str, list[float]]
    feedback: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    repeats: int = 1

    @property
    def per_task(self) -> dict[str, float]:
        """Task id -> the mean of its draws."""
        return {t: sum(self.draws[t]) / len(self.draws[t]) for t in self.tasks if self.draws.get(t)}

    @property
    def mean(self) -> float:
        """The mean over tasks of each task's mean draw (NaN with no task)."""
        means = list(self.per_task.values())
        return sum(means) / len(means) if means else math.nan

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """A ``level`` interval for `mean` (bootstrap over tasks)."""
        return bootstrap_interval(list(self.per_task.values()), level=level)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (with the mean and the 95 % interval, for readers of the file)."""
        low, high = self.interval()
        return {"tasks": list(self.tasks), "draws": {t: list(v) for t, v in self.draws.items()},
                "feedback": dict(self.feedback), "outputs": dict(self.outputs), "repeats": self.repeats,
                "mean": self.mean, "interval": [low, high]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Evaluation:
        """Rebuild from `to_json` output."""
        return cls(tasks=[str(t) for t in data["tasks"]],
                   draws={str(t): [float(x) for x in v] for t, v in data["draws"].items()},
                   feedback={str(t): str(v) for t, v in data.get("feedback", {}).items()},
                   outputs={str(t): str(v) for t, v in data.get("outputs", {}).items()},
                   repeats=int(data.get("repeats", 1)))


@dataclass(frozen=True)
class Difference:
    """``after - before`` on the same tasks: the mean of the per-task differences and its 95 % interval.

    ``separated`` is True when the interval excludes 0: the tasks and draws tell the two
    versions apart.
    """

    mean: float
    low: float
    high: float
    tasks: int

    @property
    def separated(self) -> bool:
        """The interval excludes 0."""
        return self.tasks > 1 and (self.low > 0 or self.high < 0)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"mean": self.mean, "low": self.low, "high": self.high, "tasks": self.tasks,
                "separated": self.separated}


def paired_difference(before: Evaluation, after: Evaluation, *, seed: int = 0) -> Difference:
    """Compare two evaluations task by task (the tasks both scored), with a bootstrap interval.

    Raises:
        InvalidArgument: the evaluations share no task.
    """
    a, b = before.per_task, after.per_task
    common = [t for t in before.tasks if t in a and t in b]
    if not common:
        raise InvalidArgument("paired_difference: the two evaluations share no task")
    diffs = [b[t] - a[t] for t in common]
    low, high = bootstrap_interval(diffs, seed=seed)
    return Difference(sum(diffs) / len(diffs), low, high, len(common))


def score_on(solve_and_score: Callable[[Task, int], tuple[str, Score]], tasks: Sequence[Task], repeats: int,
             map_fn: Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]] | None = None) -> Evaluation:
    """Score each task ``repeats`` times with ``solve_and_score(task, draw)``; ``map_fn`` may run them in parallel."""
    jobs = [(task, k) for task in tasks for k in range(repeats)]

    def one(job: tuple[Task, int]) -> tuple[str, Score]:
        return solve_and_score(*job)

    results = map_fn(one, jobs) if map_fn is not None else [one(j) for j in jobs]
    evaluation = Evaluation([t.id for t in tasks], {t.id: [] for t in tasks}, repeats=repeats)
    for (task, k), result in zip(jobs, results):
        if isinstance(result, BaseException):
            raise result
        output, score = result
        evaluation.draws[task.id].append(float(score))
        if k == 0:
            evaluation.feedback[task.id] = getattr(score, "feedback", "")
            evaluation.outputs[task.id] = output[:500]
    return evaluation


def _check_tasks(tasks: Any) -> list[Task]:
    if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Sequence):
        raise InvalidArgumentType(f"tasks={tasks!r:.80}: give a list of agentdescent.Task")
    out = list(tasks)
    if not out or not all(isinstance(t, Task) for t in out):
        raise InvalidArgumentType("tasks: give a non-empty list of agentdescent.Task")
    if len({t.id for t in out}) != len(out):
        raise InvalidArgument("tasks: two tasks share an id; give each task its own id")
    return out


def evaluate(tasks: Sequence[Task], reward: Callable[[Task, str], Any], *, agent: Any = None,
             run: Callable[[str, Task], str] | None = None, state: Mapping[str, str] | None = None,
             rendered: str | None = None, strategy: Strategy | None = None, repeats: int = 1,
             max_concurrency: int = 1, usage: Usage | None = None) -> Evaluation:
    """Score an artifact on ``tasks``: ``repeats`` draws per task, with the run's own agent or ``run``.

    Give the artifact as ``rendered`` text, or as a ``state`` with its ``strategy``
    (default `AppendRules`, as the engines); neither scores the empty artifact. The
    calls are recorded under phase ``test`` in the provider's meter and, when ``usage``
    is given, in that meter too.

    Args:
        tasks: the tasks (each with its own id).
        reward: ``reward(task, output) -> float | Score`` in [0, 1].
        agent: an agent with ``solve(rendered, task)`` (an `agentdescent.LLMAgent`), or
        run: ``run(rendered, task) -> str``; exactly one of the two.
        state: the artifact as a state (see above).
        rendered: the artifact as rendered text.
        strategy: the strategy that renders ``state`` (default `AppendRules`).
        repeats: draws per task (> 1 with a sampled model, to narrow the interval).
        max_concurrency: tasks scored at once.
        usage: a meter to record into as well.

    Returns:
        An `Evaluation` (``mean``, ``per_task``, ``interval()``, ``feedback``...).

    Raises:
        InvalidArgument / InvalidArgumentType: a bad argument, named.
        RewardContractError, ContractError: the reward or ``run`` broke its contract.
    """
    items = _check_tasks(tasks)
    if (agent is None) == (run is None):
        raise InvalidArgument("evaluate: give exactly one of agent= (with solve) or run=")
    solve = agent.solve if agent is not None else run
    if not callable(solve):
        raise InvalidArgumentType("evaluate: agent.solve / run must be callable")
    if rendered is not None and state is not None:
        raise InvalidArgument("evaluate: give the artifact as rendered= or as state= (with strategy=), not both")
    if rendered is None:
        strategy = strategy if strategy is not None else AppendRules()
        rendered = strategy.render(dict(state) if state is not None else strategy.initial())
    elif not isinstance(rendered, str):
        raise InvalidArgumentType(f"evaluate(rendered={rendered!r:.60}): give the artifact's text")
    repeats = check_int(repeats, "repeats", low=1, owner="evaluate", hint="draws per task")
    max_concurrency = check_int(max_concurrency, "max_concurrency", low=1, owner="evaluate")
    meters = (usage,) if usage is not None else ()
    text = rendered

    def solve_and_score(task: Task, draw: int) -> tuple[str, Score]:
        with usage_phase("test"), run_meters(*meters):
            output = solve(text, task)
        return output, score_output(reward, task, output)

    if max_concurrency == 1:
        return score_on(solve_and_score, items, repeats)
    with concurrent.futures.ThreadPoolExecutor(max_concurrency, thread_name_prefix="agentdescent-eval") as pool:
        return score_on(solve_and_score, items, repeats, lambda fn, jobs: list(pool.map(fn, jobs)))
