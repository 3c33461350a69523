"""Rollout throughput on threads, on a process pool and on a local Dask cluster.

One sync ``evolve()`` run per cell, the same work in every cell: every rollout succeeds
(reward 1.0), so nothing is proposed and nothing is merged, and the run is its rollouts
(``--rounds`` rounds of 8) plus the start-up held-out evaluation (4 tasks).
Throughput is solve calls (rollouts and evaluations) per wall-clock second of the
``evolve()`` call; the executor is created and warmed up (one small run) before the clock
starts. Two workloads:

- ``cpu``: each call does pure-Python arithmetic for about ``--cpu-ms`` milliseconds
  (calibrated once at start-up in this process), so threads share one GIL;
- ``sleep``: each call sleeps ``--sleep-ms`` milliseconds (an API-bound rollout).

Executors: ``threads`` (the default pool, ``max_concurrency=W``), ``processes``
(``concurrent.futures.ProcessPoolExecutor(W)``) and ``dask`` (``LocalCluster(processes=True,
n_workers=W, threads_per_worker=1)``, through ``Client.get_executor()``), for each worker
count W. Every repeat runs every cell once, in the same order, and each cell's rate is
divided by the one-thread rate of the same workload *in the same repeat*: the table
reports the median of those paired ratios and their min-max over ``--repeats``.

The machine is shared, so each repeat also measures the ceiling without the engine: the
same calls through a bare ``ProcessPoolExecutor(W).map`` and a bare Dask
``Client.get_executor().map`` (the ``bare-processes`` and ``bare-dask`` rows, whose ratio
is against a bare loop, not against a thread). An engine row far below its ceiling is
engine overhead; a ceiling below W is the machine (other load, fewer real cores) or the
executor's own per-call cost.

    python bench/scale_out.py [--repeats 3] [--rounds 8] [--cpu-workers 1,2]
                              [--sleep-workers 1,2,4,8] [--cpu-ms 20] [--sleep-ms 20]
                              [--json bench/results/scale_out.json]

Offline; the default run takes about three minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent import Task, evolve

EXECUTORS = ("threads", "processes", "dask")
ROLLOUTS_PER_ROUND = 8
N_TASKS = 100
HELD_OUT_FRAC = 0.04  # 4 held-out tasks: the start-up evaluation stays small


# --------------------------------------------------------------------------- the workloads


def burn(iterations: int) -> int:
    """Pure-Python arithmetic: holds the GIL for the whole call."""
    x = 0
    for i in range(iterations):
        x += i * i % 7
    return x


def cpu_run(rendered: str, task: Task, *, iterations: int) -> str:
    """A CPU-bound rollout: ``burn(iterations)``, then the answer."""
    burn(iterations)
    return "ok"


def sleep_run(rendered: str, task: Task, *, seconds: float) -> str:
    """A sleep-bound rollout (a model call that waits on the network)."""
    time.sleep(seconds)
    return "ok"


def reward(task: Task, output: str) -> float:
    """Every rollout succeeds: nothing is proposed, nothing merged."""
    return 1.0


def propose(rendered: str, task: Task, output: str, reward: float) -> str | None:
    """Never called (every reward is 1.0)."""
    return None


def calibrate(target_ms: float) -> int:
    """Iterations of `burn` that take about ``target_ms`` in this process (best of 5)."""
    probe = 200_000
    best = min(_timed(burn, probe) for _ in range(5))
    return max(1, round(probe * target_ms / 1000 / best))


def _timed(fn: Callable[[int], Any], n: int) -> float:
    start = time.perf_counter()
    fn(n)
    return time.perf_counter() - start


# --------------------------------------------------------------------------- the executors


@contextmanager
def make_executor(kind: str, workers: int) -> Iterator[dict[str, Any]]:
    """The ``evolve()`` keyword arguments that put the run's calls on ``kind`` with ``workers``."""
    if kind == "threads":
        yield {"max_concurrency": workers}
    elif kind == "processes":
        with concurrent.futures.ProcessPoolExecutor(workers) as pool:
            yield {"executor": pool}
    else:
        from distributed import Client, LocalCluster

        with LocalCluster(processes=True, n_workers=workers, threads_per_worker=1, dashboard_address=None,
                          silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
            client.wait_for_workers(workers)
            yield {"executor": client.get_executor()}


def _bare_call(run: Callable[..., str], task: Task) -> str:
    return run("", task)


def bare_rate(run: Callable[..., str], kind: str, workers: int, calls: int) -> float:
    """Calls per second without the engine: a loop (``kind == "loop"``) or a bare executor's ``map``."""
    tasks = [Task(f"t{i}", f"prompt {i}") for i in range(calls)]
    if kind == "loop":
        start = time.perf_counter()
        for task in tasks:
            run("", task)
        return calls / (time.perf_counter() - start)
    with make_executor(kind, workers) as kwargs:
        pool = kwargs["executor"]
        list(pool.map(_bare_call, [run] * 2 * workers, tasks[: 2 * workers]))  # start and import
        start = time.perf_counter()
        list(pool.map(_bare_call, [run] * calls, tasks))
        return calls / (time.perf_counter() - start)


def one_run(run: Callable[..., str], rounds: int, executor_kwargs: dict[str, Any]) -> tuple[float, int]:
    """Seconds and solve calls of one ``evolve()`` run."""
    tasks = [Task(f"t{i}", f"prompt {i}") for i in range(N_TASKS)]
    start = time.perf_counter()
    result = evolve(tasks, reward, run=run, propose=propose, rounds=rounds, n_workers=ROLLOUTS_PER_ROUND,
                    held_out_frac=HELD_OUT_FRAC, seed=0, **executor_kwargs)
    seconds = time.perf_counter() - start
    if result.error is not None:
        raise RuntimeError(f"the bench run failed: {result.error}")
    return seconds, result.rollouts + result.counters["eval_rollouts"]


# --------------------------------------------------------------------------- the bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=8, help="rounds of 8 rollouts per run")
    parser.add_argument("--cpu-workers", default="1,2")
    parser.add_argument("--sleep-workers", default="1,2,4,8")
    parser.add_argument("--cpu-ms", type=float, default=20.0)
    parser.add_argument("--sleep-ms", type=float, default=20.0)
    parser.add_argument("--executors", default=",".join(EXECUTORS))
    parser.add_argument("--json", type=Path, help="write the table and the raw timings here")
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    iterations = calibrate(args.cpu_ms)
    measured_ms = 1000 * statistics.median(_timed(burn, iterations) for _ in range(5))
    print(f"cpu work: {iterations} iterations = {measured_ms:.1f} ms per call in one thread", file=sys.stderr)
    workloads = {
        "cpu": (functools.partial(cpu_run, iterations=iterations), [int(w) for w in args.cpu_workers.split(",")]),
        "sleep": (functools.partial(sleep_run, seconds=args.sleep_ms / 1000),
                  [int(w) for w in args.sleep_workers.split(",")]),
    }
    executors = args.executors.split(",")
    cells = [(wl, ex, w) for wl, (_, ws) in workloads.items() for w in ws for ex in executors]
    if any((wl, "threads", 1) not in cells for wl in workloads):
        parser.error("every workload needs its baseline: executor threads with 1 worker")
    rates: dict[tuple[str, str, int], list[float]] = {cell: [] for cell in cells}
    bare_calls = args.rounds * ROLLOUTS_PER_ROUND
    bare = [(wl, f"bare-{ex}", w) for wl, (_, ws) in workloads.items() for ex in executors if ex != "threads"
            for w in ws]
    for wl in workloads:
        rates[(wl, "bare-loop", 1)] = []
    for cell in bare:
        rates[cell] = []
    for repeat in range(args.repeats):
        for wl, (run, _) in workloads.items():
            rates[(wl, "bare-loop", 1)].append(bare_rate(run, "loop", 1, bare_calls))
        for wl, kind, w in bare:
            rates[(wl, kind, w)].append(bare_rate(workloads[wl][0], kind.removeprefix("bare-"), w, bare_calls))
        for workload, kind, workers in cells:
            run = workloads[workload][0]
            with make_executor(kind, workers) as kwargs:
                one_run(run, 1, kwargs)  # warm-up: processes started, modules imported
                seconds, calls = one_run(run, args.rounds, kwargs)
            rates[(workload, kind, workers)].append(calls / seconds)
            print(f"repeat {repeat + 1}: {workload:5s} {kind:9s} x{workers}: {calls / seconds:7.1f} calls/s",
                  file=sys.stderr)

    load_after = os.getloadavg()
    rows = []
    for workload, kind, workers in cells + bare:
        base = rates[(workload, "bare-loop" if kind.startswith("bare") else "threads", 1)]
        ratios = [r / b for r, b in zip(rates[(workload, kind, workers)], base)]
        same_threads = None if kind.startswith("bare") else rates.get((workload, "threads", workers))
        vs_threads = [r / t for r, t in zip(rates[(workload, kind, workers)], same_threads)] if same_threads else None
        rows.append({
            "workload": workload, "executor": kind, "workers": workers,
            "calls_per_s_median": round(statistics.median(rates[(workload, kind, workers)]), 1),
            "ratio_median": round(statistics.median(ratios), 2),
            "ratio_min": round(min(ratios), 2), "ratio_max": round(max(ratios), 2),
            "vs_threads_same_workers_median": round(statistics.median(vs_threads), 2) if vs_threads else None,
            "rates": [round(r, 2) for r in rates[(workload, kind, workers)]],
        })

    print(f"\n| workload | executor | workers | rollouts/s (median) | x one thread (median) | min-max "
          f"(n={args.repeats}) | x threads, same workers |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        vs = "" if r["vs_threads_same_workers_median"] is None else f"{r['vs_threads_same_workers_median']:.2f}"
        print(f"| {r['workload']} | {r['executor']} | {r['workers']} | {r['calls_per_s_median']:.1f} | "
              f"{r['ratio_median']:.2f} | {r['ratio_min']:.2f}-{r['ratio_max']:.2f} | {vs} |")
    print(f"\n{os.cpu_count()} CPUs; load average (1, 5, 15 min) before "
          f"{', '.join(f'{x:.2f}' for x in load_before)}, after {', '.join(f'{x:.2f}' for x in load_after)}; "
          f"cpu work {measured_ms:.1f} ms per call")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {"load_before": load_before, "load_after": load_after,"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
                "cpu_iterations": iterations, "cpu_ms_measured": round(measured_ms, 2), "argv": sys.argv[1:],
                "rollouts_per_round": ROLLOUTS_PER_ROUND, "held_out_tasks": round(N_TASKS * HELD_OUT_FRAC)}
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
