"""The command line's read-only commands: ``status``, ``show``, ``eval``, ``export`` and ``report``.

Each reads a run directory (spec, status, rounds, the ledger, opened read-only by
`agentdescent.cli.runledger`: ``SqliteLedger(read_only=True)``, so a run directory on a
read-only mount reads as any other, or its database's ``PostgresLedger(read_only=True)``)
and changes nothing in it:
``eval`` calls the run's model on other tasks (on a tree run, runs the run's tests in
the sandbox instead) and writes only where ``--json`` says, outside the run directory;
``export`` and ``report`` write only their output file (a tree run's ``export``, its
output folder: `agentdescent.cli.runtree.write_tree`). The
commands that drive a run (``init``, ``run``, ``resume``) and the parser are
`agentdescent.cli.main`'s. It must not print secrets.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from ..engine.answers import AnswerDistribution
from ..engine.testset import evaluate
from ..errors import (
    AgentDescentError,
    ProviderError,
    UsageError,
)
from ..types import one_line
from .diskfull import DISK_FULL
from .explain import fate_totals, fates_words, likely_cause, round_lines
from .report import build_report
from .rundir import (
    STOPPED,
    RunDir,
    check_output,
    check_output_dir,
    load_tasks,
    read_json,
    write_output,
)
from .runledger import database, has_ledger, ledger_name, ledger_problem
from .runspec import (
    check_answers,
    initial_state,
    is_tree,
    load_versions,
    make_agent,
    make_reward,
    make_strategy,
    redact,
)
from .runtree import check_eval_flags, eval_tree, write_tree

__all__ = ["answer_lines", "cmd_eval", "cmd_export", "cmd_report", "cmd_show", "cmd_status", "test_line",
           "test_summary"]


def test_summary(test: dict[str, Any] | None) -> dict[str, Any] | None:
    """What ``status.json`` keeps of ``result.test``: the two means and their paired difference."""
    if not test:
        return None
    initial, final = test.get("initial"), test.get("final")
    return {"initial": initial["mean"] if initial else None, "final": final["mean"] if final else None,
            "tasks": len((initial or final or {}).get("tasks", [])), "difference": test.get("difference")}


def test_line(test: dict[str, Any]) -> str:
    """``test set: 0.400 -> 0.650 (difference +0.250, 95% interval [+0.10, +0.40])``."""
    initial, final = _real(test.get("initial")), _real(test.get("final"))
    start = "?" if initial is None else f"{initial:.3f}"
    end = "? (the final head was not scored)" if final is None else f"{final:.3f}"
    line = f"test set: {start} -> {end}"
    diff = test.get("difference")
    numbers = [_real(diff.get(k)) for k in ("mean", "low", "high")] if isinstance(diff, dict) else [None]
    if None not in numbers:
        mean, low, high = numbers
        line += f" (difference {mean:+.3f}, 95% interval [{low:+.2f}, {high:+.2f}])"
    return line


def _answers_of(run: RunDir) -> AnswerDistribution | None:
    """The final head's test answers from result.json, or None (no result yet, an older run, a damaged field)."""
    if not run.result_file.exists():
        return None
    try:
        data = read_json(run.result_file, "result.json").get("test_answers")
        return AnswerDistribution.from_dict(data) if data is not None else None
    except ValueError:
        return None


def _label_counts(counts: dict[str, int], shown: int = 6) -> str:
    """``'plausible' 14, 'implausible' 1`` (the most frequent first; past ``shown``, how many more)."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{label!r} {count}" for label, count in ranked[:shown])
    return text + (f", and {len(ranked) - shown} more" if len(ranked) > shown else "")


def answer_lines(answers: AnswerDistribution) -> list[str]:
    """What ``status`` prints of the final head's test answers: the counts beside the gold ones, and the warning."""
    lines = [f"answers on the test set (the final head's first reply to each of {answers.tasks} tasks): "
             f"{_label_counts(answers.answers) or 'none'}"]
    if answers.gold:
        lines.append(f"expected answers: {_label_counts(answers.gold)}")
    warning = answers.warning()
    if warning:
        lines.append(f"warning: {warning}")
    return lines


