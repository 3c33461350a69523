"""The barrier-free scheduler: workers never wait for a round, one merger owns every write.

This module owns only *when* things run in an async run: worker threads admit, roll out,
propose and self-verify (the worker step of `agentdescent.engine.worker`) and queue their
results; the merger (the calling thread) sweeps the queue into the aggregator and is the
only thread that commits. Every wait — a worker held back, the merger waiting for cards,
the shut-down waiting for workers — is on the run's clock, on one condition that each
change of state notifies: nothing polls.

Safety rules it owns: a worker resyncs once the head is more than ``async_ratio``
versions past its snapshot (and whenever it has moved, once the head has converged: its
held-out reward is 1.0, which no candidate can beat); a stall guard forces resyncs after a
run of sweeps with no commit (``forced_refreshes``), except once the head has converged;
backpressure holds workers while the merger is behind;
optional admission pacing keeps the expected staleness at merge within alpha; a result
that arrives after the stop is never merged.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from ..errors import BackendFailure
from ..fate import count_fates
from ..merge.staleness import StaleAction
from ..types import EvidenceCard
from .ending import finish
from .result import AsyncStats, EvolutionResult
from .runtime import RunEnv, drive, idle_reason
from .worker import Rollout, card_step, rollout_step

__all__ = ["AsyncScheduler", "run_async"]

logger = logging.getLogger("agentdescent.async_evolve")


def _converged(held_out_reward: float | None) -> bool:
    """The head cannot be beaten: its held-out reward is 1.0, the most a reward can give.

    No candidate can then show the held-out gain a commit needs, so sweeps that commit
    nothing are convergence, not a stall, and a snapshot behind the head is worth a resync.
    """
    return held_out_reward is not None and held_out_reward >= 1.0


@dataclass
class _Item:
    worker_id: int
    rollout: Rollout | None
    card: EvidenceCard | None


class AsyncScheduler:
    """Shared state of one barrier-free run (workers + merger), behind one condition.

    Args:
        env: the run.
    """

    def __init__(self, env: RunEnv) -> None:
        schedule = env.config.schedule
        self.env = env
        self.aid = env.artifact_id
        self.clock = env.config.clock
        self.n_workers = schedule.n_workers
        self.async_ratio = schedule.async_ratio
        self.pacing = schedule.pacing
        self.max_pending = schedule.max_pending or 2 * schedule.n_workers
        self.stall_sweeps = schedule.stall_sweeps or max(3, schedule.n_workers)
        self.alpha = env.aggregator.alpha_for(self.aid)
        self.cond = threading.Condition()
        self.queue: list[_Item] = []
        self.closed = False
        self.admitted = 0
        self.delivered = 0
        self.merged = 0  # admitted steps whose items a merge took in
        self.force = [False] * self.n_workers
        self.converged = False  # the head's held-out reward is 1.0: no candidate can beat it
        self.converged_resyncs = 0  # resyncs to a converged head that no other rule asked for
        self.exited = 0
        self.merge_steps = 0
        self.stats = AsyncStats()
        self.admission_stop: str | None = None  # why admission closed, once it has
        self.fatal: BaseException | None = None  # raised in a worker: ends the run
        self.threads: list[threading.Thread] = []
        self.working: set[int] = set()  # the threads of the workers that have not exited

    def warn_if_ratio_discards(self) -> None:
        """Log a WARNING when ``async_ratio`` lets workers build cards the policy will discard."""
        policy = self.env.aggregator.staleness_policy
        if self.async_ratio > self.alpha and policy.decide(self.alpha + 1, self.alpha, False) is StaleAction.DISCARD:
            logger.warning(
                "async_ratio=%d is above the staleness tolerance alpha=%d of artifact %r under the "
                "%s policy, which discards cards built %d..%d versions behind. Set "
                "async_ratio <= %d, use pacing=True, or the reflective policy",
                self.async_ratio, self.alpha, self.aid, policy.name, self.alpha + 1, self.async_ratio, self.alpha,
            )

    # ------------------------------------------------------------------ admission

    def _pacing_allows(self) -> bool:
        """The AReaL capacity rule: at most ``(alpha + v + 1) * batch`` rollouts admitted by step v.

        ``batch`` is the number of workers and ``v`` counts the merger's sweeps (each
        can move the head at most once; counting every sweep keeps admission live when
        rollouts stop producing cards). Every admitted rollout starts on the current head,
        so a rollout admitted under this cap sees, in expectation, no more than ``alpha``
        commits before it is merged.
        """
        return self.admitted < (self.alpha + self.merge_steps + 1) * self.n_workers

    def projected_spend(self) -> float:
        """What the work admitted and not yet merged, and one more rollout, is expected to spend.

        Each rollout in flight and the new one cost the mean worker step
        (`agentdescent.engine.runtime.RunEnv.step_cost`); each of them, and each finished rollout
        still queued, brings its share of a merge's held-out evaluation
        (`agentdescent.engine.runtime.RunEnv.merge_cost`), which is most of a sweep's spend.
        """
        env = self.env
        in_flight = self.admitted - self.delivered
        unmerged = self.admitted - self.merged
        return env.step_cost() * (in_flight + 1) + env.merge_cost(self.merged) * (unmerged + 1)

    def admit(self, w: int, snapshot: tuple[int, dict[str, str]] | None) -> tuple[int, dict[str, str]] | None:
        """Block until worker ``w`` may start a rollout; return its snapshot, or None to exit."""
        env = self.env
        with self.cond:
            while True:
                if self.closed or self.fatal is not None or self.admission_stop is not None:
                    return None
                reason = env.admission_check(self.admitted, self.projected_spend())
                if reason is not None:
                    self.admission_stop = reason
                    self.cond.notify_all()
                    return None
                if len(self.queue) >= self.max_pending:
                    self.stats.backpressure_waits += 1
                    self.clock.wait(self.cond, env.stops.admission_deadline())
                    continue
                if self.pacing and not self._pacing_allows():
                    self.stats.pacing_waits += 1
                    self.clock.wait(self.cond, env.stops.admission_deadline())
                    continue
                head = env.ledger.versions()[self.aid]
                if self.converged:  # no stall to cure: a worker behind the head catches up below, not forced
                    self.force[w] = False
                forced = self.force[w]
                stale = snapshot is None or head - snapshot[0] > self.async_ratio
                moved = snapshot is not None and snapshot[0] != head
                if forced or stale or ((self.pacing or self.converged) and moved):
                    self.converged_resyncs += not (forced or stale or self.pacing)
                    snapshot = env.ledger.head(self.aid)
                    self.stats.resyncs += 1
                    if forced:
                        self.force[w] = False
                        self.stats.forced_refreshes += 1
                self.admitted += 1
                return snapshot

    def deliver(self, item: _Item) -> None:
        """Queue a finished item for the merger; a result after the stop is dropped, never merged."""
        with self.cond:
            self.delivered += 1
            if self.closed:
                self.stats.late_results_dropped += 1
                return
            self.queue.append(item)
            self.cond.notify_all()

    # ------------------------------------------------------------------ workers

    def worker(self, w: int) -> None:
        """One worker thread: admit, roll out, propose, self-verify, deliver; until admission closes."""
        env = self.env
        snapshot: tuple[int, dict[str, str]] | None = None
        with self.cond:
            self.working.add(threading.get_ident())
        try:
            while True:
                snapshot = self.admit(w, snapshot)
                if snapshot is None:
                    return
                rollout: Rollout | None = None
                card: EvidenceCard | None = None
                try:
                    rollout = rollout_step(env, w, env.cycle.next(), snapshot[0], snapshot[1])
                    card = card_step(env, rollout)
                except BackendFailure:
                    pass  # counted by the failure rule; the run goes on without this step
                except BaseException as exc:  # RunFailed, a contract error, or the stop: end the run with it
                    with self.cond:
                        if self.fatal is None:
                            self.fatal = exc
                        self.cond.notify_all()
                    if rollout is not None:  # a finished rollout is counted as merged or dropped, never lost
                        self.deliver(_Item(w, rollout, None))
                    return
                self.deliver(_Item(w, rollout, card))
        finally:
            with self.cond:
                self.exited += 1
                self.working.discard(threading.get_ident())
                self.cond.notify_all()

    # ------------------------------------------------------------------ merger

    def take(self) -> list[_Item]:
        """Wait (on the run's clock) for cards, a failure, every worker's exit, or the time limit."""
        deadline = self.env.stops.admission_deadline()

        def ready() -> bool:
            return bool(self.queue) or self.fatal is not None or self.exited >= self.n_workers

        with self.cond:
            self.clock.wait_for(self.cond, ready, deadline)
            items, self.queue = self.queue, []
            self.cond.notify_all()
            return items

    def done_admitting(self) -> bool:
        """No worker can produce anything more (all exited) and nothing is queued."""
        with self.cond:
            return self.exited >= self.n_workers and not self.queue

    def settle(self, merged: int) -> None:
        """A sweep that took ``merged`` items has ended: one more pacing step; wake workers waiting to be admitted."""
        with self.cond:
            self.merge_steps += 1
            self.merged += merged
            self.cond.notify_all()

    def sweeps(self) -> str:
        """The merger's loop: sweep, merge, apply the stop rules; return the stop reason."""
        env = self.env
        sweeps_without_commit = 0
        while True:
            items = self.take()
            if self.fatal is not None:
                raise self.fatal
            if items:
                cards = [i.card for i in items if i.card is not None]
                rollouts, recorded = sum(i.rollout is not None for i in items), len(env.history)
                try:
                    info = env.merge_and_record(rollouts=rollouts, cards=cards)
                except BaseException:
                    if len(env.history) == recorded:  # the stop cut this sweep off before its record
                        with self.cond:
                            self.stats.late_results_dropped += rollouts
                    raise
                finally:
                    self.settle(len(items))
                with self.cond:
                    self.converged = _converged(info.held_out_reward)
                # a sweep with nothing to merge, or with a head nothing can beat, says nothing about a stall
                if cards and not self.converged:
                    sweeps_without_commit = 0 if info.committed else sweeps_without_commit + 1
                if sweeps_without_commit >= self.stall_sweeps:
                    with self.cond:
                        self.force = [True] * self.n_workers
                    sweeps_without_commit = 0
                    logger.info("stall guard: %d sweeps without a commit; forcing resyncs", self.stall_sweeps)
                reason = env.stops.after_merge(info.held_out_reward, info.rollouts, measured=info.measured)
                if reason is not None:
                    return reason
            elif env.stops.out_of_time():
                return "max_seconds"
            if self.done_admitting():
                return self.admission_stop or "max_seconds"

    def shut_down(self, *, interrupted: bool) -> None:
        """Close admission, drop what is queued, wait for workers within the grace.

        The run's calls were told to stop before this (`agentdescent.engine.runtime.drive`): a
        worker waiting out a provider's backoff leaves at once, one on the wire when its
        attempt returns. The wait is on the run's clock: it ends at the grace or the run's
        hard deadline, whichever comes first; after Ctrl-C it does not wait. What is still
        running after it is counted by `agentdescent.engine.ending.finish` (``stragglers``).
        """
        stops = self.env.stops
        with self.cond:
            self.closed = True
            self.stats.late_results_dropped += len(self.queue)  # finished rollouts queued at the stop
            self.queue = []
            self.cond.notify_all()
            if not interrupted:
                end = self.env.settle_by
                if end is None:  # drive did not get to its end
                    end = self.clock.now() + self.env.config.limits.grace_seconds
                    hard = stops.hard_deadline()
                    if hard is not None:
                        end = min(end, hard)
                started = sum(t.ident is not None for t in self.threads)  # none if the run ended before them
                self.clock.wait_for(self.cond, lambda: self.exited >= started, end)

    def still_working(self) -> set[int]:
        """The threads of the workers that have not exited yet."""
        with self.cond:
            return set(self.working)

    def run(self) -> EvolutionResult:
        """Start the workers, be the merger until a stop, shut down, and assemble the result."""
        env = self.env
        self.threads = [
            threading.Thread(target=self.worker, args=(w,), name=f"agentdescent-worker-{w}", daemon=True)
            for w in range(self.n_workers)
        ]

        def scheduler() -> str:
            self.converged = _converged(env.last_reward)  # the starting head, measured by now
            for t in self.threads:
                t.start()
            return self.sweeps()

        interrupted = True
        try:
            stop_reason, error = drive(env, scheduler, idle=idle_reason(env.config.limits, sync=False))
            interrupted = False
        finally:
            self.shut_down(interrupted=interrupted)
        with self.cond:
            stats = self.stats
            stats.sweeps = len(env.history)
            stats.admitted = self.admitted
            stats.discarded_stale = sum(count_fates(h.fates)["stale"] for h in env.history)  # first fates only
            extra = {
                "sweeps": stats.sweeps,
                "late_results_dropped": stats.late_results_dropped,
                "wasted_rollouts": stats.discarded_stale,
                "pacing_waits": stats.pacing_waits,
                "backpressure_waits": stats.backpressure_waits,
                "resyncs": stats.resyncs,
                "resyncs_converged": self.converged_resyncs,
                "admitted": stats.admitted,
            }
        return finish(env, stop_reason=stop_reason, error=error, forced_refreshes=stats.forced_refreshes,
                      async_stats=stats, extra_counters=extra, workers=self.still_working)


def run_async(env: RunEnv) -> EvolutionResult:
    """Run ``env`` barrier-free to its end (see `AsyncScheduler`)."""
    scheduler = AsyncScheduler(env)
    scheduler.warn_if_ratio_discards()
    return scheduler.run()
