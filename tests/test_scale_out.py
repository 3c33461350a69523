"""Scale-out: both runtimes on a process pool and on a Dask cluster with real worker processes.

Every run here uses the toy task family with module-level callables from
`tests.scale_out_helpers`, which log each call (its number, kind and process id) to a
directory and record a known number of tokens into the meter they were given, so a test
can check where the calls ran and that their tokens reached ``result.usage`` exactly once.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import os
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentdescent import (
    AggregatorConfig,
    ContractError,
    EvolutionResult,
    LLMAgent,
    MemoryLedger,
    Usage,
    async_evolve,
    evolve,
)
from agentdescent.testing import FakeProvider
from agentdescent.usage import recording, replay_usage, run_meters, thread_tokens, usage_phase

from . import scale_out_helpers as helpers
from .toy import echo_run, replayable, toy_propose, toy_reward, toy_tasks

ROUNDS = 3
N_WORKERS = 2


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """One local Dask cluster of two single-threaded worker processes for the module."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                                  dashboard_address=None, silence_logs=logging.ERROR) as c:
        yield c


class Backend:
    """An executor under test, and the process ids of its workers."""

    def __init__(self, name: str, executor: concurrent.futures.Executor, worker_pids: Callable[[], set[int]],
                 client: Any = None) -> None:
        self.name, self.executor, self.worker_pids, self.client = name, executor, worker_pids, client


