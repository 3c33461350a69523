"""Rollout throughput of serial, sync-barrier and async runs as the worker count grows.

The router reference domain with simulated heavy-tailed rollout latency (log-normal:
``--latency`` is the median in seconds, ``--sigma`` the shape; sigma 1 puts the mean at
1.65x the median and one rollout in a few hundred at 20x). For each worker count N it
runs, in one process and interleaved per repeat:

- **serial**: ``evolve(n_workers=1, max_concurrency=1)`` (the baseline of every speedup);
- **sync**: ``evolve(n_workers=N, max_concurrency=N)`` (a barrier after every round);
- **async**: ``async_evolve(n_workers=N)`` (no barrier, one merger).

Throughput is worker rollouts per wall-clock second of the whole call
(``result.rollouts / wall``; self-verify re-runs and held-out evaluations are not
counted as rollouts, but their time is in the wall clock). Every run does the same
fixed number of rollouts: the train task count times ``--epochs`` (steady; one for
learn). The task walk visits every train task the head has not been seen to solve once
before any twice, so the first epoch rolls out every task in every mode; after that (a
solved task leaves the walk's open set) the steady workload's later rollouts are the
walk's seeded uniform draws, the same draws in every mode and for every N.

Two workloads:

- ``steady`` (the issue's target, sleep-bound rollouts): the skill starts solved, so
  every rollout succeeds, no card is produced and nothing is merged: the runtimes
  differ only in scheduling. The held-out set is 2% of the tasks (6) so the one
  held-out evaluation at start-up stays small. Because the simulated latency is a
  deterministic function of (skill, task), the script also prints the scheduling
  bound of this exact task sequence (greedy list scheduling for async, per-round
  maxima for the barrier) from the per-rollout latencies timed in the serial run:
  the gap between measured and bound is engine overhead, the gap between the bound
  and N is the workload's tail.
- ``learn``: the full loop from an empty skill (noise 0.25, ``self_verify=False``,
  ``async_ratio=1`` = alpha for this L2 artifact, guarded). The held-out set is one
  task per keyword (24): fewer and acceptance could not see most rules. Here the
  merger's held-out evaluations are real rollouts with the same latency; the serial
  run pays them on its critical path, so speedups over serial can exceed N and are
  not a measure of concurrency alone. Read its table as "what a learning run gets".

    python bench/scaling.py [--workers 1,2,4,8,16] [--latency 0.01] [--sigma 1.0]
                            [--repeats 3] [--epochs 2] [--workloads steady]
                            [--learn-repeats 1] [--json bench/results/scaling.json]

Offline. The default run (steady only) takes about two and a half minutes on 2 cores;
``--workloads steady,learn`` adds about 70 s (one repeat of learn).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent import Task, async_evolve, evolve
from agentdescent.domains.router import KEYWORDS, RouterDomain

MODES = ("serial", "sync", "async")
#: Held-out share per workload (see the module docstring for why).
HELD_OUT_FRAC = {"steady": 0.02, "learn": len(KEYWORDS) / 288}
TARGET_EFFICIENCY = 0.8


def solved_state(domain: RouterDomain) -> dict[str, str]:
    """The router skill with the right rule for every keyword."""
    state = domain.strategy.initial()
    for kw, label in KEYWORDS.items():
        diff = domain.strategy.to_diff(state, f"{kw}: {label}", "bench", 1, "router")
        if diff is not None:
            state = diff.apply(state)
    return state


class TimedRun:
    """Wraps the domain's ``run`` and times every call on a train task (worker rollouts).

    Held-out evaluations call the same function on held-out tasks; they are not recorded.
    """

    def __init__(self, inner: Callable[[str, Task], str], train_ids: set[str]) -> None:
        self.inner = inner
        self.train_ids = train_ids
        self.lock = threading.Lock()
        self.calls: list[tuple[float, float]] = []  # (start, duration), call order

    def __call__(self, rendered: str, task: Task) -> str:
        start = time.perf_counter()
        out = self.inner(rendered, task)
        if task.id in self.train_ids:
            with self.lock:
                self.calls.append((start, time.perf_counter() - start))
        return out


def n_train(n_tasks: int, held_out_frac: float) -> int:
    """Train tasks after evolve()'s positional split (same rule as the engine)."""
    return n_tasks - min(n_tasks - 1, max(1, round(n_tasks * held_out_frac)))


