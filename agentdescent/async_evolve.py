"""The barrier-free runtime: workers never wait for a round, one merger owns every write.

This module owns only *when* things run: worker threads admit, roll out, propose and
self-verify (the worker step of `agentdescent.evolution`) and queue their cards;
the merger (the calling thread) sweeps the queue into the aggregator and is the only
thread that commits. Everything else — argument checks, the worker step, the stop
rules, the result — is the sync runtime's, reused.

Safety rules it owns: a worker resyncs once the head is more than ``async_ratio``
versions past its snapshot; a stall guard forces resyncs after a run of sweeps with no
commit (``forced_refreshes``); backpressure holds workers while the merger is behind;
optional admission pacing keeps the expected staleness at merge within alpha; shutdown
returns within a grace period even with a stuck rollout, and a result that arrives
after the stop is never merged.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .agents import Usage
from .aggregator import Aggregator, AggregatorConfig
from .allocator import AllocatorPolicy
from .evolution import (
    BackendFailure,
    EvolutionResult,
    Rollout,
    RoundInfo,
    RunEnv,
    StopRules,
    TaskCycle,
    _progress_bar,
    advantage_in_group,
    build_env,
    card_step,
    close_env,
    finish,
    rollout_step,
    summarize_reports,
)
from .ledger import Ledger
from .staleness import StalenessPolicy
from .strategies import Strategy
from .types import EvidenceCard, Task

__all__ = ["async_evolve"]

logger = logging.getLogger("agentdescent.async_evolve")

#: Consecutive failed steps after which a worker is retired.
RETIRE_AFTER = 3


@dataclass
class _Item:
    worker_id: int
    rollout: Rollout | None
    card: EvidenceCard | None


class _GroupTracker:
    """Rewards per base version, for the group-relative advantage of barrier-free rollouts."""

    def __init__(self, keep: int = 64) -> None:
        self._lock = threading.Lock()
        self._groups: dict[int, collections.deque[float]] = {}
        self._keep = keep

    def advantage(self, version: int, reward: float) -> float:
        with self._lock:
            group = self._groups.setdefault(version, collections.deque(maxlen=self._keep))
            group.append(reward)
            values = list(group)
        return advantage_in_group(reward, values)


class _AsyncRun:
    """Shared state of one barrier-free run (workers + merger)."""

    def __init__(self, env: RunEnv, *, n_workers: int, async_ratio: int, max_iters: int | None,
                 pacing: bool, max_pending: int, stall_sweeps: int) -> None:
        self.env = env
        self.aid = env.artifact_id
        self.n_workers = n_workers
        self.async_ratio = async_ratio
        self.max_iters = max_iters
        self.pacing = pacing
        self.alpha = env.aggregator.alpha_for(self.aid) if hasattr(env.aggregator, "alpha_for") else 1
        self.max_pending = max_pending
        self.stall_sweeps = stall_sweeps
        self.cond = threading.Condition()
        self.queue: list[_Item] = []
        self.closed = False
        self.admitted = 0
        self.force = [False] * n_workers
        self.forced_refreshes = 0
        self.retired: set[int] = set()
        self.exited = 0
        self.late_dropped = 0
        self.pacing_waits = 0
        self.backpressure_waits = 0
        self.resyncs = 0
        self.merge_steps = 0
        self.fatal: BaseException | None = None  # a contract error raised in a worker
        self.cycle = TaskCycle(env.train, env.seed)
        self.groups = _GroupTracker()

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
                if self.closed or w in self.retired:
                    return None
                if self.max_iters is not None and self.admitted >= self.max_iters:
                    return None
                if env.governor.over_budget():
                    return None
                if len(self.queue) >= self.max_pending:
                    self.backpressure_waits += 1
                    self.cond.wait(0.05)
                    continue
                if self.pacing and not self._pacing_allows():
                    self.pacing_waits += 1
                    self.cond.wait(0.05)
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
            if self.closed:
                self.late_dropped += 1
                return
            self.queue.append(item)
            self.cond.notify_all()

    # ------------------------------------------------------------------ workers

    def worker(self, w: int) -> None:
        env = self.env
        snapshot: tuple[int, dict[str, str]] | None = None
        failures = 0
        try:
            while True:
                snapshot = self.admit(w, snapshot)
                if snapshot is None:
                    return
                rollout: Rollout | None = None
                card: EvidenceCard | None = None
                try:
                    task = self.cycle.next()
                    rollout = rollout_step(env, w, task, snapshot[0], snapshot[1])
                    advantage = self.groups.advantage(rollout.version, rollout.reward)
                    card = card_step(env, rollout, advantage)
                    failures = 0
                except BackendFailure:
                    failures += 1
                except BaseException as exc:  # a contract error: stop the run, surface it
                    with self.cond:
                        self.fatal = exc
                        self.cond.notify_all()
                    self.deliver(_Item(w, None, None))
                    return
                env.governor.spend(env.usage.total_tokens)
                self.deliver(_Item(w, rollout, card))
                if failures >= RETIRE_AFTER:
                    logger.warning("worker %d retired after %d failed steps", w, failures)
                    with self.cond:
                        self.retired.add(w)
                        self.cond.notify_all()
                    return
        finally:
            with self.cond:
                self.exited += 1
                self.cond.notify_all()

    # ------------------------------------------------------------------ merger

    def take(self, timeout: float) -> list[_Item]:
        with self.cond:
            if not self.queue:
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
    shuffle: bool = False,
    seed: int = 0,
    self_verify: bool = True,
    target_reward: float | None = None,
    patience: int | None = None,
    max_tokens: int | None = None,
    staleness_policy: StalenessPolicy | str | None = None,
    agg_config: AggregatorConfig | None = None,
    aggregator_factory: Callable[..., Aggregator] | None = None,
    fusion_tournament: bool | None = None,
    cheap_eval_tasks: int | Sequence[Task] | None = None,
    allocator: AllocatorPolicy | None = None,
    ledger: Ledger | str | None = None,
    usage: Usage | None = None,
    on_round: Callable[[RoundInfo], None] | None = None,
    progress: bool = False,
    pacing: bool = False,
    max_pending: int | None = None,
    stall_sweeps: int | None = None,
    grace_seconds: float = 2.0,
    stop_on_diminishing_returns: bool = False,
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
        max_iters: rollouts to admit in all; every admitted rollout is merged before the
            run stops (cards ingested = rollouts finished).
        held_out_frac: see `evolve`.
        shuffle: see `evolve`.
        seed: see `evolve`.
        self_verify: see `evolve`.
        target_reward: see `evolve`.
        patience: sweeps without a new best held-out reward before stopping.
        max_tokens: token budget, checked before every admission and at every sweep.
        staleness_policy: see `evolve`.
        agg_config: see `evolve`.
        aggregator_factory: see `evolve`.
        fusion_tournament: see `evolve`.
        cheap_eval_tasks: see `evolve`.
        allocator: see `evolve`.
        ledger: see `evolve`.
        usage: see `evolve`.
        on_round: called with each sweep's `RoundInfo`.
        progress: show a progress bar of sweeps.
        pacing: admission pacing (the AReaL capacity rule): at most
            ``(alpha + v + 1) * n_workers`` rollouts admitted by merger sweep ``v``, each
            starting on the current head, so the expected staleness at merge stays
            within alpha and guarded stops paying for rollouts it would discard.
        max_pending: queued cards at which workers wait for the merger (default 2 x workers).
        stall_sweeps: sweeps without a commit after which every worker is forced to
            resync (default max(3, n_workers)).
        grace_seconds: how long shutdown waits for running rollouts; threads still
            running then are reported as stragglers and their results are dropped.
        stop_on_diminishing_returns: see `evolve`.

    Returns:
        The `EvolutionResult`; ``counters`` adds ``sweeps``,
        ``stragglers``, ``late_results_dropped``, ``wasted_rollouts``,
        ``pacing_waits``, ``backpressure_waits``, ``resyncs`` and ``retired_workers``.
    """
    if max_iters is not None and (isinstance(max_iters, bool) or not isinstance(max_iters, int) or max_iters < 1):
        raise ValueError(f"max_iters={max_iters!r}: use an integer >= 1 or None")
    if not (isinstance(grace_seconds, (int, float)) and grace_seconds >= 0):
        raise ValueError(f"grace_seconds={grace_seconds!r}: use a number of seconds >= 0")
    for name, value in (("max_pending", max_pending), ("stall_sweeps", stall_sweeps)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}={value!r}: use an integer >= 1 or None")
    if max_seconds is None and max_iters is None and target_reward is None and max_tokens is None and patience is None:
        raise ValueError(
            "async_evolve needs a stop rule: give max_seconds, max_iters, target_reward, "
            "patience or max_tokens"
        )
    stops = StopRules(target_reward, patience, max_seconds, None)
    env = build_env(
        tasks=tasks, reward=reward, agent=agent, run=run, propose=propose, strategy=strategy,
        initial_state=initial_state, blast_radius=blast_radius, artifact_id=artifact_id,
        rounds=1, n_workers=n_workers, max_concurrency=n_workers, refresh_interval=1,
        held_out_frac=held_out_frac, shuffle=shuffle, seed=seed, self_verify=self_verify,
        max_tokens=max_tokens, staleness_policy=staleness_policy, agg_config=agg_config,
        aggregator_factory=aggregator_factory, fusion_tournament=fusion_tournament,
        cheap_eval_tasks=cheap_eval_tasks, allocator=allocator, ledger=ledger, usage=usage,
        executor=None, async_ratio=async_ratio,
        stop_on_diminishing_returns=stop_on_diminishing_returns,
    )
    state = _AsyncRun(
        env, n_workers=n_workers, async_ratio=async_ratio, max_iters=max_iters, pacing=pacing,
        max_pending=max_pending or 2 * n_workers, stall_sweeps=stall_sweeps or max(3, n_workers),
    )
    policy_name = getattr(env.aggregator.staleness_policy, "name", "")
    if policy_name == "guarded" and async_ratio > state.alpha:
        logger.warning(
            "async_ratio=%d is above the staleness tolerance alpha=%d of artifact %r under the "
            "guarded policy: cards built %d..%d versions behind will be discarded. Set "
            "async_ratio <= %d, use pacing=True, or the reflective policy",
            async_ratio, state.alpha, artifact_id, state.alpha + 1, async_ratio, state.alpha,
        )
    try:
        return _merge_loop(state, stops, on_round, progress, grace_seconds)
    finally:
        close_env(env)


