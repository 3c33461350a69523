"""What a run will cost before it runs: ``agentdescent plan`` (the maximum and the expected spend).

It reads the run directory's spec and tasks; it spends nothing (``--probe`` makes one
real call, to time it). It must not write files.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from .rundir import RunDir, load_tasks
from .tokens import estimate_tokens
from .types import Task

__all__ = ["cmd_plan", "plan_numbers"]


def plan_numbers(spec: dict[str, Any], tasks: Sequence[Task], rounds: int, workers: int) -> dict[str, Any]:
    """Upper bounds on model calls and tokens, from the spec alone (nothing is spent).

    Per round at most: ``workers`` rollouts, ``workers`` proposals, ``workers`` self-verify
    re-runs, two rebase re-verification calls per card, and one candidate's held-out
    evaluation: ``n_held`` calls on the candidate, ``n_held`` on the head (a new version is
    scored task by task), and, once the evaluation is noisy, two more draws per side of
    every task that differs (``4 * n_held``), plus one re-draw per free check that disagrees
    (``n_held``). Before the first round: the starting head's sample (up to
    ``head_sample`` = 16 tasks) and the one-time noise probe (16 calls). Tokens per call are
    bounded by the longest prompt, the artifact after every round's rules were added, and
    the per-call limit (or 512 when the spec sets none).
    """
    n = len(tasks)
    n_held = min(n - 1, max(1, round(n * spec.get("held_out_frac", 0.4))))
    cheap = min(n_held, max(8, n_held // 4))
    per_round = 5 * workers + 7 * n_held
    calls = min(n_held, 16) + 16 + rounds * per_round
    call_tokens = spec.get("call_tokens") or 512
    longest = max(estimate_tokens(t.prompt) for t in tasks)
    initial = estimate_tokens(spec.get("initial_text") or "")
    rule = 40  # a one-sentence rule, in tokens
    artifact = initial + rule * workers * rounds
    per_call = longest + artifact + 400 + call_tokens  # 400: the propose template and the output it quotes
    return {
        "tasks": n, "held_out": n_held, "cheap_subset": cheap, "rounds": rounds, "workers": workers,
        "calls_per_round": per_round, "calls": calls, "tokens_per_call": per_call,
        "tokens_per_round": per_round * per_call, "tokens": calls * per_call,
    }


def cmd_plan(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    spec = run.spec()
    tasks = load_tasks(run.tasks_file)
    p = plan_numbers(spec, tasks, args.rounds, args.workers)
    print(f"{p['tasks']} tasks: {p['tasks'] - p['held_out']} train, {p['held_out']} held out "
          f"(cheap subset {p['cheap_subset']})")
    print(f"at most {p['calls_per_round']} model calls and {p['tokens_per_round']:,} tokens a round "
          f"({p['workers']} workers)")
    print(f"at most {p['calls']} calls and {p['tokens']:,} tokens for {p['rounds']} rounds "
          f"(including the starting artifact's evaluation)")
    if spec.get("test_tasks"):
        n_test = len(load_tasks(run.test_tasks_file, "--test-tasks", minimum=1))
        print(f"plus {2 * n_test} test-set calls ({n_test} tasks, at the start and the end), outside --max-tokens")
    print("The paired test stops each evaluation as soon as it is settled and scores the head once per "
          "task and version, so the real cost is usually far lower; cap it with `agentdescent run --max-tokens N`.")
    return 0