def _real(value: Any) -> float | None:
    """A finite real number from a file a hand may have edited, else None (a bool or a string is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _count(value: Any) -> str:
    number = _real(value)
    return "?" if number is None else f"{int(number):,}"


def cmd_status(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    spec = run.spec()
    status = run.status()
    rounds = run.rounds()
    unit = "merge" if status.get("unit") == "merge" else "round"
    state = status.get("state")
    line = f"state: {state}"
    if state == "running" and status.get("pid"):
        line += f" (pid {status['pid']}" + (f", since {status['since']}" if status.get("since") else "") + ")"
    elif state in STOPPED and status.get("signal"):
        line += f" ({status['signal']})"
    elif state == "failed" and status.get("stop_reason") == DISK_FULL:
        line += f": {DISK_FULL}"  # the error line says where and what to do
    problem = ledger_problem(run, spec) if state in ("finished", "failed", *STOPPED) else None
    if problem:
        line += f", but {'the ' if database(spec) else ''}{ledger_name(run, spec, short=True)} is {problem[0]}"
    elif state in STOPPED:
        line += f"; go on with `agentdescent resume {run.path}`"
    print(line)
    if database(spec) and not problem:
        print(f"ledger: the {ledger_name(run, spec)}")
    if problem and problem[1]:
        print(f"ledger: {redact(problem[1])}")
    if unit == "merge":
        planned = f" (up to {_count(status['rollouts_planned'])} rollouts)" if status.get("rollouts_planned") else ""
        print(f"merges: {_count(status.get('round', 0))}{planned}")
    else:
        print(f"round: {_count(status.get('round', 0))}" + (
            f" of {_count(status['rounds_planned'])}" if status.get("rounds_planned") else ""))
    print(f"head version: {status.get('head_version')}")
    reward = _real(status.get("held_out_reward"))
    print(f"held-out reward: {reward if reward is None else format(reward, '.3f')}")
    unsaved = _real(status.get("tokens_unsaved"))
    print(f"tokens spent: {_count(status.get('tokens', 0))}" + (
        f" of {_count(status['max_tokens'])}" if status.get("max_tokens") else "") + (
        f" (and {_count(int(unsaved))} paid after the last saved round, in no record)" if unsaved else ""))
    if isinstance(status.get("calls"), int) and not isinstance(status.get("calls"), bool):
        print(f"model calls: {_count(status['calls'])}")
    print(f"stop reason: {status.get('stop_reason')}")
    if status.get("error"):
        print(f"error: {redact(str(status['error']))}")
    if rounds:
        commits = sum(int(_real(r.get("committed")) or 0) for r in rounds)
        print(f"commits: {commits} in {len(rounds)} {unit}(s)")
        if any(isinstance(r.get("fates"), dict) for r in rounds):  # rows saved before fates were kept have none
            print(f"fates: {fates_words(fate_totals(rounds)) or 'none (no proposal, no card)'}")
    if isinstance(status.get("test"), dict):
        print(test_line(status["test"]))
        answers = _answers_of(run)
        if answers is not None:
            print("\n".join(answer_lines(answers)))
    if args.verbose:
        for row in rounds:
            print()
            print("\n".join(round_lines(row)))
    why = status.get("why") or (likely_cause(rounds) if state != "running" else None)
    if why:
        print(f"{'' if not args.verbose else chr(10)}why: {why}")
    return 0


def _reward_of(run: RunDir) -> dict[int, float]:
    rewards: dict[int, float] = {}
    status = run.status()
    if _real(status.get("initial_reward")) is not None:
        rewards[1] = float(status["initial_reward"])
    for row in run.rounds():
        version, reward = row.get("head_version"), _real(row.get("held_out_reward"))
        if isinstance(version, int) and reward is not None:
            rewards[version] = reward
    return rewards


def _pick(states: dict[int, dict[str, str]], version: int | None, flag: str) -> int:
    if version is None:
        return max(states)
    if version not in states:
        raise UsageError(f"{flag} {version}: no such version; the ledger holds 1..{max(states)}")
    return version


def cmd_show(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    if args.round is not None:
        return _show_round(run, args.round)
    states, strategy = load_versions(run)
    rewards = _reward_of(run)
    if args.diff:
        a, b = (_pick(states, v, "--diff") for v in args.diff)
        ra, rb = rewards.get(a), rewards.get(b)
        print(f"v{a} (held-out {'?' if ra is None else f'{ra:.3f}'}) -> v{b} (held-out {'?' if rb is None else f'{rb:.3f}'})")
        diff = difflib.unified_diff(strategy.render(states[a]).splitlines(), strategy.render(states[b]).splitlines(),
                                    f"v{a}", f"v{b}", lineterm="")
        print("\n".join(diff) or "(no difference)")
        return 0
    v = _pick(states, args.version, "--version")
    r = rewards.get(v)
    print(f"# v{v} of {max(states)}; held-out {'?' if r is None else f'{r:.3f}'}", file=sys.stderr)
    print(strategy.render(states[v]))
    return 0


def _show_round(run: RunDir, index: int) -> int:
    """``show --round N``: the round's record in words, and the diff of each commit it made."""
    rows = {row["round"]: row for row in run.rounds() if isinstance(row.get("round"), int)}
    if index not in rows:
        raise UsageError(f"--round {index}: no such round; {run.path} has " + (
            f"rounds 1..{max(rows)}" if rows else "no finished round yet"))
    row = rows[index]
    print("\n".join(round_lines(row)))
    decisions = row.get("decisions") if isinstance(row.get("decisions"), list) else []
    versions = [d["committed_version"] for d in decisions if isinstance(d, dict) and
                isinstance(d.get("committed_version"), int)]
    if versions:
        states, strategy = load_versions(run)
        for v in versions:
            if v in states and v - 1 in states:
                print(f"\nv{v - 1} -> v{v}:")
                print("\n".join(difflib.unified_diff(strategy.render(states[v - 1]).splitlines(),
                                                     strategy.render(states[v]).splitlines(),
                                                     f"v{v - 1}", f"v{v}", lineterm="")))
    return 0


