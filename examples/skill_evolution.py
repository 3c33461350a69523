"""Evolve an answering skill for a small QA set with a real model (or offline with --dry-run).

Run from the repository root (``-m``), or as a file from any directory::

    python -m examples.skill_evolution --dry-run
    python examples/skill_evolution.py --provider openai --model gpt-4o-mini
    python examples/skill_evolution.py --provider openai --model smollm2-135m \
        --base-url http://127.0.0.1:8090/v1 --api-key local
    python examples/skill_evolution.py --provider anthropic --model claude-3-5-haiku-latest

The questions are easy; what a model gets wrong is the *form* of the answer (a sentence
instead of the bare year, a word instead of digits), which exact-match scoring punishes.
``LLMAgent`` proposes one general rule after each failure; the aggregator keeps the
rules that make held-out answers better. API keys come from ``--api-key`` or the
environment (``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``); a local server takes any
string. Keys are never printed.

A progress bar shows each round as it ends (``--no-progress`` prints one line per round
instead). ``--call-tokens`` is the per-call limit on each reply; ``--max-tokens`` is the
budget of the whole run. ``--skill-in user`` puts the skill in the user message, for chat
templates that drop system messages.

``--dry-run`` runs the same code path offline on a ``FakeProvider`` whose simulated
model answers in full sentences until the skill tells it otherwise.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a file (python examples/skill_evolution.py, from any directory): put the
    # repository root first on the path, so `agentdescent` imports without an install.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent import LLMAgent, Task, evolve
from agentdescent.agents.llm import REFUSAL_KINDS
from agentdescent.testing import FakeProvider

#: (category, question, gold answer)
QA: tuple[tuple[str, str, str], ...] = (
    ("year", "In which year did the Berlin Wall fall?", "1989"),
    ("year", "In which year did Apollo 11 land on the Moon?", "1969"),
    ("year", "In which year did the Titanic sink?", "1912"),
    ("year", "In which year was the first iPhone released?", "2007"),
    ("number", "How many legs does a spider have?", "8"),
    ("number", "How many continents are there?", "7"),
    ("number", "How many sides does a hexagon have?", "6"),
    ("number", "How many minutes are in an hour?", "60"),
    ("symbol", "What is the chemical symbol for gold?", "Au"),
    ("symbol", "What is the chemical symbol for sodium?", "Na"),
    ("symbol", "What is the chemical symbol for iron?", "Fe"),
    ("symbol", "What is the chemical symbol for silver?", "Ag"),
    ("capital", "What is the capital of Australia?", "Canberra"),
    ("capital", "What is the capital of Canada?", "Ottawa"),
    ("capital", "What is the capital of Japan?", "Tokyo"),
    ("capital", "What is the capital of Kenya?", "Nairobi"),
    ("unit", "What is the SI unit of force?", "newton"),
    ("unit", "What is the SI unit of electric current?", "ampere"),
    ("unit", "What is the SI unit of energy?", "joule"),
    ("unit", "What is the SI unit of power?", "watt"),
)


def make_tasks() -> list[Task]:
    """The QA set as tasks, interleaved by category so a positional split covers each."""
    by_cat: dict[str, list[tuple[str, str]]] = {}
    for cat, q, a in QA:
        by_cat.setdefault(cat, []).append((q, a))
    tasks = []
    for i in range(max(len(v) for v in by_cat.values())):
        for cat, items in by_cat.items():
            if i < len(items):
                q, a = items[i]
                tasks.append(Task(id=f"{cat}-{i}", prompt=q, meta={"answer": a, "category": cat}))
    return tasks


def normalize(text: str) -> str:
    """Lower case, strip punctuation and articles, collapse spaces."""
    text = re.sub(r"[^\w\s]", " ", text.lower())
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def reward(task: Task, output: str) -> float:
    """Exact match after normalisation."""
    return 1.0 if normalize(output) == normalize(str(task.meta["answer"])) else 0.0


# --------------------------------------------------------------------------- dry run

_RULE_WORDS = {
    "year": "year", "number": "number", "symbol": "symbol", "capital": "city", "unit": "unit",
}


def simulated_model(tasks: Sequence[Task]) -> FakeProvider:
    """A FakeProvider that answers in sentences unless the skill has a rule for the category."""
    return FakeProvider(simulated_reply(tasks))


def simulated_reply(tasks: Sequence[Task]) -> Any:
    """The simulated model as a plain ``handler(messages, **options) -> str``."""
    by_prompt = {t.prompt: t for t in tasks}

    def handler(messages: Sequence[Mapping[str, Any]], **options: Any) -> str:
        system = " ".join(m["content"] for m in messages if m["role"] == "system").lower()
        user = messages[-1]["content"]
        if "playbook" in user.lower():  # a propose call
            for prompt, task in by_prompt.items():
                if prompt in user:
                    word = _RULE_WORDS[task.meta["category"]]
                    return f"When the answer is a {word}, reply with the bare {word} only, no sentence."
            return "NONE"
        task = by_prompt.get(user)
        if task is None:
            return "I am not sure."
        word = _RULE_WORDS[task.meta["category"]]
        if f"bare {word}" in system:
            return str(task.meta["answer"])
        return f"The answer is {task.meta['answer']}, as far as I know."

    return handler


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Run the example; returns the process exit code (0 done, 1 the run failed, 2 usage)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--provider", choices=["openai", "anthropic"], help="the model provider")
    parser.add_argument("--model", help="model name")
    parser.add_argument("--base-url", default=None,
                        help="an OpenAI-compatible server with /v1, e.g. http://127.0.0.1:8090/v1")
    parser.add_argument("--api-key", default=None,
                        help="default: OPENAI_API_KEY / ANTHROPIC_API_KEY; any string for a local server")
    parser.add_argument("--dry-run", action="store_true", help="offline, on a simulated model")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--call-tokens", type=int, default=200,
                        help="per-call limit on each reply, in tokens (LLMAgent call_tokens; default 200)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="sampling temperature (default 0.0 with a real model)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="token budget of the whole run (evolve max_tokens; default: none)")
    parser.add_argument("--skill-in", choices=["system", "user"], default="system",
                        help="where the skill goes: the system message (default) or the user message")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bar; print one line per round instead")
    args = parser.parse_args(argv)
    if args.call_tokens < 1:
        parser.error(f"--call-tokens {args.call_tokens}: the per-call limit must be at least 1")

    tasks = make_tasks()
    if args.dry_run:
        provider: Any = simulated_model(tasks)
        where = "a simulated model (offline)"
    else:
        if args.provider is None or args.model is None:
            parser.error("give --provider and --model, or --dry-run to run offline")
        from agentdescent import providers

        factory = providers.openai_compatible if args.provider == "openai" else providers.anthropic
        try:
            provider = factory(args.model, base_url=args.base_url, api_key=args.api_key)
        except providers.ProviderAuthError as exc:
            parser.error(f"{exc} (on the command line: --api-key KEY; any string for a local server)")
        except providers.ProviderDependencyError as exc:
            print(f"skill_evolution: {exc}", file=sys.stderr)
            return 2
        where = f"{args.model} at {provider.endpoint}"

    temperature = args.temperature if args.temperature is not None else (None if args.dry_run else 0.0)
    agent = LLMAgent(provider, call_tokens=args.call_tokens, temperature=temperature,
                     solve_template="{artifact}\n\n{prompt}" if args.skill_in == "user" else None)
    held_out = len(tasks) // 2
    print(f"Evolving a QA skill with {where}: {len(tasks)} questions ({len(tasks) - held_out} to learn "
          f"from, {held_out} held out), {args.workers} workers x {args.rounds} rounds. Scoring the "
          f"held-out set first ({held_out} calls); then each round makes up to {3 * args.workers} calls "
          f"plus up to {held_out} per candidate it evaluates.", flush=True)

    def report(info: Any) -> None:
        print(f"round {info.index}: held-out {info.held_out_reward:.3f}, {info.committed} commit(s), "
              f"{info.tokens} tokens", flush=True)

    result = evolve(
        tasks, reward, agent=agent, rounds=args.rounds, n_workers=args.workers,
        max_concurrency=args.workers, held_out_frac=0.5, max_tokens=args.max_tokens,
        artifact_id="qa-skill", target_reward=1.0, progress=args.progress,
        on_round=None if args.progress else report,
    )
    print(f"\n{'round':>5} {'held-out':>9} {'commits':>8} {'tokens':>8}")
    for h in result.history:
        print(f"{h.index:>5} {h.held_out_reward:>9.3f} {h.committed:>8} {h.tokens:>8}")
    stats = agent.stats()
    refused = ", ".join(f"{kind} {stats[kind]}" for kind in REFUSAL_KINDS if stats[kind]) or "none"
    print(f"\n{result.stop_reason}: {result.initial_reward:.3f} -> {result.final_reward:.3f} held-out; "
          f"{result.usage.calls} calls, {result.usage.total_tokens} tokens "
          f"({result.usage.cached_tokens} cached)")
    print(f"proposals: {stats['proposals']} ({stats['rules']} rules, {stats['declined']} NONE; "
          f"refused: {refused})")
    print(f"\nEvolved skill:\n{result.rendered}")
    if result.error:
        print(f"error: {result.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
