"""Route support tickets with a real model: a reward with feedback, an optional second model for the proposals, a test set.

Run from the repository root (``-m``), or as a file from any directory::

    python -m examples.ticket_routing --dry-run
    python examples/ticket_routing.py --model smollm2-135m --base-url http://127.0.0.1:8090/v1 --api-key local
    python examples/ticket_routing.py --model gpt-4o-mini \\
        --proposer-model gpt-4o --proposer-base-url https://api.openai.com/v1

The tasks are the tutorial's: 16 tickets to route to billing, tech or account
(agentdescent/testing/data/tickets.jsonl, shipped with the package), and 12 more as the test set
(tickets_test.jsonl beside it), which no decision of the run sees; both heads, the
starting one and the final one, are scored on it, with a 95 % interval on the
difference. The reward is `agentdescent.rewards.builtin.normalized_match`: 1.0 when the reply
is the right label alone (case and punctuation ignored; a sentence around it scores 0),
with feedback that says what was expected and what came back, which reaches every
proposal request (``--no-feedback`` reduces it to a plain
float, to compare). ``--proposer-*`` sends the proposals to a second model.

API keys come from ``--api-key`` / ``--proposer-api-key`` or ``OPENAI_API_KEY``; a local
server takes any string. Keys are never printed. ``--dry-run`` runs the same code
offline on a ``FakeProvider`` that answers with a sentence until the skill asks for the
label alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a file (python examples/ticket_routing.py, from any directory): put the
    # repository root first on the path, so `agentdescent` imports without an install.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent import LLMAgent, Task, evolve
from agentdescent.agents.llm import REFUSAL_KINDS
from agentdescent.cli.explain import likely_cause, round_record
from agentdescent.rewards.builtin import normalized_match
from agentdescent.testing import FakeProvider
from agentdescent.testing.standin import TEST_TICKETS_FILE, TICKETS_FILE

PROMPT = "Route this support ticket to billing, tech or account:\n{ticket}"


def read_tasks(path: Path, prefix: str) -> list[Task]:
    """One task per ``{"ticket": ..., "label": ...}`` line; the label is the task's answer."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    return [Task(f"{prefix}{i:02d}", PROMPT.format(ticket=row["ticket"]), {"answer": row["label"]})
            for i, row in enumerate(rows)]


def simulated_reply(tasks: Sequence[Task]) -> Any:
    """An offline model: the right label in a sentence, or alone once the skill asks for that."""
    label_of = {t.prompt: t.meta["answer"] for t in tasks}

    def handler(messages: Sequence[Mapping[str, Any]], **options: Any) -> str:
        user = messages[-1]["content"]
        if "Current playbook:" in user:  # a proposal request
            return "Reply with the label only: billing, tech or account." if "expected" in user else "NONE"
        system = " ".join(m["content"] for m in messages if m["role"] == "system")
        label = label_of.get(user, "tech")
        return label if "label only" in system else f"This ticket is for the {label} team."

    return handler


