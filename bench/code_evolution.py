"""Evolving code offline: calls until every held-out test passes, patches committed that are wrong or regress, sandbox time.

Runs examples/code_evolution.py's project (textstats.py with five bugs, twenty tests, two
of every function's held out) with its scripted proposer (right half the time, else wrong
or regressing; one patch loops forever, one writes outside its folder, one does not
apply) for each seed, in two arms on the same seeds:

- **veto** (the default `TestSuite.evolve_kwargs`): a patch that breaks any test the head
  passes, held out or not, is refused before its commit (`AggregatorConfig.commit_veto`);
- **held-out only**: the same, without the veto: only the paired test on the held-out
  tests guards the commits.

Per run: calls until all held-out tests pass (proposer calls plus suite runs in the
sandbox, up to the round that reached it; "-" if the run never did), commits, commits
that were wrong (no test newly passing, over all twenty) or regressing (a test the
previous version passed now fails), sandbox seconds per suite run, and the veto's rechecks
(`TestSuite(recheck=...)`: a candidate's newly passing test files run again alone; only the
veto arm has them). Prints one table
per arm and the ratio of the arms' calls, and writes JSON.

    python bench/code_evolution.py --seeds 0,1,2,3,4,5,6,7 --json bench/results/code_evolution.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentdescent import AggregatorConfig, Split, evolve  # noqa: E402
from agentdescent.code import Sandbox, TestSuite  # noqa: E402
from agentdescent.ledger import MemoryLedger  # noqa: E402
from examples.code_evolution import PROJECT, ScriptedProposer  # noqa: E402

ARMS = ("veto", "held-out only")


def one_run(seed: int, arm: str, rounds: int, workers: int, timeout: float) -> dict[str, Any]:
    suite = TestSuite(PROJECT, sandbox=Sandbox(timeout=timeout, grace=1.0, memory_mb=1024), plugins=())
    split = Split(stratify="group")
    _, held_out = split.split(suite.tasks(), seed)
    proposer = ScriptedProposer(seed)
    kwargs = suite.evolve_kwargs(propose=proposer)
    if arm == "held-out only":
        kwargs["agg_config"] = AggregatorConfig(rescore="deterministic", trust_region_chars=400_000)
    reached: dict[str, int] = {}

    def on_round(info: Any) -> None:
        if info.held_out_reward >= 1.0 and "calls" not in reached:
            stats = suite.stats()
            reached["calls"] = sum(proposer.proposed.values()) + int(stats["suite_runs"])
            reached["round"] = info.index

    ledger = MemoryLedger()
    started = time.monotonic()
    result = evolve(**kwargs, split=split, rounds=rounds, n_workers=workers, seed=seed, ledger=ledger,
                    target_reward=1.0, on_round=on_round)
    wall = time.monotonic() - started
    versions = ledger.history("artifact")
    outcomes = [suite.evaluate(v.state) for v in versions]
    wrong = regressing = 0
    for before, after in zip(outcomes, outcomes[1:]):
        gained = [n for n, o in after.items() if o.passed and not before[n].passed]
        lost = [n for n, o in after.items() if not o.passed and before[n].passed]
        wrong += not gained
        regressing += bool(lost)
    final = outcomes[-1]
    stats = suite.stats()
    suite.close()
    return {
        "seed": seed, "arm": arm, "rounds": len(result.history), "calls_to_all_held_out": reached.get("calls"),
        "round_reached": reached.get("round"), "commits": len(versions) - 1, "wrong_commits": wrong,
        "regressing_commits": regressing,
        "held_out_passing": sum(final[t.id].passed for t in held_out), "held_out": len(held_out),
        "all_passing": sum(o.passed for o in final.values()), "tests": len(final),
        "suite_runs": stats["suite_runs"], "timeouts": stats["timeouts"],
        "sandbox_seconds_per_run": round(stats["sandbox_seconds"] / max(1, stats["suite_runs"]), 3),
        "rechecks": stats["rechecks"], "recheck_seconds": stats["recheck_seconds"],
        "recheck_refusals": stats["recheck_refusals"], "untrusted": stats["untrusted"],
        "edits_refused": result.counters.get("edits_refused", 0), "proposals": dict(proposer.proposed),
        "wall_seconds": round(wall, 1),
    }


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:g}"
    return f"{statistics.median(values):g} (range {min(values):g}-{max(values):g})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds one suite run may take")
    parser.add_argument("--json", type=Path, help="write every run here")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    runs = [one_run(seed, arm, args.rounds, args.workers, args.timeout) for arm in ARMS for seed in seeds]
    for arm in ARMS:
        print(f"\n### {arm}\n")
        print("| seed | rounds | calls until all held-out pass | commits | wrong commits | regressing commits | "
              "held-out passing | all passing | suite runs (timeouts) | sandbox s per run | edits refused |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in (r for r in runs if r["arm"] == arm):
            calls = r["calls_to_all_held_out"] if r["calls_to_all_held_out"] is not None else "-"
            print(f"| {r['seed']} | {r['rounds']} | {calls} | {r['commits']} | {r['wrong_commits']} | "
                  f"{r['regressing_commits']} | {r['held_out_passing']}/{r['held_out']} | {r['all_passing']}/{r['tests']} | "
                  f"{r['suite_runs']} ({r['timeouts']}) | {r['sandbox_seconds_per_run']:.2f} | {r['edits_refused']} |")
    print("\n| | veto | held-out only |\n|---|---|---|")
    by = {arm: [r for r in runs if r["arm"] == arm] for arm in ARMS}
    rows = [
        ("runs reaching every held-out test", lambda rs: f"{sum(r['calls_to_all_held_out'] is not None for r in rs)}/{len(rs)}"),
        ("calls until all held-out pass, median", lambda rs: _spread([r["calls_to_all_held_out"] for r in rs
                                                                        if r["calls_to_all_held_out"] is not None])),
        ("wrong or regressing commits, total", lambda rs: str(sum(r["wrong_commits"] + r["regressing_commits"] for r in rs))),
        ("regressing commits, total", lambda rs: str(sum(r["regressing_commits"] for r in rs))),
        ("sandbox seconds per suite run, median", lambda rs: _spread([r["sandbox_seconds_per_run"] for r in rs])),
        ("rechecks before a commit (one test file alone), total (seconds)",
         lambda rs: f"{sum(r['rechecks'] for r in rs)} ({sum(r['recheck_seconds'] for r in rs):.1f})"),
        ("suite runs whose results were not trustworthy, total", lambda rs: str(sum(r["untrusted"] for r in rs))),
    ]
    for name, fn in rows:
        print(f"| {name} | {fn(by['veto'])} | {fn(by['held-out only'])} |")
    paired = [(a["calls_to_all_held_out"], b["calls_to_all_held_out"]) for a, b in zip(by["veto"], by["held-out only"])
              if a["calls_to_all_held_out"] and b["calls_to_all_held_out"]]
    if paired:
        ratios = [a / b for a, b in paired]
        print(f"\ncalls until all held-out pass, veto / held-out only, per seed: {_spread([round(x, 2) for x in ratios])}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "runs": runs}, indent=2))
        print(f"wrote {args.json}")
    bad = sum(r["wrong_commits"] + r["regressing_commits"] for r in by["veto"])
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
