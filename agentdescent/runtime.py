"""What both engines share: one run's configuration, set-up, calls, worker step, stop rules and end.

`evolve` (sync rounds) and `async_evolve` (barrier-free workers, one merger) differ only
in *when* workers and the merger run. Everything else is here, written once:

- `RunConfig`: every knob both engines take, validated in one place;
- `open_run`: the train/held-out split, the ledger, the evaluator, the aggregator, the run
  meter, the call pool (a `RunEnv`);
- `RunEnv.call`, `RunEnv.solve_and_score`, `RunEnv.score_tasks`: backend calls under the
  run's failure rules, on the run's executor; `RunEnv.map`: several worker steps, bounded by
  the run's hard deadline;
- the worker step: `rollout_step` then `card_step` (proposal -> ``to_diff`` ->
  ``candidate_worth`` -> self-verify -> evidence card), with the advantage from one
  `GroupTracker`;
- `StopRules`, `merge_and_record` (one merge -> one `RoundInfo`), `finish`.

**The rules, one each** (the Failures and Architecture pages of the docs say the same):

- *Failures.* A call that raises a `ProviderError` is never retried here (the provider
  already did, with backoff); one that is not ``retryable`` ends the run at once. Any other
  exception is retried ``call_attempts`` times with a WARNING each. A call that still fails
  is dropped; ``failure_limit`` failures in a row of one phase (rollout, proposal,
  self_verify, evaluation) end the run with ``error`` set, naming the round. A held-out
  evaluation stops at its first failed task; the next attempt re-runs only what failed.
- *Budget.* Every call runs inside `run_meters` with the run's meter, so the budget sees
  tokens whichever meter they were recorded into. It is checked before admitting work (a
  round, or one async rollout, with the projected spend of work in flight) and after
  every merge.
- *Time.* ``max_seconds`` stops admitting work; ``max_seconds + grace_seconds`` bounds the
  whole call: the engines wait for calls only until then, on daemon threads, so neither a
  hung backend nor Ctrl-C keeps the process alive.
- *Advantage.* The z-score of a rollout's reward among all rewards finished so far on the
  same base version (`GroupTracker`).
- *Executors.* Every expensive call (rollout, proposal, self-verify, held-out evaluation)
  is a `Call`: a pure function of picklable inputs (the user's callable, the rendered
  artifact, the task, the reward) that `run_call` runs wherever it lands and that returns
  its output, its reward and the tokens it recorded (`CallResult`). On a thread pool (the
  default `DaemonPool`, or a ``ThreadPoolExecutor``) calls run inline in the pool's threads
  and their tokens reach the run's meters through the thread's `run_meters` scope, as they
  always did. On any other executor (a ``ProcessPoolExecutor``, Dask's
  ``Client.get_executor()``) each attempt is submitted to it; the tokens come back with
  the result and are replayed into the run's meters once (`replay_usage`); the retries,
  counters, score cache, cards, ledger and allocator stay on the driver. What travels is
  pickled first (`check_travel`): a callable that does not pickle is a `ContractError`
  before any call. An executor that loses a call it accepted (a broken process pool, a
  closed Dask client) ends the run (`RunFailed`); a call Dask already rescheduled after
  worker deaths and then gave up on (``KilledWorker``) fails for good without a retry here.
- *Rollout cap* (``max_rollouts``) counts admitted rollouts; *patience* counts rounds'
  worth of rollouts (``n_workers`` each) merged without a new best held-out reward.

It must not commit except through the aggregator, print unless asked, read the wall clock
except through ``RunConfig.clock``, or use the global RNG.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import inspect
import logging
import math
import numbers
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn, Protocol, runtime_checkable

from .aggregator import Aggregator, AggregatorConfig, Evaluator
from .allocator import AllocatorPolicy, pre_spend_context
from .budget import BudgetGovernor
from .calls import (
    Call,
    CallResult,
    DaemonPool,
    check_travel,
    executor_gave_up,
    run_call,
    runs_in_process,
    score_output,
)
from .governance import ArtifactInfo, Layer, classify
from .ledger import Ledger, MemoryLedger, RunStateStore, SqliteLedger
from .model import (
    Usage,
    replay_usage,
    run_meters,
    thread_tokens,
    usage_phase,
    worker_scope,
)
from .result import EvolutionResult, RoundInfo
from .staleness import StalenessPolicy, get_policy
from .strategies import AppendRules, Strategy
from .types import (
    AgentDescentError,
    ContractError,
    EvidenceCard,
    GovernanceError,
    MergeOutcome,
    MergeReport,
    ProposalContractError,
    ProviderError,
    Task,
    sanitize_text,
    stable_hash,
)

__all__ = [
    "MAX_WORKERS",
    "AggregatorFactory",
    "BackendFailure",
    "Clock",
    "GroupTracker",
    "RunConfig",
    "RunEnv",
    "RunFailed",
    "RunTimeout",
    "StopRules",
    "card_step",
    "close_run",
    "drive",
    "finish",
    "merge_and_record",
    "open_run",
    "rollout_step",
    "split_tasks",
]

logger = logging.getLogger("agentdescent.runtime")

#: The most workers (and pool threads) one run may start: each is an OS thread.
MAX_WORKERS = 1024
#: How often (real seconds) a waiting engine re-reads its clock for the hard deadline.
POLL_SECONDS = 0.05


# =========================================================================== errors


class BackendFailure(AgentDescentError):
    """One backend call (rollout, proposal, self-verify, evaluation) failed for good.

    The run goes on without that call's result; see the failure rules in the module
    docstring for when failures end the run.
    """


class RunFailed(AgentDescentError):
    """The run cannot go on: a failure that retrying cannot fix, or too many in a row.

    The engines catch it and return the result with ``error`` set to its message and
    every commit already made intact.
    """


class RunTimeout(AgentDescentError):
    """The run's hard deadline (``max_seconds + grace_seconds``) passed while it waited."""


# =========================================================================== seams


@runtime_checkable
class Clock(Protocol):
    """The engines' time source: seconds from an arbitrary start, never going back.

    The default is `time.monotonic`; `agentdescent.testing.ManualClock` is virtual time
    for tests. The engines read it for ``max_seconds``/``grace_seconds`` only, from any
    thread.
    """

    def __call__(self) -> float:
        """The current reading in seconds."""
        ...


@runtime_checkable
class AggregatorFactory(Protocol):
    """Builds the run's merger: ``factory(ledger, evaluator, config, staleness_policy, allocator, *, tournament_gate)``.

    Called once per run, from the calling thread, before any work starts. It must return
    an `Aggregator` (a subclass is how to change a step of the pipeline); ``tournament_gate``
    is the budget governor's ``allow_fusion_tournament`` and should be passed on.
    """

    def __call__(self, ledger: Ledger, evaluator: Evaluator, config: AggregatorConfig,
                 staleness_policy: StalenessPolicy | None, allocator: AllocatorPolicy | None, *,
                 tournament_gate: Callable[[], bool] | None) -> Aggregator:
        """Build the aggregator."""
        ...


# =========================================================================== config


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(name: str, value: Any, low: int, high: int | None = None, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not _is_int(value) or value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name}={value!r}: use an integer {span}{' or None' if optional else ''}")


def _check_seconds(name: str, value: Any, *, positive: bool, optional: bool) -> None:
    if optional and value is None:
        return
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        raise ValueError(
            f"{name}={value!r}: use a finite number of seconds {'> 0' if positive else '>= 0'}"
            f"{' or None' if optional else ''}"
        )


