"""Where the engines' calls run: the daemon pool, and the calls that travel to other executors.

This module owns the default executor (`DaemonPool`: daemon threads, so a hung call never
keeps the process alive), the shape of one expensive call as it travels to a process pool
or a Dask cluster (`Call`, a pure function of picklable inputs run by `run_call`, which
brings back a `CallResult` with the call's output, reward and recorded tokens), the check
that what travels pickles (`check_travel`), and scoring an output under both contracts
(`score_output`). It knows nothing of a run: `agentdescent.runtime` applies the results
(meters, failure rules, caches) on the driver.
"""

from __future__ import annotations

import concurrent.futures
import math
import numbers
import pickle
import queue
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .model import Usage, recording
from .types import ContractError, RewardContractError, Task, sanitize_text

__all__ = [
    "Call",
    "CallResult",
    "DaemonPool",
    "check_travel",
    "executor_gave_up",
    "run_call",
    "runs_in_process",
    "score_output",
]


def score_output(reward: Callable[[Task, str], float], task: Task, output: Any) -> float:
    """The reward of one ``run``/``solve`` output, with both contracts checked (a pure function).

    Raises:
        ContractError: the output is not a ``str``.
        RewardContractError: the reward is not a finite number in [0, 1].
    """
    if not isinstance(output, str):
        raise ContractError(
            f"run/solve returned {type(output).__name__} for task {task.id!r}; return the output as a str"
        )
    return _check_reward(task, reward(task, output))


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


# =========================================================================== the call pool


