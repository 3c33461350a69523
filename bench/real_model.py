"""One evolve run against a real OpenAI-compatible model: what it costs and what it commits.

Runs ``evolve`` with an ``LLMAgent`` over ``openai_compatible(...)`` on a small question
set shipped with the repository (bench/data/qa_small.jsonl: 30 short factual and
arithmetic questions in 5 categories, answers scored by whole-word containment), and
prints: model calls and tokens (the library's run meter, and the usage the server itself
reported in its replies), every commit with its held-out scores before and after and
whether the two lists were identical (a tie: the evidence rule forbids committing one),
the merge outcomes, and the wall time. ``--old-rule`` runs the pre-0.2 acceptance rule
(the self-verify delta counts as evidence, so ties can commit) for comparison.

    ../shared/local-llm/serve.sh      # SmolLM2-135M-Instruct on 127.0.0.1:8090
    python bench/real_model.py --base-url http://127.0.0.1:8090/v1 --model smollm2-135m \\
        --api-key local --seeds 0,1,2 --json bench/results/real_model.json

Needs the ``openai`` extra and a running server; nothing else leaves the machine.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentdescent import Aggregator, AggregatorConfig, LLMAgent, Task, evolve  # noqa: E402
from agentdescent.providers import openai_compatible  # noqa: E402

DATA = ROOT / "bench" / "data" / "qa_small.jsonl"


def load_tasks(path: Path) -> list[Task]:
    """One task per JSON line (``id``, ``question``, ``answer``, ``category``)."""
    tasks = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            row = json.loads(line)
            tasks.append(Task(str(row.get("id", n)), row["question"],
                              {"answer": row["answer"], "category": row.get("category", "all")}))
    return tasks


def reward(task: Task, output: str) -> float:
    """1.0 when the answer appears as a whole word in the reply (case-insensitive)."""
    return 1.0 if re.search(rf"\b{re.escape(task.meta['answer'].lower())}\b", output.lower()) else 0.0


class AuditedAggregator(Aggregator):
    """The stock aggregator, recording the held-out score lists behind every decision it measures."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.audit: list[dict[str, Any]] = []

    def _decide(self, prepared: Any, measurement: Any) -> Any:
        report = super()._decide(prepared, measurement)
        self.audit.append({
            "outcome": report.outcome.value,
            "rule": " | ".join(v for v in prepared.candidate.ops.values() if v),
            "head": list(measurement.head_scores),
            "candidate": list(measurement.candidate_scores),
            "p_improve": report.p_improve,
        })
        return report


def run_once(args: argparse.Namespace, seed: int, old_rule: bool) -> dict[str, Any]:
    provider = openai_compatible(args.model, base_url=args.base_url, api_key=args.api_key, timeout=120.0)
    agent = LLMAgent(provider, max_tokens=args.call_tokens, temperature=args.temperature)
    made: list[AuditedAggregator] = []

    def factory(*a: Any, **kw: Any) -> AuditedAggregator:
        made.append(AuditedAggregator(*a, **kw))
        return made[0]

    config = AggregatorConfig(self_verify_counts=old_rule)
    start = time.monotonic()
    result = evolve(load_tasks(args.tasks), reward, agent=agent, rounds=args.rounds, n_workers=args.workers,
                    max_concurrency=args.workers, seed=seed, stratify="category", held_out_frac=0.4,
                    agg_config=config, aggregator_factory=factory, progress=args.progress)
    seconds = time.monotonic() - start
    audit = made[0].audit
    commits = [a for a in audit if a["outcome"] == "committed"]
    for a in commits:
        n = len(a["head"])
        a["tie"] = a["head"] == a["candidate"]
        a["head_mean"] = sum(a["head"]) / n
        a["candidate_mean"] = sum(a["candidate"]) / n
    return {
        "seed": seed, "rule": "old (self-verify counts)" if old_rule else "evidence rule",
        "calls": result.usage.calls, "tokens": result.usage.total_tokens,
        "server_tokens": provider.usage.total_tokens, "phases": result.usage.by_phase(),
        "initial": result.initial_reward, "final": result.final_reward,
        "commits": commits, "tie_commits": sum(a["tie"] for a in commits),
        "outcomes": result.outcomes(), "seconds": round(seconds, 1), "error": result.error,
        "stop_reason": result.stop_reason,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8090/v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default="local", help="any string for a local server (default: local)")
    parser.add_argument("--tasks", type=Path, default=DATA)
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--call-tokens", type=int, default=48, help="max_tokens per model call")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--old-rule", action="store_true", help="also run the pre-0.2 rule on every seed")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    rows = []
    for seed in seeds:
        for old in ([False, True] if args.old_rule else [False]):
            row = run_once(args, seed, old)
            rows.append(row)
            print(f"  seed {seed} {row['rule']}: {len(row['commits'])} commit(s), {row['tie_commits']} tie(s), "
                  f"{row['calls']} calls, {row['seconds']}s", file=sys.stderr)
    print("| seed | rule | calls | tokens (library / server) | held-out start → end | commits | commits on a tie | outcomes | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        outcomes = ", ".join(f"{k} {v}" for k, v in r["outcomes"].items() if v)
        print(f"| {r['seed']} | {r['rule']} | {r['calls']} | {r['tokens']} / {r['server_tokens']} | "
              f"{r['initial']:.3f} → {r['final']:.3f} | {len(r['commits'])} | {r['tie_commits']} | "
              f"{outcomes} | {r['seconds']} |")
    print("\nCommits (held-out mean before → after, rule text):")
    for r in rows:
        for a in r["commits"]:
            tag = " TIE" if a["tie"] else ""
            print(f"- seed {r['seed']}, {r['rule']}: {a['head_mean']:.3f} → {a['candidate_mean']:.3f}{tag}: "
                  f"{a['rule'][:100]!r}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