@dataclass(frozen=True)
class RunConfig:
    """Every knob the two engines share, validated once (`validate`).

    `evolve` and `async_evolve` build one from their keyword arguments (the names and
    meanings are theirs; see `agentdescent.evolution.evolve`), then hand it to
    `open_run`. What only one scheduler reads (rounds, refresh, async pacing) stays in
    that scheduler.

    Args:
        tasks: the tasks, split into train and held-out.
        reward: ``reward(task, output) -> float`` in [0, 1].
        agent: an object with ``solve`` and ``propose`` (or give ``run``/``propose``).
        run: ``run(rendered, task) -> str``.
        propose: ``propose(rendered, task, output, reward) -> str | None``.
        strategy: what the artifact is (default `AppendRules`).
        initial_state: the starting state (ignored on resume).
        blast_radius: in [0, 1]; above 0.30 the artifact is slow (L1).
        artifact_id: the artifact's id in the ledger.
        n_workers: workers (rollouts per sync round; worker threads in async).
        max_concurrency: threads for the run's calls when no ``executor`` is given.
        held_out_frac: share of tasks held out, in (0, 1).
        shuffle: shuffle the tasks (seeded) before the split (see `split_tasks`).
        stratify: a ``task.meta`` key to split each of its values on its own.
        seed: seeds the task order, the shuffle and the cheap subset.
        self_verify: re-run the proposing task on the patched artifact.
        target_reward: stop once the held-out reward reaches this.
        patience: rounds' worth of rollouts (``n_workers`` each) merged without a new
            best held-out reward before stopping.
        max_seconds: stop admitting work after this many seconds.
        grace_seconds: how much longer in-flight work may run; the call returns by
            ``max_seconds + grace_seconds``.
        max_rollouts: rollouts to admit in all.
        max_tokens: the run's token budget.
        staleness_policy: a policy or its name.
        agg_config: aggregator knobs.
        aggregator_factory: builds the aggregator (see `AggregatorFactory`).
        fusion_tournament: overrides ``agg_config.fusion_tournament``.
        cheap_eval_tasks: size of (or the tasks of) the cheap scoring subset.
        allocator: a learning allocator consulted by the budget governor.
        ledger: a path (SQLite), a `Ledger`, or None (in memory).
        usage: a meter that also receives every token the run records.
        executor: a ``concurrent.futures.Executor`` for the run's calls: a thread pool,
            a ``ProcessPoolExecutor`` or Dask's ``Client.get_executor()`` (see `Call`).
        on_round: called with each `RoundInfo`.
        progress: show a progress bar.
        stop_on_diminishing_returns: with a budget, stop when reward per token stalls.
        call_attempts: attempts of a call that raises something other than a
            `ProviderError` (providers retry on their own).
        failure_limit: failed calls in a row of one phase that end the run.
        clock: the time source (None: `time.monotonic`).
        resume: on a ledger that holds this run's saved progress, continue it (round
            numbering, spend, history, stop-rule, allocator and task-order state); False
            starts the counters over on the same artifact head.
    """

    tasks: Sequence[Task]
    reward: Callable[[Task, str], float]
    agent: Any = None
    run: Callable[[str, Task], str] | None = None
    propose: Callable[..., str | None] | None = None
    strategy: Strategy | None = None
    initial_state: Mapping[str, str] | None = None
    blast_radius: float = 0.2
    artifact_id: str = "artifact"
    n_workers: int = 4
    max_concurrency: int = 1
    held_out_frac: float = 0.4
    shuffle: bool = True
    stratify: str | None = None
    seed: int = 0
    self_verify: bool = True
    target_reward: float | None = None
    patience: int | None = None
    max_seconds: float | None = None
    grace_seconds: float = 2.0
    max_rollouts: int | None = None
    max_tokens: int | None = None
    staleness_policy: StalenessPolicy | str | None = None
    agg_config: AggregatorConfig | None = None
    aggregator_factory: AggregatorFactory | None = None
    fusion_tournament: bool | None = None
    cheap_eval_tasks: int | Sequence[Task] | None = None
    allocator: AllocatorPolicy | None = None
    ledger: Ledger | str | os.PathLike[str] | None = None
    usage: Usage | None = None
    executor: concurrent.futures.Executor | None = None
    on_round: Callable[[RoundInfo], None] | None = None
    progress: bool = False
    stop_on_diminishing_returns: bool = False
    call_attempts: int = 3
    failure_limit: int = 3
    clock: Clock | None = None
    resume: bool = True

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any], **overrides: Any) -> RunConfig:
        """The config of an engine call: its arguments that are fields here, then ``overrides``."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in arguments.items() if k in names}
        values.update(overrides)
        return cls(**values)

    def validate(self) -> None:
        """Check every knob; raise naming the bad one and the accepted values.

        Raises:
            TypeError: a value or callable of the wrong type or shape.
            ValueError: a value out of range.
            GovernanceError: a reserved (frozen) artifact id.
        """
        tasks = self.tasks
        if not isinstance(tasks, Sequence) or isinstance(tasks, (str, bytes)):
            raise TypeError(f"tasks must be a sequence of Task, got {type(tasks).__name__}")
        bad = [t for t in tasks if not isinstance(t, Task)]
        if bad:
            raise TypeError(f"tasks must all be agentdescent.Task; got {type(bad[0]).__name__} ({bad[0]!r:.60})")
        if len(tasks) < 4:
            raise ValueError(f"tasks has {len(tasks)} task(s): give at least 4 (some train, some held out)")
        seen: set[str] = set()
        for t in tasks:
            if t.id in seen:
                raise ValueError(f"duplicate task id {t.id!r}: task ids must be unique")
            seen.add(t.id)
        if not isinstance(self.artifact_id, str) or not self.artifact_id.strip():
            raise TypeError(f"artifact_id={self.artifact_id!r}: use a non-empty str")
        _check_int("n_workers", self.n_workers, 1, MAX_WORKERS)
        _check_int("max_concurrency", self.max_concurrency, 1, MAX_WORKERS)
        _check_int("call_attempts", self.call_attempts, 1, 100)
        _check_int("failure_limit", self.failure_limit, 1)
        _check_int("patience", self.patience, 1, optional=True)
        _check_int("max_rollouts", self.max_rollouts, 1, optional=True)
        _check_int("max_tokens", self.max_tokens, 1, optional=True)
        if not _is_int(self.seed):
            raise TypeError(f"seed={self.seed!r}: use an int")
        if not (isinstance(self.held_out_frac, (int, float)) and 0.0 < self.held_out_frac < 1.0):
            raise ValueError(f"held_out_frac={self.held_out_frac!r}: use a fraction strictly between 0 and 1")
        if not (isinstance(self.blast_radius, (int, float)) and 0.0 <= self.blast_radius <= 1.0):
            raise ValueError(f"blast_radius={self.blast_radius!r}: use a number in [0, 1]")
        if self.target_reward is not None and not (
            isinstance(self.target_reward, (int, float)) and 0.0 <= self.target_reward <= 1.0
        ):
            raise ValueError(f"target_reward={self.target_reward!r}: use a reward in [0, 1] or None")
        _check_seconds("max_seconds", self.max_seconds, positive=True, optional=True)
        _check_seconds("grace_seconds", self.grace_seconds, positive=False, optional=False)
        if self.clock is not None and not callable(self.clock):
            raise TypeError(f"clock={self.clock!r} is not callable; pass a function returning seconds")
        if not callable(self.reward):
            raise TypeError(f"reward={self.reward!r} is not callable; pass reward(task, output) -> float")
        _check_arity(self.reward, 2, "reward", "(task, output)")
        if self.usage is not None and not isinstance(self.usage, Usage):
            raise TypeError(f"usage={self.usage!r}: pass an agentdescent.Usage meter or None")
        if self.allocator is not None and not isinstance(self.allocator, AllocatorPolicy):
            raise TypeError(
                f"allocator={self.allocator!r} is not an AllocatorPolicy (it needs decide(), observe(), "
                "budget_start and stats()); subclass agentdescent.AllocatorPolicy to inherit the defaults"
            )
        if self.aggregator_factory is not None and not callable(self.aggregator_factory):
            raise TypeError(f"aggregator_factory={self.aggregator_factory!r} is not callable; see AggregatorFactory")
        if self.executor is not None and not isinstance(self.executor, concurrent.futures.Executor):
            raise TypeError(f"executor={self.executor!r}: pass a concurrent.futures.Executor or None")
        if classify(ArtifactInfo(self.artifact_id, self.blast_radius)) is Layer.L0_FROZEN:
            raise GovernanceError(f"artifact_id={self.artifact_id!r} is reserved and frozen (L0); choose another id")


def _check_arity(fn: Callable[..., Any], n: int, name: str, shape: str) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and some C callables cannot be inspected; trust them
    try:
        sig.bind(*range(n))
    except TypeError as exc:
        raise TypeError(f"{name} must accept {n} positional arguments {shape}: {exc}") from None


def _resolve_callables(config: RunConfig) -> tuple[Callable[[str, Task], str], Callable[..., str | None]]:
    agent, run, propose = config.agent, config.run, config.propose
    if agent is not None:
        if run is not None or propose is not None:
            raise ValueError("pass either agent= or run=/propose=, not both")
        for method in ("solve", "propose"):
            if not callable(getattr(agent, method, None)):
                raise TypeError(f"agent={agent!r} has no callable {method}(); see agentdescent.Agent")
        return agent.solve, agent.propose
    if run is None or propose is None:
        missing = [n for n, v in (("run", run), ("propose", propose)) if v is None]
        raise ValueError(
            f"missing {' and '.join(missing)}: pass run(rendered, task) and "
            "propose(rendered, task, output, reward), or an agent= with solve() and propose()"
        )
    _check_arity(run, 2, "run", "(rendered, task)")
    _check_arity(propose, 4, "propose", "(rendered, task, output, reward)")
    return run, propose


def split_tasks(tasks: Sequence[Task], held_out_frac: float, shuffle: bool, seed: int,
                stratify: str | None = None) -> tuple[list[Task], list[Task]]:
    """Split ``tasks`` into (train, held-out): a seeded shuffle, stratified by a meta key if named.

    Tasks usually arrive sorted (by category, by source file); a positional split would
    then hold out whole categories that no worker ever sees. So by default the tasks are
    shuffled (seeded: the same seed gives the same split on every machine) before
    ``held_out_frac`` of them are held out. With ``stratify=KEY`` each value of
    ``task.meta[KEY]`` is split on its own, so every category appears on both sides (a
    category with one task stays in train). ``shuffle=False`` keeps the positional split:
    the last tasks are held out.

    Raises:
        ContractError: ``stratify`` names a key some task's meta lacks.
    """
    ordered = list(tasks)
    rng = random.Random(stable_hash(seed, "shuffle"))
    if stratify is None:
        if shuffle:
            rng.shuffle(ordered)
        n_held = min(len(ordered) - 1, max(1, round(len(ordered) * held_out_frac)))
        return ordered[: len(ordered) - n_held], ordered[len(ordered) - n_held:]
    groups: dict[str, list[Task]] = {}
    for task in ordered:
        if stratify not in task.meta:
            raise ContractError(
                f"stratify={stratify!r}: task {task.id!r} has no meta[{stratify!r}]; give every "
                "task that key, or stratify=None"
            )
        groups.setdefault(str(task.meta[stratify]), []).append(task)
    train: list[Task] = []
    held: list[Task] = []
    for key in sorted(groups):
        group = groups[key]
        if shuffle:
            rng.shuffle(group)
        n_held = min(len(group) - 1, round(len(group) * held_out_frac))
        train += group[: len(group) - n_held]
        held += group[len(group) - n_held:]
    if not held or not train:
        raise ContractError(
            f"stratify={stratify!r}: every group is too small to hold out a task; use fewer "
            "groups, more tasks, or stratify=None"
        )
    return train, held


def _cheap_subset(held_out: list[Task], cheap_eval_tasks: int | Sequence[Task] | None, seed: int) -> list[Task]:
    if cheap_eval_tasks is None:
        k = min(len(held_out), max(8, len(held_out) // 4))
    elif _is_int(cheap_eval_tasks):
        if cheap_eval_tasks < 1:
            raise ValueError(f"cheap_eval_tasks={cheap_eval_tasks!r}: use a count >= 1 or a list of tasks")
        k = min(len(held_out), cheap_eval_tasks)
    else:
        chosen = list(cheap_eval_tasks)
        if not chosen or not all(isinstance(t, Task) for t in chosen):
            raise ValueError("cheap_eval_tasks: give a count, or a non-empty sequence of Task objects")
        return chosen
    ranked = sorted(held_out, key=lambda t: stable_hash(seed, "cheap", t.id))
    return ranked[:k]


def _travelling(config: RunConfig) -> list[tuple[str, Any]]:
    """The callables a remote executor must receive, by argument name."""
    named = [("agent", config.agent)] if config.agent is not None else [("run", config.run), ("propose", config.propose)]
    return [*named, ("reward", config.reward)]


def _open_ledger(ledger: Any) -> tuple[Ledger, bool]:
    if ledger is None:
        return MemoryLedger(), False
    if isinstance(ledger, (str, os.PathLike)):
        return SqliteLedger(ledger), True
    if not isinstance(ledger, Ledger):
        raise TypeError(
            f"ledger={ledger!r} is not a Ledger (see agentdescent.Ledger); pass a path, "
            "a MemoryLedger/SqliteLedger, or None"
        )
    return ledger, False


# =========================================================================== the run


class _Counters:
    """A thread-safe counter bag."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._c: collections.Counter[str] = collections.Counter()

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._c[key] += n

    def get(self, key: str) -> int:
        with self._lock:
            return self._c[key]

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._c.items()))

    def update(self, counts: Mapping[str, int]) -> None:
        """Add saved counts (a resumed run's)."""
        with self._lock:
            self._c.update({str(k): int(v) for k, v in counts.items()})


