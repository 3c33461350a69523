"""The synchronous engine, ``evolve()``, and the pieces both runtimes share.

This module owns the run set-up (argument checks, the train/held-out split, the
ledger, the evaluator, the aggregator), the **worker step** (rollout -> proposal ->
``to_diff`` -> ``candidate_worth`` -> self-verify -> evidence card), the stop rules,
and the result (`EvolutionResult`, `RoundInfo`). The asynchronous
runtime (`agentdescent.async_evolve`) reuses all of them and differs only in
*when* workers and the merger run.

It must not commit to the ledger except through the aggregator, print anything unless
asked (``progress=True``), or use the global RNG.
"""

from __future__ import annotations

import collections
import concurrent.futures
import inspect
import json
import logging
import math
import numbers
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .agents import Usage, thread_tokens, usage_phase, worker_scope
from .aggregator import Aggregator, AggregatorConfig
from .allocator import AllocatorPolicy, pre_spend_context
from .budget import BudgetGovernor
from .governance import ArtifactInfo, Layer, classify
from .ledger import Ledger, MemoryLedger, SqliteLedger
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
    RewardContractError,
    Task,
    stable_hash,
)

__all__ = ["EvolutionResult", "RoundInfo", "evolve"]

logger = logging.getLogger("agentdescent.evolution")

#: Attempts per backend call (a rollout, a proposal, a held-out evaluation) before the
#: failure counts against the run.
BACKEND_ATTEMPTS = 3
#: Attempts per evaluation call: the merge depends on every one of them, so it gets more.
EVAL_ATTEMPTS = 5
#: Merges in a row whose held-out evaluation may fail before the run ends with an error.
MERGE_FAILURES_TOLERATED = 3


# =========================================================================== results


@dataclass
class RoundInfo:
    """What one sync round (or one async merger sweep) did.

    Args:
        index: 1-based round (or sweep) number.
        held_out_reward: mean held-out reward of the head after the merge.
        committed: commits in this round.
        fused: commits of fused candidates in this round.
        discarded_stale: cards dropped by the staleness policy.
        conflicts_dropped: cards dropped as the weaker side of a contradiction.
        tokens: tokens recorded on the run's meter during the round.
        reports: the merge reports.
        rollouts: rollouts finished in the round.
        cards: evidence cards merged in the round.
        backend_failures: backend calls that failed even after retries.
    """

    index: int
    held_out_reward: float
    committed: int = 0
    fused: int = 0
    discarded_stale: int = 0
    conflicts_dropped: int = 0
    tokens: int = 0
    reports: list[MergeReport] = field(default_factory=list)
    rollouts: int = 0
    cards: int = 0
    backend_failures: int = 0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        data = {k: getattr(self, k) for k in (
            "index", "held_out_reward", "committed", "fused", "discarded_stale",
            "conflicts_dropped", "tokens", "rollouts", "cards", "backend_failures",
        )}
        data["reports"] = [r.to_json() for r in self.reports]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RoundInfo:
        """Rebuild from `to_json` output."""
        kwargs = dict(data)
        kwargs["reports"] = [MergeReport.from_json(r) for r in data.get("reports", [])]
        return cls(**kwargs)


