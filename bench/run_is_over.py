"""Is a returned run over? Requests after return, stragglers and budget overshoot, for both runtimes.

Each scenario starts a loopback OpenAI-compatible server on 127.0.0.1 (agentdescent/testing/llmserver.py,
which records every request with its arrival time) and runs ``evolve`` and ``async_evolve``
with an ``LLMAgent`` over the real ``openai_compatible`` adapter, 40 sums, 4 workers (the
sync runs with ``max_concurrency=4``). Nothing leaves the machine.

- **failing**: the server answers the first 24 requests, then 500 to every request. The
  run ends when ``failure_limit`` calls in a row have failed, while other calls are still
  in their provider's backoff (``initial_backoff=0.5``, ``max_backoff=4``, the default
  ``max_retries=4``: a call's retries span up to 7.5 s, more than the 2 s grace).
  Counted: the requests that reach the server after the call returned, watched for
  twice the longest backoff (8 s).
- **hung**: the server holds every reply for 6 s; the run has ``max_seconds=1``,
  ``grace_seconds=0.5``, the provider ``timeout=2`` and ``max_retries=2``. Counted: the
  calls still waiting on the server when the call returned (what the server holds open,
  read at return), the run's ``stragglers`` count, and the requests after return (a
  timed-out attempt's retry), watched for 5 s.
- **budget**: the server answers like a small model (right on a third of the sums until
  the skill tells it to add; rules when asked for one; usage of about a token per 4
  characters), each sum after a paragraph of context (a solve call is about 100
  tokens); the run has ``max_tokens=3000``. Counted: the spend against the budget, the
  overshoot in units of the largest call the server answered, and whether the spend
  stays within ``max_tokens + 2 x the largest call`` (the budget gate's bound: one call
  past the budget, and once what a call larger than any before it exceeds the largest
  seen, which it reserved; see docs/budget.md).

    python bench/run_is_over.py [--seeds 0,1,2] [--scenarios failing,hung,budget] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentdescent import LLMAgent, async_evolve, evolve  # noqa: E402
from agentdescent.providers import openai_compatible  # noqa: E402
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body  # noqa: E402
from bench.jsonout import write_json  # noqa: E402
from tests.sum_workload import CONTEXT, RULE, SUM, reward, tasks  # noqa: E402

KEY = "sk-bench-run-is-over"
N_WORKERS = 4
BUDGET = 3000
#: Calls of a run that can be in flight at once: each worker's, and the merge's held-out
#: evaluation on a pool of as many threads (sync: ``max_concurrency`` of them, here 4).
#: The budget gate's bound, in largest calls: one past the budget, and once a larger call's excess.
OVER_IN_CALLS = 2


class Model:
    """A small model behind the server: answers, rules, usage; optionally failing or slow.

    Args:
        fail_after: answer this many requests, then 500 to every one (None: never fail).
        delay: seconds every reply is held.
    """

    def __init__(self, *, fail_after: int | None = None, delay: float = 0.0) -> None:
        self.fail_after = fail_after
        self.delay = delay
        self.lock = threading.Lock()
        self.seen = 0
        self.open = 0  # requests the server is still holding
        self.replies: list[tuple[float, float, int]] = []  # (arrival, reply time, tokens)

    def text(self, messages: list[dict[str, Any]]) -> str:
        last = messages[-1]["content"]
        if "ONE general rule" in last:
            return RULE
        found = SUM.search(last)
        if found is None:
            return "no idea"
        a, b = int(found.group(1)), int(found.group(2))
        skilled = any("add the two numbers" in m["content"] for m in messages)
        return f"The sum is {a + b}." if skilled or a % 3 == 0 else "It is hard to say."

    def __call__(self, path: str, body: dict[str, Any]) -> Reply:
        arrived = time.monotonic()
        with self.lock:
            self.seen += 1
            seen = self.seen
            self.open += 1
        try:
            if self.delay:
                time.sleep(self.delay)
            if self.fail_after is not None and seen > self.fail_after:
                return Reply(500, {"error": {"message": "the server is down"}})
            text = self.text(body["messages"])
            prompt = sum(len(m["content"]) for m in body["messages"]) // 4 + 1
            completion = len(text) // 4 + 1
            with self.lock:
                self.replies.append((arrived, time.monotonic(), prompt + completion))
            return Reply(200, openai_body(text, prompt_tokens=prompt, completion_tokens=completion))
        finally:
            with self.lock:
                self.open -= 1


def engine(runtime: str, agent: LLMAgent, seed: int, context: str = "", **kwargs: Any) -> Any:
    """One run of ``runtime`` on the sums."""
    if runtime == "sync":
        return evolve(tasks(context), reward, agent=agent, rounds=kwargs.pop("rounds", 30), n_workers=N_WORKERS,
                      max_concurrency=N_WORKERS, seed=seed, **kwargs)
    kwargs.pop("rounds", None)
    kwargs.setdefault("max_seconds", 60.0)
    return async_evolve(tasks(context), reward, agent=agent, n_workers=N_WORKERS, seed=seed, **kwargs)


def stragglers(result: Any) -> int | None:
    """The run's own count of calls still running at return (None: it keeps none)."""
    if result.async_stats is not None:
        return result.async_stats.stragglers
    value = result.counters.get("stragglers")
    return None if value is None else int(value)