def _merge_loop(run: _AsyncRun, stops: StopRules, on_round: Callable[[RoundInfo], None] | None,
                progress: bool, grace_seconds: float) -> EvolutionResult:
    env = run.env
    history: list[RoundInfo] = []
    try:
        initial = env.initial_reward()
    except BackendFailure as exc:
        return finish(env, history=history, stop_reason="error", error=str(exc), initial_reward=None)
    threads = [
        threading.Thread(target=run.worker, args=(w,), name=f"agentdescent-worker-{w}", daemon=True)
        for w in range(run.n_workers)
    ]
    for t in threads:
        t.start()
    bar = _progress_bar(progress, None, "async_evolve")
    stop_reason, error = "max_seconds", None
    sweeps_without_commit = 0
    fatal: BaseException | None = None
    tokens_mark = env.usage.total_tokens
    try:
        while True:
            items = run.take(0.05)
            if run.fatal is not None:
                fatal = run.fatal
                break
            if items:
                failures_before = env.counters.get("backend_failures")
                cards = [i.card for i in items if i.card is not None]
                for card in cards:
                    env.aggregator.ingest(card)
                env.governor.spend(env.usage.total_tokens)
                try:
                    reports, held = env.merge()
                except BackendFailure as exc:
                    stop_reason, error = "error", str(exc)
                    break
                finally:
                    run.settle()
                counts = summarize_reports(reports)
                tokens_now = env.usage.total_tokens
                info = RoundInfo(
                    index=len(history) + 1, held_out_reward=held, tokens=tokens_now - tokens_mark,
                    reports=reports, rollouts=sum(i.rollout is not None for i in items),
                    cards=len(cards),
                    backend_failures=env.counters.get("backend_failures") - failures_before, **counts,
                )
                tokens_mark = tokens_now
                history.append(info)
                env.governor.end_round(info.tokens)
                if on_round is not None:
                    on_round(info)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(reward=f"{held:.3f}", commits=sum(h.committed for h in history))
                if cards:  # a sweep with nothing to merge says nothing about a stall
                    sweeps_without_commit = 0 if counts["committed"] else sweeps_without_commit + 1
                if sweeps_without_commit >= run.stall_sweeps:
                    with run.cond:
                        run.force = [True] * run.n_workers
                    sweeps_without_commit = 0
                    logger.info("stall guard: %d sweeps without a commit; forcing resyncs", run.stall_sweeps)
                reason = stops.check(held, env.counters.get("rollouts"), env)
                if reason is not None:
                    stop_reason = reason
                    break
            elif stops.out_of_time():
                stop_reason = "max_seconds"
                break
            if run.done_admitting():
                if run.retired and len(run.retired) >= run.n_workers:
                    stop_reason = "error"
                    error = f"every worker was retired after repeated backend failures: {env.last_error!r}"
                elif run.max_iters is not None and run.admitted >= run.max_iters:
                    stop_reason = "max_iters"
                elif env.governor.over_budget():
                    stop_reason = "max_tokens"
                else:
                    stop_reason = "error"
                    error = error or "every worker stopped"
                break
    finally:
        with run.cond:
            run.closed = True
            # finished rollouts still queued at the stop are dropped, and counted as such
            run.late_dropped += len(run.queue)
            run.queue = []
            run.cond.notify_all()
        deadline = time.monotonic() + grace_seconds
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stragglers = sum(t.is_alive() for t in threads)
        if stragglers:
            logger.warning("%d worker(s) still running after the %.1fs grace; their results "
                           "will be dropped", stragglers, grace_seconds)
        if bar is not None:
            bar.close()
    if fatal is not None:
        raise fatal
    with run.cond:
        extra = {
            "sweeps": len(history),
            "stragglers": stragglers,
            "late_results_dropped": run.late_dropped,
            "wasted_rollouts": sum(h.discarded_stale for h in history),
            "pacing_waits": run.pacing_waits,
            "backpressure_waits": run.backpressure_waits,
            "resyncs": run.resyncs,
            "retired_workers": len(run.retired),
            "admitted": run.admitted,
        }
        forced = run.forced_refreshes
    return finish(env, history=history, stop_reason=stop_reason, error=error,
                  initial_reward=initial, forced_refreshes=forced, extra_counters=extra)