def one_run(workload: str, mode: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """One run; returns its throughput and counters."""
    domain = RouterDomain(seed=args.seed, latency=args.latency, latency_sigma=args.sigma)
    frac = HELD_OUT_FRAC[workload]
    train_count = n_train(len(domain.tasks), frac)
    total = train_count * (args.epochs if workload == "steady" else 1)
    timed = TimedRun(domain.run, {t.id for t in domain.tasks[:train_count]})
    kwargs: dict[str, Any] = dict(domain.evolve_kwargs())
    kwargs.update(run=timed, artifact_id="router", held_out_frac=frac, seed=args.seed,
                  self_verify=False)
    if workload == "steady":
        kwargs["initial_state"] = solved_state(domain)
    workers = 1 if mode == "serial" else n
    started = time.perf_counter()
    if mode == "async":
        result = async_evolve(**kwargs, n_workers=workers, async_ratio=1, max_iters=total,
                              max_seconds=600.0)
    else:
        result = evolve(**kwargs, n_workers=workers, max_concurrency=workers,
                        rounds=-(-total // workers), max_rollouts=total)
    wall = time.perf_counter() - started
    c = result.counters
    return {
        "mode": mode, "workers": workers, "rollouts": result.rollouts, "wall": wall,
        "rate": result.rollouts / wall, "stop_reason": result.stop_reason, "error": result.error,
        "eval_rollouts": c.get("eval_rollouts", 0), "final_reward": result.final_reward,
        "commits": result.committed, "sweeps": c.get("sweeps"),
        "backpressure_waits": c.get("backpressure_waits"),
        "discarded_stale": c.get("merge_discarded_stale", 0),
        "latencies": [d for _, d in sorted(timed.calls)] if mode == "serial" else None,
    }


def bounds(latencies: Sequence[float], n: int) -> tuple[float, float]:
    """Best possible speedups on this exact rollout sequence: (greedy list scheduling, barrier)."""
    total = sum(latencies)
    free = [0.0] * n
    for d in latencies:
        heapq.heappush(free, heapq.heappop(free) + d)
    barrier = sum(max(latencies[i:i + n]) for i in range(0, len(latencies), n))
    return total / max(free), total / barrier


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run_workload(workload: str, workers: Sequence[int], repeats: int,
                 args: argparse.Namespace) -> dict[str, Any]:
    """All repeats of one workload: serial, then sync and async for every N, interleaved."""
    runs: list[dict[str, Any]] = []
    for rep in range(repeats):
        serial = one_run(workload, "serial", 1, args)
        serial["repeat"] = rep
        runs.append(serial)
        print(f"  [{workload} {rep + 1}/{repeats}] serial: {serial['rate']:.1f} rollouts/s "
              f"({serial['wall']:.1f} s)", file=sys.stderr, flush=True)
        for n in workers:
            for mode in ("sync", "async"):
                if mode == "sync" and n == 1:
                    continue  # the serial run is sync with one worker
                r = one_run(workload, mode, n, args)
                r["repeat"] = rep
                r["speedup"] = r["rate"] / serial["rate"]
                runs.append(r)
                print(f"  [{workload} {rep + 1}/{repeats}] {mode} N={n}: {r['rate']:.1f} rollouts/s "
                      f"x{r['speedup']:.2f} ({r['wall']:.1f} s)", file=sys.stderr, flush=True)
    rows = []
    for n in workers:
        row: dict[str, Any] = {"workers": n}
        for mode in ("sync", "async"):
            mine = [r for r in runs if r["mode"] == mode and r["workers"] == n]
            if mode == "sync" and n == 1:
                mine = [dict(r, speedup=1.0) for r in runs if r["mode"] == "serial"]
            row[mode] = {
                "rate": spread([r["rate"] for r in mine]),
                "speedup": spread([r["speedup"] for r in mine]),
                "eval_rollouts": statistics.median(r["eval_rollouts"] for r in mine),
                "final_reward": statistics.median(r["final_reward"] for r in mine),
                "errors": [r["error"] for r in mine if r["error"]],
            }
        if workload == "steady":
            serial_lat = [r["latencies"] for r in runs if r["mode"] == "serial"][0]
            row["bound_async"], row["bound_sync"] = bounds(serial_lat, n)
        a, s = row["async"]["speedup"]["median"], row["sync"]["speedup"]["median"]
        row["async_efficiency"] = a / n
        row["within_80pct_of_linear"] = a >= TARGET_EFFICIENCY * n
        row["async_ahead_of_sync"] = None if n == 1 else a > s
        for mode in ("sync", "async"):
            mine = [r for r in runs if r["mode"] == mode and r["workers"] == n]
            row[mode]["backpressure_waits"] = statistics.median(
                r["backpressure_waits"] or 0 for r in mine) if mine else None
        rows.append(row)
    for r in runs:
        r.pop("latencies", None)
    return {"rows": rows, "runs": runs, "repeats": repeats,
            "held_out_frac": HELD_OUT_FRAC[workload]}


def _x(s: dict[str, float]) -> str:
    return f"x{s['median']:.2f} ({s['min']:.2f}–{s['max']:.2f})"


def table(workload: str, result: dict[str, Any], args: argparse.Namespace) -> str:
    """The markdown table of one workload (quoted in docs/results.md)."""
    steady = workload == "steady"
    head = ["N", "serial/sync rollouts/s", "async rollouts/s", "sync speedup", "async speedup"]
    if steady:
        head += ["bound sync", "bound async"]
    head += ["async / N", "≥80% linear", "async > sync"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
    for row in result["rows"]:
        n = row["workers"]
        cells = [str(n), f"{row['sync']['rate']['median']:.1f}", f"{row['async']['rate']['median']:.1f}",
                 _x(row["sync"]["speedup"]), _x(row["async"]["speedup"])]
        if steady:
            cells += [f"x{row['bound_sync']:.2f}", f"x{row['bound_async']:.2f}"]
        ahead = row["async_ahead_of_sync"]
        cells += [f"{row['async_efficiency']:.0%}", "met" if row["within_80pct_of_linear"] else "NOT met",
                  "–" if ahead is None else ("met" if ahead else "NOT met")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4,8,16", help="worker counts (default 1,2,4,8,16)")
    parser.add_argument("--latency", type=float, default=0.01,
                        help="median simulated rollout latency in seconds (default 0.01)")
    parser.add_argument("--sigma", type=float, default=1.0, help="log-normal shape (default 1.0)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the steady workload (default 3)")
    parser.add_argument("--learn-repeats", type=int, default=1,
                        help="repeats of the learn workload (default 1: its serial run is slow)")
    parser.add_argument("--epochs", type=int, default=2,
                        help="steady workload: passes over the train tasks per run, i.e. the fixed "
                        "rollout count (default 2; the learn workload always runs one epoch)")
    parser.add_argument("--workloads", default="steady",
                        help="steady, learn or steady,learn (default steady; learn adds about 70 s)")
    parser.add_argument("--seed", type=int, default=0, help="domain and run seed (default 0)")
    parser.add_argument("--json", default="bench/results/scaling.json",
                        help="where to write the JSON (default bench/results/scaling.json)")
    args = parser.parse_args(argv)
    try:
        workers = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        parser.error(f"--workers={args.workers!r}: use comma-separated integers such as 1,2,4")
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if not workers or min(workers) < 1:
        parser.error("--workers: give worker counts >= 1")
    if not workloads or set(workloads) - set(HELD_OUT_FRAC):
        parser.error(f"--workloads={args.workloads!r}: use steady, learn or steady,learn")
    if args.repeats < 1 or args.learn_repeats < 1 or args.epochs < 1:
        parser.error("--repeats, --learn-repeats and --epochs must be at least 1")
    if args.latency <= 0 or args.sigma < 0:
        parser.error("--latency must be > 0 and --sigma >= 0")

    started = time.perf_counter()
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(),
               "python": platform.python_version()}
    out: dict[str, Any] = {"config": {k: v for k, v in vars(args).items() if k != "json"},
                           "machine": machine, "workloads": {}}
    out["config"]["workers"] = workers
    print(f"router domain, latency median {args.latency}s sigma {args.sigma}, "
          f"{machine['cpus']} CPUs, Python {machine['python']}")
    for workload in workloads:
        repeats = args.repeats if workload == "steady" else args.learn_repeats
        result = run_workload(workload, workers, repeats, args)
        out["workloads"][workload] = result
        total = result["runs"][0]["rollouts"]
        epochs = args.epochs if workload == "steady" else 1
        print(f"\n### {workload}: {total} rollouts per run ({epochs} epoch(s) of the train tasks), "
              f"held-out {result['held_out_frac']:.1%} of the tasks, median (min–max) over "
              f"{repeats} repeat(s)\n")
        print(table(workload, result, args))
        if workload == "steady":
            print("\nHeld-out evaluation: only the start-up evaluation of the 6 held-out tasks "
                  "(nothing is merged). 'bound' = best possible speedup on this exact rollout "
                  "sequence (list scheduling / per-round maxima of the timed latencies).")
        else:
            evals = {row["workers"]: (row["sync"]["eval_rollouts"], row["async"]["eval_rollouts"])
                     for row in result["rows"]}
            rewards = {row["workers"]: (row["sync"]["final_reward"], row["async"]["final_reward"])
                       for row in result["rows"]}
            print("\nHeld-out evaluation rollouts in the merger (sync, async) per N: "
                  + ", ".join(f"{n}: {s:.0f}/{a:.0f}" for n, (s, a) in evals.items())
                  + "; final held-out reward (sync, async): "
                  + ", ".join(f"{n}: {s:.2f}/{a:.2f}" for n, (s, a) in rewards.items())
                  + ". The serial run pays its merges on the critical path, so speedups here "
                  "include merge amortisation and can exceed N.")
        errors = [e for row in result["rows"] for m in ("sync", "async") for e in row[m]["errors"]]
        if errors:
            print(f"\nerrors: {errors}")
    out["seconds"] = time.perf_counter() - started
    print(f"\n({out['seconds']:.0f} s)")
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
