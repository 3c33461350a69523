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

A third workload compares model calls per second with the published agentdescent 0.7.0
in the same run:

- ``calls`` (``--baseline-python``): the workload of `bench/_call_workload.py` (a
  router with 24 held-out tasks, an empty skill, self-verify on, ``--calls-rollouts``
  worker rollouts per run) where **every** model call sleeps ``--calls-latency``
  (log-normal, ``--sigma``): the rollout, the proposal, the self-verify and each held-out
  evaluation, each counted at the callable, so both libraries are counted the same way.
  Our side runs in this process; 0.7.0 runs in ``--baseline-python`` (a separate virtual
  environment: the two import under the same name) through `bench/baseline_070.py`, a
  driver written against its public API, one run per request. Per repeat, for sync and
  async and every N, the two sides run back to back (which goes first alternates with
  the repeat), so load on the machine hits both alike. Concurrency caps are equal:
  0.7.0 scores up to ``eval_concurrency`` (default 8) held-out tasks at once whatever
  ``max_concurrency`` is, so with ``--sync-cap max8`` (the default) our sync run gets
  ``max_concurrency = max(N, 8)`` and 0.7.0 ``max_concurrency = N`` with its default
  eval_concurrency; with ``--sync-cap n`` both are held to N (ours ``max_concurrency = N``,
  0.7.0 ``eval_concurrency = N``). Async runs use each library's own defaults (ours: a
  merger pool of ``max(N, 8)`` threads; 0.7.0: eval_concurrency 8), ``async_ratio=1``.
  Calls per second rewards making calls as well as not waiting (a library that spends
  more evaluation calls per rollout shows more of them per second), so the table also
  gives worker rollouts per second for the same fixed work, and calls per rollout.
  Without ``--baseline-python`` the comparison is skipped (and said so).

    python bench/scaling.py [--workers 1,2,4,8,16] [--latency 0.01] [--sigma 1.0]
                            [--repeats 3] [--epochs 2] [--workloads steady]
                            [--learn-repeats 1] [--json bench/results/scaling.json]
                            [--baseline-python ../venv070/bin/python]
                            [--calls-rollouts 264] [--calls-latency 0.02]
                            [--calls-repeats 3] [--sync-cap max8]

Offline. The default run (steady only) takes about two and a half minutes on 2 cores;
``--workloads steady,learn`` adds about 70 s (one repeat of learn); ``--workloads calls
--baseline-python ...`` at N = 1, 4, 8, 16 takes about six minutes with 3 repeats.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _call_workload import CountingWorkload, task_specs  # noqa: E402
from jsonout import write_json  # noqa: E402

from agentdescent import Task, async_evolve, evolve  # noqa: E402
from agentdescent.domains.router import KEYWORDS, RouterDomain  # noqa: E402

MODES = ("serial", "sync", "async")
#: Held-out share per workload (see the module docstring for why).
HELD_OUT_FRAC = {"steady": 0.02, "learn": len(KEYWORDS) / 288, "calls": len(KEYWORDS) / 288}
TARGET_EFFICIENCY = 0.8
#: The calls workload's target at one worker: ours at least this many times 0.7.0's calls per second.
TARGET_CALLS_RATIO = 1.2
#: 0.7.0's default ``eval_concurrency`` (held-out tasks it scores at once, whatever max_concurrency is).
BASELINE_EVAL_CONCURRENCY = 8


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


# --------------------------------------------------------------------------- calls vs 0.7.0


