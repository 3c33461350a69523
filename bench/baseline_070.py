"""The published agentdescent 0.7.0's side of `bench/scaling.py --baseline-python`.

Run with the Python of a separate virtual environment where ``pip install
agentdescent==0.7.0`` was done (the published package imports under the same name as
this repository's library, so it can never share an environment with it)::

    python3 -m venv ../venv070 && ../venv070/bin/pip install agentdescent==0.7.0
    ../venv070/bin/python bench/baseline_070.py --serve     # what scaling.py starts

It is written against 0.7.0's public API only (``evolve``, ``async_evolve``,
``agentdescent.evolution.Task``) and runs the workload of `bench/_call_workload.py`, the
same module this repository's side runs. With ``--serve`` it reads one JSON request per
line on stdin (``{"mode": "sync"|"async", "workers": N, "rollouts": R, "latency": s,
"sigma": x, "seed": k, "max_concurrency": C, "eval_concurrency": E or null}``) and
answers each with one JSON line on stdout: the model calls counted at the callable, the
wall-clock seconds of the ``evolve``/``async_evolve`` call alone (the interpreter's start
and the imports are not in it), the rollouts and the stop reason. Everything else the
library prints goes to stderr. Offline.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# Only bench/ goes on the path, never the repository root: ``agentdescent`` must be 0.7.0.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE.parent]
sys.path.insert(0, str(HERE))

from _call_workload import CountingWorkload, task_specs  # noqa: E402
from agentdescent.evolution import Task  # noqa: E402

import agentdescent  # noqa: E402
from agentdescent import async_evolve, evolve  # noqa: E402


def identity() -> dict[str, Any]:
    """Which agentdescent this is (the caller refuses anything but the published 0.7.0)."""
    return {"version": getattr(agentdescent, "__version__", None), "file": agentdescent.__file__}


def one_run(req: dict[str, Any]) -> dict[str, Any]:
    """One run of the workload on 0.7.0, as ``req`` says; its calls, wall-clock and rollouts."""
    work = CountingWorkload(req["latency"], req["sigma"], req["seed"])
    tasks = [Task(s["id"], s["prompt"], s["meta"]) for s in task_specs()]
    n, total = req["workers"], req["rollouts"]
    kwargs: dict[str, Any] = dict(run=work.run, propose=work.propose, n_workers=n, seed=req["seed"],
                                  held_out_frac=req["held_out_frac"], self_verify=req["self_verify"])
    if req.get("eval_concurrency") is not None:
        kwargs["eval_concurrency"] = req["eval_concurrency"]
    started = time.perf_counter()
    if req["mode"] == "async":
        result = async_evolve(tasks, work.reward, async_ratio=req["async_ratio"], max_iters=total,
                              max_seconds=req["max_seconds"], **kwargs)
    else:
        result = evolve(tasks, work.reward, max_concurrency=req["max_concurrency"], rounds=-(-total // n),
                        max_rollouts=total, **kwargs)
    wall = time.perf_counter() - started
    return {"calls": work.total, "calls_by_kind": dict(work.calls), "wall": wall,
            "rollouts": int(getattr(result, "rollouts", 0) or 0), "stop_reason": result.stop_reason,
            "error": getattr(result, "error", None)}


def serve() -> int:
    """Answer JSON requests from stdin, one line each, until stdin closes."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr  # whatever the library prints must not break the protocol
    out.write(json.dumps({"hello": identity()}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = one_run(json.loads(line))
        except Exception as exc:  # report it to the caller, who says which run failed
            answer = {"failed": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer, default=str) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="answer JSON requests on stdin (scaling.py's use)")
    parser.add_argument("--identity", action="store_true", help="print which agentdescent this imports")
    args = parser.parse_args(argv)
    if args.identity:
        print(json.dumps(identity()))
        return 0
    if args.serve:
        return serve()
    parser.error("give --serve or --identity")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
