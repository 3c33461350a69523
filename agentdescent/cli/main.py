"""The command line (``agentdescent``, ``python -m agentdescent``) and run directories.

A run directory holds everything about one run, in real files: ``spec.json`` (what to
run: tasks file, model, provider, the *name* of the API key's environment variable, the
proposer model when a second one writes the proposals, reward, strategy, initial
artifact), ``tasks.jsonl`` (a copy of the tasks), ``test_tasks.jsonl`` (a copy of the
test set, with ``init --test-tasks``), ``tree/`` (with ``init --tree DIR``: a copy of the
project whose code evolves against its own tests, `agentdescent.cli.runtree`), and once it
runs ``ledger.sqlite`` (every version of the artifact and the run's progress; with ``init
--ledger DSN``, a schema of a PostgreSQL database instead, `agentdescent.cli.runledger`),
``rounds.jsonl`` (one JSON line per round, appended as each round ends), ``status.json``
(atomically replaced) and ``result.json``.
An API key, or a database's password, is never written anywhere.

Commands: ``demo``, ``init``, ``plan``, ``run``, ``status``, ``show``, ``resume``,
``eval``, ``export``, ``report``, ``mcp`` (the others as MCP tools, `agentdescent.cli.mcp_server`); each
has ``--help``. Exit codes: 0 done, 1 the run (or
``eval``'s model calls) failed (the message names the cause), 2 usage error (a bad flag,
or a missing, malformed or damaged file, naming it), each in one line without a traceback
(`_main` is the one boundary); 128 + the signal's number when SIGINT (Ctrl-C: 130), SIGTERM
(143), SIGHUP (129) or SIGQUIT (131) stopped the command, which then winds down as after
Ctrl-C (`agentdescent.cli.signals`). ``run`` and ``resume`` hold the run directory's lock
(`agentdescent.cli.runlock`) from before they read anything; the other commands never take it.

The ``--reward`` names are `agentdescent.rewards.builtin.by_name`'s (one home for each rule), plus
``MODULE:FUNC``; each built-in returns a `agentdescent.rewards.builtin.Score` whose feedback
reaches the proposer.

This module owns which function runs each command (`COMMANDS`), the commands that drive a
run (``init``, ``run``, ``resume``) and the error boundary. The flags are
`agentdescent.cli.parser`'s (their defaults the engines'), the read-only commands
`agentdescent.cli.runviews`'s, the HTML report `agentdescent.cli.report`'s, the run
directory's files `agentdescent.cli.rundir`'s and the evolution itself
`agentdescent.engine.entry.evolve`'s. It must not print secrets.
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._version import VERSION as __version__
from ..engine.entry import evolve
from ..engine.result import RoundInfo
from ..errors import (
    AgentDescentError,
    ContractError,
    GovernanceError,
    InvalidArgument,
    LedgerBusy,
    LedgerError,
    UsageError,
)
from ..merge.aggregator import AggregatorConfig
from ..types import one_line
from .demo import main as demo_main
from .diskfull import DISK_FULL, disk_full, disk_full_line
from .explain import likely_cause, round_record
from .mcp_server import serve
from .parser import build_parser
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
from .runinputs import check_inputs, init_inputs
from .runledger import (
    check_reachable,
    database,
    has_ledger,
    ledger_flags,
    ledger_name,
    open_ledger,
    read_saved,
    restart_refused,
)
from .runlock import hold
from .runspec import (
    ARTIFACT_ID,
    DEFAULT_KEY_ENV,
    check_answers,
    check_key_env,
    check_reward_call,
    initial_state,
    is_tree,
    make_agent,
    make_reward,
    make_strategy,
    no_ledger,
    redact,
    spec_knob,
)
from .runtree import check_flags, init_tree, open_suite, suite_line
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
from .signals import catching_signals, stopped
from .specvalues import check_values

__all__ = ["COMMANDS", "EXIT_INTERRUPTED", "SPEC_FORMAT", "UsageError", "main"]

#: The exit code of a run stopped by Ctrl-C (128 + SIGINT, as a shell reports it); SIGTERM's is 143, SIGHUP's
#: 129, SIGQUIT's 131 (`agentdescent.cli.signals.Stopped.exit_code`).
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
    if os.path.lexists(run.path) and not run.path.is_dir():
        raise UsageError(f"RUN_DIR {run.path}: exists and is not a folder; give the path of a new folder (init makes "
                         "it) or of an existing one")
    if run.spec_file.exists() and not args.force:
        raise UsageError(f"{run.spec_file} exists; pick a new RUN_DIR, or pass --force to replace the spec")
    check_flags(args)
    ledger = ledger_flags(args)  # before anything else: a DSN with a password is refused, never echoed
    api_key_env = check_key_env(args.api_key_env, "--api-key-env") or DEFAULT_KEY_ENV[args.provider]
    common = {
        "format": SPEC_FORMAT, "model": args.model, "provider": args.provider, "base_url": args.base_url,
        "api_key_env": api_key_env, "seed": args.seed, "held_out_frac": args.held_out_frac,
        "call_tokens": args.call_tokens, "temperature": args.temperature, "created": now(), "version": __version__,
        "proposer": _proposer_spec(args, api_key_env), "false_accept_rate": args.false_accept_rate,
        "command": _command_line(args),
    }
    if ledger is not None:  # absent: the ledger is RUN_DIR/ledger.sqlite
        common["ledger"] = ledger
    check_values(common)  # each value as `run` will check it, named by its flag (`specvalues.FIELDS`)
    if args.tree is not None:
        if ledger is not None:
            check_reachable(ledger)  # a wrong host, database or password fails now, not at the first run
        code = init_tree(args, run, common)
        _say_ledger(run, common)
        return code
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
        "stratify": args.stratify, "proposal": args.proposal, "demos": args.demos,
        "inputs": init_inputs(tasks, test_tasks, initial_text, args.initial),
    }
    check_values(spec)
    if args.stratify and any(args.stratify not in t.meta for t in tasks):
        missing = next(t.id for t in tasks if args.stratify not in t.meta)
        raise UsageError(f"--stratify {args.stratify}: task {missing!r} has no {args.stratify!r} field; every task "
                         "needs it (the tasks file's extra fields are the task's meta)")
    make_strategy(spec, tasks)
    if ledger is not None:
        check_reachable(ledger)  # last, before anything is written: a wrong host or password fails now
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
    _say_ledger(run, spec)
    return 0


def _say_ledger(run: RunDir, spec: dict[str, Any]) -> None:
    """``init``'s line about a database ledger (nothing for the default ``RUN_DIR/ledger.sqlite``)."""
    if database(spec) is not None:
        print(f"ledger: the {ledger_name(run, spec)}, reachable; its password, if it needs one, is read from "
              "PGPASSWORD or a PGPASSFILE (~/.pgpass) at run time")


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

    Ctrl-C ends it with one line saying what was kept and how to go on (exit 130), and so
    do SIGTERM, SIGHUP and SIGQUIT (state ``terminated``, exit 128 + the signal's number). An
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
    if restart:  # only now: a refused run deletes nothing (and nothing in a database: `restart_refused`)
        ledger_files = [] if database(spec) else [
            run.ledger_file, *(run.path / f"ledger.sqlite{end}" for end in ("-wal", "-shm", "-journal"))]
        for f in (*ledger_files, run.rounds_file, run.result_file, run.status_file):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
    atomic_write(run.spec_file, json.dumps(spec, indent=2, sort_keys=True))
    ledger = open_ledger(run, spec)
    try:
        saved = read_saved(ledger, spec)
        _write_rounds(run, saved.rounds if saved else [])
        spent_before = saved.tokens if saved else 0
        calls_before = saved.calls if saved else 0
        done_before = len(saved.rounds) if saved else 0
        previous = read_json(run.status_file, "status.json") if run.status_file.exists() else {}
        status: dict[str, Any] = {
            "state": "running", "pid": os.getpid(), "started": now(), "round": done_before,
            "unit": "merge" if asynchronous else "round",
            "head_version": ledger.versions().get(ARTIFACT_ID), "held_out_reward": previous.get("held_out_reward"),
            "initial_reward": previous.get("initial_reward"), "tokens": spent_before, "calls": calls_before,
            "stop_reason": None,
            "max_tokens": max_tokens, "rounds_planned": None if asynchronous else done_before + rounds,
            "rollouts_planned": rounds * workers if asynchronous else None, "error": None, "why": None,
            "signal": None,
        }
        run.write_status(status)
        try:
            new_tokens, new_calls = [0], [0]

            def on_round(info: RoundInfo) -> None:
                new_tokens[0] += info.tokens
                new_calls[0] += info.calls
                row = round_record(info, spent_before + new_tokens[0])
                row["ended"] = now()
                run.append_round(row)
                status.update(round=info.index, head_version=info.head_version, held_out_reward=info.held_out_reward,
                              tokens=row["tokens_total"], calls=calls_before + new_calls[0])
                run.write_status(status)

            agg = AggregatorConfig(false_accept_rate=spec["false_accept_rate"]) \
                if spec.get("false_accept_rate") else None
            kwargs: dict[str, Any] = dict(
                artifact_id=ARTIFACT_ID, n_workers=workers, seed=int(spec_knob(spec, "seed")),
                held_out_frac=spec_knob(spec, "held_out_frac"), max_tokens=max_tokens, ledger=ledger,
                on_round=on_round, progress=True, test_tasks=test_tasks, stratify=spec.get("stratify"),
                patience=patience, agg_config=agg, call_cache=run.path / "call-cache",
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
                          tokens=result.usage.total_tokens, calls=result.usage.calls, round=len(result.history),
                          test=test_summary(result.test), why=why)
            run.write_status(status)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM, SIGHUP, SIGQUIT (`catching_signals`)
            stop = stopped(exc)
            saved_now = read_saved(ledger, spec)  # what a resume starts from (a round can end unsaved)
            done, unit, head = len(saved_now.rounds) if saved_now else 0, status["unit"], \
                ledger.versions().get(ARTIFACT_ID)
            # The run directory says what the ledger keeps: its rounds (a round saved whose line was not
            # written yet gets it; none is shown that was not saved) and the tokens they record, and,
            # apart, what this process paid that no saved round records (calls of the round cut off).
            _write_rounds(run, saved_now.rounds if saved_now else [])
            recorded = saved_now.tokens if saved_now else spent_before
            paid = spent_before + int(getattr(getattr(agent, "usage", None), "total_tokens", 0) or 0)
            unsaved = max(0, paid - recorded)
            status.update(state=stop.state, stop_reason=stop.state, signal=stop.name, round=done, head_version=head,
                          tokens=recorded, tokens_unsaved=unsaved, stopped=now(),
                          calls=saved_now.calls if saved_now else calls_before)
            run.write_status(status)
            kept = (f"head v{head} and every commit before it" if head else "nothing committed yet")
            lost = (f"; {unsaved:,} tokens paid since the last saved {unit} are in no record (its calls were cut "
                    "off)" if unsaved else "")
            with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
                print(f"\n{stop.state} after {done} finished {unit}(s) ({stop.name}); the ledger keeps {kept}, "
                      f"{recorded:,} tokens recorded{lost}; go on with `agentdescent resume {run.path}`",
                      file=sys.stderr)
            return stop.exit_code
        except Exception as exc:  # never left "running": whatever ended the run is its error
            error = _error_line(exc)
            if disk_full(exc):  # named, with the way on; written over the old status if need be (`write_status`)
                error = redact(disk_full_line(run.path, exc, f"`agentdescent resume {run.path}`"))
                status["stop_reason"] = DISK_FULL
            elif isinstance(exc, LedgerBusy):  # another driver took the artifact over mid-run: how to go on here
                error += f"; from the command line, go on with `agentdescent resume {run.path}` once it is done"
            status.update(state="failed", error=error, finished=now())
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
    ran = has_ledger(run, spec)
    if ran and args.restart and database(spec):
        raise restart_refused(run, spec)
    if not ran and run.status_file.exists() and not args.restart:
        raise no_ledger(run, spec)
    if ran and not args.restart:
        then = "" if database(spec) else " (or pass --restart to start over, which deletes its ledger)"
        raise UsageError(f"{run.path} has already run; `agentdescent resume {run.path}` continues it{then}")
    settings = dict(run_rounds=args.rounds, run_workers=args.workers, run_max_tokens=args.max_tokens,
                    run_async=args.asynchronous, run_patience=args.patience, run_command=_command_line(args))
    check_values(settings)  # as the spec is checked when opened: a value the spec could not hold is refused now
    _settle_inputs(run, spec, args)
    spec.update(settings)
    return _execute(run, spec, rounds=args.rounds, workers=args.workers, max_tokens=args.max_tokens,
                    asynchronous=args.asynchronous, patience=args.patience, restart=args.restart)


def cmd_resume(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    with hold(run.path, "resume"):  # before anything is read: one driver per run directory
        return _resume(run, args)


def _resume(run: RunDir, args: argparse.Namespace) -> int:
    spec = run.spec()
    if not has_ledger(run, spec):
        raise no_ledger(run, spec)
    _settle_inputs(run, spec, args)
    with open_ledger(run, spec) as ledger:
        saved = read_saved(ledger, spec)
    planned, workers = spec_knob(spec, "rounds", "run_rounds"), spec_knob(spec, "n_workers", "run_workers")
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
        if run.status().get("state") == "finished" and run.result_file.exists():
            return 0
        # Killed after its last round was saved, its end never written: the call below, with
        # nothing to run, writes it from the saved run (nothing is measured or called).
    spec["run_command"] = _command_line(args)
    return _execute(run, spec, rounds=rounds, workers=workers,
                    max_tokens=spec_knob(spec, "max_tokens", "run_max_tokens"),
                    asynchronous=bool(spec.get("run_async")), patience=spec_knob(spec, "patience", "run_patience"))


def _settle_inputs(run: RunDir, spec: dict[str, Any], args: argparse.Namespace) -> bool:
    """Refuse a task file changed since init, unless ``--accept-changed-tasks`` (`check_inputs`); say its notes.

    What changed in the spec (checksums recorded for the first time, a change adopted) is
    written at once, under the run's lock: it holds whatever happens to the run next.
    """
    notes, changed = check_inputs(run, spec, accept=args.accept_changed_tasks, command=_command_line(args))
    if changed:
        atomic_write(run.spec_file, json.dumps(spec, indent=2, sort_keys=True))
    for note in notes:
        print(note, file=sys.stderr)
    return changed


def _command_line(args: argparse.Namespace) -> str:
    """The command as typed (``agentdescent ...``), for the spec and the report (no flag takes a key)."""
    return shlex.join(["agentdescent", *getattr(args, "argv", [])])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 done, 1 the run failed, 2 usage error, 128 + a signal's
    number: 130 Ctrl-C, 143 SIGTERM)."""
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # the reader went away (`... | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


#: What runs each command of `agentdescent.cli.parser.build_parser` (``demo`` has a parser of its own).
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "init": cmd_init, "plan": cmd_plan, "run": cmd_run, "status": cmd_status, "show": cmd_show,
    "resume": cmd_resume, "eval": cmd_eval, "export": cmd_export, "report": cmd_report,
    "mcp": lambda args: serve(args.root, _main),  # the tools call the same boundary (`agentdescent.cli.mcp_server`)
}


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
        with catching_signals():  # SIGTERM, SIGHUP, SIGQUIT end a command as Ctrl-C does: every finally runs
            return int(COMMANDS[args.command](args))
    except KeyboardInterrupt as exc:  # outside a run (a run says what it kept)
        stop = stopped(exc)
        with contextlib.suppress(OSError):
            print(f"\nagentdescent {args.command}: {stop.state} ({stop.name})", file=sys.stderr)
        return stop.exit_code
    except BrokenPipeError:
        raise  # the reader went away: `main` stops quietly
    except (ContractError, GovernanceError, LedgerError) as exc:  # bad input: a flag, a missing or damaged file
        return _failed(args, exc, 2)
    except Exception as exc:  # a model call, the disk, or a fault of agentdescent's: in one line
        return _failed(args, exc, 1)


def _failed(args: argparse.Namespace, exc: BaseException, code: int) -> int:
    """Say a command's failure in one line; returns ``code``, or 1 for a full disk, whatever raised it.

    A full disk (a ledger write, the run lock, a run directory's file) is not bad input:
    the line names the folder, the room left and the command that goes on once there is room.
    """
    if disk_full(exc):
        run = RunDir(args.run_dir)
        then = (f"agentdescent resume {run.path}" if args.command in ("run", "resume") and _resumable(run)
                else _command_line(args))
        print(f"agentdescent {args.command}: {redact(disk_full_line(run.path, exc, f'`{then}`'))}", file=sys.stderr)
        return 1
    print(f"agentdescent {args.command}: {_error_line(exc)}", file=sys.stderr)
    return code


def _resumable(run: RunDir) -> bool:
    """Whether ``resume`` could go on with the run (it has a ledger); False when that cannot be told."""
    try:
        spec = run.spec()
    except (UsageError, OSError):
        spec = {}  # the ledger file is the default
    try:
        return has_ledger(run, spec)
    except LedgerError:
        return False


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

