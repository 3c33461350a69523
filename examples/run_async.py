"""The barrier-free runtime on the reference domain: policies, async_ratio, admission pacing.

Run from the repository root (``-m``), or as a file from any directory
(``python path/to/examples/run_async.py``)::

    python -m examples.run_async                      # seed 0, latency 5 ms, 400 rollouts per run
    python -m examples.run_async --seed 1
    python -m examples.run_async --stop-at-target     # forced refreshes before convergence only

Eight workers evolve the router skill with :func:`agentdescent.engine.entry`: no round
barrier, one merger that owns every write. Every run has the same rollout budget
(``max_iters``, ``--budget``; ``--max-seconds`` is only a safety stop), so final rewards
compare at equal spend. Three tables:

1. full / guarded / reflective at ``async_ratio=4`` (a worker resyncs once the head is
   more than 4 versions past its snapshot). The skill is L2, so alpha = ``alpha_tail``
   = 1: guarded discards anything more than 1 version stale, reflective rebases it.
2. guarded with ``async_ratio`` swept over 0, 1, 2, 4, 8.
3. guarded at ``async_ratio=4`` with admission pacing off and on.

Columns as ``examples/rq2_staleness.py``, with ``to target`` = cumulative
``RoundInfo.rollouts`` up to the first merger sweep whose held-out reward reaches the
target, and "max eta" = the largest staleness seen at merge time. Async runs depend on
thread timing, so numbers vary from run to run; the claims at the end are checked on
this run only.

With ``--stop-at-target`` every run stops at the target (``target_reward``), so the
counters cover the learning phase only. Without it, a run goes on after convergence; once
the head's held-out reward is 1.0 the stall guard neither counts sweeps nor forces a
resync (a worker behind a converged head resyncs as an ordinary resync), so ``forced
refreshes`` count the learning phase in fixed-budget runs too.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a file (python examples/run_async.py, from any directory): put the repository
    # root first on the path, so `agentdescent` and `examples` import without an install.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent import async_evolve
from agentdescent.domains.router import RouterDomain
from examples.rq2_staleness import COLUMNS, cells, markdown_table, measure

POLICIES = ("full", "guarded", "reflective")
RATIOS = (0, 1, 2, 4, 8)


def run_one(args: argparse.Namespace, policy: str, ratio: int, pacing: bool) -> dict[str, Any]:
    """One async run on a fresh domain."""
    domain = RouterDomain(seed=args.seed, latency=args.latency)
    started = time.perf_counter()
    result = async_evolve(
        **domain.evolve_kwargs(), artifact_id="router", n_workers=args.workers,
        async_ratio=ratio, pacing=pacing, staleness_policy=policy, seed=args.seed,
        max_iters=args.budget, max_seconds=args.max_seconds,
        target_reward=args.target if args.stop_at_target else None,
    )
    m = measure(result, args.target, time.perf_counter() - started)
    m["max_eta"] = max((int(k) for k in m["eta"]), default=0)
    m["counters"] = result.counters
    return m


def row(label: list[Any], m: dict[str, Any]) -> list[Any]:
    return [*label, *cells(m), m["max_eta"], m["stop_reason"]]


def main(argv: list[str] | None = None) -> int:
    """Run the three tables and check the claims; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the domain and the runs (default 0)")
    parser.add_argument("--latency", type=float, default=0.005,
                        help="median simulated rollout latency in seconds (default 0.005)")
    parser.add_argument("--max-seconds", type=float, default=20.0,
                        help="safety wall-clock limit per run (default 20)")
    parser.add_argument("--budget", type=int, default=400, help="rollouts per run, max_iters (default 400)")
    parser.add_argument("--workers", type=int, default=8, help="worker threads (default 8)")
    parser.add_argument("--target", type=float, default=0.95,
                        help="held-out reward that counts as reaching the target (default 0.95)")
    parser.add_argument("--stop-at-target", action="store_true",
                        help="stop each run at the target instead of spending the whole budget")
    args = parser.parse_args(argv)
    if args.latency < 0 or args.max_seconds <= 0 or args.budget < 1 or args.workers < 1:
        parser.error("--latency >= 0, --max-seconds > 0, --budget >= 1 and --workers >= 1")
    if not 0.0 <= args.target <= 1.0:
        parser.error("--target must be in [0, 1]")

    print(f"router domain, seed {args.seed}, {args.workers} workers, latency median "
          f"{args.latency}s, budget {args.budget} rollouts per run, target {args.target}"
          f"{', stop at target' if args.stop_at_target else ''}\n")
    header = [*COLUMNS, "max eta", "stop"]
    errors: list[str] = []

    by_policy = {p: run_one(args, p, 4, False) for p in POLICIES}
    print("1. Policies at async_ratio=4 (alpha = alpha_tail = 1):\n")
    print(markdown_table(["policy", *header], [row([p], m) for p, m in by_policy.items()]))

    by_ratio = {r: (by_policy["guarded"] if r == 4 else run_one(args, "guarded", r, False)) for r in RATIOS}
    print("\n2. Guarded, async_ratio swept (the async_ratio=4 row is the run of table 1):\n")
    print(markdown_table(["async_ratio", *header], [row([r], m) for r, m in by_ratio.items()]))

    paced = run_one(args, "guarded", 4, True)
    unpaced = by_policy["guarded"]
    print("\n3. Guarded at async_ratio=4, admission pacing off / on (off is the run of table 1):\n")
    print(markdown_table(["pacing", *header, "pacing waits"], [
        row(["off"], unpaced) + [unpaced["counters"].get("pacing_waits", 0)],
        row(["on"], paced) + [paced["counters"].get("pacing_waits", 0)],
    ]))

    for m in [*by_policy.values(), *by_ratio.values(), paced]:
        if m["error"]:
            errors.append(m["error"])

    g, r = by_policy["guarded"], by_policy["reflective"]
    fell = unpaced["wasted"] - paced["wasted"]
    share = f" ({fell / unpaced['wasted']:.0%})" if unpaced["wasted"] else ""
    claims = [
        ("all three policies reach the target",
         all(m["to_target"] is not None for m in by_policy.values()),
         ", ".join(f"{p}: {m['to_target'] if m['to_target'] is not None else '-'}" for p, m in by_policy.items())),
        ("guarded discards more than reflective", g["stale"] > r["stale"],
         f"{g['stale']} vs {r['stale']} stale discarded"),
        ("reflective spends no more rollouts than guarded to reach the target",
         r["to_target"] is not None and (g["to_target"] is None or r["to_target"] <= g["to_target"]),
         f"{r['to_target'] if r['to_target'] is not None else '-'} vs "
         f"{g['to_target'] if g['to_target'] is not None else '-'}"),
        ("reflective is not behind guarded on final reward",
         None if args.stop_at_target else r["final"] >= g["final"],
         f"{r['final']:.3f} vs {g['final']:.3f}"
         + (" (runs stop at the target: final rewards are not at equal spend)" if args.stop_at_target else "")),
        ("pacing cuts guarded's wasted rollouts", paced["wasted"] < unpaced["wasted"],
         f"{unpaced['wasted']} -> {paced['wasted']}: {fell} fewer{share}; wall-clock "
         f"{unpaced['wall']:.1f}s -> {paced['wall']:.1f}s"),
    ]
    print("\nClaims on this run:\n")
    print(markdown_table(["claim", "holds", "numbers"],
                         [[c, "n/a" if ok is None else ("yes" if ok else "NO"), detail]
                          for c, ok, detail in claims], 3))
    if errors:
        print(f"\nerrors: {errors}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