class GroupTracker:
    """Rewards per base version: the group-relative advantage, one rule for both runtimes.

    The advantage of a rollout is the z-score of its reward among every reward finished so
    far on the same base version (itself included); 0.0 while the group has fewer than two
    or no spread. The sync runtime adds a whole round before asking, so a round's rollouts
    on one version form one group; the async runtime asks as each rollout finishes, so the
    first rollout on a version scores 0.0. Each group keeps its last ``keep`` rewards.
    """

    def __init__(self, keep: int = 256) -> None:
        self._lock = threading.Lock()
        self._groups: dict[int, collections.deque[float]] = {}
        self._keep = keep

    def add(self, version: int, reward: float) -> None:
        """Record one finished rollout's reward."""
        with self._lock:
            self._groups.setdefault(version, collections.deque(maxlen=self._keep)).append(reward)

    def state_dict(self, versions: int = 8) -> dict[str, list[float]]:
        """The groups of the newest ``versions`` versions, JSON-ready (older ones are done)."""
        with self._lock:
            keep = sorted(self._groups)[-versions:]
            return {str(v): list(self._groups[v]) for v in keep}

    def load_state_dict(self, state: Mapping[str, Sequence[float]]) -> None:
        """Put back a `state_dict`."""
        with self._lock:
            for v, rewards in state.items():
                self._groups[int(v)] = collections.deque((float(r) for r in rewards), maxlen=self._keep)

    def advantage(self, version: int, reward: float) -> float:
        """``(reward - mean) / std`` over the version's group; 0.0 when it has no spread."""
        with self._lock:
            group = list(self._groups.get(version, ()))
        if len(group) < 2:
            return 0.0
        mean = sum(group) / len(group)
        std = math.sqrt(sum((g - mean) ** 2 for g in group) / len(group))
        return 0.0 if std == 0.0 else (reward - mean) / std


