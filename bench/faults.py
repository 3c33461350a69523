"""How fast a run gives up on a backend that cannot answer, with the default provider settings.

Each scenario starts a loopback OpenAI-compatible server on 127.0.0.1 that fails on
purpose (or no server at all), then runs ``evolve`` and ``async_evolve`` with an
``LLMAgent`` over ``openai_compatible(...)`` at its defaults (``max_retries=4``, backoff
0.5 s doubling to 8 s) on 40 tasks with 4 workers, and prints the requests the server
received, the seconds until the call returned, the stop reason and the start of the
error. Nothing leaves the machine.

    python bench/faults.py [--json PATH] [--scenarios 401,500,slow,closed]
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentdescent import LLMAgent, Task, async_evolve, evolve  # noqa: E402
from agentdescent.providers import openai_compatible  # noqa: E402
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body  # noqa: E402
from bench.jsonout import write_json  # noqa: E402

KEY = "sk-bench-faults-key"


def _tasks() -> list[Task]:
    return [Task(f"q{i:02d}", f"What is {i} + {i}?", {"answer": str(2 * i)}) for i in range(40)]


def _reward(task: Task, output: str) -> float:
    return 1.0 if task.meta["answer"] in output else 0.0


SCENARIOS: dict[str, tuple[str, Any, dict[str, Any]]] = {
    "401": ("every request answered 401", lambda p, b: Reply(401, {"error": {"message": "bad key"}}), {}),
    "500": ("every request answered 500", lambda p, b: Reply(500, {"error": {"message": "boom"}}), {}),
    "slow": ("answers after 5 s, timeout=3", lambda p, b: Reply(200, openai_body("2"), delay=5.0), {"timeout": 3.0}),
    "closed": ("nothing listens on the port", None, {}),
}


def run_one(name: str, runtime: str) -> dict[str, Any]:
    label, responder, options = SCENARIOS[name]
    server = None
    if responder is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base_url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    else:
        server = LLMServer(responder=responder).__enter__()
        base_url = server.openai_base_url
    agent = LLMAgent(openai_compatible("bench-model", base_url=base_url, api_key=KEY, **options))
    start = time.monotonic()
    try:
        if runtime == "sync":
            result = evolve(_tasks(), _reward, agent=agent, rounds=15, n_workers=4)
        else:
            result = async_evolve(_tasks(), _reward, agent=agent, n_workers=4, max_seconds=600)
    finally:
        seconds = time.monotonic() - start
        requests = len(server.requests) if server is not None else None
        if server is not None:
            server.__exit__(None, None, None)
    return {
        "scenario": name, "what": label, "runtime": runtime, "requests": requests,
        "seconds": round(seconds, 2), "stop_reason": result.stop_reason,
        "error": (result.error or "")[:110],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated subset")
    args = parser.parse_args(argv)
    names = [n for n in args.scenarios.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {sorted(SCENARIOS)}")
    rows = []
    for name in names:
        for runtime in ("sync", "async"):
            row = run_one(name, runtime)
            rows.append(row)
            print(f"  {name:6s} {runtime:5s} {row['requests']} request(s) in {row['seconds']}s", file=sys.stderr)
    print("| scenario | runtime | requests sent | seconds to return | stop_reason | error (start) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        sent = "-" if r["requests"] is None else r["requests"]
        print(f"| {r['what']} | {r['runtime']} | {sent} | {r['seconds']} | {r['stop_reason']} | {r['error'][:60]}… |")
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
