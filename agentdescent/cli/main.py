"""The command line (``agentdescent``, ``python -m agentdescent``) and run directories.

A run directory holds everything about one run, in real files: ``spec.json`` (what to
run: tasks file, model, provider, the *name* of the API key's environment variable, the
proposer model when a second one writes the proposals, reward, strategy, initial
artifact), ``tasks.jsonl`` (a copy of the tasks), ``test_tasks.jsonl`` (a copy of the
test set, with ``init --test-tasks``), ``tree/`` (with ``init --tree DIR``: a copy of the
project whose code evolves against its own tests, `agentdescent.cli.runtree`), and once it
runs ``ledger.sqlite`` (every version of the artifact and the run's progress),
``rounds.jsonl`` (one JSON line per round, appended as each round ends), ``status.json``
(atomically replaced) and ``result.json``.
An API key is never written anywhere.

Commands: ``demo``, ``init``, ``plan``, ``run``, ``status``, ``show``, ``resume``,
``eval``, ``export``, ``report``; each has ``--help``. Exit codes: 0 done, 1 the run (or
``eval``'s model calls) failed (the message names the cause), 2 usage error (a bad flag,
or a missing, malformed or damaged file, naming it), each in one line without a traceback
(`_main` is the one boundary). ``run`` and ``resume`` hold the run directory's lock
(`agentdescent.cli.runlock`) from before they read anything; the other commands never take it.

The ``--reward`` names are `agentdescent.rewards.builtin.by_name`'s (one home for each rule), plus
``MODULE:FUNC``; each built-in returns a `agentdescent.rewards.builtin.Score` whose feedback
reaches the proposer.

This module owns argument parsing, the commands that drive a run and the error boundary (the read-only ones are `agentdescent.cli.runviews`'s, the HTML report `agentdescent.cli.report`'s); the run directory's
files are `agentdescent.cli.rundir`'s and the evolution itself is `agentdescent.engine.entry.evolve`'s.
It must not print secrets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._version import VERSION as __version__
from ..engine.entry import evolve
from ..engine.progress import read_progress
from ..engine.result import RoundInfo
from ..errors import (
    AgentDescentError,
    ContractError,
    GovernanceError,
    InvalidArgument,
    LedgerError,
    UsageError,
)
from ..ledger import SqliteLedger
from ..merge.aggregator import AggregatorConfig
from ..types import one_line
from .demo import main as demo_main
from .explain import likely_cause, round_record
from .plan import cmd_plan
from .rundir import (
    SPEC_FORMAT,
    RunDir,
    atomic_write,
    load_tasks,
    now,
    read_json,
    write_tasks,
)
from .runlock import hold
from .runspec import (
    ARTIFACT_ID,
    DEFAULT_KEY_ENV,
    REWARD_HELP,
    check_answers,
    check_base_url,
    check_key_env,
    check_reward_call,
    initial_state,
    is_tree,
    make_agent,
    make_reward,
    make_strategy,
    no_ledger,
    redact,
)
from .runtree import DEFAULT_SUITE_TIMEOUT, check_flags, init_tree, open_suite, suite_line
from .runtree import evolve_kwargs as tree_evolve_kwargs
from .runviews import (
    cmd_eval,
    cmd_export,
    cmd_report,
    cmd_show,
    cmd_status,
    test_line,
    test_summary,
)

__all__ = ["EXIT_INTERRUPTED", "SPEC_FORMAT", "UsageError", "main"]

#: The exit code of a run stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130

# --------------------------------------------------------------------------- commands


def _proposer_spec(args: argparse.Namespace, api_key_env: str) -> dict[str, Any] | None:
    """The ``proposer`` entry of the spec (``--proposer-*``), or None: the run's model proposes."""
    given = [flag for flag, value in (("--proposer-provider", args.proposer_provider),
                                      ("--proposer-base-url", args.proposer_base_url),
                                      ("--proposer-api-key-env", args.proposer_api_key_env)) if value is not None]
    if args.proposer_model is None:
        if given:
            raise UsageError(f"{given[0]} needs --proposer-model (the model that writes the proposals)")
        return None
    kind = args.proposer_provider or args.provider
    same = kind == args.provider
    env = check_key_env(args.proposer_api_key_env, "--proposer-api-key-env") or (
        api_key_env if same else DEFAULT_KEY_ENV[kind])
    base_url = args.proposer_base_url if args.proposer_base_url is not None else (args.base_url if same else None)
    return {"model": args.proposer_model, "provider": kind, "base_url": base_url, "api_key_env": env}