@dataclass
class EvolutionResult:
    """The outcome of a run.

    Args:
        state: the final artifact state (the ledger head).
        rendered: the final state rendered by the strategy.
        final_reward: mean held-out reward of the final state.
        error: why the run could not continue, or None.
        stop_reason: ``"rounds"``, ``"target_reward"``, ``"patience"``, ``"max_seconds"``,
            ``"max_rollouts"``, ``"max_iters"``, ``"max_tokens"``, ``"diminishing_returns"``
            or ``"error"``.
        history: one `RoundInfo` per round (or merger sweep).
        forced_refreshes: resyncs the async stall guard forced.
        usage: the run's token meter.
        budget: the budget governor's summary, or None without a budget.
        artifact_id: the evolved artifact.
        version: the final head version.
        initial_reward: held-out reward of the starting state.
        rollouts: rollouts finished (self-verify re-runs not included).
        counters: everything else the run counted (backend failures, self-verify skips,
            async sweeps, the eta histogram, stragglers...).
    """

    state: dict[str, str]
    rendered: str
    final_reward: float
    error: str | None
    stop_reason: str
    history: list[RoundInfo] = field(default_factory=list)
    forced_refreshes: int = 0
    usage: Usage = field(default_factory=Usage)
    budget: dict[str, Any] | None = None
    artifact_id: str = "artifact"
    version: int = 1
    initial_reward: float | None = None
    rollouts: int = 0
    counters: dict[str, Any] = field(default_factory=dict)

    def outcomes(self) -> dict[str, int]:
        """How many merge decisions ended each way, keyed by `MergeOutcome` value."""
        counts = {o.value: 0 for o in MergeOutcome}
        for info in self.history:
            for report in info.reports:
                counts[report.outcome.value] += 1
        return counts

    @property
    def committed(self) -> int:
        """Commits over the whole run."""
        return sum(info.committed for info in self.history)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the usage meter as its snapshot)."""
        return {
            "format": "agentdescent-result/1",
            "state": dict(self.state),
            "rendered": self.rendered,
            "final_reward": self.final_reward,
            "error": self.error,
            "stop_reason": self.stop_reason,
            "history": [h.to_json() for h in self.history],
            "forced_refreshes": self.forced_refreshes,
            "usage": {**self.usage.snapshot(), "phases": self.usage.by_phase()},
            "budget": self.budget,
            "artifact_id": self.artifact_id,
            "version": self.version,
            "initial_reward": self.initial_reward,
            "rollouts": self.rollouts,
            "counters": self.counters,
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the result as JSON (atomically) and return the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True), encoding="utf-8")
        os.replace(tmp, target)
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EvolutionResult:
        """Read a result written by `save`.

        Raises:
            AgentDescentError: the file is not a saved result.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError(f"the JSON is a {type(data).__name__}, not an object")
            if data.get("format") != "agentdescent-result/1":
                raise ValueError(f"format marker is {data.get('format')!r}")
            snap = data["usage"]
            usage = Usage(snap["prompt_tokens"], snap["completion_tokens"], snap["cached_tokens"], snap["calls"])
            usage.cache_write_tokens = int(snap.get("cache_write_tokens", 0))
            usage._phases.update({str(k): int(v) for k, v in snap.get("phases", {}).items()})
            return cls(
                state=dict(data["state"]),
                rendered=data["rendered"],
                final_reward=float(data["final_reward"]),
                error=data["error"],
                stop_reason=data["stop_reason"],
                history=[RoundInfo.from_json(h) for h in data["history"]],
                forced_refreshes=int(data["forced_refreshes"]),
                usage=usage,
                budget=data["budget"],
                artifact_id=data["artifact_id"],
                version=int(data["version"]),
                initial_reward=data["initial_reward"],
                rollouts=int(data["rollouts"]),
                counters=dict(data["counters"]),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AgentDescentError(
                f"{os.fspath(path)!r} is not a saved agentdescent result "
                f"(expected JSON written by EvolutionResult.save): {exc}"
            ) from exc


# =========================================================================== set-up


class BackendFailure(AgentDescentError):
    """A backend call (rollout, proposal, evaluation) kept failing after its retries."""


def _check_arity(fn: Callable[..., Any], n: int, name: str, shape: str) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and some C callables cannot be inspected; trust them
    try:
        sig.bind(*range(n))
    except TypeError as exc:
        raise TypeError(f"{name} must accept {n} positional arguments {shape}: {exc}") from None


def _resolve_callables(
    agent: Any, run: Callable | None, propose: Callable | None
) -> tuple[Callable[[str, Task], str], Callable[..., str | None], Any]:
    if agent is not None:
        if run is not None or propose is not None:
            raise ValueError("pass either agent= or run=/propose=, not both")
        for method in ("solve", "propose"):
            if not callable(getattr(agent, method, None)):
                raise TypeError(f"agent={agent!r} has no callable {method}(); see agentdescent.Agent")
        return agent.solve, agent.propose, agent
    if run is None or propose is None:
        missing = [n for n, v in (("run", run), ("propose", propose)) if v is None]
        raise ValueError(
            f"missing {' and '.join(missing)}: pass run(rendered, task) and "
            "propose(rendered, task, output, reward), or an agent= with solve() and propose()"
        )
    _check_arity(run, 2, "run", "(rendered, task)")
    _check_arity(propose, 4, "propose", "(rendered, task, output, reward)")
    return run, propose, getattr(run, "__self__", None)


def _split(tasks: Sequence[Task], held_out_frac: float, shuffle: bool, seed: int) -> tuple[list[Task], list[Task]]:
    ordered = list(tasks)
    if shuffle:
        random.Random(stable_hash(seed, "shuffle")).shuffle(ordered)
    n_held = min(len(ordered) - 1, max(1, round(len(ordered) * held_out_frac)))
    n_train = len(ordered) - n_held
    return ordered[:n_train], ordered[n_train:]


def _cheap_subset(held_out: list[Task], cheap_eval_tasks: int | Sequence[Task] | None, seed: int) -> list[Task]:
    if cheap_eval_tasks is None:
        k = min(len(held_out), max(8, len(held_out) // 4))
    elif isinstance(cheap_eval_tasks, int) and not isinstance(cheap_eval_tasks, bool):
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


def _open_ledger(ledger: Any) -> tuple[Ledger, bool]:
    if ledger is None:
        return MemoryLedger(), False
    if isinstance(ledger, (str, os.PathLike)):
        return SqliteLedger(ledger), True
    for method in ("register", "head", "versions", "commit", "history", "blast_radius"):
        if not callable(getattr(ledger, method, None)):
            raise TypeError(
                f"ledger={ledger!r} is not a Ledger (no {method}()); pass a path, "
                "a MemoryLedger/SqliteLedger, or None"
            )
    return ledger, False


def _validate(
    tasks: Sequence[Task], n_workers: int, rounds: int, held_out_frac: float, blast_radius: float,
    max_concurrency: int, refresh_interval: int, artifact_id: str, async_ratio: int,
) -> None:
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
    for name, value, low in (
        ("n_workers", n_workers, 1), ("rounds", rounds, 1), ("max_concurrency", max_concurrency, 1),
        ("refresh_interval", refresh_interval, 1), ("async_ratio", async_ratio, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r}: use an integer >= {low}")
    if not (isinstance(held_out_frac, (int, float)) and 0.0 < held_out_frac < 1.0):
        raise ValueError(f"held_out_frac={held_out_frac!r}: use a fraction strictly between 0 and 1")
    if not (isinstance(blast_radius, (int, float)) and 0.0 <= blast_radius <= 1.0):
        raise ValueError(f"blast_radius={blast_radius!r}: use a number in [0, 1]")
    if classify(ArtifactInfo(artifact_id, blast_radius)) is Layer.L0_FROZEN:
        raise GovernanceError(
            f"artifact_id={artifact_id!r} is reserved and frozen (L0); choose another id"
        )


def _check_reward(task: Task, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RewardContractError(
            f"reward for task {task.id!r} returned {value!r} ({type(value).__name__}); "
            "return a float in [0, 1]"
        )
    value = float(value)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise RewardContractError(
            f"reward for task {task.id!r} returned {value!r}; return a finite float in [0, 1]"
        )
    return value


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


@dataclass
class RunEnv:
    """Everything a worker step and a merge need, shared by the sync and async runtimes.

    Built by `build_env`; not part of the public API.
    """

    train: list[Task]
    held_out: list[Task]
    strategy: Strategy
    solve: Callable[[str, Task], str]
    propose: Callable[..., str | None]
    reward: Callable[[Task, str], float]
    usage: Usage
    ledger: Ledger
    owns_ledger: bool
    executor: concurrent.futures.Executor | None
    owns_executor: bool
    artifact_id: str
    blast_radius: float
    self_verify: bool
    governor: BudgetGovernor
    seed: int
    n_workers: int
    evaluator: RolloutEvaluator | None = None
    aggregator: Aggregator | None = None
    counters: _Counters = field(default_factory=lambda: _Counters())
    last_error: BaseException | None = None
    failed_merges_in_a_row: int = 0
    last_reward: float | None = None

    # ----------------------------------------------------------------- backend calls

    def call(self, fn: Callable[..., Any], *args: Any, what: str, phase: str,
             attempts: int = BACKEND_ATTEMPTS, worker: int | None = None) -> Any:
        """Call a backend with bounded retries; raise `BackendFailure` when it keeps failing.

        Tokens the call records are attributed to ``phase`` (see
        `agentdescent.agents.usage_phase`). Contract errors are the caller's bug and
        propagate at once.
        """
        last: BaseException | None = None
        for attempt in range(1, attempts + 1):
            try:
                with usage_phase(phase), worker_scope(worker):
                    return fn(*args)
            except (ContractError, GovernanceError):
                raise
            except Exception as exc:  # a backend failure: count, retry
                last = exc
                self.counters.add("backend_errors")
                logger.warning("%s failed (attempt %d/%d): %s: %s", what, attempt,
                               attempts, type(exc).__name__, exc)
        self.counters.add("backend_failures")
        self.last_error = last
        raise BackendFailure(f"{what} failed {attempts} times; last error: "
                             f"{type(last).__name__}: {last}") from last

    def head_reward(self) -> float:
        """Mean held-out reward of the current head (cached per version by the aggregator)."""
        return sum(self.aggregator.head_scores(self.artifact_id)) / len(self.held_out)

    def _count_merge_failure(self, exc: BackendFailure) -> None:
        """Count a failed held-out measurement; re-raise once too many came in a row."""
        self.counters.add("merge_failures")
        self.failed_merges_in_a_row += 1
        if self.failed_merges_in_a_row >= MERGE_FAILURES_TOLERATED:
            raise exc
        logger.warning("held-out measurement failed (%d in a row); trying again at the next merge",
                       self.failed_merges_in_a_row)

    def merge(self) -> tuple[list[MergeReport], float]:
        """One aggregator step and the head's held-out reward, tolerating a failing evaluator.

        If the held-out evaluation keeps failing (a `BackendFailure`), the
        aggregator has already put the cards back; the failure is counted and the merge
        reports nothing, with the last known reward, so the runtime tries again at its
        next merge (scores that did succeed are cached, so a retry only re-runs what
        failed). After ``MERGE_FAILURES_TOLERATED`` failed merges in a row the failure
        is raised.
        """
        try:
            reports, held = self.aggregator.step(), self.head_reward()
        except BackendFailure as exc:
            self._count_merge_failure(exc)
            return [], self.last_reward if self.last_reward is not None else 0.0
        self.failed_merges_in_a_row = 0
        self.last_reward = held
        return reports, held

    def initial_reward(self) -> float:
        """The starting head's held-out reward, with the same tolerance as `merge`."""
        while True:
            try:
                self.last_reward = self.head_reward()
            except BackendFailure as exc:
                self._count_merge_failure(exc)
                continue
            self.failed_merges_in_a_row = 0
            return self.last_reward

    def score(self, task: Task, output: str) -> float:
        """The reward of one output, with the reward contract checked."""
        return _check_reward(task, self.reward(task, output))

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """Apply ``fn`` to ``items`` on the run's executor (in order), or serially."""
        items = list(items)
        if self.executor is None or len(items) <= 1:
            return [fn(item) for item in items]
        return list(self.executor.map(fn, items))


class RolloutEvaluator:
    """The engines' `Evaluator`: run the agent on held-out tasks.

    Per-task scores are cached by (state digest, task id), so the cheap subset (drawn
    from the held-out set) and repeated head evaluations cost nothing extra.
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
            if not missing:
                return [self._cache[(digest, t.id)] for t in tasks]
        rendered = self.env.strategy.render(state)

        def one(task: Task) -> float | BackendFailure:
            try:
                out = self.env.call(self.env.solve, rendered, task,
                                    what=f"evaluation on task {task.id!r}", phase="evaluation",
                                    attempts=EVAL_ATTEMPTS)
            except BackendFailure as exc:
                return exc  # keep the other tasks' scores: a retry re-runs only what failed
            return self.env.score(task, out)

        scores = self.env.map(one, missing)
        with self._lock:
            failures = [s for s in scores if isinstance(s, BackendFailure)]
            for t, s in zip(missing, scores):
                if not isinstance(s, BackendFailure):
                    self._cache[(digest, t.id)] = s
            self.env.counters.add("eval_rollouts", len(missing))
            if failures:
                raise failures[0]
            return [self._cache[(digest, t.id)] for t in tasks]

    def held_out(self, artifact_id: str, state: Mapping[str, str]) -> list[float]:
        return self._scores(state, self.held_out_tasks)

    def cheap(self, artifact_id: str, state: Mapping[str, str]) -> float:
        scores = self._scores(state, self.cheap_tasks)
        return sum(scores) / len(scores)

    def verify(self, artifact_id: str, state: Mapping[str, str], tasks: Sequence[Task]) -> list[float]:
        """Scores of ``state`` on ``tasks`` (the aggregator's rebase re-verification hook)."""
        return self._scores(state, list(tasks))


def build_env(
    *, tasks: Sequence[Task], reward: Callable[[Task, str], float], agent: Any, run: Any,
    propose: Any, strategy: Strategy | None, initial_state: Mapping[str, str] | None,
    blast_radius: float, artifact_id: str, rounds: int, n_workers: int, max_concurrency: int,
    refresh_interval: int, held_out_frac: float, shuffle: bool, seed: int, self_verify: bool,
    max_tokens: int | None, staleness_policy: StalenessPolicy | str | None,
    agg_config: AggregatorConfig | None, aggregator_factory: Callable[..., Aggregator] | None,
    fusion_tournament: bool | None, cheap_eval_tasks: Any, allocator: AllocatorPolicy | None,
    ledger: Any, usage: Usage | None, executor: concurrent.futures.Executor | None,
    async_ratio: int, stop_on_diminishing_returns: bool = False,
) -> RunEnv:
    """Validate the arguments and build the shared run environment (both runtimes call this)."""
    _validate(tasks, n_workers, rounds, held_out_frac, blast_radius, max_concurrency,
              refresh_interval, artifact_id, async_ratio)
    if not callable(reward):
        raise TypeError(f"reward={reward!r} is not callable; pass reward(task, output) -> float")
    _check_arity(reward, 2, "reward", "(task, output)")
    solve, propose_fn, owner = _resolve_callables(agent, run, propose)
    if usage is None:
        owned = getattr(owner, "usage", None)
        usage = owned if isinstance(owned, Usage) else Usage()
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"max_tokens={max_tokens!r}: use a positive token count, or None for no budget")
    if allocator is not None and not (callable(getattr(allocator, "decide", None)) and callable(getattr(allocator, "observe", None))):
        raise TypeError(f"allocator={allocator!r} has no decide()/observe(); see AllocatorPolicy")
    strategy = strategy if strategy is not None else AppendRules()
    policy = get_policy(staleness_policy) if isinstance(staleness_policy, str) else staleness_policy
    config = agg_config if agg_config is not None else AggregatorConfig()
    if fusion_tournament is not None:
        config = replace(config, fusion_tournament=bool(fusion_tournament))
    train, held_out = _split(tasks, held_out_frac, shuffle, seed)
    cheap_tasks = _cheap_subset(held_out, cheap_eval_tasks, seed)

    led, owns_ledger = _open_ledger(ledger)
    state0 = dict(initial_state) if initial_state is not None else strategy.initial()
    led.register(artifact_id, state0, blast_radius)
    stored_blast = led.blast_radius(artifact_id)  # a resumed artifact keeps its own (the ledger warns)

    if isinstance(executor, concurrent.futures.ProcessPoolExecutor):
        raise ValueError(
            "executor= is a ProcessPoolExecutor: the workers share the run's token meter, "
            "ledger handle and score cache, which cannot cross processes; pass a "
            "ThreadPoolExecutor (or max_concurrency=N)"
        )
    owns_executor = executor is None and max_concurrency > 1
    if owns_executor:
        executor = concurrent.futures.ThreadPoolExecutor(max_concurrency, thread_name_prefix="agentdescent")
    governor = BudgetGovernor(
        max_tokens=max_tokens, allocator=allocator,
        stop_on_diminishing=stop_on_diminishing_returns,
    )
    env = RunEnv(
        train=train, held_out=held_out, strategy=strategy,
        solve=solve, propose=propose_fn, reward=reward, usage=usage, ledger=led,
        owns_ledger=owns_ledger, executor=executor, owns_executor=owns_executor,
        artifact_id=artifact_id, blast_radius=stored_blast, self_verify=bool(self_verify),
        governor=governor, seed=seed, n_workers=n_workers,
    )
    env.evaluator = RolloutEvaluator(env, held_out, cheap_tasks)
    factory = aggregator_factory if aggregator_factory is not None else Aggregator
    env.aggregator = factory(led, env.evaluator, config, policy, allocator)
    if getattr(env.aggregator, "tournament_gate", "absent") is None:
        env.aggregator.tournament_gate = governor.allow_fusion_tournament
    return env


def close_env(env: RunEnv) -> None:
    """Release what the run opened itself (its thread pool, a ledger opened from a path)."""
    if env.owns_executor and env.executor is not None:
        env.executor.shutdown(wait=False, cancel_futures=True)
    if env.owns_ledger:
        env.ledger.close()


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
    """Roll ``task`` out on the worker's snapshot (raises `BackendFailure`)."""
    rendered = env.strategy.render(state)
    tokens_before = thread_tokens()
    output = env.call(env.solve, rendered, task, what=f"worker {worker_id} rollout of task {task.id!r}", phase="rollout",
                      worker=worker_id)
    if not isinstance(output, str):
        raise ContractError(
            f"run/solve returned {type(output).__name__} for task {task.id!r}; return the output as a str"
        )
    env.counters.add("rollouts")
    return Rollout(worker_id, task, version, dict(state), rendered, output,
                   env.score(task, output), thread_tokens() - tokens_before)


def group_advantages(rollouts: Sequence[Rollout]) -> list[float]:
    """Group-relative z-score of each rollout's reward among rollouts of the same base version."""
    groups: dict[int, list[float]] = {}
    for r in rollouts:
        groups.setdefault(r.version, []).append(r.reward)
    return [advantage_in_group(r.reward, groups[r.version]) for r in rollouts]


def advantage_in_group(value: float, group: Sequence[float]) -> float:
    """``(value - mean) / std`` over ``group``; 0.0 when the group has no spread."""
    if len(group) < 2:
        return 0.0
    mean = sum(group) / len(group)
    std = math.sqrt(sum((g - mean) ** 2 for g in group) / len(group))
    return 0.0 if std == 0.0 else (value - mean) / std


def card_step(env: RunEnv, rollout: Rollout, advantage: float) -> EvidenceCard | None:
    """Propose after an unsolved rollout and build the evidence card (raises `BackendFailure`).

    The self-verify rollout (re-run the task on the patched artifact) is the optional
    spend: it runs when ``self_verify`` is on **and** the budget governor says the
    candidate is worth it; a skipped self-verify records ``before_after_delta = 0.0``
    and the card still goes to the merge.
    """
    if rollout.reward >= 1.0:
        return None
    task = rollout.task
    tokens_before = thread_tokens()
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
    diff = env.strategy.to_diff(
        rollout.state, proposal, f"worker-{rollout.worker_id}", rollout.version, env.artifact_id
    )
    if diff is None:
        return None
    card = EvidenceCard(diff, {env.artifact_id: rollout.version}, None, advantage, [task])
    if env.self_verify:
        env.governor.spend(env.usage.total_tokens)
        ctx = pre_spend_context(card, env.blast_radius)
        if env.governor.candidate_worth(ctx):
            patched = env.strategy.render(diff.apply(rollout.state))
            out = env.call(env.solve, patched, task,
                           what=f"worker {rollout.worker_id} self-verify of task {task.id!r}",
                           phase="self_verify", worker=rollout.worker_id)
            card.before_after_delta = env.score(task, str(out)) - rollout.reward
            card.self_verified = True
            env.counters.add("self_verify_rollouts")
        else:
            card.before_after_delta = 0.0
            env.counters.add("self_verify_skipped")
    card.cost_tokens = rollout.tokens + thread_tokens() - tokens_before
    env.counters.add("cards")
    return card


# =========================================================================== stop rules


class StopRules:
    """The stop rules both runtimes apply at every merge (round barrier or sweep).

    Args:
        target_reward: stop once the held-out reward reaches this.
        patience: stop after this many merges without a new best held-out reward.
        max_seconds: stop after this much wall-clock time.
        max_rollouts: stop once this many rollouts have finished.
    """

    def __init__(self, target_reward: float | None, patience: int | None,
                 max_seconds: float | None, max_rollouts: int | None) -> None:
        if target_reward is not None and not (isinstance(target_reward, (int, float)) and 0.0 <= target_reward <= 1.0):
            raise ValueError(f"target_reward={target_reward!r}: use a reward in [0, 1] or None")
        for name, value in (("patience", patience), ("max_rollouts", max_rollouts)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}={value!r}: use an integer >= 1 or None")
        if max_seconds is not None and not (isinstance(max_seconds, (int, float)) and max_seconds > 0):
            raise ValueError(f"max_seconds={max_seconds!r}: use a positive number of seconds or None")
        self.target_reward = target_reward
        self.patience = patience
        self.max_seconds = max_seconds
        self.max_rollouts = max_rollouts
        self.started = time.monotonic()
        self.best = -math.inf
        self.since_best = 0

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.started

    def out_of_time(self) -> bool:
        """True once ``max_seconds`` has passed."""
        return self.max_seconds is not None and self.elapsed() >= self.max_seconds

    def rollouts_left(self, done: int) -> int | None:
        """Rollouts still allowed (None: unbounded)."""
        return None if self.max_rollouts is None else max(0, self.max_rollouts - done)

    def check(self, held_out_reward: float, rollouts: int, env: RunEnv) -> str | None:
        """The stop reason after a merge, or None to go on."""
        if held_out_reward > self.best + 1e-12:
            self.best = held_out_reward
            self.since_best = 0
        else:
            self.since_best += 1
        env.governor.observe(held_out_reward)
        if self.target_reward is not None and held_out_reward >= self.target_reward:
            return "target_reward"
        if env.governor.over_budget():
            return "max_tokens"
        if env.governor.stop_on_diminishing and env.governor.diminishing_returns():
            return "diminishing_returns"
        if self.max_rollouts is not None and rollouts >= self.max_rollouts:
            return "max_rollouts"
        if self.patience is not None and self.since_best >= self.patience:
            return "patience"
        if self.out_of_time():
            return "max_seconds"
        return None


def summarize_reports(reports: Sequence[MergeReport]) -> dict[str, int]:
    """Commit, fusion, staleness and conflict counts of a batch of merge reports."""
    return {
        "committed": sum(r.outcome is MergeOutcome.COMMITTED for r in reports),
        "fused": sum(r.outcome is MergeOutcome.COMMITTED and r.fused for r in reports),
        "discarded_stale": sum(r.discarded_stale for r in reports),
        "conflicts_dropped": sum(r.conflicts_dropped for r in reports),
    }


def finish(env: RunEnv, *, history: list[RoundInfo], stop_reason: str, error: str | None,
           initial_reward: float | None, forced_refreshes: int = 0,
           extra_counters: Mapping[str, Any] | None = None) -> EvolutionResult:
    """Assemble the `EvolutionResult` from the ledger head (both runtimes call this)."""
    version, state = env.ledger.head(env.artifact_id)
    try:
        final = env.head_reward()
    except BackendFailure as exc:  # the evaluator itself is down: report what we know
        final = env.last_reward if env.last_reward is not None else 0.0
        error = error or str(exc)
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
        history=history,
        forced_refreshes=forced_refreshes,
        usage=env.usage,
        budget=env.governor.summary() if env.governor.max_tokens is not None else None,
        artifact_id=env.artifact_id,
        version=version,
        initial_reward=initial_reward,
        rollouts=env.counters.get("rollouts"),
        counters=counters,
    )


# =========================================================================== evolve()


def evolve(
    tasks: Sequence[Task],
    reward: Callable[[Task, str], float],
    *,
    agent: Any = None,
    run: Callable[[str, Task], str] | None = None,
    propose: Callable[[str, Task, str, float], str | None] | None = None,
    strategy: Strategy | None = None,
    initial_state: Mapping[str, str] | None = None,
    blast_radius: float = 0.2,
    artifact_id: str = "artifact",
    rounds: int = 15,
    n_workers: int = 4,
    max_concurrency: int = 1,
    refresh_interval: int = 1,
    held_out_frac: float = 0.4,
    shuffle: bool = False,
    seed: int = 0,
    self_verify: bool = True,
    target_reward: float | None = None,
    patience: int | None = None,
    max_seconds: float | None = None,
    max_rollouts: int | None = None,
    max_tokens: int | None = None,
    staleness_policy: StalenessPolicy | str | None = None,
    agg_config: AggregatorConfig | None = None,
    aggregator_factory: Callable[..., Aggregator] | None = None,
    fusion_tournament: bool | None = None,
    cheap_eval_tasks: int | Sequence[Task] | None = None,
    allocator: AllocatorPolicy | None = None,
    ledger: Ledger | str | os.PathLike[str] | None = None,
    usage: Usage | None = None,
    executor: concurrent.futures.Executor | None = None,
    on_round: Callable[[RoundInfo], None] | None = None,
    progress: bool = False,
    asynchronous: bool = False,
    async_ratio: int = 3,
    stop_on_diminishing_returns: bool = False,
) -> EvolutionResult:
    """Evolve an artifact with parallel workers that merge through a versioned ledger.

    Each round every worker rolls out a train task on its snapshot of the artifact; an
    unsolved rollout leads to a proposal, which the strategy turns into a diff; an
    optional self-verify rollout measures the diff on the same task; the card goes to
    the aggregator, and at the round's barrier all of the round's cards are merged in
    one decision (so complementary proposals fuse). The held-out reward of the head
    is recorded after every round.

    Args:
        tasks: at least 4 tasks with unique ids; split positionally (after an optional
            seeded shuffle) into train and held-out.
        reward: ``reward(task, output) -> float`` in [0, 1].
        agent: an object with ``solve(rendered, task)`` and ``propose(...)``
            (alternative to ``run``/``propose``); its ``usage`` meter is adopted.
        run: ``run(rendered, task) -> str``.
        propose: ``propose(rendered, task, output, reward) -> str | None``.
        strategy: what the artifact is (default `AppendRules`).
        initial_state: the starting state (default ``strategy.initial()``); ignored when
            the ledger already holds the artifact (resume).
        blast_radius: in [0, 1]; above 0.30 the artifact is slow (L1, oracle-gated).
        artifact_id: the artifact's id in the ledger (reserved ids are refused).
        rounds: sync rounds to run.
        n_workers: workers per round.
        max_concurrency: threads for rollouts when no ``executor`` is given.
        refresh_interval: a worker re-reads the head every this many rounds (staggered
            by worker id), so diffs can be stale; 1 means always fresh.
        held_out_frac: share of tasks held out for acceptance, in (0, 1).
        shuffle: shuffle the tasks (seeded) before the split.
        seed: seeds task order, the cheap subset and the shuffle.
        self_verify: re-run the prompting task on the patched artifact before merging.
        target_reward: stop once the held-out reward reaches this.
        patience: stop after this many rounds without a new best held-out reward.
        max_seconds: wall-clock limit, checked at each barrier.
        max_rollouts: rollout limit (the last round is cut short to honour it).
        max_tokens: token budget read from ``usage``; ends the run with
            ``stop_reason == "max_tokens"`` and thins optional spend as it runs out.
        staleness_policy: a policy or its name (default ``"guarded"``).
        agg_config: aggregator knobs.
        aggregator_factory: ``factory(ledger, evaluator, config, policy, allocator)``.
        fusion_tournament: overrides ``agg_config.fusion_tournament``.
        cheap_eval_tasks: size of (or the tasks of) the cheap scoring subset.
        allocator: a learning allocator consulted by the budget governor.
        ledger: a path (SQLite, resumed if it exists), a Ledger, or None (in memory).
        usage: the token meter (default: the agent's or the run callable owner's, else new).
        executor: any ``concurrent.futures.Executor`` for rollouts.
        on_round: called with each `RoundInfo`.
        progress: show a progress bar.
        asynchronous: delegate to `agentdescent.async_evolve`.
        async_ratio: with ``asynchronous=True``, the staleness at which a worker resyncs.
        stop_on_diminishing_returns: with a budget, stop when reward per token stalls.

    Returns:
        The `EvolutionResult`; everything committed stays in the ledger.

    Raises:
        ValueError: a bad knob (the message names it and the accepted range).
        TypeError: a callable with the wrong shape.
        RewardContractError: the reward returned something outside [0, 1].
        ProposalContractError: a proposal that is neither ``str`` nor ``None``.
    """
    if asynchronous:
        from .async_evolve import async_evolve

        ignored = [
            name for name, value, default in (
                ("rounds", rounds, 15), ("max_concurrency", max_concurrency, 1),
                ("refresh_interval", refresh_interval, 1), ("executor", executor, None),
            ) if value != default
        ]
        if ignored:
            raise ValueError(
                f"evolve(asynchronous=True) has no rounds or thread pool: {', '.join(ignored)} "
                "cannot apply; drop them (async workers are n_workers threads, staleness is "
                "bounded by async_ratio, and the run stops on max_seconds/max_rollouts/"
                "target_reward/patience/max_tokens)"
            )
        if max_seconds is None:
            logger.info("evolve(asynchronous=True) without max_seconds: using async_evolve's 20 s")

        return async_evolve(
            tasks, reward, agent=agent, run=run, propose=propose, strategy=strategy,
            initial_state=initial_state, blast_radius=blast_radius, artifact_id=artifact_id,
            n_workers=n_workers, async_ratio=async_ratio, max_seconds=max_seconds or 20.0,
            max_iters=max_rollouts, held_out_frac=held_out_frac, shuffle=shuffle, seed=seed,
            self_verify=self_verify, target_reward=target_reward, patience=patience,
            max_tokens=max_tokens, staleness_policy=staleness_policy, agg_config=agg_config,
            aggregator_factory=aggregator_factory, fusion_tournament=fusion_tournament,
            cheap_eval_tasks=cheap_eval_tasks, allocator=allocator, ledger=ledger, usage=usage,
            on_round=on_round, progress=progress,
            stop_on_diminishing_returns=stop_on_diminishing_returns,
        )
    stops = StopRules(target_reward, patience, max_seconds, max_rollouts)
    env = build_env(
        tasks=tasks, reward=reward, agent=agent, run=run, propose=propose, strategy=strategy,
        initial_state=initial_state, blast_radius=blast_radius, artifact_id=artifact_id,
        rounds=rounds, n_workers=n_workers, max_concurrency=max_concurrency,
        refresh_interval=refresh_interval, held_out_frac=held_out_frac, shuffle=shuffle,
        seed=seed, self_verify=self_verify, max_tokens=max_tokens,
        staleness_policy=staleness_policy, agg_config=agg_config,
        aggregator_factory=aggregator_factory, fusion_tournament=fusion_tournament,
        cheap_eval_tasks=cheap_eval_tasks, allocator=allocator, ledger=ledger, usage=usage,
        executor=executor, async_ratio=async_ratio,
        stop_on_diminishing_returns=stop_on_diminishing_returns,
    )
    try:
        return _run_sync(env, stops, rounds, refresh_interval, on_round, progress)
    finally:
        close_env(env)


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


def _progress_bar(progress: bool, total: int | None, desc: str) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="round" if total else "sweep")


def _run_sync(env: RunEnv, stops: StopRules, rounds: int, refresh_interval: int,
              on_round: Callable[[RoundInfo], None] | None, progress: bool) -> EvolutionResult:
    aid = env.artifact_id
    history: list[RoundInfo] = []
    try:
        initial = env.initial_reward()
    except BackendFailure as exc:
        return finish(env, history=history, stop_reason="error", error=str(exc), initial_reward=None)
    cycle = TaskCycle(env.train, env.seed)
    snapshots: dict[int, tuple[int, dict[str, str]]] = {}
    bar = _progress_bar(progress, rounds, "evolve")
    stop_reason, error = "rounds", None
    try:
        for index in range(1, rounds + 1):
            tokens_before = env.usage.total_tokens
            for w in range(env.n_workers):
                if index == 1 or (index - 1 + w) % refresh_interval == 0:
                    snapshots[w] = env.ledger.head(aid)
            left = stops.rollouts_left(env.counters.get("rollouts"))
            workers = list(range(env.n_workers if left is None else min(env.n_workers, left)))
            jobs = [(w, cycle.next()) for w in workers]
            failures_before = env.counters.get("backend_failures")

            def do_rollout(job: tuple[int, Task]) -> Rollout | None:
                w, task = job
                version, state = snapshots[w]
                try:
                    return rollout_step(env, w, task, version, state)
                except BackendFailure:
                    return None

            rollouts = [r for r in env.map(do_rollout, jobs) if r is not None]
            if jobs and not rollouts:
                stop_reason, error = "error", f"every rollout of round {index} failed: {env.last_error!r}"
                break
            advantages = group_advantages(rollouts)

            def do_card(pair: tuple[Rollout, float]) -> EvidenceCard | None:
                try:
                    return card_step(env, pair[0], pair[1])
                except BackendFailure:
                    return None

            cards = [c for c in env.map(do_card, list(zip(rollouts, advantages))) if c is not None]
            for card in cards:
                env.aggregator.ingest(card)
            env.governor.spend(env.usage.total_tokens)
            try:
                reports, held = env.merge()
            except BackendFailure as exc:
                stop_reason, error = "error", str(exc)
                break
            env.governor.spend(env.usage.total_tokens)
            info = RoundInfo(
                index=index, held_out_reward=held, tokens=env.usage.total_tokens - tokens_before,
                reports=reports, rollouts=len(rollouts), cards=len(cards),
                backend_failures=env.counters.get("backend_failures") - failures_before,
                **summarize_reports(reports),
            )
            history.append(info)
            env.governor.end_round(info.tokens)
            logger.info("round %d: held-out %.3f, %d commit(s), %d token(s)",
                        index, held, info.committed, info.tokens)
            if on_round is not None:
                on_round(info)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(reward=f"{held:.3f}", commits=sum(h.committed for h in history))
            reason = stops.check(held, env.counters.get("rollouts"), env)
            if reason is None and index < rounds and not env.governor.affords_next_round():
                reason = "max_tokens"
            if reason is not None:
                stop_reason = reason
                break
    finally:
        if bar is not None:
            bar.close()
    return finish(env, history=history, stop_reason=stop_reason, error=error, initial_reward=initial)
