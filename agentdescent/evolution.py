"""The synchronous engine, ``evolve()``: rounds with a barrier, and nothing else.

This module owns only *when* things run in a sync run: each round snapshots the head
for every worker (every ``refresh_interval`` rounds, staggered), runs the round's
rollouts and worker steps on the run's pool, and merges every card the round produced
in one decision at the barrier (so two complementary proposals of one round fuse).
Everything else — the configuration, the worker step, the failure, budget and time rules,
the stop rules, the result — is `agentdescent.runtime`'s, shared with
`agentdescent.async_evolve`.

It must not commit to the ledger except through the aggregator, print anything unless
asked (``progress=True``), or use the global RNG.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .aggregator import AggregatorConfig
from .allocator import AllocatorPolicy
from .async_evolve import async_evolve
from .ledger import Ledger
from .model import Usage
from .result import EvolutionResult, RoundInfo
from .runtime import (
    AggregatorFactory,
    Clock,
    Rollout,
    RunConfig,
    RunEnv,
    card_step,
    close_run,
    drive,
    finish,
    merge_and_record,
    open_run,
    rollout_step,
)
from .staleness import StalenessPolicy
from .strategies import Strategy
from .types import EvidenceCard, Task

__all__ = ["EvolutionResult", "RoundInfo", "evolve"]

logger = logging.getLogger("agentdescent.evolution")

_SYNC_ONLY = (("rounds", 15), ("max_concurrency", 1), ("refresh_interval", 1))


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
    shuffle: bool = True,
    seed: int = 0,
    self_verify: bool = True,
    target_reward: float | None = None,
    patience: int | None = None,
    max_seconds: float | None = None,
    max_rollouts: int | None = None,
    max_tokens: int | None = None,
    staleness_policy: StalenessPolicy | str | None = None,
    agg_config: AggregatorConfig | None = None,
    aggregator_factory: AggregatorFactory | None = None,
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
    grace_seconds: float = 2.0,
    call_attempts: int = 3,
    failure_limit: int = 3,
    clock: Clock | None = None,
    stratify: str | None = None,
    resume: bool = True,
) -> EvolutionResult:
    """Evolve an artifact with parallel workers that merge through a versioned ledger.

    Each round every worker rolls out a train task on its snapshot of the artifact; an
    unsolved rollout leads to a proposal, which the strategy turns into a diff; an
    optional self-verify rollout measures the diff on the same task; the card goes to
    the aggregator, and at the round's barrier all of the round's cards are merged in
    one decision (so complementary proposals fuse). The held-out reward of the head
    is recorded after every round.

    Args:
        tasks: at least 4 tasks with unique ids; split into train and held-out after a
            seeded shuffle (``shuffle=False``: positionally, the last ones held out).
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
        max_concurrency: threads for rollouts when no ``executor`` is given (1: serial,
            bit-for-bit repeatable).
        refresh_interval: a worker re-reads the head every this many rounds (staggered
            by worker id), so diffs can be stale; 1 means always fresh.
        held_out_frac: share of tasks held out for acceptance, in (0, 1).
        shuffle: shuffle the tasks (seeded) before the split (default since 0.2: sorted
            task files would otherwise hold out whole categories).
        seed: seeds task order, the cheap subset and the shuffle.
        self_verify: re-run the prompting task on the patched artifact before merging.
        target_reward: stop once the held-out reward reaches this.
        patience: stop after this many rounds without a new best held-out reward (in
            rounds' worth of rollouts, ``n_workers`` each, the same rule as async).
        max_seconds: stop admitting work after this many seconds (on ``clock``).
        max_rollouts: rollout limit (the last round is cut short to honour it).
        max_tokens: the run's token budget. It binds on every meter the run's calls
            record into (the provider's, the agent's, ``usage``): checked before each
            round (the mean round so far must still fit) and after every merge, so a run
            overshoots by at most about one round's spend. Ends the run with
            ``stop_reason == "max_tokens"`` and thins optional spend as it runs out.
        staleness_policy: a policy or its name (default ``"guarded"``).
        agg_config: aggregator knobs.
        aggregator_factory: ``factory(ledger, evaluator, config, policy, allocator)``.
        fusion_tournament: overrides ``agg_config.fusion_tournament``.
        cheap_eval_tasks: size of (or the tasks of) the cheap scoring subset.
        allocator: a learning allocator consulted by the budget governor.
        ledger: a path (SQLite, resumed if it exists: see ``resume``), a Ledger, or None
            (in memory).
        usage: a meter that also receives every token the run records (``result.usage``
            is the run's own meter, counting this run only).
        executor: a ``concurrent.futures.Executor`` for the run's calls (default: a pool
            of ``max_concurrency`` daemon threads): a ``ThreadPoolExecutor``, a
            ``ProcessPoolExecutor``, or Dask's ``Client(...).get_executor()``. Rollouts,
            proposals, self-verify and held-out evaluations run on it; the merge, the
            ledger and the allocator stay in this process. On anything but a thread pool
            the callables (``reward``, ``run``/``propose`` or ``agent``) and the tasks
            are pickled: what does not pickle is a `ContractError` before any call. See
            the Scaling out page.
        on_round: called with each `RoundInfo`.
        progress: show a progress bar.
        asynchronous: delegate to `agentdescent.async_evolve`.
        async_ratio: with ``asynchronous=True``, the staleness at which a worker resyncs.
        stop_on_diminishing_returns: with a budget, stop when reward per token stalls.
        grace_seconds: how long work in flight may run past ``max_seconds``; the call
            returns by ``max_seconds + grace_seconds`` whatever the backend does.
        call_attempts: attempts of a call that raises something other than a
            `ProviderError` (a provider retries on its own; a non-retryable provider
            error ends the run at once).
        failure_limit: failed calls in a row of one phase (rollout, proposal,
            self-verify, evaluation) that end the run with ``error`` set.
        stratify: a ``task.meta`` key: split each of its values on its own, so every
            category is on both sides of the split (see `agentdescent.runtime.split_tasks`).
        resume: on a ledger that holds this run's saved progress (a SQLite path run
            before, even one killed mid-run), continue it: round numbering, spend
            (``max_tokens`` counts what was already spent), history, counters, stop-rule,
            allocator and task-order state come back and ``rounds`` more rounds run.
            False starts the counters over on the same artifact head.
        clock: the time source for ``max_seconds`` (default `time.monotonic`;
            `agentdescent.testing.ManualClock` in tests).

    Returns:
        The `EvolutionResult`; everything committed stays in the ledger. A run that
        cannot go on (see the Failures page) returns with ``stop_reason == "error"`` and
        ``error`` saying why.

    Raises:
        ValueError: a bad knob (the message names it and the accepted range).
        TypeError: a callable with the wrong shape.
        RewardContractError: the reward returned something outside [0, 1].
        ProposalContractError: a proposal that is neither ``str`` nor ``None``.
    """
    arguments = dict(locals())
    if asynchronous:
        ignored = [name for name, default in _SYNC_ONLY if arguments[name] != default]
        if ignored:
            raise ValueError(
                f"evolve(asynchronous=True) has no rounds: {', '.join(ignored)} cannot apply; "
                "drop them (async workers are n_workers threads whose calls run on executor=, "
                "staleness is bounded by async_ratio, and the run stops on max_seconds/"
                "max_rollouts/target_reward/patience/max_tokens)"
            )
        if max_seconds is None:
            logger.info("evolve(asynchronous=True) without max_seconds: using async_evolve's 20 s")
        passed = {k: v for k, v in arguments.items()
                  if k not in {name for name, _ in _SYNC_ONLY} | {"asynchronous", "tasks", "reward"}}
        passed["max_seconds"] = max_seconds or 20.0
        return async_evolve(tasks, reward, **passed)
    for name, value, low in (("rounds", rounds, 1), ("refresh_interval", refresh_interval, 1),
                             ("async_ratio", async_ratio, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r}: use an integer >= {low}")
    config = RunConfig.from_arguments(arguments)
    env = open_run(config)
    try:
        if env.bar is not None:
            env.bar.total, env.bar.unit = rounds, "round"
        stop_reason, error = drive(env, lambda: _run_rounds(env, rounds, refresh_interval))
        return finish(env, stop_reason=stop_reason, error=error)
    finally:
        close_run(env)


def _run_rounds(env: RunEnv, rounds: int, refresh_interval: int) -> str:
    """Run up to ``rounds`` rounds; return the stop reason."""
    aid = env.artifact_id
    cycle = env.cycle
    snapshots: dict[int, tuple[int, dict[str, str]]] = {}
    admitted = 0
    for index in range(1, rounds + 1):
        reason = env.admission_check(admitted, env.governor.mean_round_tokens())
        if reason is not None:
            return reason
        for w in range(env.n_workers):
            if index == 1 or (env.resumed_rounds + index - 1 + w) % refresh_interval == 0:
                snapshots[w] = env.ledger.head(aid)
        left = env.stops.rollouts_left(admitted)
        workers = range(env.n_workers if left is None else min(env.n_workers, left))
        jobs = [(w, cycle.next()) for w in workers]
        admitted += len(jobs)

        def do_rollout(job: tuple[int, Task]) -> Rollout:
            w, task = job
            version, state = snapshots[w]
            return rollout_step(env, w, task, version, state)

        rollouts = [r for r in env.map(do_rollout, jobs) if isinstance(r, Rollout)]
        cards = [c for c in env.map(lambda r: card_step(env, r), rollouts) if isinstance(c, EvidenceCard)]
        info = merge_and_record(env, rollouts=len(rollouts), cards=cards)
        reason = env.stops.after_merge(info.held_out_reward, info.rollouts, env.governor)
        if reason is None and env.stops.rollouts_left(admitted) == 0:
            reason = "max_rollouts"
        if reason is not None:
            return reason
    return "rounds"
