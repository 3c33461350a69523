"""Does a reward's feedback help a real model propose better rules? Float reward against the same reward with feedback.

Runs ``evolve`` with an ``LLMAgent`` over ``openai_compatible(...)`` on a question set
shipped with the repository (default bench/data/ab_qa.jsonl: 60 short arithmetic,
capital, counting, symbol and colour questions), twice per seed:

- ``float``: the reward is whole-word containment of the expected answer
  (`agentdescent.rewards.builtin.contains_answer`) reduced to a plain float, so the proposal
  request carries no feedback (the prompt of a float reward);
- ``feedback``: the same reward returned as a `agentdescent.rewards.builtin.Score`, whose
  feedback names the expected answer and what came back; it reaches the proposal
  request (``Feedback on the answer: ...``).

Before any run a **test set** is split off (seeded, stratified by category, the same for
every seed and both arms) and passed as ``evolve(test_tasks=...)``: no rollout, proposal
or merge decision ever sees it. The starting head (the empty playbook) and the final
head are scored on it ``--test-repeats`` times per task; ``result.test`` has both
evaluations with their 95 % bootstrap intervals and the paired difference, final minus
start, with its interval.

Per run it records: the test scores before and after with intervals, the difference and
whether its interval excludes 0, the held-out estimate, the commits (with their rules),
calls and tokens twice (``result.usage``, the run's meter, and the provider's own meter,
which counts every request sent: the two agree when every call of the run, the test
scoring included, reached the run's meter), the proposals by the agent's verdict, how many proposal requests carried feedback and how many proposed rules
name the prompting task's expected answer, and the wall time. It prints a markdown table
and, with ``--json``, writes every run.

    python bench/feedback.py --base-url http://127.0.0.1:8090/v1 --model smollm2-135m --api-key local \\
        --seeds 0,1,2 --rounds 8 --workers 2 --temperature 0.7 --json bench/results/feedback.json

Needs the ``openai`` extra and a running server; nothing else leaves the machine. With no
server listening at ``--base-url`` it says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentdescent import LLMAgent, Task, evolve  # noqa: E402
from agentdescent.agents.llm import REFUSAL_KINDS  # noqa: E402
from agentdescent.providers import openai_compatible  # noqa: E402
from agentdescent.rewards.builtin import contains_answer  # noqa: E402
from agentdescent.types import MergeOutcome  # noqa: E402

DATA = ROOT / "bench" / "data" / "ab_qa.jsonl"
ARTIFACT = "qa-skill"
ARMS = ("float", "feedback")


def load_tasks(path: Path) -> list[Task]:
    """One task per JSON line (``id``, ``question``, ``answer``, ``category``)."""
    tasks = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            row = json.loads(line)
            tasks.append(Task(str(row.get("id", n)), row["question"],
                              {"answer": str(row["answer"]), "category": row.get("category", "all")}))
    return tasks


def split_test(tasks: list[Task], size: int, seed: int) -> tuple[list[Task], list[Task]]:
    """``(run_tasks, test_tasks)``: about ``size`` test tasks, each category in proportion (seeded)."""
    rng = random.Random(seed)
    by_cat: dict[str, list[Task]] = {}
    for task in tasks:
        by_cat.setdefault(str(task.meta["category"]), []).append(task)
    test_ids: set[str] = set()
    for cat in sorted(by_cat):
        group = list(by_cat[cat])
        rng.shuffle(group)
        take = min(len(group) - 1, max(1, round(len(group) * size / len(tasks))))
        test_ids.update(t.id for t in group[:take])
    return [t for t in tasks if t.id not in test_ids], [t for t in tasks if t.id in test_ids]


def float_reward(task: Task, output: str) -> float:
    """Whole-word containment of the expected answer, as a plain float (no feedback)."""
    return float(contains_answer(task, output))


def feedback_reward(task: Task, output: str) -> Any:
    """The same containment, as a Score whose feedback names the expected answer and the reply."""
    return contains_answer(task, output)


REWARDS = {"float": float_reward, "feedback": feedback_reward}


class LoggingAgent(LLMAgent):
    """An LLMAgent that notes, per proposal, whether feedback reached it and whether the rule names the answer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log_lock = threading.Lock()
        self.proposal_log: list[dict[str, Any]] = []

    def explain_proposal(self, rendered: str, task: Task, output: str, reward: float, *,
                         failures: Any = ()) -> Any:
        parsed = super().explain_proposal(rendered, task, output, reward, failures=failures)
        rule = parsed.text
        answer = str(task.meta.get("answer", ""))
        with self.log_lock:
            self.proposal_log.append({
                "task": task.id, "feedback": bool(getattr(reward, "feedback", "")), "rule": rule,
                "names_answer": bool(rule and answer and re.search(rf"(?<!\w){re.escape(answer)}(?!\w)",
                                                                    rule, re.IGNORECASE)),
            })
        return parsed