class Baseline:
    """The published 0.7.0's side: `bench/baseline_070.py --serve` in ``python``, one run per request.

    Raises:
        SystemExit: ``python`` does not import agentdescent 0.7.0 (the message says how to make one that does).
    """

    def __init__(self, python: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of this repository
        # the driver's stderr, kept for as long as it runs (and after, to read when it failed)
        self.log = tempfile.NamedTemporaryFile("w+", prefix="baseline_070-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen([python, str(HERE / "baseline_070.py"), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, env=env,
                                     cwd=tempfile.gettempdir())
        hello = self._read()
        identity = hello.get("hello", {})
        if identity.get("version") != "0.7.0":
            self.close()
            raise SystemExit(f"--baseline-python={python}: it imports agentdescent {identity.get('version')!r} "
                             f"from {identity.get('file')!r}, not the published 0.7.0; make one with: python3 -m "
                             "venv ../venv070 && ../venv070/bin/pip install agentdescent==0.7.0")
        self.identity = identity

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the 0.7.0 driver exited (exit code {self.proc.poll()}); its stderr is in {self.log.name}")
        return json.loads(line)

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """One run on 0.7.0; its calls, wall-clock and rollouts."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = self._read()
        if "failed" in answer:
            raise SystemExit(f"0.7.0 failed on {request}: {answer['failed']} (stderr: {self.log.name})")
        return answer

    def close(self) -> None:
        """End the driver."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.log.close()


def calls_request(mode: str, n: int, args: argparse.Namespace, *, baseline: bool) -> dict[str, Any]:
    """The run both sides make for (mode, N); ``baseline`` picks 0.7.0's concurrency knobs."""
    equal_n = args.sync_cap == "n"
    if baseline:
        cap, eval_cap = n, (n if equal_n and mode == "sync" else None)  # None: 0.7.0's default (8)
    else:
        cap, eval_cap = (n if equal_n else max(n, BASELINE_EVAL_CONCURRENCY)), None
    return {"mode": mode, "workers": n, "rollouts": args.calls_rollouts, "latency": args.calls_latency,
            "sigma": args.sigma, "seed": args.seed, "held_out_frac": HELD_OUT_FRAC["calls"], "self_verify": True,
            "async_ratio": 1, "max_seconds": 600.0, "max_concurrency": cap, "eval_concurrency": eval_cap}


def ours_calls_run(request: dict[str, Any]) -> dict[str, Any]:
    """One run of the calls workload on this repository's library (the same request 0.7.0 answers)."""
    work = CountingWorkload(request["latency"], request["sigma"], request["seed"])
    tasks = [Task(s["id"], s["prompt"], s["meta"]) for s in task_specs()]
    n, total = request["workers"], request["rollouts"]
    kwargs: dict[str, Any] = dict(run=work.run, propose=work.propose, n_workers=n, seed=request["seed"],
                                  held_out_frac=request["held_out_frac"], self_verify=request["self_verify"],
                                  shuffle=False)  # 0.7.0's positional split: the same held-out tasks
    started = time.perf_counter()
    if request["mode"] == "async":
        result = async_evolve(tasks, work.reward, async_ratio=request["async_ratio"], max_rollouts=total,
                              max_seconds=request["max_seconds"], **kwargs)
    else:
        result = evolve(tasks, work.reward, max_concurrency=request["max_concurrency"], rounds=-(-total // n),
                        max_rollouts=total, **kwargs)
    wall = time.perf_counter() - started
    return {"calls": work.total, "calls_by_kind": dict(work.calls), "wall": wall, "rollouts": result.rollouts,
            "stop_reason": result.stop_reason, "error": result.error}


def run_calls(workers: Sequence[int], args: argparse.Namespace, baseline: Baseline | None) -> dict[str, Any]:
    """Every repeat of the calls workload: for each N, sync then async, both sides back to back."""
    runs: list[dict[str, Any]] = []
    sides = ("ours", "0.7.0") if baseline is not None else ("ours",)
    for rep in range(args.calls_repeats):
        for n in workers:
            for mode in ("sync", "async"):
                order = sides if rep % 2 == 0 else tuple(reversed(sides))
                for side in order:
                    request = calls_request(mode, n, args, baseline=side == "0.7.0")
                    r = ours_calls_run(request) if side == "ours" else baseline.run(request)  # type: ignore[union-attr]
                    r.update(side=side, mode=mode, workers=n, repeat=rep, request=request,
                             rate=r["calls"] / r["wall"], rollout_rate=r["rollouts"] / r["wall"])
                    runs.append(r)
                    print(f"  [calls {rep + 1}/{args.calls_repeats}] {side:>5} {mode:>5} N={n}: "
                          f"{r['rate']:.1f} calls/s, {r['rollout_rate']:.1f} rollouts/s ({r['calls']} calls, "
                          f"{r['wall']:.1f} s)", file=sys.stderr, flush=True)
    rows = []
    for mode in ("sync", "async"):
        for n in workers:
            row: dict[str, Any] = {"mode": mode, "workers": n}
            for side in sides:
                mine = [r for r in runs if r["side"] == side and r["mode"] == mode and r["workers"] == n]
                row[side] = {"rate": spread([r["rate"] for r in mine]),
                             "rollout_rate": spread([r["rollout_rate"] for r in mine]),
                             "calls_per_rollout": statistics.median(r["calls"] / max(1, r["rollouts"]) for r in mine),
                             "errors": [r["error"] for r in mine if r["error"]],
                             "request": mine[0]["request"]}
            if baseline is not None:
                pairs = [(o, b) for o in runs for b in runs
                         if o["side"] == "ours" and b["side"] == "0.7.0" and o["mode"] == b["mode"] == mode
                         and o["workers"] == b["workers"] == n and o["repeat"] == b["repeat"]]
                row["ratio"] = spread([o["rate"] / b["rate"] for o, b in pairs])
                row["rollout_ratio"] = spread([o["rollout_rate"] / b["rollout_rate"] for o, b in pairs])
                row["target_met"] = row["ratio"]["median"] >= TARGET_CALLS_RATIO if n == 1 else None
            rows.append(row)
    return {"rows": rows, "runs": runs, "repeats": args.calls_repeats, "held_out_frac": HELD_OUT_FRAC["calls"],
            "baseline": baseline.identity if baseline is not None else None}


def _spread(s: dict[str, float], fmt: str = ".1f") -> str:
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}–{s['max']:{fmt}})"


