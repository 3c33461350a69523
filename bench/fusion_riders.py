"""Do wrong diffs ride into the ledger inside unions? Evidence-gated fusion on and off.

On the router reference domain (noise 0.25: a quarter of proposals name a wrong label),
runs ``evolve()`` with ``AggregatorConfig(fusion_requires_evidence=True)`` (the default)
and ``False`` on the same seeds, in one process, and reports the final held-out reward
and how many wrong routing rules the final skill holds.

Usage::

    python bench/fusion_riders.py [--seeds 0,1,...,9] [--rounds 15] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentdescent import AggregatorConfig, evolve  # noqa: E402
from agentdescent.domains.router import KEYWORDS, RouterDomain, parse_rules  # noqa: E402


def run(seed: int, rounds: int, gated: bool) -> dict[str, float]:
    """One run; returns its final reward, wrong rules and commits."""
    domain = RouterDomain(seed=seed)
    result = evolve(**domain.evolve_kwargs(), rounds=rounds, n_workers=4, seed=seed,
                    agg_config=AggregatorConfig(fusion_requires_evidence=gated))
    rules = parse_rules(result.rendered)
    wrong = sum(1 for keyword, label in rules.items() if KEYWORDS.get(keyword) != label)
    return {"final_reward": result.final_reward, "wrong_rules": wrong, "commits": result.committed,
            "fused_commits": sum(h.fused for h in result.history)}


def main(argv: list[str] | None = None) -> int:
    """Run both sides on every seed and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4,5,6,7,8,9")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "fusion_riders.json")
    args = parser.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: give comma-separated integers")
    rows = []
    for seed in seeds:
        for gated in (True, False):
            rows.append({"seed": seed, "gated": gated, **run(seed, args.rounds, gated)})
    print("| fusion | final held-out (min / median / max) | wrong rules in the final skill (total) | commits (total) | fused commits (total) |")
    print("|---|---|---|---|---|")
    for gated in (True, False):
        side = [r for r in rows if r["gated"] is gated]
        rewards = [r["final_reward"] for r in side]
        print(f"| {'evidence-gated (default)' if gated else 'plain union'} | "
              f"{min(rewards):.3f} / {statistics.median(rewards):.3f} / {max(rewards):.3f} | "
              f"{sum(r['wrong_rules'] for r in side)} | {sum(r['commits'] for r in side)} | "
              f"{sum(r['fused_commits'] for r in side)} |")
    diffs = [a["final_reward"] - b["final_reward"] for a, b in zip(rows[0::2], rows[1::2])]
    print(f"\nfinal reward, gated - plain per seed: min {min(diffs):+.3f}, "
          f"median {statistics.median(diffs):+.3f}, max {max(diffs):+.3f} over {len(seeds)} seeds")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"seeds": seeds, "rounds": args.rounds, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