def reachable(base_url: str, timeout: float = 3.0) -> str | None:
    """None when something listens at ``base_url``'s host and port, else why not."""
    parsed = urlparse(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return f"--base-url {base_url!r} is not an http(s) URL"
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"{exc.strerror or exc}"


def run_once(args: argparse.Namespace, arm: str, seed: int, run_tasks: list[Task],
             test_tasks: list[Task]) -> dict[str, Any]:
    provider = openai_compatible(args.model, base_url=args.base_url, api_key=args.api_key, timeout=120.0)
    agent = LoggingAgent(provider, call_tokens=args.call_tokens, temperature=args.temperature)
    start = time.monotonic()
    result = evolve(run_tasks, REWARDS[arm], agent=agent, rounds=args.rounds, n_workers=args.workers,
                    max_concurrency=args.workers, seed=seed, stratify="category", held_out_frac=0.4,
                    artifact_id=ARTIFACT, test_tasks=test_tasks, test_repeats=args.test_repeats,
                    progress=args.progress)
    seconds = time.monotonic() - start
    test = result.test or {}
    initial, final, diff = test.get("initial"), test.get("final"), test.get("difference")
    commits = []
    for info in result.history:
        for report in info.reports:
            if report.outcome is MergeOutcome.COMMITTED:
                commits.append({
                    "round": info.index, "version": report.committed_version, "reason": report.reason,
                    "rule": " | ".join(x for x in (report.accepted.ops.values() if report.accepted else ()) if x),
                    "feedback": list(report.feedback),
                })
    run = result.usage.snapshot()
    sent = provider.usage.snapshot()
    log = agent.proposal_log
    return {
        "arm": arm, "seed": seed, "error": result.error, "stop_reason": result.stop_reason,
        "held_out_initial": result.initial_reward, "held_out_final": result.final_reward,
        "test_initial": result.test_initial, "test_final": result.test_final,
        "test_initial_interval": initial["interval"] if initial else None,
        "test_final_interval": final["interval"] if final else None,
        "difference": diff,
        "test_draws": {"initial": sum(len(v) for v in initial["draws"].values()) if initial else 0,
                       "final": sum(len(v) for v in final["draws"].values()) if final else 0},
        "commits": commits, "outcomes": result.outcomes(), "rounds": len(result.history),
        "calls": run["calls"], "tokens": run["total_tokens"],
        "sent_calls": sent["calls"], "sent_tokens": sent["total_tokens"],
        "phases": result.usage.by_phase(), "agent": agent.stats(),
        "proposals_with_feedback": sum(p["feedback"] for p in log),
        "rules_naming_answer": sum(p["names_answer"] for p in log),
        "proposal_log": log,
        "noise": result.counters.get("noise", {}),
        "seconds": round(seconds, 1), "rendered": result.rendered,
    }


def _ci(interval: list[float] | None) -> str:
    return f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "-"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def render(report: dict[str, Any]) -> str:
    c = report["config"]
    lines = [f"model {c['model']} at {c['base_url']}; {Path(c['tasks']).name}: {c['run_tasks']} run tasks "
             f"(40 % held out), {c['test_tasks']} test tasks x {c['test_repeats']} draws; rounds {c['rounds']}, "
             f"workers {c['workers']}, per-call limit {c['call_tokens']} tokens, temperature {c['temperature']}", ""]
    lines += ["| seed | reward | test start [95 % CI] | test end [95 % CI] | end − start [95 % CI] | commits | "
              "held-out start → end | calls: run / sent | tokens: run / sent | seconds |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        d = r["difference"]
        change = f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]" if d else "-"
        lines.append(
            f"| {r['seed']} | {r['arm']} | {_num(r['test_initial'])} {_ci(r['test_initial_interval'])} | "
            f"{_num(r['test_final'])} {_ci(r['test_final_interval'])} | {change} | {len(r['commits'])} | "
            f"{_num(r['held_out_initial'])} → {_num(r['held_out_final'])} | {r['calls']} / {r['sent_calls']} | "
            f"{r['tokens']} / {r['sent_tokens']} | {r['seconds']} |")
    lines += ["", "Proposals (LLMAgent.stats(); with feedback: proposal requests that carried the reward's "
              "feedback; naming the answer: rules that contain the prompting task's expected answer):", "",
              "| seed | reward | proposals | with feedback | rules | naming the answer | NONE | "
              + " | ".join(REFUSAL_KINDS) + " |",
              "|---|---|---|---|---|---|---|" + "---|" * len(REFUSAL_KINDS)]
    for r in report["runs"]:
        a = r["agent"]
        lines.append(f"| {r['seed']} | {r['arm']} | {a['proposals']} | {r['proposals_with_feedback']} | "
                     f"{a['rules']} | {r['rules_naming_answer']} | {a['declined']} | "
                     + " | ".join(str(a[k]) for k in REFUSAL_KINDS) + " |")
    lines += ["", "Commits:"]
    if not any(r["commits"] for r in report["runs"]):
        lines.append("- none")
    for r in report["runs"]:
        for cm in r["commits"]:
            lines.append(f"- seed {r['seed']}, {r['arm']}, round {cm['round']} → v{cm['version']}: "
                         f"{cm['reason'][:160]}; rule {cm['rule'][:120]!r}")
    lines += ["", "Per arm, over seeds (mean of the per-run numbers):"]
    for arm in ARMS:
        rows = [r for r in report["runs"] if r["arm"] == arm and r["difference"]]
        if rows:
            mean = sum(r["difference"]["mean"] for r in rows) / len(rows)
            sep = sum(r["difference"]["separated"] for r in rows)
            lines.append(f"- {arm}: end − start {mean:+.3f} over {len(rows)} run(s); interval excludes 0 in "
                         f"{sep}; commits {sum(len(r['commits']) for r in rows)}; sent calls "
                         f"{sum(r['sent_calls'] for r in rows)}")
    errors = [f"seed {r['seed']} {r['arm']}: {r['error']}" for r in report["runs"] if r["error"]]
    if errors:
        lines += ["", "Errors:", *(f"- {e}" for e in errors)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8090/v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default="local", help="any string for a local server (default: local)")
    parser.add_argument("--tasks", type=Path, default=DATA)
    parser.add_argument("--test-size", type=int, default=20, help="test tasks split off before any run")
    parser.add_argument("--test-repeats", type=int, default=2, help="draws per test task (evolve test_repeats)")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the test split (the same for every run)")
    parser.add_argument("--seeds", default="0", help="comma-separated run seeds")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--call-tokens", type=int, default=48, help="per-call limit on each reply (LLMAgent call_tokens)")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    why = reachable(args.base_url)
    if why is not None:
        print(f"bench/feedback.py: no server reachable at {args.base_url} ({why}); start an OpenAI-compatible "
              "server there or pass --base-url", file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    run_tasks, test_tasks = split_test(load_tasks(args.tasks), args.test_size, args.split_seed)
    report: dict[str, Any] = {
        "config": {"model": args.model, "base_url": args.base_url, "tasks": str(args.tasks),
                   "run_tasks": len(run_tasks), "test_tasks": len(test_tasks),
                   "test_ids": [t.id for t in test_tasks], "test_repeats": args.test_repeats,
                   "split_seed": args.split_seed, "seeds": seeds, "rounds": args.rounds, "workers": args.workers,
                   "call_tokens": args.call_tokens, "temperature": args.temperature},
        "runs": [],
    }
    for seed in seeds:
        for arm in ARMS:
            row = run_once(args, arm, seed, run_tasks, test_tasks)
            report["runs"].append(row)
            print(f"  seed {seed} {arm}: test {_num(row['test_initial'])} -> {_num(row['test_final'])}, "
                  f"{len(row['commits'])} commit(s), {row['sent_calls']} calls, {row['seconds']}s"
                  + (f", error: {row['error']}" if row["error"] else ""), file=sys.stderr)
    print(render(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 1 if all(r["error"] for r in report["runs"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
