"""The barrier-free runtime, ``async_evolve()``: workers never wait for a round, one merger owns every write.

This module owns only *when* things run in an async run: worker threads admit, roll out,
propose and self-verify (the worker step of `agentdescent.runtime`) and queue their
results (on the run's executor when it is not a thread pool: a process pool, a Dask
cluster); the merger (the calling thread) sweeps the queue into the aggregator and is the
only thread that commits. Everything else — the configuration, the worker step, the
failure, budget and time rules, the stop rules, the result — is `agentdescent.runtime`'s,
shared with `agentdescent.evolution`.

Safety rules it owns: a worker resyncs once the head is more than ``async_ratio``
versions past its snapshot; a stall guard forces resyncs after a run of sweeps with no
commit (``forced_refreshes``); backpressure holds workers while the merger is behind;
optional admission pacing keeps the expected staleness at merge within alpha; a result
that arrives after the stop is never merged.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .aggregator import AggregatorConfig
from .allocator import AllocatorPolicy
from .ledger import Ledger
from .model import Usage
from .result import EvolutionResult, RoundInfo
from .runtime import (
    POLL_SECONDS,
    AggregatorFactory,
    BackendFailure,
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
from .staleness import StaleAction, StalenessPolicy
from .strategies import Strategy
from .types import EvidenceCard, Task

__all__ = ["async_evolve"]

logger = logging.getLogger("agentdescent.async_evolve")


@dataclass
class _Item:
    worker_id: int
    rollout: Rollout | None
    card: EvidenceCard | None


class _AsyncRun:
    """Shared state of one barrier-free run (workers + merger)."""

    def __init__(self, env: RunEnv, *, async_ratio: int, pacing: bool, max_pending: int,
                 stall_sweeps: int) -> None:
        self.env = env
        self.aid = env.artifact_id
        self.n_workers = env.n_workers
        self.async_ratio = async_ratio
        self.pacing = pacing
        self.alpha = env.aggregator.alpha_for(self.aid)
        self.max_pending = max_pending
        self.stall_sweeps = stall_sweeps
        self.cond = threading.Condition()
        self.queue: list[_Item] = []
        self.closed = False
        self.admitted = 0
        self.delivered = 0
        self.force = [False] * self.n_workers
        self.forced_refreshes = 0
        self.exited = 0
        self.late_dropped = 0
        self.pacing_waits = 0
        self.backpressure_waits = 0
        self.resyncs = 0
        self.merge_steps = 0
        self.admission_stop: str | None = None  # why admission closed, once it has
        self.fatal: BaseException | None = None  # raised in a worker: ends the run
        self.cycle = env.cycle

    # ------------------------------------------------------------------ admission

    def _pacing_allows(self) -> bool:
        """The AReaL capacity rule: at most ``(alpha + v + 1) * batch`` rollouts admitted by step v.

        ``batch`` is the number of workers and ``v`` counts the merger's sweeps (each
        can move the head at most once; counting every sweep keeps admission live when
        rollouts stop producing cards). Every admitted rollout
        starts on the current head, so a rollout admitted under this cap sees, in
        expectation, no more than ``alpha`` commits before it is merged.
        """
        return self.admitted < (self.alpha + self.merge_steps + 1) * self.n_workers

    def admit(self, w: int, snapshot: tuple[int, dict[str, str]] | None) -> tuple[int, dict[str, str]] | None:
        """Block until worker ``w`` may start a rollout; return its snapshot, or None to exit."""
        env = self.env
        with self.cond:
            while True:
                if self.closed or self.fatal is not None or self.admission_stop is not None:
                    return None
                in_flight = self.admitted - self.delivered
                reason = env.admission_check(self.admitted, env.step_cost() * (in_flight + 1))
                if reason is not None:
                    self.admission_stop = reason
                    self.cond.notify_all()
                    return None
                if len(self.queue) >= self.max_pending:
                    self.backpressure_waits += 1
                    self.cond.wait(POLL_SECONDS)
                    continue
                if self.pacing and not self._pacing_allows():
                    self.pacing_waits += 1
                    self.cond.wait(POLL_SECONDS)
                    continue
                head = env.ledger.versions()[self.aid]
                forced = self.force[w]
                stale = snapshot is None or head - snapshot[0] > self.async_ratio
                if forced or stale or (self.pacing and snapshot[0] != head):
                    snapshot = env.ledger.head(self.aid)
                    self.resyncs += 1
                    if forced:
                        self.force[w] = False
                        self.forced_refreshes += 1
                self.admitted += 1
                return snapshot

    def deliver(self, item: _Item) -> None:
        """Queue a finished item for the merger; a result after the stop is dropped, never merged."""
        with self.cond:
            self.delivered += 1
            if self.closed:
                self.late_dropped += 1
                return
            self.queue.append(item)
            self.cond.notify_all()

    # ------------------------------------------------------------------ workers

    def worker(self, w: int) -> None:
        env = self.env
        snapshot: tuple[int, dict[str, str]] | None = None
        try:
            while True:
                snapshot = self.admit(w, snapshot)
                if snapshot is None:
                    return
                rollout: Rollout | None = None
                card: EvidenceCard | None = None
                try:
                    rollout = rollout_step(env, w, self.cycle.next(), snapshot[0], snapshot[1])
                    card = card_step(env, rollout)
                except BackendFailure:
                    pass  # counted by the failure rule; the run goes on without this step
                except BaseException as exc:  # RunFailed or a contract error: end the run with it
                    with self.cond:
                        if self.fatal is None:
                            self.fatal = exc
                        self.cond.notify_all()
                    return
                self.deliver(_Item(w, rollout, card))
        finally:
            with self.cond:
                self.exited += 1
                self.cond.notify_all()

    # ------------------------------------------------------------------ merger

    def take(self, timeout: float) -> list[_Item]:
        with self.cond:
            if not self.queue and self.fatal is None:
                self.cond.wait(timeout)
            items, self.queue = self.queue, []
            self.cond.notify_all()
            return items

    def done_admitting(self) -> bool:
        """No worker can produce anything more (all exited) and nothing is queued."""
        with self.cond:
            return self.exited >= self.n_workers and not self.queue

    def settle(self) -> None:
        """A sweep has ended: one more pacing step; wake workers waiting to be admitted."""
        with self.cond:
            self.merge_steps += 1
            self.cond.notify_all()

    def sweeps(self) -> str:
        """The merger's loop: sweep, merge, apply the stop rules; return the stop reason."""
        env = self.env
        sweeps_without_commit = 0
        while True:
            items = self.take(POLL_SECONDS)
            if self.fatal is not None:
                raise self.fatal
            if items:
                cards = [i.card for i in items if i.card is not None]
                try:
                    info = merge_and_record(env, rollouts=sum(i.rollout is not None for i in items), cards=cards)
                finally:
                    self.settle()
                if cards:  # a sweep with nothing to merge says nothing about a stall
                    sweeps_without_commit = 0 if info.committed else sweeps_without_commit + 1
                if sweeps_without_commit >= self.stall_sweeps:
                    with self.cond:
                        self.force = [True] * self.n_workers
                    sweeps_without_commit = 0
                    logger.info("stall guard: %d sweeps without a commit; forcing resyncs", self.stall_sweeps)
                reason = env.stops.after_merge(info.held_out_reward, info.rollouts, env.governor)
                if reason is not None:
                    return reason
            elif env.stops.out_of_time():
                return "max_seconds"
            if self.done_admitting():
                return self.admission_stop or "max_seconds"

    def shut_down(self, grace_seconds: float, *, interrupted: bool) -> int:
        """Close admission, drop what is queued, wait for workers within the grace; return stragglers.

        The wait ends at the grace on the run's clock or in real time, whichever comes
        first, and never past the run's hard deadline; after Ctrl-C it does not wait.
        """
        with self.cond:
            self.closed = True
            self.late_dropped += len(self.queue)  # finished rollouts queued at the stop are dropped
            self.queue = []
            self.cond.notify_all()
        stops = self.env.stops
        clock_end = stops.clock() + grace_seconds
        real_end = time.monotonic() + grace_seconds
        threads = self.threads
        while not interrupted and any(t.is_alive() for t in threads):
            if stops.clock() >= clock_end or time.monotonic() >= real_end or stops.past_deadline():
                break
            for t in threads:
                t.join(POLL_SECONDS / len(threads))
        stragglers = sum(t.is_alive() for t in threads)
        if stragglers:
            logger.warning("%d worker(s) still running after the %.1fs grace; their results "
                           "will be dropped", stragglers, grace_seconds)
        return stragglers

    threads: list[threading.Thread]


