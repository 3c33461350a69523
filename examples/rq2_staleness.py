"""RQ2 on the sync path: how stale snapshots and the staleness tolerance alpha trade off.

Run from the repository root (``-m``), or as a file from any directory
(``python path/to/examples/rq2_staleness.py``)::

    python -m examples.rq2_staleness              # seed 0, target 0.95
    python -m examples.rq2_staleness --seed 1 --target 1.0
    python -m examples.rq2_staleness --pool-draw 0    # without drawing on the evidence pool
    python -m examples.rq2_staleness --compare-pool   # every run with and without the pool
    python -m examples.rq2_staleness --policy reflective  # one staleness policy's runs only

Eight workers evolve the router skill (the offline reference domain) in synchronous
rounds. With ``refresh_interval=N`` a worker re-reads the head only every N rounds
(staggered by worker id), so its diffs can be up to N-1+ versions stale when they
reach the merge. The first table sweeps alpha (``AggregatorConfig(alpha_tail=...)``;
the skill has blast radius 0.2, so ``classify()`` makes it L2 and alpha is
``alpha_tail``) under the default **guarded** policy: a card within alpha versions is
rebased and re-verified on the current head, a card beyond alpha is discarded. The
second table runs the three policies at the default alpha (``alpha_tail=1``).
``--policy {full,guarded,reflective}`` keeps only that policy's runs: ``guarded`` prints
the alpha sweep alone, ``full`` and ``reflective`` (which ignore alpha) their rows of the
second table alone; with ``--compare-pool`` it keeps that policy's configurations.

Every run draws on the evidence pool as ``--pool-draw N`` says
(``AggregatorConfig(pool_draw=N)``, the library default unless given; 0 turns it off).
``--compare-pool`` runs every configuration of both tables twice, with ``--pool-draw``
and with 0, and prints the two sides next to each other.

Runs use ``max_concurrency=1``, so they repeat bit for bit. Columns: final held-out
reward; rollouts; rollouts to reach the target (cumulative rollouts up to the first
round whose held-out reward is >= target, ``-`` if never); stale discarded (cards the
staleness filter dropped: beyond alpha, or rebased but no longer helping); of which
rebase-rejected; wasted rollouts (rollouts whose card was discarded, the async
engine's definition, here computed from the history, less the discarded cards that a
later step drew from the pool and committed after all); commits; forced refreshes
(always 0 here: the stall guard belongs to the async runtime); evaluation rollouts
(held-out, cheap and rebase re-verification rollouts, what the merges cost); pooled
cards drawn and, of those, committed; wall-clock.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a file (python examples/rq2_staleness.py, from any directory): put the repository
    # root first on the path, so `agentdescent` and `examples` import without an install.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent import AggregatorConfig, EvolutionResult, evolve
from agentdescent.domains.router import RouterDomain

POLICIES = ("full", "guarded", "reflective")

COLUMNS = ["final reward", "rollouts", "to target", "stale discarded", "rebase-rejected",
           "wasted rollouts", "commits", "forced refreshes", "eval rollouts", "pool drawn",
           "pool committed", "wall s"]


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
        "wasted": c.get("wasted_rollouts", stale) - c.get("merge_pool_recovered", 0),
        "commits": result.committed,
        "forced": result.forced_refreshes,
        "eval_rollouts": c.get("eval_rollouts", 0),
        "pool_drawn": c.get("merge_pool_drawn", 0),
        "pool_committed": c.get("merge_pool_committed", 0),
        "pool_recovered": c.get("merge_pool_recovered", 0),
        "pool_returned": c.get("merge_pool_returned", 0),
        "pool_dropped": c.get("merge_pool_dropped", 0),
        "wall": wall,
        "eta": c.get("eta_histogram", {}),
        "stop_reason": result.stop_reason,
        "error": result.error,
    }


def cells(m: dict[str, Any]) -> list[Any]:
    """A measurement as table cells, in :data:`COLUMNS` order."""
    return [f"{m['final']:.3f}", m["rollouts"], _target(m), m["stale"], m["rebase_rejected"],
            m["wasted"], m["commits"], m["forced"], m["eval_rollouts"], m["pool_drawn"],
            m["pool_committed"], f"{m['wall']:.2f}"]


def _target(m: dict[str, Any]) -> Any:
    return "-" if m["to_target"] is None else m["to_target"]


def run_sync(args: argparse.Namespace, refresh_interval: int, policy: str,
             alpha_tail: int, pool_draw: int | None = None) -> dict[str, Any]:
    """One deterministic sync run on a fresh domain (``pool_draw`` defaults to ``--pool-draw``)."""
    domain = RouterDomain(seed=args.seed, latency=args.latency)
    config = AggregatorConfig(alpha_tail=alpha_tail,
                              pool_draw=args.pool_draw if pool_draw is None else pool_draw)
    started = time.perf_counter()
    result = evolve(
        **domain.evolve_kwargs(), artifact_id="router", n_workers=args.workers,
        rounds=args.rounds, refresh_interval=refresh_interval, staleness_policy=policy,
        agg_config=config, seed=args.seed,
    )
    return measure(result, args.target, time.perf_counter() - started)


def compare_pool(args: argparse.Namespace, configurations: Sequence[tuple[int, str, int]]) -> list[str]:
    """Run every configuration with ``--pool-draw`` and with 0; print both sides. Returns the errors."""
    header = ["refresh_interval", "policy", "alpha", "to target (pool / none)",
              "wasted rollouts (pool / none)", "final reward (pool / none)",
              "eval rollouts (pool / none)", "pool drawn", "pool committed"]
    rows, failed = [], []
    sooner = later = same_target = fewer_wasted = more_wasted = recovered = 0
    evals = {"pool": 0, "none": 0}
    pool = dict.fromkeys(("drawn", "committed", "recovered", "returned", "dropped"), 0)
    for ri, policy, alpha in configurations:
        with_pool = run_sync(args, ri, policy, alpha)
        without = run_sync(args, ri, policy, alpha, pool_draw=0)
        failed += [m["error"] for m in (with_pool, without) if m["error"]]
        never = args.rounds * args.workers + 1
        a, b = (m["to_target"] if m["to_target"] is not None else never for m in (with_pool, without))
        sooner, later, same_target = sooner + (a < b), later + (a > b), same_target + (a == b)
        recovered += with_pool["pool_committed"] > 0
        fewer_wasted += with_pool["wasted"] < without["wasted"]
        more_wasted += with_pool["wasted"] > without["wasted"]
        evals["pool"] += with_pool["eval_rollouts"]
        evals["none"] += without["eval_rollouts"]
        for key in pool:
            pool[key] += with_pool[f"pool_{key}"]
        rows.append([ri, policy, alpha,
                     f"{_target(with_pool)} / {_target(without)}",
                     f"{with_pool['wasted']} / {without['wasted']}",
                     f"{with_pool['final']:.3f} / {without['final']:.3f}",
                     f"{with_pool['eval_rollouts']} / {without['eval_rollouts']}",
                     with_pool["pool_drawn"], with_pool["pool_committed"]])
    print(markdown_table(header, rows, text_columns=2))
    extra = evals["pool"] / evals["none"] - 1 if evals["none"] else 0.0
    print(f"\n{len(rows)} configurations: a pooled card committed in {recovered}; the pool reached "
          f"the target sooner in {sooner}, later in {later}, at the same rollout in {same_target}; "
          f"fewer wasted rollouts in {fewer_wasted}, more in {more_wasted}; evaluation rollouts "
          f"{evals['pool']} against {evals['none']} ({extra:+.1%}). Pooled cards drawn "
          f"{pool['drawn']}: committed {pool['committed']} (of which first discarded as stale: "
          f"{pool['recovered']}), back in the pool {pool['returned']}, measured and rejected "
          f"{pool['dropped']}.")
    return failed


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
    default_draw = AggregatorConfig().pool_draw
    parser.add_argument("--pool-draw", type=int, default=default_draw,
                        help="pooled cards re-tried per merge, AggregatorConfig(pool_draw=...) "
                        f"(default {default_draw}, the library default; 0 turns the pool off)")
    parser.add_argument("--compare-pool", action="store_true",
                        help="run every configuration with --pool-draw and with 0, side by side")
    parser.add_argument("--policy", choices=POLICIES, default=None,
                        help="run only this staleness policy: guarded with alpha swept, or full or "
                        "reflective at alpha 1 (default: all three)")
    args = parser.parse_args(argv)
    intervals = _ints(args.intervals, "--intervals", parser, 1)
    alphas = _ints(args.alphas, "--alphas", parser, 0)
    if not 0.0 <= args.target <= 1.0:
        parser.error("--target must be in [0, 1]")
    if args.workers < 1 or args.rounds < 1 or args.latency < 0:
        parser.error("--workers and --rounds must be >= 1, --latency >= 0")
    if args.pool_draw < 0:
        parser.error(f"--pool-draw={args.pool_draw}: give an integer >= 0 (0 turns the pool off)")
    if args.compare_pool and args.pool_draw == 0:
        parser.error("--compare-pool compares --pool-draw N with 0: give N >= 1")

    policies = POLICIES if args.policy is None else (args.policy,)
    print(f"router domain, seed {args.seed}, {args.workers} workers x {args.rounds} rounds, "
          f"target {args.target}, pool_draw {args.pool_draw}, max_concurrency=1 (deterministic)"
          + ("" if args.policy is None else f", policy {args.policy} only") + "\n")
    if args.compare_pool:
        configurations = [(ri, "guarded", alpha) for ri in intervals for alpha in alphas if "guarded" in policies]
        configurations += [(ri, policy, 1) for ri in intervals for policy in ("full", "reflective")
                           if policy in policies]
        what = ("guarded with alpha swept, then full and reflective at alpha 1" if args.policy is None
                else "alpha swept" if args.policy == "guarded" else "at alpha 1")
        print(f"With the evidence pool (pool_draw={args.pool_draw}) / without (pool_draw=0); {what}:\n")
        failed = compare_pool(args, configurations)
        if failed:
            print(f"errors: {failed}")
            return 1
        return 0
    failed: list[str] = []
    if "guarded" in policies:
        print("Guarded policy, alpha swept (alpha_tail; the skill is L2):\n")
        rows = []
        for ri in intervals:
            for alpha in alphas:
                m = run_sync(args, ri, "guarded", alpha)
                rows.append([ri, alpha, *cells(m)])
                if m["error"]:
                    failed.append(m["error"])
        print(markdown_table(["refresh_interval", "alpha", *COLUMNS], rows))

    if args.policy != "guarded":  # guarded alone: its alpha 1 rows are in the sweep above
        print("\nThe three policies at the default alpha (alpha_tail=1):\n" if args.policy is None
              else f"The {args.policy} policy at the default alpha (alpha_tail=1; {args.policy} ignores alpha):\n")
        rows = []
        for ri in intervals:
            for policy in policies:
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
