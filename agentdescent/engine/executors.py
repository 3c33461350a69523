"""Where a run's calls run, and the one runner that runs them: pools, retries, deadlines.

This module owns `CallRunner`: every backend call of a run goes through it. It runs the call inline on a
  thread pool or submits it to another executor (as an `agentdescent.engine.calls.Call`),
  applies the failure rule (`agentdescent.failures.judge`) to each failed attempt, counts
  failures in a row per phase, replays a travelling call's tokens into the run's meters
  once, and never waits past the run's hard deadline: every wait is on the run's clock,
  woken by the futures it waits for. It gives each call a `agentdescent.clock.StopSignal`
  (in the thread's `stop_scope`, where the providers' retry loops read it): once the
  token budget is spent, or the run is over (`end_work`, `close`), no call makes a new
  attempt, and `running_calls` says which are still on the wire. A held-out batch
  (`score_jobs`) is scored on the run's pool at once, each call admitted as any other, and
  with a budget every attempt is admitted by the run's `agentdescent.engine.reservations.BudgetGate`.

The default executor (`DaemonPool`) and `runs_in_process` live in
`agentdescent.engine.daemonpool` (re-exported here).

The shape of a travelling call, `run_call`, `check_travel` and `score_output` live in
`agentdescent.engine.calls` (re-exported here). It knows nothing of ledgers, cards or rounds.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, NoReturn

from ..agents.callcache import CallCache, InCallCache, as_call_cache, call_cache_scope
from ..clock import Clock, StopSignal, notify_when_done, stop_scope
from ..errors import (
    BackendFailure,
    ContractError,
    GovernanceError,
    ProviderError,
    RunFailed,
    RunTimeout,
)
from ..failures import Verdict, ends_run, judge
from ..rewards.builtin import Score, check_reward
from ..types import Task, sanitize_text
from ..usage import Usage, replay_usage, run_meters, thread_tokens, usage_phase, worker_scope
from .calls import (
    Call,
    CallResult,
    calls_a_model,
    check_travel,
    executor_gave_up,
    run_call,
    score_output,
)
from .counters import Counters
from .daemonpool import DaemonPool, runs_in_process
from .reservations import BudgetGate

__all__ = [
    "Call",
    "CallResult",
    "CallRunner",
    "DaemonPool",
    "calls_a_model",
    "check_travel",
    "executor_gave_up",
    "run_call",
    "runs_in_process",
    "score_output",
]

logger = logging.getLogger("agentdescent.executors")


# =========================================================================== the runner


class CallRunner:
    """Runs a run's backend calls under its failure rule, on its executor, within its hard deadline.

    One per run (built by `agentdescent.engine.runtime.open_run`). Workers call `call` and
    `solve_and_score` from their threads; the merge calls `score_jobs`; the sync
    scheduler fans worker steps out with `map`. On a thread pool a call runs inline in
    the calling (pool) thread, its tokens reaching the run's meters through the thread's
    `run_meters` scope; on another executor each attempt is submitted there and its
    tokens come back with it (`replay_usage`). Either way the same rule judges each failed
    attempt (`agentdescent.failures.judge`): retry, drop (a `BackendFailure`), end the run
    (a `RunFailed`, the first of which every later call re-raises without calling the
    backend), or propagate. Every wait is on the run's clock and ends at the hard
    deadline (a `RunTimeout`) or when `close` is called.

    Every call carries a `StopSignal`, checked before each attempt here and, through the
    thread's `stop_scope`, by a provider's own retry loop before each of its attempts and
    through each backoff. It is set for every running call when the run fails, when the
    scheduler has ended (`end_work`: from then on only the calls of no worker, the test
    set's final scoring, may start) and when the runner closes; and it reads the run's
    token budget (``budget_spent``): once the budget is spent a call of a phase it counts
    is not started (a `BackendFailure` that counts as no failure, ``budget_refused_calls``)
    and a running one is not retried. A call already on the wire finishes; no new
    request is sent for it.

    Args:
        executor: where calls run.
        remote: calls travel (the executor is not a thread pool of this process).
        pool: where worker steps run (`map`): the executor when it is a thread pool,
            else this process's threads.
        solve: the run's ``solve(rendered, task)``.
        reward: the run's reward.
        meters: the meters every call's tokens land in (the run meter first).
        counters: the run's counters.
        clock: the run's clock.
        deadline: the hard deadline (a reading of ``clock``) or None.
        call_attempts: attempts of a call that raises something other than a `ProviderError`.
        failure_limit: dropped calls in a row of one phase that end the run.
        max_seconds: the run's ``max_seconds``, for the timeout's message.
        grace_seconds: the run's ``grace_seconds``, for the timeout's message.
        budget_spent: ``budget_spent(phase)`` is True once the run's token budget is spent
            and counts ``phase`` (None: no budget).
        call_cache: the run's `agentdescent.CallCache` or its folder (None: none), in scope around every call; a
            travelling attempt takes a copy (`InCallCache`), whose counts stay where it ran.
        gate: admits each attempt against the budget (`agentdescent.engine.reservations.BudgetGate`), or None.
    """

    def __init__(self, *, executor: concurrent.futures.Executor, remote: bool,
                 pool: concurrent.futures.Executor, solve: Callable[[str, Task], str],
                 reward: Callable[[Task, str], Any], meters: tuple[Usage, ...], counters: Counters,
                 clock: Clock, deadline: float | None, call_attempts: int, failure_limit: int,
                 max_seconds: float | None, grace_seconds: float,
                 budget_spent: Callable[[str], bool] | None = None, call_cache: Any = None,
                 gate: BudgetGate | None = None) -> None:
        self.executor = executor
        self.remote = remote
        self.pool = pool
        self.solve = solve
        self.reward = reward
        self.meters = meters
        self.counters = counters
        self.clock = clock
        self.deadline = deadline
        self.call_attempts = call_attempts
        self.failure_limit = failure_limit
        self.max_seconds = max_seconds
        self.grace_seconds = grace_seconds
        self.budget_spent, self.gate = budget_spent, gate
        self.call_cache = as_call_cache(call_cache)  # a folder path becomes a CallCache
        self.cache_start = self.call_cache.stats() if isinstance(self.call_cache, CallCache) else {}  # the run's deltas
        #: Notified when a watched call finishes and when the runner closes.
        self.cond = threading.Condition()
        self.fatal: RunFailed | None = None
        self.last_error: BaseException | None = None
        self.closed = False
        #: The scheduler has ended: only calls of no worker (the test set's) may start.
        self.ending = False
        self._running: dict[StopSignal, int] = {}  # each running call's signal -> its thread
        self._lock = threading.Lock()
        self._in_a_row: collections.Counter[str] = collections.Counter()
        self._submissions = 0
        self._run_key = os.urandom(6).hex()

    # ----------------------------------------------------------------- the calls

    def call(self, fn: Callable[..., Any], *args: Any, what: str, phase: str, worker: int | None = None) -> Any:
        """One backend call (a proposal) under the failure rule; a returned ``str`` is sanitised.

        Raises:
            BackendFailure: the call failed for good; the run goes on without it.
            RunFailed: the run cannot go on.
            ContractError: the caller's callable broke its contract.
        """
        return self._retrying(Call(fn, args, phase, worker), what).output

    def solve_and_score(self, rendered: str, task: Task, *, what: str, phase: str,
                        worker: int | None = None) -> tuple[str, Score]:
        """Solve ``task`` on ``rendered`` and score the output: a rollout, a self-verify or one evaluation.

        The call is retried under the failure rule; the scoring is not (a reward that
        raises, or breaks its contract, ends the run wherever it ran) — except a reward that
        makes model calls of its own (a judge, `calls_a_model`): it is a second call, in
        phase ``judge``, under the same failure rule as every call.

        Returns:
            The output and its reward as a `agentdescent.rewards.builtin.Score`.

        Raises:
            BackendFailure, RunFailed, ContractError: as `call`.
            RewardContractError: the reward is not a finite number in [0, 1].
        """
        if calls_a_model(self.reward):
            output = self._retrying(Call(self.solve, (rendered, task), phase, worker), what).output
            if not isinstance(output, str):
                raise ContractError(
                    f"run/solve returned {type(output).__name__} for task {task.id!r}; return the output as a str"
                )
            graded = self._retrying(Call(self.reward, (task, output), "judge", worker), f"judge of {what}")
            self.counters.add("judge_calls")
            return output, check_reward(task, graded.output)
        result = self._retrying(Call(self.solve, (rendered, task), phase, worker, self.reward, task), what)
        return result.output, self._reward_of(task, result)

    def score_jobs(self, jobs: Sequence[tuple[str, Task]],
                   samples: list[tuple[str, str] | None] | None = None) -> list[Any]:
        """Held-out evaluation: the reward of each ``(rendered, task)`` job, in order, all on the pool at once.

        Every job is one call, admitted like any other (its `StopSignal`), run on the pool
        (inline) or submitted to the executor; they start together, so the pool's size
        bounds how many run and a batch takes as long as its slowest call, not the sum. A
        slot holds the reward, or the `BackendFailure` of a job that failed for good; the
        evaluation stops at its first failure (jobs not yet started are cancelled, their
        slots None). With ``samples`` (one slot per job), each scored job's ``(output,
        feedback)`` is put in its slot.

        Raises:
            RunTimeout: the hard deadline passed.
            RunFailed, ContractError, RewardContractError: as `solve_and_score`.
        """
        def one(k: int) -> float:
            rendered, task = jobs[k]
            output, score = self.solve_and_score(rendered, task, what=f"evaluation on task {task.id!r}",
                                                 phase="evaluation")
            if samples is not None:
                samples[k] = (output, score.feedback)
            return score.value

        return self.map(one, range(len(jobs)), stop_on_failure=True)

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any], *, stop_on_failure: bool = False) -> list[Any]:
        """``fn`` over ``items`` on the run's pool, results in order, within the deadline.

        A `BackendFailure` raised by ``fn`` comes back as the exception object in its slot;
        with ``stop_on_failure`` the items not yet started are cancelled (their slots are
        None). Anything else ``fn`` raises cancels the rest and propagates.

        Raises:
            RunTimeout: the hard deadline passed (the calls still running are abandoned).
        """
        futures = [self.pool.submit(fn, item) for item in items]
        waker = threading.Condition()
        notify_when_done(futures, waker)
        pending = set(futures)
        try:
            with waker:
                while pending:
                    done = {f for f in pending if f.done()}
                    if not done:
                        if self.deadline is not None and self.clock.now() >= self.deadline:
                            raise self._timeout(len(pending))
                        self.clock.wait(waker, self.deadline)
                        continue
                    pending -= done
                    for future in done:
                        exc = None if future.cancelled() else future.exception()
                        if exc is None:
                            continue
                        if not isinstance(exc, BackendFailure):
                            raise exc
                        if stop_on_failure:
                            for other in pending:
                                other.cancel()
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

    def score(self, task: Task, output: Any) -> Score:
        """The reward of one ``run``/``solve`` output, with both contracts checked.

        Raises:
            ContractError: the output is not a ``str``.
            RewardContractError: the reward is not a finite number in [0, 1].
        """
        return score_output(self.reward, task, output)

    def end_work(self) -> None:
        """The scheduler has ended: no running call makes a new attempt, no worker's call starts.

        Calls of no worker (the test set's final scoring) may still start; calls already
        on the wire finish. Waiters on another executor are woken and leave.
        """
        with self._lock:
            self.ending = True
        self._stop_running("the run has ended")

    def close(self) -> None:
        """No call may start or wait any more: wake every waiter (their calls' results are dropped)."""
        with self._lock:
            self.closed = True
        self._stop_running("the run has ended")

    def wait_running(self, until: float | None) -> bool:
        """Wait (on the run's clock, at most until ``until``) for every running call to finish.

        Meant for the end of a run, after `end_work`: calls stopped in a backoff leave at
        once, a call on the wire when its attempt returns (it makes no other).

        Returns:
            True when no call is running any more.
        """
        with self.cond:
            return self.clock.wait_for(self.cond, lambda: not self._any_running(), until)

    def _any_running(self) -> bool:
        with self._lock:
            return bool(self._running)

    def running_calls(self) -> list[int]:
        """The threads of the calls still running (on the wire, or in a callable): one entry per call.

        A call stopped while it waited out a backoff is leaving and is not listed.
        """
        with self._lock:
            return [ident for signal, ident in self._running.items() if not signal.woke_from_backoff]

    def _stop_running(self, reason: str) -> None:
        with self._lock:
            running = list(self._running)
        for signal in running:
            signal.set(reason)
        with self.cond:
            self.cond.notify_all()

    # ----------------------------------------------------------------- the rule

    def _retrying(self, call: Call, what: str) -> CallResult:
        """``call`` under the failure rule: attempt, judge each failure, retry or give up.

        Before each attempt the call's stop signal is read: a run that failed re-raises its
        `RunFailed`, a run that is over raises `RunTimeout`, a spent budget a `BackendFailure`
        (none of them counted as a failure of the call).
        """
        signal = self._open(call)
        try:
            attempt = 0
            while True:
                if self.fatal is not None:  # the run is ending: send nothing more to the backend
                    raise self.fatal
                if signal.is_set():
                    raise self._stopped(signal, what)
                attempt += 1
                reservation = self.gate.admit(call.phase, signal.is_set) if self.gate is not None else None
                if self.gate is not None and reservation is None:  # spent, or stopped while it waited
                    raise self._stopped(signal, what)
                before = thread_tokens()
                try:
                    result = self._once(call, signal)
                except Exception as exc:
                    if signal.is_set() and not isinstance(exc, (ContractError, GovernanceError)):
                        raise self._stopped(signal, what) from None  # stopped, not failed
                    self._judge(exc, attempt, what, call.phase)  # returns only to retry
                    continue
                finally:
                    if self.gate is not None:
                        self.gate.release(reservation, thread_tokens() - before, call.phase)
                with self._lock:
                    self._in_a_row[call.phase] = 0
                return result
        finally:
            with self._lock:
                self._running.pop(signal, None)
            if self.ending or self.closed:  # the end of the run may be waiting for its last calls
                with self.cond:
                    self.cond.notify_all()

    def _open(self, call: Call) -> StopSignal:
        """The call's stop signal, registered as running (set at once when the call may not start)."""
        spent = self.budget_spent
        signal = StopSignal(None if spent is None else (lambda: spent(call.phase)))
        late = self.deadline is not None and self.clock.now() >= self.deadline  # nobody would wait for it
        with self._lock:
            self._running[signal] = threading.get_ident()
            if self.closed or late or (self.ending and call.worker is not None) or self.fatal is not None:
                signal.set("the run has ended")
        return signal

    def _stopped(self, signal: StopSignal, what: str) -> Exception:
        """What a call its signal stopped raises: the run's `RunFailed`, a `RunTimeout`, or a `BackendFailure`."""
        if self.fatal is not None:
            return self.fatal
        if signal.cancelled:
            return RunTimeout(f"{what}: not sent or not retried: {signal.reason}")
        self.counters.add("budget_refused_calls")
        return BackendFailure(f"{what}: not sent or not retried: {signal.reason} (max_tokens)")

    def _once(self, call: Call, signal: StopSignal) -> CallResult:
        """One attempt: inline on a thread pool, else submitted to the executor and awaited."""
        if self.remote:
            return self._collect(self._await(self._submit(call), signal))
        with stop_scope(signal), usage_phase(call.phase), worker_scope(call.worker), run_meters(*self.meters), \
                call_cache_scope(self.call_cache):
            out = call.fn(*call.args)
        return CallResult(sanitize_text(out) if isinstance(out, str) else out)

    def _reward_of(self, task: Task, result: CallResult) -> Score:
        """The scored reward: computed here on a thread pool, brought back by the call otherwise."""
        if not self.remote:
            return self.score(task, result.output)
        if result.score_error is not None:
            raise result.score_error
        assert result.reward is not None
        return result.reward

    def _judge(self, exc: Exception, attempt: int, what: str, phase: str) -> None:
        """Apply `agentdescent.failures.judge` to one failed attempt: return to retry it, or raise.

        Raises:
            BackendFailure: the call failed for good.
            RunFailed: the run cannot go on.
            ContractError, GovernanceError, RunTimeout: as raised.
        """
        verdict = judge(exc, attempt, self.call_attempts, rerun_by_executor=executor_gave_up(exc))
        if verdict is Verdict.PROPAGATE:
            raise exc
        if verdict is Verdict.END_RUN:
            self.counters.add("backend_failures")
            self.last_error = exc
            raise self._fail_run(
                f"{what} failed with {type(exc).__name__}, which retrying cannot fix: {exc}"
            ) from None
        if verdict is Verdict.RETRY:
            self.counters.add("backend_errors")
            logger.warning("%s failed (attempt %d/%d): %s: %s; retrying", what, attempt,
                           self.call_attempts, type(exc).__name__, exc)
            return
        if not _already_retried(exc):
            self.counters.add("backend_errors")
        self._dropped(what, phase, exc)

    def _dropped(self, what: str, phase: str, exc: BaseException) -> NoReturn:
        self.counters.add("backend_failures")
        self.last_error = exc
        with self._lock:
            self._in_a_row[phase] += 1
            in_a_row = self._in_a_row[phase]
        cause = f"{type(exc).__name__}: {exc}"
        if ends_run(in_a_row, self.failure_limit):
            raise self._fail_run(
                f"{in_a_row} {phase} call(s) in a row failed (failure_limit="
                f"{self.failure_limit}); last: {what}: {cause}"
            ) from None
        logger.warning("%s failed for good (%d %s failure(s) in a row): %s", what, in_a_row, phase, cause)
        raise BackendFailure(f"{what} failed; last error: {cause}") from None

    def _fail_run(self, message: str) -> RunFailed:
        """The run's one `RunFailed`: the first one wins, later calls re-raise it without calling.

        Every call still running makes no new attempt from then on.
        """
        with self._lock:
            first = self.fatal is None
            if first:
                self.fatal = RunFailed(message)
            fatal = self.fatal
        if first:
            self._stop_running("the run failed")
        return fatal

    def _timeout(self, running: int) -> RunTimeout:
        limit = "?" if self.max_seconds is None else f"{self.max_seconds:g}"
        return RunTimeout(
            f"the run's time bound (max_seconds={limit} + grace_seconds={self.grace_seconds:g}) "
            f"passed with {running} call(s) still running"
        )

    # ----------------------------------------------------------------- another executor

    def _submit(self, call: Call) -> concurrent.futures.Future[Any]:
        """Submit one attempt of ``call`` to the executor (each attempt with its own key)."""
        if self.fatal is not None:
            raise self.fatal
        with self._lock:
            self._submissions += 1
            key = f"agentdescent-{self._run_key}-{self._submissions}"
        try:
            fn = call.fn if self.call_cache is None else InCallCache(call.fn, self.call_cache)
            return self.executor.submit(run_call, replace(call, fn=fn, key=key))
        except Exception as exc:
            raise self._executor_lost(exc, "refused a call") from None

    def _await(self, future: concurrent.futures.Future[Any], signal: StopSignal) -> concurrent.futures.Future[Any]:
        """Wait for one submitted call; once the run is over for it, cancel it and leave."""
        notify_when_done((future,), self.cond)
        with self.cond:
            self.clock.wait_for(self.cond, lambda: future.done() or self.closed or signal.cancelled, None)
        if not future.done():
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


def _already_retried(exc: BaseException) -> bool:
    """A `ProviderError` (the provider retried it) or Dask's ``KilledWorker`` (the cluster did)."""
    return isinstance(exc, ProviderError) or executor_gave_up(exc)