@pytest.fixture(params=["processes", "dask"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A fresh ``ProcessPoolExecutor(2)``, or a fresh client of the module's Dask cluster."""
    if request.param == "processes":
        pool = concurrent.futures.ProcessPoolExecutor(2)
        try:
            yield Backend("processes", pool, lambda: {p.pid for p in pool._processes.values()})
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return
    distributed = pytest.importorskip("distributed")
    cluster = request.getfixturevalue("cluster")
    client = distributed.Client(cluster)
    try:
        client.wait_for_workers(2, timeout=30)
        yield Backend("dask", client.get_executor(), lambda: set(client.run(os.getpid).values()), client)
    finally:
        client.close()


@pytest.fixture(params=["sync", "async"])
def engine(request: pytest.FixtureRequest) -> Callable[..., EvolutionResult]:
    """``engine(rounds=ROUNDS, **kwargs)``: a run of ``rounds`` rounds' worth of rollouts on the toy tasks."""

    def run(*, reward: Callable[[Any, str], float] = toy_reward, rounds: int = ROUNDS,
            **kwargs: Any) -> EvolutionResult:
        kwargs.setdefault("n_workers", N_WORKERS)
        if request.param == "sync":
            return evolve(toy_tasks(12), reward, rounds=rounds, **kwargs)
        return async_evolve(toy_tasks(12), reward, max_rollouts=rounds * N_WORKERS, max_seconds=30.0,
                            async_ratio=1, **kwargs)

    run.runtime = request.param  # type: ignore[attr-defined]
    return run


def logged(log_dir: os.PathLike[str], usage: Usage, kill_at: int | None = None) -> dict[str, Any]:
    """``run``/``propose`` that log every call to ``log_dir`` and record their tokens into ``usage``."""
    return {
        "run": functools.partial(helpers.logged_run, log_dir=str(log_dir), usage=usage, kill_at=kill_at),
        "propose": functools.partial(helpers.logged_propose, log_dir=str(log_dir), usage=usage),
    }


def expected_tokens(log_dir: os.PathLike[str], *, lost_solves: int = 0) -> int:
    """Tokens the logged calls recorded, less the solve calls whose process died mid-call."""
    solves = len(helpers.calls(log_dir, "solve")) - lost_solves
    return solves * sum(helpers.SOLVE_TOKENS) + len(helpers.calls(log_dir, "propose")) * sum(helpers.PROPOSE_TOKENS)


def assert_ledger_whole(result: EvolutionResult, ledger: MemoryLedger) -> None:
    """The ledger's head is the result's, and it holds every commit the rounds report, once."""
    assert ledger.head("artifact") == (result.version, result.state)
    assert len(ledger.history("artifact")) == result.version == 1 + sum(h.committed for h in result.history)


# --------------------------------------------------------------------------- the meter travels


def test_a_meter_pickles_with_its_counts_and_phases():
    meter = Usage()
    with usage_phase("rollout"):
        meter.record(7, 3, cached_tokens=2)
    twin = pickle.loads(pickle.dumps(meter))
    assert twin.snapshot() == meter.snapshot() and twin.by_phase() == {"rollout": 10}
    twin.record(1, 1)  # a working meter, with its own lock
    assert twin.total_tokens == 12 and meter.total_tokens == 10


def test_a_recorded_call_is_replayed_into_each_run_meter_once():
    own, run, user = Usage(), Usage(), Usage()
    with run_meters(Usage()), recording("evaluation", 3) as call:  # the outer meter must not see it
        own.record(7, 3)
    assert call.by_phase() == {"evaluation": 10}
    before = thread_tokens()
    with run_meters(run, user):
        replay_usage(pickle.loads(pickle.dumps(call)))
    assert thread_tokens() - before == 10
    for meter in (run, user):
        assert meter.snapshot()["total_tokens"] == 10 and meter.calls == 1
        assert meter.by_phase() == {"evaluation": 10}


# --------------------------------------------------------------------------- both runtimes, both executors


def test_calls_run_in_other_processes_and_their_tokens_count_once(engine, backend, tmp_path):
    meter = Usage()  # given to the callables and to the run: the same calls must not land twice
    ledger = MemoryLedger()
    result = engine(**logged(tmp_path, meter), executor=backend.executor, usage=meter, ledger=ledger)

    assert result.error is None and result.stop_reason in {"rounds", "max_rollouts"}, result.error
    assert result.version > 1  # it learned: commits were made on the driver from remote results
    pids = {pid for _, _, pid in helpers.calls(tmp_path)}
    assert os.getpid() not in pids and pids <= backend.worker_pids()
    counters = result.counters
    solves = counters["rollouts"] + counters["self_verify_rollouts"] + counters["eval_rollouts"]
    assert len(helpers.calls(tmp_path, "solve")) == solves
    assert result.usage.total_tokens == expected_tokens(tmp_path) == meter.total_tokens
    assert result.usage.calls == len(helpers.calls(tmp_path))
    assert sum(h.tokens for h in result.history) == result.usage.total_tokens
    assert result.usage.by_phase()["evaluation"] == counters["eval_rollouts"] * sum(helpers.SOLVE_TOKENS)
    assert counters["step_tokens"] > 0  # the worker step saw the remote tokens (card costs, budget)
    assert_ledger_whole(result, ledger)


def test_a_sync_run_on_a_process_pool_matches_the_same_run_on_threads(tmp_path):
    results = []
    for i, executor in enumerate([None, concurrent.futures.ProcessPoolExecutor(2)]):
        log_dir = tmp_path / str(i)
        log_dir.mkdir()
        try:
            results.append(evolve(toy_tasks(12), toy_reward, rounds=ROUNDS, n_workers=N_WORKERS,
                                  executor=executor, **logged(log_dir, Usage())))
        finally:
            if executor is not None:
                executor.shutdown()
    threads, processes = results
    assert processes.state == threads.state and processes.version == threads.version
    assert [replayable(h) for h in processes.history] == [replayable(h) for h in threads.history]
    assert processes.usage.snapshot() == threads.usage.snapshot()
    assert processes.usage.by_phase() == threads.usage.by_phase()


def test_evolve_asynchronous_takes_an_executor(tmp_path):
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        result = evolve(toy_tasks(12), toy_reward, asynchronous=True, max_rollouts=4, max_seconds=30,
                        n_workers=N_WORKERS, executor=pool, **logged(tmp_path, Usage()))
    assert result.error is None and result.stop_reason == "max_rollouts"
    assert os.getpid() not in {pid for _, _, pid in helpers.calls(tmp_path)}


def _closure_reward() -> Callable[[Any, str], float]:
    def reward(task: Any, output: str) -> float:
        return toy_reward(task, output)

    return reward


@pytest.mark.parametrize("culprit", ["run", "reward", "agent"])
def test_what_does_not_pickle_is_refused_before_any_call(engine, backend, tmp_path, culprit):
    kwargs: dict[str, Any] = logged(tmp_path, Usage())
    if culprit == "run":
        kwargs["run"] = lambda rendered, task: "unsolved"
    elif culprit == "agent":
        kwargs = {"agent": LLMAgent(FakeProvider(lambda messages, **options: "ok"))}  # holds a lock
    elif culprit == "reward":
        kwargs["reward"] = _closure_reward()
    ledger = MemoryLedger()
    with pytest.raises(ContractError, match=rf"^{culprit}=.*functools\.partial"):
        engine(**kwargs, executor=backend.executor, ledger=ledger)
    assert helpers.calls(tmp_path) == []  # nothing ran anywhere
    assert ledger.versions() == {}  # nothing was registered either


def test_a_thread_pool_never_pickles(engine, tmp_path):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        result = engine(run=lambda rendered, task: echo_run(rendered, task), propose=toy_propose,
                        executor=pool)
    assert result.error is None and result.version > 1


# --------------------------------------------------------------------------- faults


KILL_AT = 22  # the first solve call from this number on dies: after the first commit of a sync run


def test_a_worker_killed_mid_call(engine, backend, tmp_path):
    """Dask reruns the dead worker's call once and the run goes on; a broken process pool ends the run.

    The toy evaluation is deterministic, and the run says so (``rescore="deterministic"``):
    with five held-out tasks a commit rests on that (the e-value alone cannot reach its
    threshold on so few), and a run left to find it out would spend round 1's calls
    re-drawing scores to learn it, past `KILL_AT`. Declared, round 1 commits within its
    first `KILL_AT` calls, so the kill lands after it.
    """
    log_dir = tmp_path / "calls"
    log_dir.mkdir()
    ledger = MemoryLedger()
    result = engine(**logged(log_dir, Usage(), kill_at=KILL_AT), executor=backend.executor, ledger=ledger,
                    agg_config=AggregatorConfig(rescore="deterministic"))

    assert helpers.killed(log_dir)
    assert_ledger_whole(result, ledger)
    if backend.name == "dask":
        assert result.error is None and result.stop_reason in {"rounds", "max_rollouts"}, result.error
        counters = result.counters
        solves = counters["rollouts"] + counters["self_verify_rollouts"] + counters["eval_rollouts"]
        # Dask re-ran the killed call (and any result that died with the worker before the
        # driver fetched it), and each result counted once. Nothing failed for good; at most
        # one call was retried by the engine: on a loaded machine Dask can lose a result it
        # had computed on the dead worker and fail its gather ("Couldn't gather keys", seen
        # by the driver as a TypeError from distributed), a failure the engine retries once
        assert len(helpers.calls(log_dir, "solve")) >= solves + 1
        assert counters.get("backend_failures", 0) == 0 and counters.get("backend_errors", 0) <= 1
        assert result.usage.total_tokens == (solves * sum(helpers.SOLVE_TOKENS)
                                             + counters["proposals"] * sum(helpers.PROPOSE_TOKENS))
        assert result.usage.calls == solves + counters["proposals"]
    else:
        assert result.stop_reason == "error"
        assert "BrokenProcessPool" in result.error and "ledger" in result.error
        if engine.runtime == "sync":
            assert result.version > 1  # round 1 committed before the kill, and it stays
        assert result.usage.total_tokens <= expected_tokens(log_dir, lost_solves=1)


class GivesUpOnce(concurrent.futures.Executor):
    """Runs calls inline, but fails the ``nth`` submission as Dask does after its own re-runs."""

    def __init__(self, nth: int) -> None:
        self.nth, self.submitted = nth, 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        distributed = pytest.importorskip("distributed")
        self.submitted += 1
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if self.submitted == self.nth:
            worker = type("WorkerState", (), {"address": "tcp://127.0.0.1:1"})()
            future.set_exception(distributed.KilledWorker("run_call-x", worker, 3))
        else:
            future.set_result(fn(*args, **kwargs))
        return future


def test_a_call_dask_gave_up_on_fails_for_good_without_another_retry(tmp_path):
    executor = GivesUpOnce(nth=8)  # a rollout of round 1
    result = evolve(toy_tasks(12), toy_reward, rounds=ROUNDS, n_workers=N_WORKERS, executor=executor,
                    **logged(tmp_path, Usage()))
    assert result.error is None and result.stop_reason == "rounds"
    assert result.counters["backend_failures"] == 1 and result.counters.get("backend_errors", 0) == 0
    assert executor.submitted == len(helpers.calls(tmp_path)) + 1  # the failed call was not sent again


def test_closing_the_dask_client_mid_run_ends_the_run_with_the_ledger_whole(engine, cluster, tmp_path):
    distributed = pytest.importorskip("distributed")
    client = distributed.Client(cluster)
    ledger = MemoryLedger()
    seen: list[int] = []

    def close_after_the_first_merge(info: Any) -> None:
        seen.append(info.index)
        if info.index == 1:
            client.close()

    try:
        result = engine(**logged(tmp_path, Usage()), executor=client.get_executor(), ledger=ledger,
                        on_round=close_after_the_first_merge, rounds=20)  # work is left after the first
    finally:
        client.close()
    assert result.stop_reason == "error", result.stop_reason
    assert "executor (ClientExecutor)" in result.error and "ledger" in result.error
    assert seen[0] == 1 and len(result.history) == len(seen)
    assert_ledger_whole(result, ledger)
