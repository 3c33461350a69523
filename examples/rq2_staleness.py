"""RQ2 on the sync path: how stale snapshots and the staleness tolerance alpha trade off.

Run from the repository root::

    python -m examples.rq2_staleness              # seed 0, target 0.95
    python -m examples.rq2_staleness --seed 1 --target 1.0

Eight workers evolve the router skill (the offline reference domain) in synchronous
rounds. With ``refresh_interval=N`` a worker re-reads the head only every N rounds
(staggered by worker id), so its diffs can be up to N-1+ versions stale when they
reach the merge. The first table sweeps alpha (``AggregatorConfig(alpha_tail=...)``;
the skill has blast radius 0.2, so ``classify()`` makes it L2 and alpha is
``alpha_tail``) under the default **guarded** policy: a card within alpha versions is
rebased and re-verified on the current head, a card beyond alpha is discarded. The
second table runs the three policies at the default alpha (``alpha_tail=1``).

Runs use ``max_concurrency=1``, so they repeat bit for bit. Columns: final held-out
reward; rollouts; rollouts to reach the target (cumulative rollouts up to the first
round whose held-out reward is >= target, ``-`` if never); stale discarded (cards the
staleness filter dropped: beyond alpha, or rebased but no longer helping); of which
rebase-rejected; wasted rollouts (rollouts whose card was discarded, the async
engine's definition, here computed from the history); commits; forced refreshes
(always 0 here: the stall guard belongs to the async runtime); wall-clock.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from agentdescent import AggregatorConfig, EvolutionResult, evolve
from agentdescent.domains.router import RouterDomain

COLUMNS = ["final reward", "rollouts", "to target", "stale discarded", "rebase-rejected",
           "wasted rollouts", "commits", "forced refreshes", "wall s"]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], text_columns: int = 1) -> str:
    """A markdown table: the first ``text_columns`` columns left-aligned, the rest right-aligned."""
    align = ["---" if i < text_columns else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def rollouts_to_target(result: EvolutionResult, target: float) -> int | None:
    """Cumulative rollouts up to the first round (or sweep) whose held-out reward reaches ``target``."""
    spent = 0
    for info in result.history:
        spent += info.rollouts
        if info.held_out_reward >= target:
            return spent
    return None


def measure(result: EvolutionResult, target: float, wall: float) -> dict[str, Any]:
    """The numbers of one run (the table columns, plus the eta histogram)."""
    c = result.counters
    stale = sum(h.discarded_stale for h in result.history)
    return {
        "final": result.final_reward,
        "rollouts": result.rollouts,
        "to_target": rollouts_to_target(result, target),
        "stale": stale,
        "rebase_rejected": c.get("merge_rebase_rejected", 0),
        "wasted": c.get("wasted_rollouts", stale),
        "commits": result.committed,
        "forced": result.forced_refreshes,
        "wall": wall,
        "eta": c.get("eta_histogram", {}),
        "stop_reason": result.stop_reason,
        "error": result.error,
    }


def cells(m: dict[str, Any]) -> list[Any]:
    """A measurement as table cells, in :data:`COLUMNS` order."""
    return [f"{m['final']:.3f}", m["rollouts"], "-" if m["to_target"] is None else m["to_target"],
            m["stale"], m["rebase_rejected"], m["wasted"], m["commits"], m["forced"],
            f"{m['wall']:.2f}"]


def run_sync(args: argparse.Namespace, refresh_interval: int, policy: str,
             alpha_tail: int) -> dict[str, Any]:
    """One deterministic sync run on a fresh domain."""
    domain = RouterDomain(seed=args.seed, latency=args.latency)
    started = time.perf_counter()
    result = evolve(
        **domain.evolve_kwargs(), artifact_id="router", n_workers=args.workers,
        rounds=args.rounds, refresh_interval=refresh_interval, staleness_policy=policy,
        agg_config=AggregatorConfig(alpha_tail=alpha_tail), seed=args.seed,
    )
    return measure(result, args.target, time.perf_counter() - started)


def _ints(text: str, name: str, parser: argparse.ArgumentParser, low: int) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        parser.error(f"{name}={text!r}: use comma-separated integers")
    if not values or min(values) < low:
        parser.error(f"{name}={text!r}: give integers >= {low}")
    return values


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of the domain and the runs (default 0)")
    parser.add_argument("--target", type=float, default=0.95,
                        help="held-out reward that counts as reaching the target (default 0.95)")
    parser.add_argument("--workers", type=int, default=8, help="workers per round (default 8)")
    parser.add_argument("--rounds", type=int, default=20, help="sync rounds per run (default 20)")
    parser.add_argument("--intervals", default="1,2,4,8", help="refresh intervals (default 1,2,4,8)")
    parser.add_argument("--alphas", default="0,1,2,4,8", help="alpha_tail values (default 0,1,2,4,8)")
    parser.add_argument("--latency", type=float, default=0.0,
                        help="median simulated rollout latency in seconds (default 0: CPU only)")
    args = parser.parse_args(argv)
    intervals = _ints(args.intervals, "--intervals", parser, 1)
    alphas = _ints(args.alphas, "--alphas", parser, 0)
    if not 0.0 <= args.target <= 1.0:
        parser.error("--target must be in [0, 1]")
    if args.workers < 1 or args.rounds < 1 or args.latency < 0:
        parser.error("--workers and --rounds must be >= 1, --latency >= 0")

    print(f"router domain, seed {args.seed}, {args.workers} workers x {args.rounds} rounds, "
          f"target {args.target}, max_concurrency=1 (deterministic)\n")
    print("Guarded policy, alpha swept (alpha_tail; the skill is L2):\n")
    rows, failed = [], []
    for ri in intervals:
        for alpha in alphas:
            m = run_sync(args, ri, "guarded", alpha)
            rows.append([ri, alpha, *cells(m)])
            if m["error"]:
                failed.append(m["error"])
    print(markdown_table(["refresh_interval", "alpha", *COLUMNS], rows))

    print("\nThe three policies at the default alpha (alpha_tail=1):\n")
    rows = []
    for ri in intervals:
        for policy in ("full", "guarded", "reflective"):
            m = run_sync(args, ri, policy, 1)
            rows.append([ri, policy, *cells(m)])
            if m["error"]:
                failed.append(m["error"])
    print(markdown_table(["refresh_interval", "policy", *COLUMNS], rows))
    print("\nWasted rollouts count one rollout per discarded card; with self-verify on (the "
          "default) each such card also cost one self-verify re-run, not counted here.")
    if failed:
        print(f"errors: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
