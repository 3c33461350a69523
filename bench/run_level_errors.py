"""Run-level false accepts through the engines: how many long junk runs ever commit.

The per-run row of the acceptance audit (``bench/acceptance_audit.py``) drives the
`Aggregator` directly; this one runs whole `evolve` / `async_evolve` runs on the router
workload of ``bench/sample_efficiency.py`` with its junk arms: a proposer whose every rule
names a word no prompt contains (so every commit is a false accept) and a reward that flips
each score with probability 0.1 or 0.2, the self-verify gate off. For each engine, flip
rate and ``error_control`` it runs ``--runs`` seeds of ``--rounds`` rounds (async: the same
rollouts) and counts the runs that end with at least one commit, with a Clopper–Pearson
95 % interval, against the stated per-run rate (``false_accept_rate``, 0.05).

Run from the repository root::

    python bench/run_level_errors.py --json bench/results/run_level_errors.json   # 100 runs x 200 rounds
    python bench/run_level_errors.py --runs 10 --rounds 50                        # a quick look
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sample_efficiency
from acceptance_audit import clopper_pearson

ARMS = ("junk-0.1", "junk-0.2", "async-junk-0.1", "async-junk-0.2")
CONTROLS = ("per_decision", "per_run")
RATE = 0.05


def run(arms: list[str], controls: list[str], runs: int, rounds: int, quiet: bool) -> list[dict]:
    """One row per (arm, control): runs, runs with a commit, commits, decisions, the interval."""
    spec = sample_efficiency.WORKLOADS["router-0.25"]
    out = []
    for arm in arms:
        for control in controls:
            started = time.perf_counter()
            with_commit = commits = decisions = 0
            for seed in range(runs):
                row = sample_efficiency.run_one(spec, seed, arm, rounds, {"error_control": control})
                with_commit += row.commits > 0
                commits += row.commits
                decisions += len(row.candidates)
                if not quiet and (seed + 1) % 10 == 0:
                    print(f"{arm} {control}: {seed + 1}/{runs} runs, {with_commit} with a junk commit",
                          file=sys.stderr)
            low, high = clopper_pearson(with_commit, runs)
            out.append({"arm": arm, "engine": "async" if arm.startswith("async") else "sync",
                        "flip": float(arm.rsplit("-", 1)[1]), "error_control": control, "runs": runs,
                        "rounds": rounds, "runs_with_commit": with_commit, "rate": with_commit / runs,
                        "interval": [low, high], "commits": commits, "decisions": decisions,
                        "verdict": "PASS" if high <= RATE + 0.02 else "FAIL",
                        "seconds": time.perf_counter() - started})
    return out


def render(rows: list[dict]) -> str:
    """The table, one row per engine, flip rate and control."""
    lines = ["| engine | flip | error_control | runs with a junk commit | rate [95 % CI] | junk commits / decisions | "
             "per-run verdict (<= 0.05 + 0.02) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        low, high = r["interval"]
        lines.append(f"| {r['engine']} | {r['flip']} | {r['error_control']} | {r['runs_with_commit']} / {r['runs']} | "
                     f"{r['rate']:.2f} [{low:.3f}–{high:.3f}] | {r['commits']} / {r['decisions']} | {r['verdict']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The CLI; returns 0 (2 on a usage error)."""
    parser = argparse.ArgumentParser(description="Run-level junk commits through evolve / async_evolve.")
    parser.add_argument("--runs", type=int, default=100, help="seeds per row (default 100)")
    parser.add_argument("--rounds", type=int, default=200, help="rounds per run (default 200)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, from {', '.join(ARMS)}")
    parser.add_argument("--controls", default=",".join(CONTROLS), help="comma-separated error_control values")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    controls = [c for c in args.controls.split(",") if c]
    bad = [a for a in arms if a not in ARMS] + [c for c in controls if c not in CONTROLS]
    if bad or args.runs < 1 or args.rounds < 1:
        print(f"run_level_errors.py: unknown {bad} or a count below 1; arms {ARMS}, controls {CONTROLS}",
              file=sys.stderr)
        return 2
    started = time.perf_counter()
    rows = run(arms, controls, args.runs, args.rounds, args.quiet)
    print(render(rows))
    print(f"\n({len(rows)} rows in {time.perf_counter() - started:.0f}s)")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"arguments": vars(args) | {"json": str(args.json)}, "rows": rows},
                                        indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