class TaskCycle:
    """A seeded, endless walk over the train tasks: every task once per epoch, new order each epoch."""

    def __init__(self, train: Sequence[Task], seed: int) -> None:
        self._train = list(train)
        self._rng = random.Random(stable_hash(seed, "task-order"))
        self._order: list[Task] = []
        self._lock = threading.Lock()

    def next(self) -> Task:
        """The next task."""
        with self._lock:
            if not self._order:
                self._order = list(self._train)
                self._rng.shuffle(self._order)
            return self._order.pop()

    def state_dict(self) -> dict[str, Any]:
        """Where the walk stands (the RNG's state and the epoch's tasks still to come), JSON-ready."""
        with self._lock:
            version, internal, gauss = self._rng.getstate()
            return {"rng": [version, list(internal), gauss], "order": [t.id for t in self._order]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Go on from a saved `state_dict` (tasks no longer in the train set are skipped)."""
        by_id = {t.id: t for t in self._train}
        with self._lock:
            version, internal, gauss = state["rng"]
            self._rng.setstate((version, tuple(internal), gauss))
            self._order = [by_id[i] for i in state["order"] if i in by_id]


class StopRules:
    """The stop rules both runtimes apply: before admitting work and after every merge."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.clock: Clock = config.clock if config.clock is not None else time.monotonic
        self.started = float(self.clock())
        self.best = -math.inf
        self.since_best = 0

    def elapsed(self) -> float:
        """Seconds since the run started, on the run's clock."""
        return float(self.clock()) - self.started

    def out_of_time(self) -> bool:
        """True once ``max_seconds`` has passed: admit no more work."""
        return self.config.max_seconds is not None and self.elapsed() >= self.config.max_seconds

    def past_deadline(self) -> bool:
        """True once ``max_seconds + grace_seconds`` has passed: wait for nothing more."""
        limit = self.config.max_seconds
        return limit is not None and self.elapsed() >= limit + self.config.grace_seconds

    def rollouts_left(self, admitted: int) -> int | None:
        """Rollouts still allowed (None: unbounded)."""
        cap = self.config.max_rollouts
        return None if cap is None else max(0, cap - admitted)

    def before_admission(self, governor: BudgetGovernor, admitted: int, projected_tokens: float) -> str | None:
        """Why no more work may start, or None: the rollout cap, the time, the budget.

        Args:
            governor: the run's budget governor (its spend is current).
            admitted: rollouts admitted so far.
            projected_tokens: what the work about to start, and work still in flight, is
                expected to spend.
        """
        if self.rollouts_left(admitted) == 0:
            return "max_rollouts"
        if self.out_of_time():
            return "max_seconds"
        if governor.over_budget() or not governor.affords(projected_tokens):
            return "max_tokens"
        return None

    def after_merge(self, held_out_reward: float, rollouts_merged: int, governor: BudgetGovernor) -> str | None:
        """The stop reason after a merge, or None to go on.

        Patience counts in rounds' worth of rollouts (``n_workers`` rollouts merged since
        the last new best held-out reward), so a sync round and any number of async
        sweeps that merge the same rollouts count the same.

        Args:
            held_out_reward: the head's held-out reward after the merge.
            rollouts_merged: rollouts whose results this merge took in.
            governor: the run's budget governor.
        """
        if held_out_reward > self.best + 1e-12:
            self.best = held_out_reward
            self.since_best = 0
        else:
            self.since_best += rollouts_merged
        governor.observe(held_out_reward)
        cfg = self.config
        if cfg.target_reward is not None and held_out_reward >= cfg.target_reward:
            return "target_reward"
        if governor.over_budget():
            return "max_tokens"
        if governor.stop_on_diminishing and governor.diminishing_returns():
            return "diminishing_returns"
        if cfg.patience is not None and self.since_best >= cfg.patience * cfg.n_workers:
            return "patience"
        if self.out_of_time():
            return "max_seconds"
        return None


@dataclass
class RunEnv:
    """One run's shared state: what a worker step and a merge need (built by `open_run`).

    Not part of the public API; the schedulers in `agentdescent.evolution` and
    `agentdescent.async_evolve` drive it.
    """

    config: RunConfig
    train: list[Task]
    held_out: list[Task]
    strategy: Strategy
    solve: Callable[[str, Task], str]
    propose: Callable[..., str | None]
    usage: Usage
    meters: tuple[Usage, ...]
    ledger: Ledger
    owns_ledger: bool
    executor: concurrent.futures.Executor
    owns_executor: bool
    blast_radius: float
    governor: BudgetGovernor
    stops: StopRules
    evaluator: RolloutEvaluator | None = None
    aggregator: Aggregator | None = None
    counters: _Counters = field(default_factory=_Counters)
    groups: GroupTracker = field(default_factory=GroupTracker)
    history: list[RoundInfo] = field(default_factory=list)
    cycle: TaskCycle | None = None
    resumed_rounds: int = 0
    initial_reward: float | None = None
    last_reward: float | None = None
    last_error: BaseException | None = None
    fatal: RunFailed | None = None
    bar: Any = None
    unit: str = "round"
    remote: bool = False
    pool: concurrent.futures.Executor | None = None
    closed: bool = False
    persist: bool = False
    _tokens_mark: int = 0
    _failures_mark: int = 0
    _rounds_saved: int = 0
    _in_a_row: collections.Counter[str] = field(default_factory=collections.Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _submissions: int = 0
    _run_key: str = field(default_factory=lambda: os.urandom(6).hex())

    @property
    def artifact_id(self) -> str:
        """The evolved artifact's id."""
        return self.config.artifact_id

    @property
    def n_workers(self) -> int:
        """Workers of the run."""
        return self.config.n_workers

    # ----------------------------------------------------------------- calls

    def call(self, fn: Callable[..., Any], *args: Any, what: str, phase: str, worker: int | None = None) -> Any:
        """One backend call (a proposal) under the run's failure rules (see the module docstring).

        Tokens the call records on any meter land in the run's meters once, attributed to
        ``phase``. A returned ``str`` is sanitised (`sanitize_text`).

        Raises:
            BackendFailure: the call failed for good; the run goes on without it.
            RunFailed: the run cannot go on (a non-retryable provider error,
                ``failure_limit`` failures in a row of this phase, or an executor that lost
                a call).
            ContractError: the caller's callable broke its contract.
        """
        return self._retrying(Call(fn, args, phase, worker), what).output

    def solve_and_score(self, rendered: str, task: Task, *, what: str, phase: str,
                        worker: int | None = None) -> tuple[str, float]:
        """Solve ``task`` on ``rendered`` and score the output: a rollout, a self-verify or one evaluation.

        The call is retried under the failure rules; the scoring is not (a reward that
        raises, or breaks its contract, ends the run wherever it ran).

        Returns:
            ``(output, reward)``.

        Raises:
            BackendFailure, RunFailed, ContractError: as `call`.
            RewardContractError: the reward is not a finite number in [0, 1].
        """
        result = self._retrying(Call(self.solve, (rendered, task), phase, worker, self.config.reward, task), what)
        return result.output, self._reward_of(task, result)

    def score_tasks(self, rendered: str, tasks: Sequence[Task]) -> list[Any]:
        """Held-out evaluation: the reward of ``rendered`` on each task, in order, within the deadline.

        A slot holds the reward, or the `BackendFailure` of a task that failed for good;
        the evaluation stops at its first failed task (the tasks not yet started are
        cancelled, their slots None). On a thread pool each task is one `call` on the
        pool; on another executor every task is submitted at once (the executor bounds how
        many run) and the failure rule is applied here as results arrive.

        Raises:
            RunTimeout: the hard deadline passed.
            RunFailed, ContractError, RewardContractError: as `solve_and_score`.
        """
        if not self.remote:
            def one(task: Task) -> float:
                return self.solve_and_score(rendered, task, what=f"evaluation on task {task.id!r}",
                                            phase="evaluation")[1]

            return self.map(one, tasks, stop_on_failure=True)
        slots: list[Any] = [None] * len(tasks)
        running: dict[concurrent.futures.Future[Any], tuple[int, int]] = {}
        cancelled: set[concurrent.futures.Future[Any]] = set()

        def submit(i: int, attempt: int) -> None:
            call = Call(self.solve, (rendered, tasks[i]), "evaluation", None, self.config.reward, tasks[i])
            running[self._submit(call)] = (i, attempt)

        try:
            for i in range(len(tasks)):
                submit(i, 1)
            while running:
                done, _ = concurrent.futures.wait(
                    running, timeout=POLL_SECONDS, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in done:
                    i, attempt = running.pop(future)
                    if future in cancelled:
                        continue
                    try:
                        result = self._collect(future)
                    except Exception as exc:
                        try:
                            self._judge(exc, attempt, f"evaluation on task {tasks[i].id!r}", "evaluation")
                        except BackendFailure as failure:
                            slots[i] = failure
                            cancelled.update(f for f in running if f.cancel())
                            continue
                        submit(i, attempt + 1)
                        continue
                    self._succeeded("evaluation")
                    slots[i] = self._reward_of(tasks[i], result)
                if running and self.stops.past_deadline():
                    raise self._timeout(len(running))
        except BaseException:
            for future in running:
                future.cancel()
            raise
        return slots

    def _retrying(self, call: Call, what: str) -> CallResult:
        """``call`` under the failure rules: attempt, judge each failure, retry or give up."""
        if self.fatal is not None:  # the run is ending: send nothing more to the backend
            raise self.fatal
        attempt = 0
        while True:
            attempt += 1
            try:
                result = self._once(call)
            except Exception as exc:
                self._judge(exc, attempt, what, call.phase)  # returns only to retry
                continue
            self._succeeded(call.phase)
            return result

    def _once(self, call: Call) -> CallResult:
        """One attempt: inline on a thread pool, else submitted to the executor and awaited."""
        if self.remote:
            return self._collect(self._await(self._submit(call)))
        with usage_phase(call.phase), worker_scope(call.worker), run_meters(*self.meters):
            out = call.fn(*call.args)
        return CallResult(sanitize_text(out) if isinstance(out, str) else out)

    def _reward_of(self, task: Task, result: CallResult) -> float:
        """The scored reward: computed here on a thread pool, brought back by the call otherwise."""
        if not self.remote:
            return self.score(task, result.output)
        if result.score_error is not None:
            raise result.score_error
        assert result.reward is not None
        return result.reward

    def _judge(self, exc: Exception, attempt: int, what: str, phase: str) -> None:
        """The failure rule for one failed attempt: return to retry it, or raise.

        Raises:
            BackendFailure: the call failed for good (retries spent, a provider's own
                retries spent, or Dask's rescheduling spent).
            RunFailed: the run cannot go on.
            ContractError, GovernanceError, RunTimeout: as raised.
        """
        if isinstance(exc, (ContractError, GovernanceError, RunFailed, RunTimeout)):
            raise exc
        if isinstance(exc, ProviderError):
            if not exc.retryable:
                self.counters.add("backend_failures")
                self.last_error = exc
                raise self._fail_run(
                    f"{what} failed with {type(exc).__name__}, which retrying cannot fix: {exc}"
                ) from None
            self._failed(what, phase, exc)  # the provider already retried with backoff: never multiply its retries
        if executor_gave_up(exc):
            self._failed(what, phase, exc)  # Dask already re-ran it after worker deaths: never twice
        self.counters.add("backend_errors")
        if attempt < self.config.call_attempts:
            logger.warning("%s failed (attempt %d/%d): %s: %s; retrying", what, attempt,
                           self.config.call_attempts, type(exc).__name__, exc)
            return
        self._failed(what, phase, exc)

    def _succeeded(self, phase: str) -> None:
        with self._lock:
            self._in_a_row[phase] = 0

    # ----------------------------------------------------------------- another executor

    def _submit(self, call: Call) -> concurrent.futures.Future[Any]:
        """Submit one attempt of ``call`` to the executor (each attempt with its own key)."""
        if self.fatal is not None:
            raise self.fatal
        with self._lock:
            self._submissions += 1
            key = f"agentdescent-{self._run_key}-{self._submissions}"
        try:
            return self.executor.submit(run_call, replace(call, key=key))
        except Exception as exc:
            raise self._executor_lost(exc, "refused a call") from None

    def _await(self, future: concurrent.futures.Future[Any]) -> concurrent.futures.Future[Any]:
        """Wait for one submitted call (a worker's); once the run has closed, cancel it and leave."""
        while not future.done():
            concurrent.futures.wait((future,), timeout=POLL_SECONDS)
            if self.closed and not future.done():
                future.cancel()
                raise RunTimeout("the run ended while this call was running; its result is dropped")
        return future

    def _collect(self, future: concurrent.futures.Future[Any]) -> CallResult:
        """A finished call's result; its tokens land in the run's meters (once) before anything else.

        Raises:
            RunFailed: the executor lost the call (a broken pool, a closed client).
            Exception: what the call raised, for the failure rule.
        """
        try:
            result: CallResult = future.result()
        except concurrent.futures.CancelledError as exc:  # we cancel only what we no longer wait for
            raise self._executor_lost(exc, "cancelled a call it had accepted (a closed Dask client, "
                                           "or an executor shut down mid-run)") from None
        except concurrent.futures.BrokenExecutor as exc:
            raise self._executor_lost(exc, "broke: a worker process died mid-call, and a broken pool "
                                           "takes no more calls (Dask reschedules a dead worker's "
                                           "call instead)") from None
        with run_meters(*self.meters):
            replay_usage(result.usage)
        if result.error is not None:
            raise result.error
        return result

    def _executor_lost(self, exc: BaseException, what: str) -> RunFailed:
        self.counters.add("backend_failures")
        self.last_error = exc
        return self._fail_run(
            f"the executor ({type(self.executor).__name__}) {what} [{type(exc).__name__}: {exc}]; "
            "the run cannot go on: everything committed stays in the ledger, so a new run on the "
            "same ledger resumes from it"
        )

    def _timeout(self, running: int) -> RunTimeout:
        return RunTimeout(
            f"the run's time bound (max_seconds={self.config.max_seconds:g} + "
            f"grace_seconds={self.config.grace_seconds:g}) passed with "
            f"{running} call(s) still running"
        )

    def _failed(self, what: str, phase: str, exc: BaseException | None) -> NoReturn:
        self.counters.add("backend_failures")
        self.last_error = exc
        with self._lock:
            self._in_a_row[phase] += 1
            in_a_row = self._in_a_row[phase]
        cause = f"{type(exc).__name__}: {exc}"
        if in_a_row >= self.config.failure_limit:
            raise self._fail_run(
                f"{in_a_row} {phase} call(s) in a row failed (failure_limit="
                f"{self.config.failure_limit}); last: {what}: {cause}"
            ) from None
        logger.warning("%s failed for good (%d %s failure(s) in a row): %s", what, in_a_row, phase, cause)
        raise BackendFailure(f"{what} failed; last error: {cause}") from None

    def _fail_run(self, message: str) -> RunFailed:
        """The run's one `RunFailed`: the first one wins, later calls re-raise it without calling."""
        with self._lock:
            if self.fatal is None:
                self.fatal = RunFailed(message)
            return self.fatal

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any], *, stop_on_failure: bool = False) -> list[Any]:
        """``fn`` over ``items`` on the run's pool, results in order, within the deadline.

        The pool is the executor when that is a thread pool; otherwise threads of this
        process (``n_workers`` of them) run ``fn``, and the calls it makes travel.

        A `BackendFailure` raised by ``fn`` comes back as the exception object in its slot;
        with ``stop_on_failure`` the items not yet started are cancelled (their slots are
        None). Anything else ``fn`` raises cancels the rest and propagates.

        Raises:
            RunTimeout: the hard deadline passed (the calls still running are abandoned).
        """
        futures = [self.pool.submit(fn, item) for item in items]
        pending = set(futures)
        try:
            while pending:
                done, pending = concurrent.futures.wait(
                    pending, timeout=POLL_SECONDS, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in done:
                    exc = None if future.cancelled() else future.exception()
                    if exc is None:
                        continue
                    if not isinstance(exc, BackendFailure):
                        raise exc
                    if stop_on_failure:
                        for other in pending:
                            other.cancel()
                if pending and self.stops.past_deadline():
                    raise self._timeout(len(pending))
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        results: list[Any] = []
        for future in futures:
            if future.cancelled():
                results.append(None)
            else:
                exc = future.exception()
                results.append(exc if exc is not None else future.result())
        return results

    def score(self, task: Task, output: Any) -> float:
        """The reward of one ``run``/``solve`` output, with both contracts checked.

        Raises:
            ContractError: the output is not a ``str``.
            RewardContractError: the reward is not a finite number in [0, 1].
        """
        return score_output(self.config.reward, task, output)

    # ----------------------------------------------------------------- merging

    def head_reward(self) -> float:
        """Mean held-out reward of the current head (cached per version by the aggregator)."""
        return sum(self.aggregator.head_scores(self.artifact_id)) / len(self.held_out)

    def measure_initial(self) -> float:
        """The starting head's held-out reward, under the failure rule like every evaluation.

        A failed attempt is tried again (only the tasks that failed re-run: the others are
        cached) until ``failure_limit`` evaluation calls in a row have failed; nothing can
        be compared without it, so no work starts before it succeeds.

        Raises:
            RunFailed: too many evaluation failures in a row.
        """
        while True:
            try:
                self.last_reward = self.head_reward()
            except BackendFailure:
                continue
            if self.initial_reward is None:  # a resumed run keeps its first measurement
                self.initial_reward = self.last_reward
            return self.last_reward

    def merge(self) -> tuple[list[MergeReport], float]:
        """One aggregator step and the head's held-out reward.

        A held-out evaluation that fails (a `BackendFailure`) leaves the cards queued for
        the next merge (scores that succeeded stay cached, so the retry re-runs only what
        failed); the failure rule decides when failures end the run.
        """
        try:
            reports = self.aggregator.step()
            held = self.head_reward()
        except BackendFailure:
            self.counters.add("merge_failures")
            return [], self.last_reward if self.last_reward is not None else 0.0
        self.last_reward = held
        return reports, held

    def admission_check(self, admitted: int, projected_tokens: float) -> str | None:
        """Whether more work may start now: the stop reason if not.

        Args:
            admitted: rollouts admitted so far.
            projected_tokens: the expected spend of the work about to start plus the work
                still in flight (a sync round: the mean round so far; an async rollout:
                `step_cost` times the rollouts in flight plus one).
        """
        self.governor.spend(self.usage.total_tokens)
        return self.stops.before_admission(self.governor, admitted, projected_tokens)

    def step_cost(self) -> float:
        """Mean tokens of one worker step so far (rollout, proposal, self-verify)."""
        steps = self.counters.get("rollouts")
        return self.counters.get("step_tokens") / steps if steps else 0.0


def open_run(config: RunConfig) -> RunEnv:
    """Validate ``config`` and build the run (its ledger, evaluator, aggregator, meter, pool).

    Close it with `close_run` (the engines do, in a ``finally``).
    """
    config.validate()
    solve, propose = _resolve_callables(config)
    remote = config.executor is not None and not runs_in_process(config.executor)
    if remote:
        check_travel(_travelling(config), config.tasks, config.executor)  # before anything is opened or submitted
    strategy = config.strategy if config.strategy is not None else AppendRules()
    policy = get_policy(config.staleness_policy) if isinstance(config.staleness_policy, str) else config.staleness_policy
    agg_config = config.agg_config if config.agg_config is not None else AggregatorConfig()
    if config.fusion_tournament is not None:
        agg_config = replace(agg_config, fusion_tournament=bool(config.fusion_tournament))
    train, held_out = split_tasks(config.tasks, config.held_out_frac, config.shuffle, config.seed, config.stratify)
    cheap_tasks = _cheap_subset(held_out, config.cheap_eval_tasks, config.seed)
    governor = BudgetGovernor(max_tokens=config.max_tokens, allocator=config.allocator,
                              stop_on_diminishing=config.stop_on_diminishing_returns)

    led, owns_ledger = _open_ledger(config.ledger)
    try:
        state0 = dict(config.initial_state) if config.initial_state is not None else strategy.initial()
        led.register(config.artifact_id, state0, config.blast_radius)
        stored_blast = led.blast_radius(config.artifact_id)  # a resumed artifact keeps its own
    except BaseException:
        if owns_ledger:
            led.close()
        raise
    executor = config.executor
    owns_executor = executor is None
    if executor is None:
        executor = DaemonPool(config.max_concurrency)
    run_meter = Usage()
    meters = (run_meter,) if config.usage is None else (run_meter, config.usage)
    env = RunEnv(
        config=config, train=train, held_out=held_out, strategy=strategy, solve=solve,
        propose=propose, usage=run_meter, meters=meters, ledger=led, owns_ledger=owns_ledger,
        executor=executor, owns_executor=owns_executor, blast_radius=stored_blast,
        governor=governor, stops=StopRules(config), remote=remote,
        pool=DaemonPool(config.n_workers, name="agentdescent-driver") if remote else executor,
    )
    env.evaluator = RolloutEvaluator(env, held_out, cheap_tasks)
    factory = config.aggregator_factory if config.aggregator_factory is not None else Aggregator
    aggregator = factory(led, env.evaluator, agg_config, policy, config.allocator,
                         tournament_gate=governor.allow_fusion_tournament)
    if not isinstance(aggregator, Aggregator):
        close_run(env)
        raise TypeError(
            f"aggregator_factory returned a {type(aggregator).__name__}; it must return an "
            "agentdescent.Aggregator (subclass it to change a step of the pipeline)"
        )
    env.aggregator = aggregator
    env.cycle = TaskCycle(train, config.seed)
    # A ledger the run made for itself (ledger=None) dies with it: nothing could resume.
    env.persist = config.resume and config.ledger is not None and isinstance(led, RunStateStore)
    if env.persist:
        saved = led.load_run_state(config.artifact_id)
        if saved is not None and saved.get("format") == RUN_STATE_FORMAT:
            _restore_progress(env, saved)
    if config.progress:
        from tqdm.auto import tqdm

        env.bar = tqdm(desc="evolve", unit="merge")  # the scheduler names its unit
    return env


def close_run(env: RunEnv) -> None:
    """Release what the run opened itself: its pools (running calls are abandoned), its ledger, its bar.

    Calls still waited for on another executor are cancelled there by their waiting
    threads; the caller's executor itself is left open.
    """
    env.closed = True
    if env.owns_executor:
        env.executor.shutdown(wait=False, cancel_futures=True)
    if env.pool is not None and env.pool is not env.executor:
        env.pool.shutdown(wait=False, cancel_futures=True)
    if env.owns_ledger:
        env.ledger.close()
    if env.bar is not None:
        env.bar.close()


class RolloutEvaluator(Evaluator):
    """The engines' `Evaluator`: run the agent on held-out tasks.

    Per-task scores are cached by (state digest, task id), so the cheap subset (drawn
    from the held-out set) and repeated head evaluations cost nothing extra. An
    evaluation stops at its first failed task.
    """

    def __init__(self, env: RunEnv, held_out: list[Task], cheap_tasks: list[Task]) -> None:
        self.env = env
        self.held_out_tasks = held_out
        self.cheap_tasks = cheap_tasks
        self._cache: dict[tuple[int, str], float] = {}
        self._lock = threading.Lock()

    def _scores(self, state: Mapping[str, str], tasks: list[Task]) -> list[float]:
        digest = stable_hash(sorted(state.items()))
        with self._lock:
            missing = [t for t in tasks if (digest, t.id) not in self._cache]
        if missing:
            scores = self.env.score_tasks(self.env.strategy.render(state), missing)
            with self._lock:
                for t, s in zip(missing, scores):
                    if isinstance(s, float):
                        self._cache[(digest, t.id)] = s
            self.env.counters.add("eval_rollouts", sum(isinstance(s, float) for s in scores))
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

    def held_out_subset(self, artifact_id: str, state: Mapping[str, str], indices: Sequence[int]) -> list[float]:
        """Scores of ``state`` on the held-out tasks at ``indices`` (one batch of a sequential evaluation)."""
        return self._scores(state, [self.held_out_tasks[i] for i in indices])


# =========================================================================== worker step


@dataclass
class Rollout:
    """One finished rollout of a worker on its snapshot."""

    worker_id: int
    task: Task
    version: int
    state: dict[str, str]
    rendered: str
    output: str
    reward: float
    tokens: int = 0


def rollout_step(env: RunEnv, worker_id: int, task: Task, version: int, state: Mapping[str, str]) -> Rollout:
    """Roll ``task`` out on the worker's snapshot and record its reward in the version's group.

    Raises:
        BackendFailure: the rollout failed for good.
    """
    rendered = env.strategy.render(state)
    tokens_before = thread_tokens()
    output, reward = env.solve_and_score(rendered, task, what=f"worker {worker_id} rollout of task {task.id!r}",
                                         phase="rollout", worker=worker_id)
    env.counters.add("rollouts")
    env.groups.add(version, reward)
    tokens = thread_tokens() - tokens_before
    env.counters.add("step_tokens", tokens)
    return Rollout(worker_id, task, version, dict(state), rendered, output, reward, tokens)


def card_step(env: RunEnv, rollout: Rollout) -> EvidenceCard | None:
    """Propose after an unsolved rollout and build its evidence card.

    The advantage is read from the run's `GroupTracker` now. The budget governor is asked
    once, from the card's pre-spend features, whether the candidate is worth its optional
    spend (``card.allocated``): its self-verify rollout (re-run the task on the patched
    artifact, when ``self_verify`` is on) and its held-out evaluation at the merge. A
    skipped self-verify records ``before_after_delta = 0.0``; the card still goes to the
    merge, where a candidate with no allocated card is not evaluated (so not committed).

    Raises:
        BackendFailure: the proposal or the self-verify failed for good.
        ProposalContractError: the proposer returned neither ``str`` nor ``None``.
    """
    if rollout.reward >= 1.0:
        return None
    task = rollout.task
    advantage = env.groups.advantage(rollout.version, rollout.reward)
    tokens_before = thread_tokens()
    try:
        proposal = env.call(env.propose, rollout.rendered, task, rollout.output, rollout.reward,
                            what=f"worker {rollout.worker_id} proposal for task {task.id!r}", phase="proposal",
                            worker=rollout.worker_id)
        env.counters.add("proposals")
        if proposal is not None and not isinstance(proposal, str):
            raise ProposalContractError(
                f"propose returned {type(proposal).__name__} for task {task.id!r}; "
                "return a str (one change) or None (no change)"
            )
        if proposal is None:
            return None
        diff = env.strategy.to_diff(rollout.state, proposal, f"worker-{rollout.worker_id}", rollout.version,
                                    env.artifact_id)
        if diff is None:
            return None
        card = EvidenceCard(diff, {env.artifact_id: rollout.version}, None, advantage, [task])
        env.governor.spend(env.usage.total_tokens)
        card.allocated = env.governor.candidate_worth(pre_spend_context(card, env.blast_radius))
        if not card.allocated:
            env.counters.add("not_allocated")
        if env.config.self_verify:
            if card.allocated:
                patched = env.strategy.render(diff.apply(rollout.state))
                _, verified = env.solve_and_score(
                    patched, task, what=f"worker {rollout.worker_id} self-verify of task {task.id!r}",
                    phase="self_verify", worker=rollout.worker_id,
                )
                card.before_after_delta = verified - rollout.reward
                card.self_verified = True
                env.counters.add("self_verify_rollouts")
            else:
                card.before_after_delta = 0.0
                env.counters.add("self_verify_skipped")
    finally:
        spent = thread_tokens() - tokens_before
        env.counters.add("step_tokens", spent)
    card.cost_tokens = rollout.tokens + spent
    env.counters.add("cards")
    env.counters.add("card_tokens", card.cost_tokens)
    return card


# =========================================================================== merge, finish


def merge_and_record(env: RunEnv, *, rollouts: int, cards: Sequence[EvidenceCard]) -> RoundInfo:
    """Merge ``cards`` (one aggregator step), record the `RoundInfo`, report it.

    Both runtimes end every round (sync) or sweep (async) here: ingest, budget spend,
    merge, budget spend again, the round's tokens (everything the run meter recorded since
    the previous round), the progress bar and ``on_round``.
    """
    for card in cards:
        env.aggregator.ingest(card)
    env.governor.spend(env.usage.total_tokens)
    reports, held = env.merge()
    total, failures = env.usage.total_tokens, env.counters.get("backend_failures")
    env.governor.spend(total)
    info = RoundInfo(
        index=len(env.history) + 1, held_out_reward=held, tokens=total - env._tokens_mark,
        reports=reports, rollouts=rollouts, cards=len(cards),
        backend_failures=failures - env._failures_mark,
        **_summarize(reports),
    )
    env._tokens_mark, env._failures_mark = total, failures
    env.history.append(info)
    env.governor.end_round(info.tokens)
    save_progress(env)
    logger.info("%s %d: held-out %.3f, %d commit(s), %d token(s)", env.unit, info.index, held, info.committed, info.tokens)
    if env.config.on_round is not None:
        env.config.on_round(info)
    if env.bar is not None:
        env.bar.update(1)
        env.bar.set_postfix(reward=f"{held:.3f}", commits=sum(h.committed for h in env.history))
    return info


RUN_STATE_FORMAT = "agentdescent-run-state/1"


def save_progress(env: RunEnv) -> None:
    """Save the run's progress in its ledger (a `RunStateStore`), keyed by the artifact id.

    Called after every round or sweep, so a run killed at any instant loses at most the
    round in flight. What is saved: every `RoundInfo`, the run meter, the first and last
    held-out rewards, the stop rules' best and patience count, the task walk, the
    governor's and the allocator's learned state, the counters, and the head's per-task
    held-out scores (so a resumed run does not pay to evaluate its head again).
    """
    if not env.persist:
        return
    aid = env.artifact_id
    version, _ = env.ledger.head(aid)
    head_scores = env.aggregator.cached_head_scores(aid, version)
    state = {
        "format": RUN_STATE_FORMAT,
        "usage": env.usage.to_json(),
        "initial_reward": env.initial_reward, "last_reward": env.last_reward,
        "stop": {"best": env.stops.best if math.isfinite(env.stops.best) else None,
                 "since_best": env.stops.since_best},
        "cycle": env.cycle.state_dict() if env.cycle is not None else None,
        "governor": env.governor.state_dict(),
        "allocator": env.config.allocator.state_dict() if env.config.allocator is not None else None,
        "counters": env.counters.as_dict(),
        "merge_counters": dict(env.aggregator.counters),
        "eta_histogram": {str(k): v for k, v in env.aggregator.eta_histogram.items()},
        "pool": env.aggregator.pool_state(),
        "groups": env.groups.state_dict(),
        "head": {"version": version, "held_out": [t.id for t in env.held_out], "scores": head_scores},
    }
    # Only what changed since the last save: the new rounds, and the last saved one again
    # (`finish` adds the tokens of work abandoned at the stop to the last round).
    new_rounds = [h.to_json() for h in env.history[max(0, env._rounds_saved - 1):]]
    env.ledger.save_run_state(aid, state, new_rounds)
    env._rounds_saved = len(env.history)


def _restore_progress(env: RunEnv, saved: Mapping[str, Any]) -> None:
    """Continue a run from `save_progress`'s state (see it for what comes back)."""
    env.history = [RoundInfo.from_json(h) for h in saved["history"]]
    env.resumed_rounds = env._rounds_saved = len(env.history)
    meter = Usage.from_json(saved["usage"])
    env.usage = meter
    env.meters = (meter, *env.meters[1:])
    env._tokens_mark = meter.total_tokens
    env.counters.update(saved.get("counters", {}))
    env._failures_mark = env.counters.get("backend_failures")
    env.aggregator.counters.update(saved.get("merge_counters", {}))
    env.aggregator.eta_histogram.update({int(k): int(v) for k, v in saved.get("eta_histogram", {}).items()})
    env.aggregator.restore_pool(saved.get("pool", []), {t.id: t for t in env.config.tasks})
    env.groups.load_state_dict(saved.get("groups", {}))
    env.initial_reward, env.last_reward = saved.get("initial_reward"), saved.get("last_reward")
    stop = saved.get("stop") or {}
    env.stops.best = stop["best"] if stop.get("best") is not None else -math.inf
    env.stops.since_best = int(stop.get("since_best", 0))
    if saved.get("cycle") and env.cycle is not None:
        env.cycle.load_state_dict(saved["cycle"])
    env.governor.load_state_dict(saved.get("governor") or {})
    env.governor.spend(meter.total_tokens)
    if env.config.allocator is not None and saved.get("allocator") is not None:
        env.config.allocator.load_state_dict(saved["allocator"])
    head = saved.get("head") or {}
    version, state = env.ledger.head(env.artifact_id)
    if (head.get("scores") is not None and head.get("version") == version
            and head.get("held_out") == [t.id for t in env.held_out]):
        env.aggregator.remember_head_scores(env.artifact_id, version, head["scores"])
        env.evaluator.remember(state, env.held_out, head["scores"])
    logger.info("resuming run %r after %d round(s): %d token(s) already spent",
                env.artifact_id, env.resumed_rounds, meter.total_tokens)


def _summarize(reports: Sequence[MergeReport]) -> dict[str, int]:
    return {
        "committed": sum(r.outcome is MergeOutcome.COMMITTED for r in reports),
        "fused": sum(r.outcome is MergeOutcome.COMMITTED and r.fused for r in reports),
        "discarded_stale": sum(r.discarded_stale for r in reports),
        "conflicts_dropped": sum(r.conflicts_dropped for r in reports),
    }


def drive(env: RunEnv, scheduler: Callable[[], str]) -> tuple[str, str | None]:
    """Measure the starting head, run ``scheduler`` until it returns a stop reason, map the ends.

    Both runtimes run through here, so a time stop and a failed run end the same way:
    a `RunTimeout` is ``("max_seconds", None)``, a `RunFailed` is ``("error", message)``.
    Contract errors and ``KeyboardInterrupt`` propagate.

    Returns:
        ``(stop_reason, error)``.
    """
    try:
        env.measure_initial()
        return scheduler(), None
    except RunTimeout as exc:
        logger.warning("%s; stopping", exc)
        return "max_seconds", None
    except RunFailed as exc:
        where = f"{env.unit} {len(env.history) + 1}" if env.initial_reward is not None else "the first evaluation"
        logger.error("the run cannot go on (%s): %s", where, exc)
        return "error", f"{where}: {exc}"


def finish(env: RunEnv, *, stop_reason: str, error: str | None, forced_refreshes: int = 0,
           extra_counters: Mapping[str, Any] | None = None) -> EvolutionResult:
    """Assemble the `EvolutionResult` from the ledger head (both runtimes end here).

    Nothing is evaluated: the final reward is the head's cached held-out score, else the
    last one measured, else NaN (the run never measured one; ``stop_reason``/``error``
    say why). Tokens recorded after the last round (work in flight at the stop) count in
    the last round, so the rounds' tokens add up to ``result.usage.total_tokens`` and to
    ``result.budget["spent"]``; ``result.usage`` is a copy taken now, which work abandoned
    at the stop can no longer change.
    """
    version, state = env.ledger.head(env.artifact_id)
    cached = env.aggregator.cached_head_scores(env.artifact_id, version)
    if cached is not None:
        final = sum(cached) / len(cached)
    else:
        final = env.last_reward if env.last_reward is not None else math.nan
    usage = env.usage.copy()
    total = usage.total_tokens
    if env.history and total > env._tokens_mark:
        env.history[-1].tokens += total - env._tokens_mark
        env._tokens_mark = total
    env.governor.spend(total)
    if env.history:
        save_progress(env)
    counters: dict[str, Any] = dict(env.counters.as_dict())
    counters.update({f"merge_{k}": v for k, v in sorted(env.aggregator.counters.items())})
    counters["eta_histogram"] = {str(k): v for k, v in sorted(env.aggregator.eta_histogram.items())}
    if extra_counters:
        counters.update(extra_counters)
    return EvolutionResult(
        state=state,
        rendered=env.strategy.render(state),
        final_reward=final,
        error=error,
        stop_reason=stop_reason,
        history=env.history,
        forced_refreshes=forced_refreshes,
        usage=usage,
        budget=env.governor.summary() if env.governor.max_tokens is not None else None,
        artifact_id=env.artifact_id,
        version=version,
        initial_reward=env.initial_reward,
        rollouts=env.counters.get("rollouts"),
        counters=counters,
    )