def cmd_init(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    if run.spec_file.exists() and not args.force:
        raise UsageError(f"{run.spec_file} exists; pick a new RUN_DIR, or pass --force to replace the spec")
    check_flags(args)
    api_key_env = check_key_env(args.api_key_env, "--api-key-env") or DEFAULT_KEY_ENV[args.provider]
    check_base_url(args.base_url, "--base-url")
    check_base_url(args.proposer_base_url, "--proposer-base-url")
    if not 0.0 < args.false_accept_rate <= 0.5:
        raise UsageError(f"--false-accept-rate {args.false_accept_rate}: use a rate in (0, 0.5], e.g. 0.05")
    common = {
        "format": SPEC_FORMAT, "model": args.model, "provider": args.provider, "base_url": args.base_url,
        "api_key_env": api_key_env, "seed": args.seed, "held_out_frac": args.held_out_frac,
        "call_tokens": args.call_tokens, "temperature": args.temperature, "created": now(), "version": __version__,
        "proposer": _proposer_spec(args, api_key_env), "false_accept_rate": args.false_accept_rate,
        "command": _command_line(args),
    }
    if args.tree is not None:
        return init_tree(args, run, common)
    if args.tasks is None:
        raise UsageError("--tasks FILE.jsonl is required (or --tree DIR, to evolve a project's code against its "
                         "tests)")
    args.reward = args.reward or "contains"
    args.strategy = args.strategy or "append"
    tasks = load_tasks(Path(args.tasks))
    reward = make_reward(args.reward, Path(args.run_dir))  # fail now on a bad reward, not mid-run
    check_answers(args.reward, reward, tasks, f"--tasks {args.tasks}")
    check_reward_call(args.reward, reward, tasks, f"--tasks {args.tasks}")
    test_tasks = None
    if args.test_tasks:
        test_tasks = load_tasks(Path(args.test_tasks), "--test-tasks", minimum=1)
        run_ids = {t.id for t in tasks}
        clash = [t.id for t in test_tasks if t.id in run_ids]
        if clash:
            raise UsageError(f"--test-tasks {args.test_tasks}: task id {clash[0]!r} is also in --tasks "
                             f"({len(clash)} shared id(s)); a test set holds tasks the run never decides on")
        check_answers(args.reward, reward, test_tasks, f"--test-tasks {args.test_tasks}")
    initial_text = None
    if args.initial:
        try:
            initial_text = Path(args.initial).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--initial {args.initial}: cannot read it ({exc})") from None
    proposer = common["proposer"]
    spec = {
        **common, "tasks": "tasks.jsonl", "reward": args.reward, "strategy": args.strategy,
        "initial_text": initial_text, "test_tasks": "test_tasks.jsonl" if test_tasks else None,
        "stratify": args.stratify, "proposal": args.proposal,
    }
    if args.stratify and any(args.stratify not in t.meta for t in tasks):
        missing = next(t.id for t in tasks if args.stratify not in t.meta)
        raise UsageError(f"--stratify {args.stratify}: task {missing!r} has no {args.stratify!r} field; every task "
                         "needs it (the tasks file's extra fields are the task's meta)")
    make_strategy(spec, tasks)
    if run.spec_file.exists():  # --force: not under a run that is going on
        with hold(run.path, "init"):
            _write_init(run, spec, tasks, test_tasks)
    else:
        run.path.mkdir(parents=True, exist_ok=True)
        _write_init(run, spec, tasks, test_tasks)
    print(f"initialised {run.path}: {len(tasks)} tasks, model {args.model} ({args.provider}), "
          f"reward {args.reward}, strategy {args.strategy}; the key is read from ${api_key_env} at run time")
    if proposer:
        where = f", {proposer['base_url']}" if proposer["base_url"] else ""
        print(f"proposals by {proposer['model']} ({proposer['provider']}{where}); "
              f"its key is read from ${proposer['api_key_env']} at run time")
    if test_tasks:
        print(f"test set: {len(test_tasks)} tasks, scored at the run's start and end (never used for a decision)")
    return 0


def _write_init(run: RunDir, spec: dict[str, Any], tasks: Sequence[Any], test_tasks: Sequence[Any] | None) -> None:
    write_tasks(run.tasks_file, tasks)
    if test_tasks:
        write_tasks(run.test_tasks_file, test_tasks)
    else:
        with contextlib.suppress(FileNotFoundError):
            run.test_tasks_file.unlink()  # a --force re-init without a test set
    atomic_write(run.spec_file, json.dumps(spec, indent=2, sort_keys=True))


def _write_rounds(run: RunDir, rounds: Sequence[RoundInfo]) -> None:
    """Rewrite ``rounds.jsonl`` from the ledger's rounds (the one store of them), atomically.

    A round's ``ended`` time is the wall time its line was first written, kept from the
    file when the line is rewritten.
    """
    ended = {row["round"]: row.get("ended") for row in run.rounds() if isinstance(row.get("round"), int)}
    total = 0
    lines = []
    for info in rounds:
        total += info.tokens
        row = round_record(info, total)
        row["ended"] = ended.get(info.index)
        lines.append(json.dumps(row, sort_keys=True))
    atomic_write(run.rounds_file, "".join(line + "\n" for line in lines))


def _execute(run: RunDir, spec: dict[str, Any], *, rounds: int, workers: int, max_tokens: int | None,
             asynchronous: bool, patience: int | None = None, restart: bool = False) -> int:
    """Run (or go on with) the run in ``run``; the ledger's saved progress decides which.

    Ctrl-C ends it with one line saying what was kept and how to go on (exit 130). An
    async run counts merges, not rounds: ``rounds * workers`` rollouts in all. Once the
    run's parts are built, ``restart`` deletes the ledger, rounds, result and status, and
    the spec (with this run's settings) is written. What fails before the
    status says "running" (a bad file, a damaged ledger) is the caller's to report; once
    it says so, any failure writes the state ``failed`` and exits 1.
    """
    tasks = load_tasks(run.tasks_file)
    tree = is_tree(spec)
    reward = None if tree else make_reward(spec["reward"], run.path)
    strategy = make_strategy(spec, tasks)
    test_tasks = load_tasks(run.test_tasks_file, "--test-tasks", minimum=1) if spec.get("test_tasks") else None
    agent = make_agent(spec)
    suite = open_suite(spec, run, tasks) if tree else None  # the tests found again on RUN_DIR/tree
    if restart:  # only now: a refused run deletes nothing
        for f in (run.ledger_file, *(run.path / f"ledger.sqlite{end}" for end in ("-wal", "-shm", "-journal")),
                  run.rounds_file, run.result_file, run.status_file):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
    atomic_write(run.spec_file, json.dumps(spec, indent=2, sort_keys=True))
    ledger = SqliteLedger(run.ledger_file)
    try:
        saved = read_progress(ledger, ARTIFACT_ID)
        _write_rounds(run, saved.rounds if saved else [])
        spent_before = saved.tokens if saved else 0
        done_before = len(saved.rounds) if saved else 0
        previous = read_json(run.status_file, "status.json") if run.status_file.exists() else {}
        status: dict[str, Any] = {
            "state": "running", "pid": os.getpid(), "started": now(), "round": done_before,
            "unit": "merge" if asynchronous else "round",
            "head_version": ledger.versions().get(ARTIFACT_ID), "held_out_reward": previous.get("held_out_reward"),
            "initial_reward": previous.get("initial_reward"), "tokens": spent_before, "stop_reason": None,
            "max_tokens": max_tokens, "rounds_planned": None if asynchronous else done_before + rounds,
            "rollouts_planned": rounds * workers if asynchronous else None, "error": None, "why": None,
        }
        run.write_status(status)
        try:
            new_tokens = [0]

            def on_round(info: RoundInfo) -> None:
                new_tokens[0] += info.tokens
                row = round_record(info, spent_before + new_tokens[0])
                row["ended"] = now()
                run.append_round(row)
                status.update(round=info.index, head_version=info.head_version,
                              held_out_reward=info.held_out_reward, tokens=row["tokens_total"])
                run.write_status(status)

            agg = AggregatorConfig(false_accept_rate=spec["false_accept_rate"]) \
                if spec.get("false_accept_rate") else None
            kwargs: dict[str, Any] = dict(
                artifact_id=ARTIFACT_ID, n_workers=workers, seed=int(spec.get("seed", 0)),
                held_out_frac=spec.get("held_out_frac", 0.4), max_tokens=max_tokens, ledger=ledger,
                on_round=on_round, progress=True, test_tasks=test_tasks, stratify=spec.get("stratify"),
                patience=patience, agg_config=agg,
            )
            if suite is None:
                kwargs.update(agent=agent, strategy=strategy, initial_state=initial_state(spec, strategy, run.path))
            else:  # the tests are the tasks, the run and the reward; the model only writes the edits
                kwargs.update(tree_evolve_kwargs(suite, agent, spec))
                tasks, reward = kwargs.pop("tasks"), kwargs.pop("reward")
            if asynchronous:
                result = evolve(tasks, reward, asynchronous=True, max_rollouts=rounds * workers,
                                max_seconds=24 * 3600.0, **kwargs)
            else:
                result = evolve(tasks, reward, rounds=rounds, max_concurrency=workers, **kwargs)
            result.save(run.result_file)
            _write_rounds(run, result.history)  # the last round's tokens settled at the end (the test set's scoring)
            final = None if math.isnan(result.final_reward) else result.final_reward
            why = likely_cause(run.rounds()) if not result.error else None
            error = redact(result.error) if result.error else None
            status.update(state="failed" if result.error else "finished", stop_reason=result.stop_reason,
                          head_version=result.version, error=error, finished=now(),
                          initial_reward=result.initial_reward, held_out_reward=final,
                          tokens=result.usage.total_tokens, round=len(result.history),
                          test=test_summary(result.test), why=why)
            run.write_status(status)
        except KeyboardInterrupt:
            kept = read_progress(ledger, ARTIFACT_ID)  # what a resume starts from (a round can end unsaved)
            done, unit, head = len(kept.rounds) if kept else 0, status["unit"], ledger.versions().get(ARTIFACT_ID)
            status.update(state="interrupted", stop_reason="interrupted", round=done, head_version=head)
            run.write_status(status)
            kept = (f"head v{head} and every commit before it" if head else "nothing committed yet")
            print(f"\ninterrupted after {done} finished {unit}(s); the ledger keeps {kept}; go on with "
                  f"`agentdescent resume {run.path}`", file=sys.stderr)
            return EXIT_INTERRUPTED
        except Exception as exc:  # never left "running": whatever ended the run is its error
            status.update(state="failed", error=_error_line(exc), finished=now())
            with contextlib.suppress(OSError):
                run.write_status(status)
            print(f"agentdescent: the run failed: {status['error']}", file=sys.stderr)
            return 2 if isinstance(exc, InvalidArgument) else 1  # a bad knob in the spec is bad input
    finally:
        ledger.close()
        if suite is not None:
            suite.close()  # its copy of the project (a process that dies leaves it to the suite's finalizer)
    shown = "?" if final is None else f"{final:.3f}"
    start = "?" if result.initial_reward is None else f"{result.initial_reward:.3f}"
    print(f"{status['state']}: {result.stop_reason} after {status['unit']} {len(result.history)}; held-out "
          f"{start} -> {shown}; head v{result.version}; {result.committed} commit(s); "
          f"{result.usage.total_tokens:,} tokens in all")
    if status["test"]:
        print(test_line(status["test"]))
    if suite is not None:
        print(suite_line(suite))
    if why:
        print(f"why: {why}")
        print(f"(each round in detail: agentdescent status {run.path} --verbose)")
    if error:
        print(f"agentdescent: the run failed: {error}", file=sys.stderr)
        return 1
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    with hold(run.path, "run"):  # before anything is read: one driver per run directory
        return _run(run, args)


def _run(run: RunDir, args: argparse.Namespace) -> int:
    spec = run.spec()
    if not run.ledger_file.exists() and run.status_file.exists() and not args.restart:
        raise no_ledger(run)
    if run.ledger_file.exists() and not args.restart:
        raise UsageError(f"{run.path} has already run; `agentdescent resume {run.path}` continues it "
                         "(or pass --restart to start over, which deletes its ledger)")
    spec.update(run_rounds=args.rounds, run_workers=args.workers, run_max_tokens=args.max_tokens,
                run_async=args.asynchronous, run_patience=args.patience, run_command=_command_line(args))
    return _execute(run, spec, rounds=args.rounds, workers=args.workers, max_tokens=args.max_tokens,
                    asynchronous=args.asynchronous, patience=args.patience, restart=args.restart)


def cmd_resume(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    with hold(run.path, "resume"):  # before anything is read: one driver per run directory
        return _resume(run, args)


def _resume(run: RunDir, args: argparse.Namespace) -> int:
    spec = run.spec()
    if not run.ledger_file.exists():
        raise no_ledger(run)
    with SqliteLedger(run.ledger_file) as ledger:
        saved = read_progress(ledger, ARTIFACT_ID)
    planned, workers = spec.get("run_rounds", 15), spec.get("run_workers", 4)
    if spec.get("run_async"):  # an async run's saved rounds are merges: what is left is counted in rollouts
        done_rollouts = sum(r.rollouts for r in saved.rounds) if saved else 0
        left = max(0, -(-(planned * workers - done_rollouts) // workers))
    else:
        left = max(0, planned - (len(saved.rounds) if saved else 0))
    rounds = args.rounds if args.rounds is not None else left
    if not is_tree(spec):
        make_reward(spec["reward"], run.path)  # a spec edited since: refused even with nothing left to run
    if rounds == 0:
        print(f"{run.path}: nothing left to run (it did the {planned} round(s) it was given); "
              f"`agentdescent resume {run.path} --rounds N` adds N more")
        return 0
    spec["run_command"] = _command_line(args)
    return _execute(run, spec, rounds=rounds, workers=spec.get("run_workers", 4),
                    max_tokens=spec.get("run_max_tokens"), asynchronous=bool(spec.get("run_async")),
                    patience=spec.get("run_patience"))


def _command_line(args: argparse.Namespace) -> str:
    """The command as typed (``agentdescent ...``), for the spec and the report (no flag takes a key)."""
    return shlex.join(["agentdescent", *getattr(args, "argv", [])])


# --------------------------------------------------------------------------- parser


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: use a number >= 1")
    return n


class _DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the help already says it (a flag has none)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or action.required or "(default" in text or action.default is False or \
                action.default == argparse.SUPPRESS:
            return text
        shown = "none" if action.default is None else "%(default)s"
        return f"{text} (default: {shown})".lstrip()


def build_parser() -> argparse.ArgumentParser:
    """The ``agentdescent`` argument parser (every command has ``--help``)."""
    parser = _Parser(prog="agentdescent", description="Parallel self-evolution of LLM agent artifacts.")
    parser.add_argument("--version", action="version", version=f"agentdescent {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    defaults = _DefaultsFormatter

    p = sub.add_parser("demo", help="the offline demo (simulated domain, SQLite ledger, no API key)",
                       add_help=False)
    p.set_defaults(func=None)

    p = sub.add_parser("init", help="make a run directory: spec.json and a copy of the tasks (with --tree, of a "
                       "project whose code evolves against its tests)",
                       formatter_class=defaults)
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--tasks", metavar="FILE.jsonl", default=None,
                   help='one JSON object per line: "prompt", optional "id" and "answer" (default: none; required '
                   'without --tree)')
    p.add_argument("--model", required=True, metavar="M", help="the model that answers the tasks (with --tree: "
                   "the model that writes the edits)")
    p.add_argument("--provider", choices=["openai", "anthropic"], default="openai",
                   help="its API: an OpenAI-compatible server, or Anthropic's")
    p.add_argument("--base-url", metavar="U", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8090/v1")
    p.add_argument("--api-key-env", metavar="VAR",
                   help="the environment variable holding the key (default OPENAI_API_KEY / ANTHROPIC_API_KEY); "
                   "only its name is stored")
    p.add_argument("--reward", default=None, metavar="REWARD",
                   help=REWARD_HELP.replace("%", "%%") + " (default: contains)")
    p.add_argument("--test-tasks", metavar="FILE.jsonl", default=None,
                   help="a test set (same format, ids not in --tasks), scored at the run's start and end and "
                   "never used for a decision (default: none)")
    p.add_argument("--proposer-model", metavar="M", default=None,
                   help="a second model that writes the proposals while --model answers the tasks "
                   "(default: none, --model does both)")
    p.add_argument("--proposer-provider", choices=["openai", "anthropic"], default=None,
                   help="the proposer's API (default: --provider)")
    p.add_argument("--proposer-base-url", metavar="U", default=None,
                   help="the proposer's server (default: --base-url when the proposer uses --provider's API, "
                   "else that API's own endpoint)")
    p.add_argument("--proposer-api-key-env", metavar="VAR", default=None,
                   help="the environment variable holding the proposer's key (default: --api-key-env's when the "
                   "proposer uses --provider's API, else OPENAI_API_KEY / ANTHROPIC_API_KEY); only its name is "
                   "stored")
    p.add_argument("--strategy", choices=["append", "keyed", "single"], default=None,
                   help="append: a playbook of rules; keyed: one rule per task category; single: one prompt, "
                   "rewritten whole (default: append)")
    p.add_argument("--initial", metavar="FILE", help="a starting prompt or playbook (one rule per line)")
    p.add_argument("--proposal", choices=["rule", "rewrite"], default=None,
                   help="what the model proposes: one rule, or the whole new text (default: rewrite for "
                   "--strategy single, else rule)")
    p.add_argument("--tree", metavar="DIR", default=None,
                   help="evolve the code of the project in DIR against its own tests: DIR is copied into "
                   "RUN_DIR/tree, its tests are the tasks and the reward, and the model writes search/replace "
                   "edits (not with --tasks, --reward, --strategy, --initial, --proposal, --test-tasks)")
    p.add_argument("--test-cmd", metavar="CMD", default=None,
                   help="with --tree: the test command, writing JUnit XML to {junit} (default: pytest)")
    p.add_argument("--include", metavar="GLOB", action="append", default=None,
                   help="with --tree: the files the run may change, repeatable (default: *.py)")
    p.add_argument("--exclude", metavar="GLOB", action="append", default=None,
                   help="with --tree: files it must not change, repeatable, added to the tests (test_*.py, "
                   "*_test.py, conftest.py, tests/**, test/**), which are never changed (default: the tests)")
    p.add_argument("--pytest-plugins", metavar="NAMES", default=None,
                   help="with --tree and pytest: load only these pytest plugins (comma-separated; '' for none) "
                   "instead of every installed one, which starts each suite run faster (default: every installed)")
    p.add_argument("--suite-timeout", type=float, metavar="SECONDS", default=None,
                   help=f"with --tree: seconds one run of the whole suite may take (default: {DEFAULT_SUITE_TIMEOUT:g})")
    p.add_argument("--seed", type=int, default=0, help="the run's seed (the split, the task order)")
    p.add_argument("--held-out-frac", type=float, default=0.4, help="the share of tasks held out for acceptance")
    p.add_argument("--stratify", metavar="FIELD", default=None,
                   help="split the held-out tasks evenly over this task field, e.g. a label or category "
                   "(default: none; with --tree, group: each test's class or file)")
    p.add_argument("--false-accept-rate", type=float, default=0.05, metavar="A",
                   help="the acceptance test's rate of committing a change that does not help")
    p.add_argument("--call-tokens", type=_positive, default=None, help="max_tokens per model call (the reply limit)")
    p.add_argument("--temperature", type=float, default=None, help="the model's sampling temperature "
                   "(default: the server's)")
    p.add_argument("--force", action="store_true", help="replace an existing spec")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("plan", help="the calls and tokens a round and the run cost at most",
                       formatter_class=defaults)
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--rounds", type=_positive, default=15, help="rounds to plan for")
    p.add_argument("--workers", type=_positive, default=4, help="workers a round")
    p.add_argument("--probe", action="store_true",
                   help="time one real model call to estimate the wall time (spends one call)")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("run", help="run it, writing ledger.sqlite, rounds.jsonl, status.json, result.json",
                       formatter_class=defaults)
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--rounds", type=_positive, default=15,
                   help="rounds to run (with --async: rounds x workers rollouts)")
    p.add_argument("--workers", type=_positive, default=4, help="workers a round, each one task at a time")
    p.add_argument("--max-tokens", type=_positive, default=None, help="the run's token budget (default: none)")
    p.add_argument("--patience", type=_positive, default=None, metavar="N",
                   help="stop after N rounds' worth of rollouts without a commit (default: never)")
    p.add_argument("--async", dest="asynchronous", action="store_true", help="the barrier-free runtime")
    p.add_argument("--restart", action="store_true", help="delete the ledger and rounds and start over")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("status", help="running / finished / failed / interrupted, with progress",
                       formatter_class=defaults)
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="every round: proposals (refused, by kind, with an example), each merge decision "
                   "with its numbers and its reason")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("show", help="the artifact at a version, or a diff between two versions",
                       formatter_class=defaults)
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--version", type=_positive, default=None, help="default: the head")
    p.add_argument("--diff", type=_positive, nargs=2, metavar=("A", "B"), help="the diff from version A to B")
    p.add_argument("--round", type=_positive, default=None, metavar="N",
                   help="round N: its proposals, its decisions with their numbers, and the diff of each commit")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("resume", help="continue an interrupted or finished run",
                       formatter_class=defaults)
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--rounds", type=_positive, default=None, help="rounds to add (default: what the run had left)")
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("eval", help="score a version on tasks (a test set), printing the mean, its interval "
                       "and each task; writes nothing into the run directory",
                       formatter_class=defaults)
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--tasks", metavar="FILE.jsonl", default=None,
                   help="the tasks to score on (same format as init's --tasks; at least one); required, except "
                   "for a tree run (init --tree), whose own tests are run on the version")
    p.add_argument("--version", type=_positive, default=None, metavar="V",
                   help="the version to score (default: the head)")
    p.add_argument("--repeats", type=_positive, default=1, metavar="K",
                   help="draws per task (default 1; more with a sampled model narrows the interval)")
    p.add_argument("--workers", type=_positive, default=4, metavar="W", help="model calls at once (default 4)")
    p.add_argument("--json", metavar="FILE", default=None,
                   help="also write the evaluation as JSON to FILE, outside the run directory (default: print only)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists (a regular file only)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("export", help="write the rendered artifact to a file (a tree run's files to a folder)",
                       formatter_class=defaults)
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the file to write, outside the run directory; for a tree run (init --tree) a folder, "
                   "new or empty")
    p.add_argument("--force", action="store_true",
                   help="replace FILE if it exists (a regular file only); for a tree run, write into a folder "
                   "with files in it (files of the same paths are replaced, the others kept)")
    p.add_argument("--version", type=_positive, default=None, help="the version to export (default: the head)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("report", help="one self-contained HTML page about the run",
                       formatter_class=defaults)
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("-o", "--output", metavar="FILE.html", default=None,
                   help="where to write it: outside the run directory, or its own RUN_DIR/report.html, replaced "
                   "freely (default: RUN_DIR/report.html)")
    p.add_argument("--force", action="store_true", help="replace FILE.html if it exists (a regular file only)")
    p.set_defaults(func=cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 done, 1 the run failed, 2 usage error, 130 Ctrl-C)."""
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # the reader went away (`... | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "demo":
        return demo_main(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help is 0, a bad flag is 2
        return int(exc.code or 0)
    args.argv = argv
    try:
        return int(args.func(args))
    except KeyboardInterrupt:  # outside a run (a run says what it kept)
        print(f"\nagentdescent {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        raise  # the reader went away: `main` stops quietly
    except (ContractError, GovernanceError, LedgerError) as exc:  # bad input: a flag, a missing or damaged file
        print(f"agentdescent {args.command}: {_error_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # a model call, the disk, or a fault of agentdescent's: in one line
        print(f"agentdescent {args.command}: {_error_line(exc)}", file=sys.stderr)
        return 1


def _error_line(exc: BaseException) -> str:
    """An exception in one line with every key-shaped string redacted; one that is not an
    `AgentDescentError` (a fault, not a message written for the user) says its type and where it was raised."""
    text = one_line(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.filename is not None and str(exc.filename) not in text:
        text += f": {exc.filename}"
    if not isinstance(exc, AgentDescentError):
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
        text = f"{type(exc).__name__}: {text}{where}"
    return redact(text)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose error line never echoes a key-shaped value (`redact`)."""

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {redact(message)}\n")