def async_evolve(
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
    n_workers: int = 4,
    async_ratio: int = 3,
    max_seconds: float | None = 20.0,
    max_iters: int | None = None,
    held_out_frac: float = 0.4,
    shuffle: bool = True,
    seed: int = 0,
    self_verify: bool = True,
    target_reward: float | None = None,
    patience: int | None = None,
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
    pacing: bool = False,
    max_pending: int | None = None,
    stall_sweeps: int | None = None,
    grace_seconds: float = 2.0,
    stop_on_diminishing_returns: bool = False,
    max_rollouts: int | None = None,
    call_attempts: int = 3,
    failure_limit: int = 3,
    clock: Clock | None = None,
    stratify: str | None = None,
    resume: bool = True,
) -> EvolutionResult:
    """Evolve an artifact without round barriers: workers stream cards to one merger.

    Workers (``n_workers`` threads) loop admit -> snapshot -> rollout -> propose ->
    self-verify -> queue; the calling thread is the merger, which sweeps the queue into
    the aggregator whenever cards arrive. Each sweep is one `RoundInfo`. The
    arguments shared with `evolve` mean the same; the rest:

    Args:
        tasks: see `evolve`.
        reward: see `evolve`.
        agent: see `evolve`.
        run: see `evolve`.
        propose: see `evolve`.
        strategy: see `evolve`.
        initial_state: see `evolve`.
        blast_radius: see `evolve`.
        artifact_id: see `evolve`.
        n_workers: worker threads.
        async_ratio: a worker resyncs once the head is more than this many versions past
            its snapshot. Set it no higher than the staleness policy's alpha, or stale
            cards get discarded and the stall guard has to force resyncs.
        max_seconds: wall-clock limit (default 20 s).
        max_iters: the older name of ``max_rollouts`` (give one or the other).
        max_rollouts: rollouts to admit in all; every admitted rollout is merged before
            the run stops with ``stop_reason == "max_rollouts"``.
        held_out_frac: see `evolve`.
        shuffle: see `evolve`.
        seed: see `evolve`.
        self_verify: see `evolve`.
        target_reward: see `evolve`.
        patience: see `evolve` (counted in rollouts, so sweep timing does not matter).
        max_tokens: the run's token budget, binding on every meter the calls record into.
            A worker is admitted only while the spend so far plus the expected spend of
            the rollouts in flight and its own still fits; it is checked again after every
            sweep. The overshoot stays within about one sweep's spend.
        staleness_policy: see `evolve`.
        agg_config: see `evolve`.
        aggregator_factory: see `evolve`.
        fusion_tournament: see `evolve`.
        cheap_eval_tasks: see `evolve`.
        allocator: see `evolve`.
        ledger: see `evolve`.
        usage: see `evolve`.
        executor: where the calls run (default: a pool of ``n_workers`` daemon threads,
            for the held-out evaluations; the workers call inline on their own threads).
            On anything but a thread pool (a ``ProcessPoolExecutor``, Dask's
            ``Client(...).get_executor()``) each worker submits its rollout, proposal and
            self-verify to it and waits, and evaluations are submitted to it too; what
            travels must pickle (see `evolve`).
        on_round: called with each sweep's `RoundInfo`.
        progress: show a progress bar of sweeps.
        pacing: admission pacing (the AReaL capacity rule): at most
            ``(alpha + v + 1) * n_workers`` rollouts admitted by merger sweep ``v``, each
            starting on the current head, so the expected staleness at merge stays
            within alpha and guarded stops paying for rollouts it would discard.
        max_pending: queued cards at which workers wait for the merger (default 2 x workers).
        stall_sweeps: sweeps without a commit after which every worker is forced to
            resync (default max(3, n_workers)).
        grace_seconds: how long work in flight may run past ``max_seconds``; the call
            returns by ``max_seconds + grace_seconds`` whatever the backend does (worker
            threads still running then are stragglers: daemon threads whose results are
            dropped).
        stop_on_diminishing_returns: see `evolve`.
        call_attempts: see `evolve`.
        failure_limit: see `evolve`.
        clock: see `evolve`.
        stratify: see `evolve`.
        resume: see `evolve` (``max_rollouts`` and ``max_seconds`` count for this call).

    Returns:
        The `EvolutionResult`; ``counters`` adds ``sweeps``,
        ``stragglers``, ``late_results_dropped``, ``wasted_rollouts``,
        ``pacing_waits``, ``backpressure_waits``, ``resyncs`` and ``admitted``.
    """
    arguments = dict(locals())
    if max_iters is not None and max_rollouts is not None:
        raise ValueError(
            f"max_iters={max_iters!r} and max_rollouts={max_rollouts!r}: they are the same "
            "knob (max_iters is its older name); give one"
        )
    if not isinstance(async_ratio, int) or isinstance(async_ratio, bool) or async_ratio < 0:
        raise ValueError(f"async_ratio={async_ratio!r}: use an integer >= 0")
    for name, value in (("max_pending", max_pending), ("stall_sweeps", stall_sweeps)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}={value!r}: use an integer >= 1 or None")
    cap = max_rollouts if max_rollouts is not None else max_iters
    if max_seconds is None and cap is None and target_reward is None and max_tokens is None and patience is None:
        raise ValueError(
            "async_evolve needs a stop rule: give max_seconds, max_rollouts, target_reward, "
            "patience or max_tokens"
        )
    config = RunConfig.from_arguments(arguments, max_rollouts=cap, max_concurrency=n_workers)
    env = open_run(config)
    env.unit = "sweep"
    if env.bar is not None:
        env.bar.desc, env.bar.unit = "async_evolve", "sweep"
    try:
        state = _AsyncRun(env, async_ratio=async_ratio, pacing=pacing,
                          max_pending=max_pending or 2 * n_workers,
                          stall_sweeps=stall_sweeps or max(3, n_workers))
        policy = env.aggregator.staleness_policy
        if async_ratio > state.alpha and policy.decide(state.alpha + 1, state.alpha, False) is StaleAction.DISCARD:
            logger.warning(
                "async_ratio=%d is above the staleness tolerance alpha=%d of artifact %r under the "
                "%s policy, which discards cards built %d..%d versions behind. Set "
                "async_ratio <= %d, use pacing=True, or the reflective policy",
                async_ratio, state.alpha, artifact_id, policy.name, state.alpha + 1, async_ratio, state.alpha,
            )
        return _run(state, grace_seconds)
    finally:
        close_run(env)


def _run(state: _AsyncRun, grace_seconds: float) -> EvolutionResult:
    env = state.env
    state.threads = [
        threading.Thread(target=state.worker, args=(w,), name=f"agentdescent-worker-{w}", daemon=True)
        for w in range(state.n_workers)
    ]

    def scheduler() -> str:
        for t in state.threads:
            t.start()
        return state.sweeps()

    interrupted = True
    try:
        stop_reason, error = drive(env, scheduler)
        interrupted = False
    finally:
        stragglers = state.shut_down(grace_seconds, interrupted=interrupted)
    with state.cond:
        extra = {
            "sweeps": len(env.history),
            "stragglers": stragglers,
            "late_results_dropped": state.late_dropped,
            "wasted_rollouts": sum(h.discarded_stale for h in env.history),
            "pacing_waits": state.pacing_waits,
            "backpressure_waits": state.backpressure_waits,
            "resyncs": state.resyncs,
            "admitted": state.admitted,
        }
        forced = state.forced_refreshes
    return finish(env, stop_reason=stop_reason, error=error, forced_refreshes=forced, extra_counters=extra)
