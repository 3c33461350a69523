"""One expensive call as it travels to an executor, and scoring its output.

This module owns

- `Call`: one call as a pure function of picklable inputs (a rollout, a self-verify, a
  held-out evaluation or a proposal), `run_call`, which runs it wherever it landed (a
  pool thread, another process, a Dask worker) under a fresh meter, and `CallResult`,
  which brings back its output, its reward, its recorded tokens and its errors;
- `check_travel`: what must travel pickles, checked before the first submission;
- `score_output`: an output scored under both contracts (a ``str``, a reward in [0, 1]),
  and `calls_a_model` (a reward that is a model call of its own, a judge);
- `executor_gave_up`: Dask's word that it already re-ran a call.

It must not know of the run: no meters but the call's own, no retries, no deadline, no
counters (the failure rule and the waits are `agentdescent.engine.executors.CallRunner`'s).
"""

from __future__ import annotations

import concurrent.futures
import pickle
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ContractError
from ..rewards.builtin import Score, check_reward
from ..types import Task, sanitize_text
from ..usage import Usage, recording

__all__ = ["Call", "CallResult", "calls_a_model", "check_travel", "executor_gave_up", "run_call", "score_output"]


def score_output(reward: Callable[[Task, str], Any], task: Task, output: Any) -> Score:
    """The reward of one ``run``/``solve`` output, with both contracts checked (a pure function).

    Returns:
        The reward as a `agentdescent.rewards.builtin.Score` (a float reward has no feedback).

    Raises:
        ContractError: the output is not a ``str``.
        RewardContractError: the reward is not a finite number in [0, 1] (or a `Score`).
    """
    if not isinstance(output, str):
        raise ContractError(
            f"run/solve returned {type(output).__name__} for task {task.id!r}; return the output as a str"
        )
    return check_reward(task, reward(task, output))


def calls_a_model(reward: Any) -> bool:
    """Whether ``reward`` makes model calls of its own (a judge): they are then calls of the run."""
    return bool(getattr(reward, "calls_a_model", False))


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
        reward: the checked reward of the output (a `agentdescent.rewards.builtin.Score`), when the
            call is scored.
        usage: the tokens the call recorded (on any meter, by a provider or by a user
            callable into the meter it was given), phases kept; None when the call ran in
            the run's own thread, where they already reached the run's meters.
        error: what ``fn`` raised (the driver applies the failure rule to it).
        score_error: what scoring raised (a contract error or the reward's own
            exception): never retried, as on a thread.
    """

    output: Any = None
    reward: Score | None = None
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