#: The failing scenario's backoff: the first wait, and the cap (the provider's own
#: ``max_retries=4``); a call's retries span up to 0.5 + 1 + 2 + 4 = 7.5 s.
FAILING_BACKOFF = (0.5, 4.0)


def run_failing(runtime: str, seed: int) -> dict[str, Any]:
    """The server fails after 24 replies; requests after return, watched for twice the longest backoff."""
    model = Model(fail_after=24)
    initial, cap = FAILING_BACKOFF
    with LLMServer(responder=model) as server:
        agent = LLMAgent(openai_compatible("bench-model", base_url=server.openai_base_url, api_key=KEY,
                                           initial_backoff=initial, max_backoff=cap, seed=seed))
        result = engine(runtime, agent, seed)
        returned = time.monotonic()
        time.sleep(2 * cap)
        after = [r.at - returned for r in server.requests if r.at > returned]
    return {"requests_after_return": len(after), "last_after_s": round(max(after), 2) if after else None,
            "stragglers": stragglers(result), "held_at_return": None, "stop_reason": result.stop_reason}


def run_hung(runtime: str, seed: int) -> dict[str, Any]:
    """Every reply held 6 s; the run's bound is 1.5 s: calls hung at return, and their retries."""
    model = Model(delay=6.0)
    with LLMServer(responder=model) as server:
        agent = LLMAgent(openai_compatible("bench-model", base_url=server.openai_base_url, api_key=KEY,
                                           timeout=2.0, initial_backoff=0.1, max_backoff=0.8, max_retries=2,
                                           seed=seed))
        result = engine(runtime, agent, seed, max_seconds=1.0, grace_seconds=0.5)
        returned = time.monotonic()
        with model.lock:
            held = model.open
        time.sleep(5.0)
        after = [r.at - returned for r in server.requests if r.at > returned]
    return {"requests_after_return": len(after), "last_after_s": round(max(after), 2) if after else None,
            "stragglers": stragglers(result), "held_at_return": held, "stop_reason": result.stop_reason}


def run_budget(runtime: str, seed: int) -> dict[str, Any]:
    """``max_tokens=3000`` on a healthy server: the spend against the budget and the bound."""
    model = Model()
    with LLMServer(responder=model) as server:
        agent = LLMAgent(openai_compatible("bench-model", base_url=server.openai_base_url, api_key=KEY, seed=seed))
        result = engine(runtime, agent, seed, CONTEXT, max_tokens=BUDGET, rounds=50)
        returned = time.monotonic()
        time.sleep(0.5)
        after = sum(1 for r in server.requests if r.at > returned)
    spent = result.usage.total_tokens
    largest = max((t for _, _, t in model.replies), default=0)
    return {"requests_after_return": after, "stragglers": stragglers(result), "spent": spent,
            "overshoot_ratio": round(spent / BUDGET, 3), "largest_call": largest,
            "over_in_largest_calls": round(max(0, spent - BUDGET) / largest, 2) if largest else 0.0,
            "bound": BUDGET + OVER_IN_CALLS * largest, "stop_reason": result.stop_reason}


SCENARIOS = {"failing": run_failing, "hung": run_hung, "budget": run_budget}


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios over the seeds, print a table (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated subset")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    names = [n for n in args.scenarios.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {sorted(SCENARIOS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    rows = []
    for name in names:
        for runtime in ("sync", "async"):
            for seed in seeds:
                row = {"scenario": name, "runtime": runtime, "seed": seed, **SCENARIOS[name](runtime, seed)}
                rows.append(row)
                print(f"  {name:8s} {runtime:5s} seed {seed}: {row}", file=sys.stderr)
    print("| scenario | runtime | seed | requests after return | calls held at return | stragglers "
          "| spent / budget | over the budget, in largest calls | within the bound | stop_reason |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        def cell(key: str, r: dict[str, Any] = r) -> str:
            value = r.get(key)
            return "-" if value is None else str(value)
        within = "-" if "spent" not in r else ("yes" if r["spent"] <= r["bound"] else "**no**")
        print(f"| {r['scenario']} | {r['runtime']} | {r['seed']} | {cell('requests_after_return')} "
              f"| {cell('held_at_return')} | {cell('stragglers')} | {cell('overshoot_ratio')} "
              f"| {cell('over_in_largest_calls')} | {within} | {r['stop_reason']} |")
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
