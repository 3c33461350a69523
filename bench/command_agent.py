"""`CommandAgent` with a real third-party program: the `llm` command line on the local model.

Points ``llm`` (package ``llm``, the ``bench`` extra) at an OpenAI-compatible server through
an ``extra-openai-models.yaml`` in a temporary ``LLM_USER_PATH``, then makes a few calls
through `agentdescent.CommandAgent`: solves (the artifact as ``llm -s``'s system prompt) and
one proposal (parsed as `LLMAgent` parses it), and prints what came back, the usage ``llm -u``
reported on standard error, the agent's counters and the wall time of each call::

    /work/shared/local-llm/serve.sh            # SmolLM2-135M-Instruct on 127.0.0.1:8090
    python bench/command_agent.py --json bench/results/command_agent.json

Needs the ``llm`` program and a running server; nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from agentdescent import CommandAgent, Task


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8090/v1")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--call-tokens", type=int, default=48)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    llm = shutil.which("llm", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if llm is None:
        print("the `llm` program is not installed: pip install llm (the bench extra)", file=sys.stderr)
        return 2
    records = []
    with tempfile.TemporaryDirectory(prefix="llm-user-path-") as home:
        Path(home, "extra-openai-models.yaml").write_text(
            f"- model_id: {args.model}\n  model_name: {args.model}\n  api_base: {args.base_url}\n",
            encoding="utf-8")
        argv = [llm, "-m", args.model, "--no-log", "--no-stream", "-u", "-s", "{system}", "-o", "max_tokens", "{max_tokens}",
                "-o", "temperature", "0"]
        agent = CommandAgent(argv, env={"LLM_USER_PATH": home, "OPENAI_API_KEY": "local"}, timeout=120.0,
                             call_tokens=args.call_tokens)
        skill = "Answer with one word."
        tasks = [Task(id="sky", prompt="What color is the sky on a clear day?"),
                 Task(id="capital", prompt="What is the capital of France?")]
        for task in tasks:
            before, start = agent.usage.snapshot(), time.monotonic()
            answer = agent.solve(skill, task)
            records.append({"call": "solve", "task": task.prompt, "reply": answer,
                            "seconds": round(time.monotonic() - start, 2), **_spent(before, agent)})
        before, start = agent.usage.snapshot(), time.monotonic()
        rule = agent.propose(skill, tasks[0], records[0]["reply"], 0.0)
        records.append({"call": "propose", "task": tasks[0].prompt, "proposal": rule,
                        "refused_replies": agent.refusal_examples(),
                        "seconds": round(time.monotonic() - start, 2), **_spent(before, agent)})
        stats = {k: v for k, v in agent.stats().items() if v}
    for record in records:
        print(json.dumps(record, ensure_ascii=False))
    print("stats:", json.dumps(stats))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"argv": ["llm", *argv[1:]], "model": args.model, "calls": records,
                                         "stats": stats}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


def _spent(before: dict, agent: CommandAgent) -> dict:
    after = agent.usage.snapshot()
    return {"prompt_tokens": after["prompt_tokens"] - before["prompt_tokens"],
            "completion_tokens": after["completion_tokens"] - before["completion_tokens"]}


if __name__ == "__main__":
    sys.exit(main())