def make_provider(model: str, base_url: str | None, api_key: str | None) -> Any:
    """An OpenAI-compatible provider (raises the provider's own errors, which name the fix)."""
    from agentdescent import providers

    return providers.openai_compatible(model, base_url=base_url, api_key=api_key)


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run, print what happened; 0 on success, 1 when the run failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="the model that answers the tickets")
    parser.add_argument("--base-url", default=None, help="its API root, with /v1")
    parser.add_argument("--api-key", default=None, help="its key (default: OPENAI_API_KEY)")
    parser.add_argument("--proposer-model", default=None, help="a second model for the proposals")
    parser.add_argument("--proposer-base-url", default=None, help="its API root (default: --base-url)")
    parser.add_argument("--proposer-api-key", default=None, help="its key (default: --api-key)")
    parser.add_argument("--dry-run", action="store_true", help="offline, on a simulated model")
    parser.add_argument("--no-feedback", dest="feedback", action="store_false",
                        help="a plain float reward: the proposal requests carry no feedback")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--call-tokens", type=int, default=64, help="the per-call limit on each reply")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--test-repeats", type=int, default=1,
                        help="draws per test ticket (more with a sampled model)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bar; print one line per round instead")
    args = parser.parse_args(argv)
    if args.call_tokens < 1:
        parser.error(f"--call-tokens {args.call_tokens}: the per-call limit must be at least 1")

    tasks = read_tasks(TICKETS_FILE, "t")
    test_tasks = read_tasks(TEST_TICKETS_FILE, "test")
    from agentdescent import providers

    try:
        if args.dry_run:
            provider: Any = FakeProvider(simulated_reply(tasks + test_tasks))
            proposer = None
            where = "a simulated model (offline)"
        else:
            if args.model is None:
                parser.error("give --model (and --base-url for a local server), or --dry-run to run offline")
            provider = make_provider(args.model, args.base_url, args.api_key)
            where = f"{args.model} at {provider.endpoint}"
            proposer = None
            if args.proposer_model is not None:
                proposer = make_provider(args.proposer_model, args.proposer_base_url or args.base_url,
                                         args.proposer_api_key or args.api_key)
                where += f", proposals by {args.proposer_model} at {proposer.endpoint}"
    except providers.ProviderAuthError as exc:
        parser.error(f"{exc} (on the command line: --api-key KEY; any string for a local server)")
    except providers.ProviderDependencyError as exc:
        print(f"ticket_routing: {exc}", file=sys.stderr)
        return 2

    def plain(task: Task, output: str) -> float:
        return normalized_match(task, output).value  # the same value, without the feedback

    reward = normalized_match if args.feedback else plain
    agent = LLMAgent(provider, call_tokens=args.call_tokens, temperature=args.temperature, propose_with=proposer)
    print(f"Routing tickets with {where}: {len(tasks)} tickets (half held out), {len(test_tasks)} test "
          f"tickets x {args.test_repeats}; reward {'normalized_match with feedback' if args.feedback else 'a plain float'}; "
          f"{args.workers} workers x {args.rounds} rounds.", flush=True)

    def report(info: Any) -> None:
        print(f"round {info.index}: held-out {info.held_out_reward:.3f}, {info.committed} commit(s)", flush=True)

    result = evolve(
        tasks, reward, agent=agent, rounds=args.rounds, n_workers=args.workers,
        max_concurrency=args.workers, held_out_frac=0.5, stratify="answer",
        artifact_id="ticket-router", seed=args.seed, test_tasks=test_tasks,
        test_repeats=args.test_repeats, progress=args.progress, on_round=None if args.progress else report,
    )
    for info in result.history:
        for r in info.reports:
            print(f"round {info.index}: {r.outcome.value}" + (f" (feedback: {r.feedback[0]})" if r.feedback else ""))
    stats = agent.stats()
    refused = ", ".join(f"{kind} {stats[kind]}" for kind in REFUSAL_KINDS if stats[kind]) or "none"
    print(f"\n{result.stop_reason}: held-out {result.initial_reward:.3f} -> {result.final_reward:.3f}; "
          f"{result.usage.calls} calls, {result.usage.total_tokens} tokens, by phase {result.usage.by_phase()}")
    print(f"proposals: {stats['proposals']} ({stats['rules']} rules, {stats['declined']} NONE; refused: {refused})")
    for kind, reply in sorted(agent.refusal_examples().items()):
        print(f"  a reply refused as {kind}: {reply!r}")
    if result.test:
        diff = result.test["difference"]
        print(f"test set: {result.test_initial:.3f} -> {result.test_final:.3f}, difference {diff['mean']:+.3f} "
              f"[{diff['low']:+.3f}, {diff['high']:+.3f}] on {diff['tasks']} tickets "
              f"({'told apart' if diff['separated'] else 'not told apart'})")
    why = likely_cause([round_record(info, 0) for info in result.history])
    if why:
        print(f"why: {why}")
    print(f"\nEvolved skill:\n{result.rendered}")
    if result.error:
        print(f"error: {result.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