def _version(run: RunDir, spec: dict[str, Any], version: int | None) -> tuple[int, dict[str, str], str, Any]:
    """The version ``eval`` scores (default: the head), its state, its label and the strategy."""
    if has_ledger(run, spec) or run.status_file.exists():
        states, strategy = load_versions(run)
        v = _pick(states, version, "--version")
        return v, states[v], f"v{v} of {max(states)}", strategy
    if version not in (None, 1):
        raise UsageError(f"--version {version}: {run.path} has not run yet; only v1, the starting "
                         "artifact, exists")
    strategy = make_strategy(spec, load_tasks(run.tasks_file))
    return 1, initial_state(spec, strategy, run.path), "v1 (the starting artifact; the run has not started)", strategy


def cmd_eval(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    spec = run.spec()
    if is_tree(spec):  # the run's own tests, in the sandbox: no model call
        check_eval_flags(args)
        version, state, label, _ = _version(run, spec, args.version)
        return eval_tree(run, spec, load_tasks(run.tasks_file), state, label, version, args)
    if args.tasks is None:
        raise UsageError("--tasks FILE.jsonl is required: the tasks to score the version on")
    out = Path(args.json) if args.json else None
    if out is not None:  # before any call: nothing is spent on an evaluation it cannot write
        check_output(out, run.path, "--json", force=args.force)
    tasks = load_tasks(Path(args.tasks), "--tasks", minimum=1)
    reward = make_reward(spec["reward"], run.path)
    check_answers(spec["reward"], reward, tasks, f"--tasks {args.tasks}")
    version, state, label, strategy = _version(run, spec, args.version)
    known = {t.id for t in load_tasks(run.tasks_file)}
    shared = [t.id for t in tasks if t.id in known]
    if shared:
        print(f"note: {len(shared)} of these tasks share an id with the run's tasks (first {shared[0]!r}); "
              "the run has seen those", file=sys.stderr)
    agent = make_agent(spec, propose=False)
    try:
        evaluation = evaluate(tasks, reward, agent=agent, state=state, strategy=strategy, repeats=args.repeats,
                              max_concurrency=args.workers)
    except ProviderError as exc:
        print(f"agentdescent eval: the model call failed: {redact(one_line(exc, 400))}", file=sys.stderr)
        return 1
    except UsageError:
        raise
    except AgentDescentError as exc:
        print(f"agentdescent eval: the evaluation failed: {redact(one_line(exc, 400))}", file=sys.stderr)
        return 1
    low, high = evaluation.interval()
    draws = "1 draw" if args.repeats == 1 else f"{args.repeats} draws"
    count = "1 task" if len(tasks) == 1 else f"{len(tasks)} tasks"
    print(f"{label} on {count} of {args.tasks} ({draws} each), reward {spec['reward']}: "
          f"mean {evaluation.mean:.3f}, 95% interval [{low:.3f}, {high:.3f}]")
    width = max(len(t) for t in evaluation.tasks)
    for task_id, score in evaluation.per_task.items():
        feedback = one_line(evaluation.feedback.get(task_id, ""), 120)
        print(f"  {task_id:<{width}}  {score:.3f}  {feedback}".rstrip())
    print(f"{agent.usage.calls} model calls, {agent.usage.total_tokens} tokens")
    if out is not None:
        data = {"run_dir": str(run.path), "version": version, "tasks_file": str(args.tasks),
                "model": spec["model"], "reward": spec["reward"], **evaluation.to_json()}
        check_output(out, run.path, "--json", force=args.force)  # again: the calls took a while
        write_output(out, json.dumps(data, indent=2, sort_keys=True), "--json")
        print(f"wrote {out}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    out = Path(args.output)
    if is_tree(run.spec()):  # the files themselves, into a folder
        existed = check_output_dir(out, run.path, "-o", force=args.force)
        states, strategy = load_versions(run)
        v = _pick(states, args.version, "--version")
        written = write_tree(out, states[v], strategy, run.path, existed=existed)
        shown = ", ".join(written[:3]) + (f" and {len(written) - 3} more" if len(written) > 3 else "")
        print(f"wrote v{v}'s {len(written)} file(s) to {out}: {shown}")
        return 0
    check_output(out, run.path, "-o", force=args.force)
    states, strategy = load_versions(run)
    v = _pick(states, args.version, "--version")
    write_output(out, strategy.render(states[v]) + "\n", "-o")
    print(f"wrote v{v} to {out}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    out = Path(args.output) if args.output else run.report_file
    check_output(out, run.path, "-o", force=args.force, allowed=run.report_file)  # its own file is replaced freely
    if out == run.report_file and run.path.is_dir() and not os.access(run.path, os.W_OK):  # a read-only mount
        raise UsageError(f"{run.path} is read-only, so its own {out.name} cannot be written there; pass -o "
                         "FILE.html outside it")
    page = build_report(run)
    write_output(out, page, "-o")
    print(f"wrote {out}")
    return 0
