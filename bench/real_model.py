"""One evolve run against a real OpenAI-compatible model: what it costs, what it refuses, what it commits.

Runs ``evolve`` with an ``LLMAgent`` over ``openai_compatible(...)`` on a small question
set shipped with the repository (bench/data/qa_small.jsonl: 30 short factual and
arithmetic questions in 5 categories, answers scored by whole-word containment), and
prints, per seed:

- model calls and tokens twice: the library's run meter (``result.usage``) and the
  ``usage`` the server itself put in its HTTP replies (read off the wire by an
  ``httpx2`` response hook, independently of the adapter);
- every commit with the paired test's numbers (held-out tasks scored, gains, losses, the
  e-value against its threshold ``1 / false_accept_rate``) and the head's held-out scores
  before and after it on the tasks both versions were scored on, and the rule it added;
- every measured refusal with the test's reason, the merge outcomes, and what the noise
  monitor learned (``result.counters["noise"]``: deterministic or noisy, re-draws,
  disagreement rate);
- the proposals the agent refused, by kind (``LLMAgent.stats()``);
- the wall time.

Run it at the model's sampling temperature and at 0 (``--temperature``) to see the test
treat a sampled model as noisy and a greedy one as deterministic::

    # a local OpenAI-compatible server (llama.cpp's llama-server) with SmolLM2-135M-Instruct on 127.0.0.1:8090
    python bench/real_model.py --base-url http://127.0.0.1:8090/v1 --model smollm2-135m \\
        --api-key local --seeds 0 --temperature 0.7 --json bench/results/real_model_t07.json

Needs the ``openai`` extra and a running server; nothing else leaves the machine.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentdescent import Aggregator, AggregatorConfig, LLMAgent, Task, evolve  # noqa: E402
from agentdescent.agents.llm import REFUSAL_KINDS  # noqa: E402
from agentdescent.providers import openai_compatible  # noqa: E402
from agentdescent.types import MergeOutcome  # noqa: E402
from bench.jsonout import write_json  # noqa: E402

DATA = ROOT / "bench" / "data" / "qa_small.jsonl"
ARTIFACT = "qa-skill"


def load_tasks(path: Path) -> list[Task]:
    """One task per JSON line (``id``, ``question``, ``answer``, ``category``)."""
    tasks = []
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if line.strip():
            row = json.loads(line)
            tasks.append(Task(str(row.get("id", n)), row["question"],
                              {"answer": row["answer"], "category": row.get("category", "all")}))
    return tasks


def reward(task: Task, output: str) -> float:
    """1.0 when the answer appears as a whole word in the reply (case-insensitive)."""
    return 1.0 if re.search(rf"\b{re.escape(task.meta['answer'].lower())}\b", output.lower()) else 0.0


class WireUsage:
    """Sums the ``usage`` objects of the server's HTTP replies, as sent (an httpx2 response hook)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.without_usage = 0

    def __call__(self, response: Any) -> None:
        if response.status_code != 200:
            return
        response.read()
        try:
            usage = json.loads(response.content).get("usage")
        except (ValueError, AttributeError):
            usage = None
        with self.lock:
            self.calls += 1
            if not isinstance(usage, dict):
                self.without_usage += 1
                return
            self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.completion_tokens += int(usage.get("completion_tokens") or 0)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def run_once(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    import httpx2

    wire = WireUsage()
    client = httpx2.Client(event_hooks={"response": [wire]}, timeout=120.0)
    provider = openai_compatible(args.model, base_url=args.base_url, api_key=args.api_key,
                                 timeout=120.0, http_client=client)
    agent = LLMAgent(provider, call_tokens=args.call_tokens, temperature=args.temperature)
    made: list[Aggregator] = []

    def factory(*a: Any, **kw: Any) -> Aggregator:
        made.append(Aggregator(*a, **kw))
        return made[-1]

    config = AggregatorConfig(false_accept_rate=args.false_accept_rate)
    start = time.monotonic()
    result = evolve(load_tasks(args.tasks), reward, agent=agent, rounds=args.rounds, n_workers=args.workers,
                    max_concurrency=args.workers, seed=seed, stratify="category", held_out_frac=0.4,
                    agg_config=config, aggregator_factory=factory, progress=args.progress,
                    artifact_id=ARTIFACT)
    seconds = time.monotonic() - start
    client.close()
    aggregator = made[0]
    board = aggregator.scoreboard
    commits, refusals = [], []
    for info in result.history:
        for report in info.reports:
            if report.outcome is MergeOutcome.COMMITTED and report.committed_version is not None:
                v = report.committed_version
                before = board.measured(ARTIFACT, v - 1)
                after = board.measured(ARTIFACT, v)
                both = sorted(set(before) & set(after))
                pairs = [(before[i], after[i]) for i in both]
                commits.append({
                    "round": info.index, "version": v, "fused": report.fused, "p_improve": report.p_improve,
                    "reason": report.reason,
                    "rule": " | ".join(x for x in (report.accepted.ops.values() if report.accepted else ()) if x),
                    "tasks_compared": len(both), "before_mean": _mean([a for a, _ in pairs]),
                    "after_mean": _mean([b for _, b in pairs]),
                    "better": sum(b > a for a, b in pairs), "worse": sum(b < a for a, b in pairs),
                })
            elif report.outcome in (MergeOutcome.BELOW_THRESHOLD, MergeOutcome.ORACLE_REJECTED):
                refusals.append({"round": info.index, "outcome": report.outcome.value, "reason": report.reason,
                                 "p_improve": report.p_improve,
                                 "rule": " | ".join(x for x in (report.accepted.ops.values()
                                                                if report.accepted else ()) if x)})
    snap = result.usage.snapshot()
    counters = result.counters
    return {
        "seed": seed, "temperature": args.temperature, "false_accept_rate": args.false_accept_rate,
        "calls": snap["calls"], "prompt_tokens": snap["prompt_tokens"],
        "completion_tokens": snap["completion_tokens"], "tokens": snap["total_tokens"],
        "server_calls": wire.calls, "server_prompt_tokens": wire.prompt_tokens,
        "server_completion_tokens": wire.completion_tokens, "server_tokens": wire.total_tokens,
        "server_replies_without_usage": wire.without_usage,
        "phases": result.usage.by_phase(), "agent": agent.stats(),
        "initial": result.initial_reward, "final": result.final_reward,
        "held_out": board.n_tasks, "noise": counters.get("noise", {}),
        "final_measured": counters.get("final_reward_measured", 0),
        "held_out_tasks_scored": counters.get("merge_held_out_tasks_scored", 0),
        "held_out_tasks_saved": counters.get("merge_held_out_tasks_saved", 0),
        "commits": commits, "refusals": refusals,
        "outcomes": result.outcomes(), "rounds": len(result.history),
        "seconds": round(seconds, 1), "error": result.error, "stop_reason": result.stop_reason,
        "rendered": result.rendered,
    }


def render(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [f"model {args.model} at {args.base_url}; {args.tasks.name}; rounds {args.rounds}, "
             f"workers {args.workers}, per-call limit {args.call_tokens} tokens, temperature {args.temperature}, "
             f"false_accept_rate {args.false_accept_rate}", ""]
    lines += ["| seed | held-out start → end (end: tasks measured) | commits | refused | noise | held-out tasks scored / "
              "saved | calls: library / server | tokens: library / server | seconds |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        noise = r["noise"]
        rate = noise.get("disagreement_rate")
        what = f"{noise.get('state', '?')}" + (f" ({rate:.2f} of {noise.get('agreements', 0) + noise.get('disagreements', 0)}"
                                               " re-draws differ)" if rate is not None else "")
        lines.append(
            f"| {r['seed']} | {r['initial']:.3f} → {r['final']:.3f} ({r['final_measured']} of {r['held_out']}) | {len(r['commits'])} | {len(r['refusals'])} | "
            f"{what} | {r['held_out_tasks_scored']} / {r['held_out_tasks_saved']} | {r['calls']} / "
            f"{r['server_calls']} | {r['tokens']} / {r['server_tokens']} | {r['seconds']} |")
    lines += ["", "Tokens, library / server: prompt and completion; by phase (library):"]
    for r in rows:
        phases = ", ".join(f"{k} {v}" for k, v in r["phases"].items())
        lines.append(f"- seed {r['seed']}: prompt {r['prompt_tokens']} / {r['server_prompt_tokens']}, "
                     f"completion {r['completion_tokens']} / {r['server_completion_tokens']}; {phases}")
    lines += ["", "Proposals: the agent's verdict on each reply (LLMAgent.stats()):", "",
              "| seed | proposals | rules | NONE | " + " | ".join(REFUSAL_KINDS) + " | solves cut off |",
              "|---|---|---|---|" + "---|" * len(REFUSAL_KINDS) + "---|"]
    for r in rows:
        a = r["agent"]
        lines.append(f"| {r['seed']} | {a['proposals']} | {a['rules']} | {a['declined']} | "
                     + " | ".join(str(a[k]) for k in REFUSAL_KINDS) + f" | {a['solves_truncated']} of {a['solves']} |")
    lines += ["", "Merge outcomes:"]
    for r in rows:
        outcomes = ", ".join(f"{k} {v}" for k, v in r["outcomes"].items() if v) or "none"
        lines.append(f"- seed {r['seed']}: {outcomes}; stop: {r['stop_reason']}"
                     + (f"; error: {r['error']}" if r["error"] else ""))
    lines += ["", "Commits (the paired test's reason; the head's held-out mean before → after on the tasks both "
              "versions were scored on):"]
    if not any(r["commits"] for r in rows):
        lines.append("- none")
    for r in rows:
        for c in r["commits"]:
            lines.append(f"- seed {r['seed']}, round {c['round']} → v{c['version']}: {c['reason']}; "
                         f"{c['before_mean']:.3f} → {c['after_mean']:.3f} over {c['tasks_compared']} task(s) "
                         f"({c['better']} better, {c['worse']} worse): {c['rule'][:120]!r}")
    lines += ["", "Refusals (measured candidates the test did not accept):"]
    if not any(r["refusals"] for r in rows):
        lines.append("- none")
    for r in rows:
        for c in r["refusals"]:
            lines.append(f"- seed {r['seed']}, round {c['round']}, {c['outcome']}: {c['reason'][:200]}; "
                         f"rule {c['rule'][:80]!r}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8090/v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default="local", help="any string for a local server (default: local)")
    parser.add_argument("--tasks", type=Path, default=DATA)
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--call-tokens", type=int, default=48, help="per-call limit on each reply (LLMAgent call_tokens)")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--false-accept-rate", type=float, default=0.05,
                        help="AggregatorConfig.false_accept_rate (default 0.05)")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    rows = []
    for seed in seeds:
        row = run_once(args, seed)
        rows.append(row)
        print(f"  seed {seed}: {len(row['commits'])} commit(s), {len(row['refusals'])} refused, "
              f"noise {row['noise'].get('state')}, {row['calls']} calls, {row['seconds']}s", file=sys.stderr)
    print(render(rows, args))
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