def calls_table(result: dict[str, Any]) -> str:
    """The markdown table of the calls workload: ours against 0.7.0, medians (min–max) over repeats."""
    versus = result["baseline"] is not None
    head = ["mode", "N", "ours calls/s"]
    if versus:
        head += ["0.7.0 calls/s", "ratio", "ours rollouts/s", "0.7.0 rollouts/s", "ratio",
                 "calls per rollout (ours / 0.7.0)", f"N=1: ≥{TARGET_CALLS_RATIO}x calls/s"]
    else:
        head += ["ours rollouts/s", "calls per rollout"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for row in result["rows"]:
        ours = row["ours"]
        cells = [row["mode"], str(row["workers"]), _spread(ours["rate"])]
        if versus:
            base = row["0.7.0"]
            met = row["target_met"]
            cells += [_spread(base["rate"]), "x" + _spread(row["ratio"], ".2f"), _spread(ours["rollout_rate"]),
                      _spread(base["rollout_rate"]), "x" + _spread(row["rollout_ratio"], ".2f"),
                      f"{ours['calls_per_rollout']:.2f} / {base['calls_per_rollout']:.2f}",
                      "–" if met is None else ("met" if met else "NOT met")]
        else:
            cells += [_spread(ours["rollout_rate"]), f"{ours['calls_per_rollout']:.2f}"]
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
                        help="comma-separated steady, learn, calls (default steady; learn adds about 70 s; "
                        "calls is the comparison with 0.7.0, added by --baseline-python)")
    parser.add_argument("--seed", type=int, default=0, help="domain and run seed (default 0)")
    parser.add_argument("--json", default="bench/results/scaling.json",
                        help="where to write the JSON (default bench/results/scaling.json)")
    parser.add_argument("--baseline-python", default=None,
                        help="the Python of a virtual environment with agentdescent==0.7.0: adds the calls "
                        "workload, run on both (default: none, the comparison is skipped)")
    parser.add_argument("--calls-rollouts", type=int, default=264,
                        help="calls workload: worker rollouts per run (default 264, one pass of the train tasks)")
    parser.add_argument("--calls-latency", type=float, default=0.02,
                        help="calls workload: median latency of every model call in seconds (default 0.02)")
    parser.add_argument("--calls-repeats", type=int, default=3, help="calls workload: repeats (default 3)")
    parser.add_argument("--sync-cap", choices=("max8", "n"), default="max8",
                        help="calls workload, sync: max8 (ours max_concurrency=max(N, 8), 0.7.0 its default "
                        "eval_concurrency=8) or n (both held to N) (default max8)")
    args = parser.parse_args(argv)
    try:
        workers = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        parser.error(f"--workers={args.workers!r}: use comma-separated integers such as 1,2,4")
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if args.baseline_python and "calls" not in workloads:
        workloads.append("calls")
    if not workers or min(workers) < 1:
        parser.error("--workers: give worker counts >= 1")
    if not workloads or set(workloads) - set(HELD_OUT_FRAC):
        parser.error(f"--workloads={args.workloads!r}: use steady, learn, calls or a comma-separated mix")
    if min(args.repeats, args.learn_repeats, args.epochs, args.calls_repeats, args.calls_rollouts) < 1:
        parser.error("--repeats, --learn-repeats, --epochs, --calls-repeats and --calls-rollouts must be at least 1")
    if args.latency <= 0 or args.calls_latency <= 0 or args.sigma < 0:
        parser.error("--latency and --calls-latency must be > 0 and --sigma >= 0")

    started = time.perf_counter()
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(),
               "python": platform.python_version()}
    out: dict[str, Any] = {"config": {k: v for k, v in vars(args).items() if k != "json"},
                           "machine": machine, "workloads": {}}
    out["config"]["workers"] = workers
    latency = f"latency median {args.latency}s" if set(workloads) - {"calls"} else "latency: see the calls table"
    print(f"router domain, {latency} sigma {args.sigma}, {machine['cpus']} CPUs, Python {machine['python']}")
    for workload in workloads:
        if workload == "calls":
            baseline = Baseline(args.baseline_python) if args.baseline_python else None
            try:
                result = run_calls(workers, args, baseline)
            finally:
                if baseline is not None:
                    baseline.close()
            out["workloads"]["calls"] = result
            cap = ("ours max_concurrency = max(N, 8), 0.7.0 max_concurrency = N with its eval_concurrency 8"
                   if args.sync_cap == "max8" else "both held to N (ours max_concurrency, 0.7.0 eval_concurrency)")
            print(f"\n### calls: {args.calls_rollouts} worker rollouts per run, every model call "
                  f"{args.calls_latency}s median log-normal (sigma {args.sigma}), held-out "
                  f"{result['held_out_frac']:.1%} of the tasks, self-verify on; sync cap: {cap}; "
                  f"median (min–max) over {args.calls_repeats} repeat(s), ratio = ours / 0.7.0 per repeat\n")
            print(calls_table(result))
            if baseline is None:
                print("\nThe comparison with agentdescent 0.7.0 was skipped: no --baseline-python (make one "
                      "with: python3 -m venv ../venv070 && ../venv070/bin/pip install agentdescent==0.7.0).")
            continue
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
    if "calls" not in workloads:
        print("\nThe calls-per-second comparison with agentdescent 0.7.0 was skipped (give "
              "--baseline-python ../venv070/bin/python to run it).")
    out["seconds"] = time.perf_counter() - started
    print(f"\n({out['seconds']:.0f} s)")
    write_json(Path(args.json), out)
    print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