class DaemonPool(concurrent.futures.Executor):
    """A fixed pool of *daemon* threads: the engines' default executor.

    Unlike `concurrent.futures.ThreadPoolExecutor`, whose threads the interpreter joins at
    exit, a hung call on this pool never keeps the process alive: after Ctrl-C or a time
    stop the engine returns and the process can exit at once.

    Args:
        threads: worker threads (started lazily, up to this many).
        name: thread name prefix.
    """

    def __init__(self, threads: int, name: str = "agentdescent") -> None:
        self._threads = threads
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._started: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        """Schedule ``fn(*args, **kwargs)``; returns its future."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("DaemonPool: submit after shutdown")
            self._queue.put((future, fn, args, kwargs))
            if self._idle == 0 and len(self._started) < self._threads:
                thread = threading.Thread(target=self._work, name=f"{self._name}-{len(self._started)}", daemon=True)
                self._started.append(thread)
                thread.start()
            else:
                self._idle -= 1 if self._idle else 0
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # the future carries it to the waiter
                    future.set_exception(exc)
            del item, future
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking work; with ``cancel_futures`` cancel what has not started."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            for _ in self._started:
                self._queue.put(None)
        if wait:
            for thread in self._started:
                thread.join()


# =========================================================================== calls that travel


@dataclass(frozen=True)
class Call:
    """One expensive call as it travels to an executor: a pure function of picklable inputs.

    ``fn(*args)`` is a rollout, a self-verify or a held-out evaluation (``solve(rendered,
    task)``, scored with ``reward`` on ``task``) or a proposal (``propose(rendered, task,
    output, reward)``, not scored). Nothing in it refers to the run: `run_call` can run it in
    another process or on another machine, and everything the run needs comes back in its
    `CallResult`.

    Args:
        fn: the user's callable (``run``/``propose`` or an agent's bound method).
        args: its positional arguments.
        phase: where its tokens go (``"rollout"``, ``"proposal"``, ``"self_verify"``,
            ``"evaluation"``).
        worker: the worker it runs for (None for an evaluation).
        reward: the run's reward, to score the output on ``task`` (None: not scored).
        task: the task to score on.
        key: unique per submission (set by the engine), so that a cluster that caches
            results by their inputs (Dask's ``pure=True``) never merges two rollouts.
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    phase: str
    worker: int | None = None
    reward: Callable[[Task, str], float] | None = None
    task: Task | None = None
    key: str = ""

    def __dask_tokenize__(self) -> str:
        """Dask's task key for this call: its unique ``key`` (no hashing of the callable)."""
        return self.key


@dataclass
class CallResult:
    """What a `Call` brings back: its output, its reward, the tokens it recorded, its errors.

    Args:
        output: what ``fn`` returned (a ``str`` sanitised with `sanitize_text`).
        reward: the checked reward of the output, when the call is scored.
        usage: the tokens the call recorded (on any meter, by a provider or by a user
            callable into the meter it was given), phases kept; None when the call ran in
            the run's own thread, where they already reached the run's meters.
        error: what ``fn`` raised (the driver applies the failure rule to it).
        score_error: what scoring raised (a contract error or the reward's own
            exception): never retried, as on a thread.
    """

    output: Any = None
    reward: float | None = None
    usage: Usage | None = None
    error: Exception | None = None
    score_error: Exception | None = None


def run_call(call: Call) -> CallResult:
    """Run one `Call` where it landed (a pool thread, another process, a Dask worker).

    The call runs under a fresh meter (`agentdescent.model.recording`) that the result
    carries back, so its tokens are counted once, on the driver. It never raises for the
    call's own errors: they come back in the result with the tokens spent before them
    (as on a thread, where those tokens reach the run's meter too). The output is scored
    outside the meter, as on a thread.
    """
    with recording(call.phase, call.worker) as meter:
        try:
            out = call.fn(*call.args)
        except Exception as exc:
            return CallResult(usage=meter, error=exc)
    if isinstance(out, str):
        out = sanitize_text(out)
    if call.reward is None or call.task is None:
        return CallResult(out, usage=meter)
    try:
        reward = score_output(call.reward, call.task, out)
    except Exception as exc:
        return CallResult(out, usage=meter, score_error=exc)
    return CallResult(out, reward, meter)


def runs_in_process(executor: concurrent.futures.Executor) -> bool:
    """True for the executors whose calls run in this process's threads (nothing is pickled)."""
    return isinstance(executor, (DaemonPool, concurrent.futures.ThreadPoolExecutor))


def check_travel(travelling: Sequence[tuple[str, Any]], tasks: Sequence[Task],
                 executor: concurrent.futures.Executor) -> None:
    """Check that what travels to ``executor`` pickles: the named callables and the tasks.

    Called before the first submission to an executor that is not a thread pool, so a
    lambda or a closure fails here, naming itself, instead of in a worker process.

    Args:
        travelling: ``(argument name, value)`` of each callable that travels.
        tasks: the run's tasks.
        executor: where they would travel.

    Raises:
        ContractError: something that must travel does not pickle.
    """
    where = type(executor).__name__
    for name, value in travelling:
        try:
            pickle.dumps(value)
        except Exception as exc:
            raise ContractError(
                f"{name}={value!r:.120} cannot travel to the executor ({where}): pickle.dumps "
                f"fails with {type(exc).__name__}: {exc}. Calls on a process pool or a Dask "
                f"cluster are pickled: define {name} at module level (not a lambda or a function "
                "nested in another), bind extra arguments with functools.partial, keep locks "
                "and open clients out of it, or run on threads (executor=None or a "
                "ThreadPoolExecutor)"
            ) from None
    for task in tasks:
        try:
            pickle.dumps(task)
        except Exception as exc:
            raise ContractError(
                f"task {task.id!r} cannot travel to the executor ({where}): pickle.dumps fails "
                f"with {type(exc).__name__}: {exc}; keep task.meta to plain data"
            ) from None


def executor_gave_up(exc: BaseException) -> bool:
    """Dask's ``KilledWorker``: the scheduler already re-ran the call on other workers, then gave up."""
    distributed = sys.modules.get("distributed")  # only an executor of Dask's can raise it
    return distributed is not None and isinstance(exc, distributed.KilledWorker)
