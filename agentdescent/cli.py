"""The command line (``agentdescent``, ``python -m agentdescent``) and run directories.

A run directory holds everything about one run, in real files: ``spec.json`` (what to
run: tasks file, model, provider, the *name* of the API key's environment variable,
reward, strategy, initial artifact), ``tasks.jsonl`` (a copy of the tasks), and once it
runs ``ledger.sqlite`` (every version of the artifact and the run's progress),
``rounds.jsonl`` (one JSON line per round, appended as each round ends), ``status.json``
(atomically replaced) and ``result.json``. An API key is never written anywhere.

Commands: ``demo``, ``init``, ``plan``, ``run``, ``status``, ``show``, ``resume``,
``export``, ``report``; each has ``--help``. Exit codes: 0 done, 1 the run failed (the
message names the cause), 2 usage error (a bad flag, or a missing or malformed file,
naming the line).

This module owns argument parsing, the run-directory files and the HTML report; the
evolution itself is `agentdescent.evolution.evolve`'s. It must not print secrets.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import difflib
import html
import importlib
import json
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._version import VERSION as __version__
from .demo import main as demo_main
from .errors import AgentDescentError, UsageError
from .evolution import evolve
from .ledger import SqliteLedger
from .progress import read_progress
from .result import RoundInfo
from .strategies import AppendRules, KeyedRules, SingleSlot, Strategy
from .tokens import estimate_tokens
from .types import Task

__all__ = ["SPEC_FORMAT", "UsageError", "main"]

SPEC_FORMAT = "agentdescent-run/1"
ARTIFACT_ID = "artifact"
_REWARDS = "exact, contains, regex:PATTERN or MODULE:FUNC"


# --------------------------------------------------------------------------- files


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no {what} here; is this a run directory made by `agentdescent init`?") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable {what} ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: the {what} must be a JSON object")
    return data


def load_tasks(path: Path) -> list[Task]:
    """Read a tasks file: one JSON object per line with ``prompt``, optional ``id`` and ``answer``.

    Raises:
        UsageError: the file is missing, or a line is malformed (the message names the line).
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise UsageError(f"--tasks {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--tasks {path}: cannot read it ({exc})") from None
    tasks: list[Task] = []
    seen: set[str] = set()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise UsageError(f"{path}, line {n}: not JSON ({exc.args[0]})") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise UsageError(f'{path}, line {n}: each line must be a JSON object with a non-empty "prompt" string')
        task_id = str(row.get("id", f"task-{n}"))
        if task_id in seen:
            raise UsageError(f"{path}, line {n}: duplicate id {task_id!r}; ids must be unique")
        seen.add(task_id)
        meta = {k: v for k, v in row.items() if k not in ("id", "prompt")}
        tasks.append(Task(task_id, row["prompt"], meta))
    if len(tasks) < 4:
        raise UsageError(f"{path}: {len(tasks)} task(s); give at least 4 (some train, some held out)")
    return tasks


# --------------------------------------------------------------------------- rewards and strategies


def _normalize(text: str) -> str:
    text = re.sub(r"[^\w\s]", " ", text.lower())
    return " ".join(text.split())


def _answer(task: Task) -> str:
    if "answer" not in task.meta:
        raise UsageError(f"task {task.id!r} has no \"answer\"; the built-in rewards compare the output with it")
    return str(task.meta["answer"])


def reward_exact(task: Task, output: str) -> float:
    """1.0 when the output equals the task's ``answer`` (case, punctuation and spacing ignored)."""
    return 1.0 if _normalize(output) == _normalize(_answer(task)) else 0.0


def reward_contains(task: Task, output: str) -> float:
    """1.0 when the task's ``answer`` appears in the output as whole words (case ignored)."""
    answer = _normalize(_answer(task))
    return 1.0 if answer and re.search(rf"(^|\s){re.escape(answer)}($|\s)", _normalize(output)) else 0.0


def make_reward(spec: str) -> Callable[[Task, str], float]:
    """The reward a ``--reward`` value names.

    Raises:
        UsageError: an unknown name, a bad pattern, or a function that cannot be imported.
    """
    if spec == "exact":
        return reward_exact
    if spec == "contains":
        return reward_contains
    if spec.startswith("regex:"):
        try:
            pattern = re.compile(spec[len("regex:"):])
        except re.error as exc:
            raise UsageError(f"--reward {spec!r}: not a valid regular expression ({exc})") from None

        def reward_regex(task: Task, output: str) -> float:
            return 1.0 if pattern.search(output) else 0.0

        return reward_regex
    module, sep, func = spec.partition(":")
    if sep and module and func:
        try:
            fn = getattr(importlib.import_module(module), func)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"--reward {spec!r}: cannot import {func} from {module} ({exc})") from None
        if not callable(fn):
            raise UsageError(f"--reward {spec!r}: {module}.{func} is not callable")
        return fn
    raise UsageError(f"--reward {spec!r}: use {_REWARDS}")


def make_strategy(spec: dict[str, Any], tasks: Sequence[Task]) -> Strategy:
    """The strategy the spec names (``keyed`` takes its categories from the tasks' ``category``)."""
    name = spec["strategy"]
    if name == "append":
        return AppendRules()
    if name == "single":
        return SingleSlot(initial_value=spec.get("initial_text") or "")
    categories = sorted({str(t.meta["category"]) for t in tasks if "category" in t.meta})
    if not categories:
        raise UsageError('--strategy keyed needs a "category" on the tasks (the slot names)')
    return KeyedRules(categories)


def initial_state(spec: dict[str, Any], strategy: Strategy) -> dict[str, str]:
    """The starting state: the strategy's, with each line of ``--initial`` added as a proposal."""
    state = strategy.initial()
    text = spec.get("initial_text")
    if text and not isinstance(strategy, SingleSlot):
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                diff = strategy.to_diff(state, line, "initial", 1, ARTIFACT_ID)
                if diff is not None:
                    state = diff.apply(state)
    return state


def make_agent(spec: dict[str, Any]) -> Any:
    """The `LLMAgent` the spec describes; the key is read from its environment variable now."""
    from .agents import LLMAgent
    from .providers import anthropic, openai_compatible

    env_var = spec.get("api_key_env")
    key = os.environ.get(env_var) if env_var else None
    if env_var and not key:
        raise UsageError(f"the API key's environment variable {env_var} is not set; export it and run again")
    factory = openai_compatible if spec["provider"] == "openai" else anthropic
    options: dict[str, Any] = {"api_key": key}
    if spec.get("base_url"):
        options["base_url"] = spec["base_url"]
    provider = factory(spec["model"], **options)
    return LLMAgent(provider, max_tokens=spec.get("call_tokens"), temperature=spec.get("temperature"))


# --------------------------------------------------------------------------- run directory


class RunDir:
    """The files of one run directory (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    spec_file = property(lambda self: self.path / "spec.json")
    tasks_file = property(lambda self: self.path / "tasks.jsonl")
    ledger_file = property(lambda self: self.path / "ledger.sqlite")
    rounds_file = property(lambda self: self.path / "rounds.jsonl")
    status_file = property(lambda self: self.path / "status.json")
    result_file = property(lambda self: self.path / "result.json")

    def spec(self) -> dict[str, Any]:
        """The run's spec.

        Raises:
            UsageError: no spec here, or one this version cannot read.
        """
        spec = _read_json(self.spec_file, "spec.json")
        if spec.get("format") != SPEC_FORMAT:
            raise UsageError(f"{self.spec_file}: format {spec.get('format')!r}, expected {SPEC_FORMAT!r}")
        return spec

    def rounds(self) -> list[dict[str, Any]]:
        """Every round written so far (a torn last line, from a kill mid-write, is skipped)."""
        if not self.rounds_file.exists():
            return []
        rows = []
        for line in self.rounds_file.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
        return rows

    def append_round(self, row: dict[str, Any]) -> None:
        """Append one round's line and flush it to disk."""
        with self.rounds_file.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def write_status(self, status: dict[str, Any]) -> None:
        """Replace ``status.json`` atomically."""
        _atomic_write(self.status_file, json.dumps(status, indent=2, sort_keys=True))

    def status(self) -> dict[str, Any]:
        """The status, with a run whose process died without finishing reported as ``interrupted``."""
        if not self.status_file.exists():
            return {"state": "initialised", "round": 0}
        status = _read_json(self.status_file, "status.json")
        if status.get("state") == "running" and not _alive(status.get("pid")):
            status["state"] = "interrupted"
        return status


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- commands


def cmd_init(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    if run.spec_file.exists() and not args.force:
        raise UsageError(f"{run.spec_file} exists; pick a new RUN_DIR, or pass --force to replace the spec")
    tasks = load_tasks(Path(args.tasks))
    make_reward(args.reward)  # fail now on a bad reward, not mid-run
    if args.reward in ("exact", "contains"):
        missing = [t.id for t in tasks if "answer" not in t.meta]
        if missing:
            raise UsageError(f'--reward {args.reward} compares with each task\'s "answer"; task {missing[0]!r} has none')
    initial_text = None
    if args.initial:
        try:
            initial_text = Path(args.initial).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--initial {args.initial}: cannot read it ({exc})") from None
    if args.api_key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", args.api_key_env):
        raise UsageError(f"--api-key-env {args.api_key_env!r}: give the NAME of an environment variable, not the key")
    api_key_env = args.api_key_env or ("OPENAI_API_KEY" if args.provider == "openai" else "ANTHROPIC_API_KEY")
    spec = {
        "format": SPEC_FORMAT, "tasks": "tasks.jsonl", "model": args.model, "provider": args.provider,
        "base_url": args.base_url, "api_key_env": api_key_env, "reward": args.reward,
        "strategy": args.strategy, "initial_text": initial_text, "seed": args.seed,
        "held_out_frac": args.held_out_frac, "call_tokens": args.call_tokens,
        "temperature": args.temperature, "created": _now(), "version": __version__,
    }
    make_strategy(spec, tasks)
    run.path.mkdir(parents=True, exist_ok=True)
    with run.tasks_file.open("w", encoding="utf-8") as f:
        for t in tasks:
            f.write(json.dumps({"id": t.id, "prompt": t.prompt, **dict(t.meta)}, ensure_ascii=False) + "\n")
    _atomic_write(run.spec_file, json.dumps(spec, indent=2, sort_keys=True))
    print(f"initialised {run.path}: {len(tasks)} tasks, model {args.model} ({args.provider}), "
          f"reward {args.reward}, strategy {args.strategy}; the key is read from ${api_key_env} at run time")
    return 0


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
    print("The paired test stops each evaluation as soon as it is settled and scores the head once per "
          "task and version, so the real cost is usually far lower; cap it with `agentdescent run --max-tokens N`.")
    return 0


def _round_row(info: RoundInfo, tokens_total: int) -> dict[str, Any]:
    """One line of ``rounds.jsonl``: a view of the ledger's record of the round."""
    return {
        "round": info.index, "held_out_reward": info.held_out_reward, "head_version": info.head_version,
        "tokens": info.tokens, "tokens_total": tokens_total, "committed": info.committed,
        "fused": info.fused, "rollouts": info.rollouts, "cards": info.cards,
        "outcomes": [r.outcome.value for r in info.reports],
    }


def _write_rounds(run: RunDir, rounds: Sequence[RoundInfo]) -> None:
    """Rewrite ``rounds.jsonl`` from the ledger's rounds (the one store of them), atomically."""
    total = 0
    lines = []
    for info in rounds:
        total += info.tokens
        lines.append(json.dumps(_round_row(info, total), sort_keys=True))
    _atomic_write(run.rounds_file, "".join(line + "\n" for line in lines))


def _execute(run: RunDir, spec: dict[str, Any], *, rounds: int, workers: int, max_tokens: int | None,
             asynchronous: bool) -> int:
    """Run (or go on with) the run in ``run``; the ledger's saved progress decides which."""
    tasks = load_tasks(run.tasks_file)
    reward = make_reward(spec["reward"])
    strategy = make_strategy(spec, tasks)
    agent = make_agent(spec)
    ledger = SqliteLedger(run.ledger_file)
    saved = read_progress(ledger, ARTIFACT_ID)
    _write_rounds(run, saved.rounds if saved else [])
    spent_before = saved.tokens if saved else 0
    done_before = len(saved.rounds) if saved else 0
    previous = _read_json(run.status_file, "status.json") if run.status_file.exists() else {}
    status: dict[str, Any] = {
        "state": "running", "pid": os.getpid(), "started": _now(), "round": done_before,
        "head_version": ledger.versions().get(ARTIFACT_ID), "held_out_reward": previous.get("held_out_reward"),
        "initial_reward": previous.get("initial_reward"), "tokens": spent_before, "stop_reason": None,
        "max_tokens": max_tokens, "rounds_planned": done_before + rounds, "error": None,
    }
    run.write_status(status)
    new_tokens = [0]

    def on_round(info: RoundInfo) -> None:
        new_tokens[0] += info.tokens
        row = _round_row(info, spent_before + new_tokens[0])
        run.append_round(row)
        status.update(round=info.index, head_version=info.head_version, held_out_reward=info.held_out_reward,
                      tokens=row["tokens_total"])
        run.write_status(status)

    kwargs: dict[str, Any] = dict(
        agent=agent, strategy=strategy, initial_state=initial_state(spec, strategy), artifact_id=ARTIFACT_ID,
        n_workers=workers, seed=int(spec.get("seed", 0)), held_out_frac=spec.get("held_out_frac", 0.4),
        max_tokens=max_tokens, ledger=ledger, on_round=on_round, progress=True,
    )
    try:
        if asynchronous:
            result = evolve(tasks, reward, asynchronous=True, max_rollouts=rounds * workers,
                            max_seconds=24 * 3600.0, **kwargs)
        else:
            result = evolve(tasks, reward, rounds=rounds, max_concurrency=workers, **kwargs)
    except KeyboardInterrupt:
        status.update(state="interrupted", stop_reason="interrupted")
        run.write_status(status)
        ledger.close()
        raise
    except AgentDescentError as exc:
        status.update(state="failed", error=str(exc), finished=_now())
        run.write_status(status)
        ledger.close()
        print(f"agentdescent: the run failed: {exc}", file=sys.stderr)
        return 1
    ledger.close()
    result.save(run.result_file)
    final = None if math.isnan(result.final_reward) else result.final_reward
    status.update(state="failed" if result.error else "finished", stop_reason=result.stop_reason,
                  head_version=result.version, error=result.error, finished=_now(),
                  initial_reward=result.initial_reward, held_out_reward=final,
                  tokens=result.usage.total_tokens, round=len(result.history))
    run.write_status(status)
    shown = "?" if final is None else f"{final:.3f}"
    start = "?" if result.initial_reward is None else f"{result.initial_reward:.3f}"
    print(f"{status['state']}: {result.stop_reason} after round {len(result.history)}; held-out {start} -> "
          f"{shown}; head v{result.version}; {result.usage.total_tokens} tokens in all")
    if result.error:
        print(f"agentdescent: the run failed: {result.error}", file=sys.stderr)
        return 1
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    spec = run.spec()
    if run.status().get("state") == "running":
        raise UsageError(f"{run.path} is running (pid {run.status().get('pid')}); wait for it or stop it first")
    if run.ledger_file.exists() and not args.restart:
        raise UsageError(f"{run.path} has already run; `agentdescent resume {run.path}` continues it "
                         "(or pass --restart to start over, which deletes its ledger)")
    if args.restart:
        for f in (run.ledger_file, run.rounds_file, run.result_file, run.status_file):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
    spec.update(run_rounds=args.rounds, run_workers=args.workers, run_max_tokens=args.max_tokens,
                run_async=args.asynchronous)
    _atomic_write(run.spec_file, json.dumps(spec, indent=2, sort_keys=True))
    return _execute(run, spec, rounds=args.rounds, workers=args.workers, max_tokens=args.max_tokens,
                    asynchronous=args.asynchronous)


def cmd_resume(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    spec = run.spec()
    state = run.status().get("state")
    if state == "running":
        raise UsageError(f"{run.path} is still running (pid {run.status().get('pid')})")
    if not run.ledger_file.exists():
        raise UsageError(f"{run.path} has not run yet; use `agentdescent run {run.path}`")
    with SqliteLedger(run.ledger_file) as ledger:
        saved = read_progress(ledger, ARTIFACT_ID)
    done = len(saved.rounds) if saved else 0
    planned = spec.get("run_rounds", 15)
    rounds = args.rounds if args.rounds is not None else max(1, planned - done)
    return _execute(run, spec, rounds=rounds, workers=spec.get("run_workers", 4),
                    max_tokens=spec.get("run_max_tokens"), asynchronous=bool(spec.get("run_async")))


def cmd_status(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    run.spec()
    status = run.status()
    rounds = run.rounds()
    print(f"state: {status.get('state')}")
    print(f"round: {status.get('round', 0)}" + (f" of {status['rounds_planned']}" if status.get("rounds_planned") else ""))
    print(f"head version: {status.get('head_version')}")
    reward = status.get("held_out_reward")
    print(f"held-out reward: {reward if reward is None else format(reward, '.3f')}")
    print(f"tokens spent: {status.get('tokens', 0)}" + (f" of {status['max_tokens']}" if status.get("max_tokens") else ""))
    print(f"stop reason: {status.get('stop_reason')}")
    if status.get("error"):
        print(f"error: {status['error']}")
    if rounds:
        print(f"commits: {sum(r['committed'] for r in rounds)} in {len(rounds)} round(s)")
    return 0


def _versions(run: RunDir) -> tuple[dict[int, dict[str, str]], Strategy]:
    spec = run.spec()
    if not run.ledger_file.exists():
        raise UsageError(f"{run.path} has no ledger yet; `agentdescent run {run.path}` first")
    ledger = SqliteLedger(run.ledger_file)
    try:
        states = {entry.version: dict(entry.state) for entry in ledger.history(ARTIFACT_ID)}
    finally:
        ledger.close()
    return states, make_strategy(spec, load_tasks(run.tasks_file))


def _reward_of(run: RunDir) -> dict[int, float]:
    rewards: dict[int, float] = {}
    status = run.status()
    if status.get("initial_reward") is not None:
        rewards[1] = status["initial_reward"]
    for row in run.rounds():
        if row.get("head_version") is not None:
            rewards[row["head_version"]] = row["held_out_reward"]
    return rewards


def _pick(states: dict[int, dict[str, str]], version: int | None, flag: str) -> int:
    if version is None:
        return max(states)
    if version not in states:
        raise UsageError(f"{flag} {version}: no such version; the ledger holds 1..{max(states)}")
    return version


def cmd_show(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    states, strategy = _versions(run)
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


def cmd_export(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    states, strategy = _versions(run)
    v = _pick(states, args.version, "--version")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(out, strategy.render(states[v]) + "\n")
    print(f"wrote v{v} to {out}")
    return 0


def _svg(points: list[tuple[float, float]], width: int = 640, height: int = 240) -> str:
    if not points:
        return "<p>No rounds yet.</p>"
    xs = [p[0] for p in points]
    x0, x1 = min(xs), max(xs) or 1.0
    span = (x1 - x0) or 1.0
    pad = 36

    def px(x: float, y: float) -> str:
        return f"{pad + (x - x0) / span * (width - 2 * pad):.1f},{height - pad - y * (height - 2 * pad):.1f}"

    line = " ".join(px(x, y) for x, y in points)
    dots = "".join(f'<circle cx="{px(x, y).split(",")[0]}" cy="{px(x, y).split(",")[1]}" r="3"/>' for x, y in points)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="held-out reward against tokens">'
        f'<rect width="100%" height="100%" fill="#fff" stroke="#ccc"/>'
        f'<text x="{pad}" y="20" font-size="12">held-out reward (0-1) against tokens spent ({int(x0)}-{int(x1)})</text>'
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#999"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#999"/>'
        f'<text x="{pad - 6}" y="{height - pad + 4}" font-size="11" text-anchor="end">0</text>'
        f'<text x="{pad - 6}" y="{pad + 4}" font-size="11" text-anchor="end">1</text>'
        f'<polyline fill="none" stroke="#1f6feb" stroke-width="2" points="{line}"/>'
        f'<g fill="#1f6feb">{dots}</g></svg>'
    )


def cmd_report(args: argparse.Namespace) -> int:
    run = RunDir(args.run_dir)
    spec = run.spec()
    states, strategy = _versions(run)
    rounds = run.rounds()
    status = run.status()
    first, last = min(states), max(states)
    points = [(0.0, status["initial_reward"])] if status.get("initial_reward") is not None else []
    points += [(float(r["tokens_total"]), float(r["held_out_reward"])) for r in rounds]
    rows = "".join(
        f"<tr><td>{r['round']}</td><td>{r['held_out_reward']:.3f}</td><td>{r['committed']}</td>"
        f"<td>{html.escape(', '.join(r['outcomes']) or '-')}</td><td>{r['tokens']}</td><td>{r['tokens_total']}</td></tr>"
        for r in rounds
    )
    diff = "\n".join(difflib.unified_diff(strategy.render(states[first]).splitlines(),
                                          strategy.render(states[last]).splitlines(), f"v{first}", f"v{last}",
                                          lineterm=""))
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agentdescent run report: {html.escape(run.path.name)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}}
pre{{background:#f6f8fa;padding:1rem;overflow-x:auto;white-space:pre-wrap}}</style></head><body>
<h1>Run report: {html.escape(run.path.name)}</h1>
<p>Model <b>{html.escape(str(spec['model']))}</b> ({html.escape(spec['provider'])}), reward
<b>{html.escape(spec['reward'])}</b>, strategy <b>{html.escape(spec['strategy'])}</b>.
State <b>{html.escape(str(status.get('state')))}</b>, stop reason {html.escape(str(status.get('stop_reason')))},
head v{last}, {status.get('tokens', 0)} tokens.</p>
<h2>Held-out reward against tokens</h2>{_svg(points)}
<h2>Rounds</h2><table><tr><th>round</th><th>held-out</th><th>commits</th><th>merge outcomes</th>
<th>tokens</th><th>tokens in all</th></tr>{rows}</table>
<h2>Final artifact (v{last})</h2><pre>{html.escape(strategy.render(states[last]))}</pre>
<h2>Diff from the start (v{first} to v{last})</h2><pre>{html.escape(diff or '(no change)')}</pre>
</body></html>
"""
    out = Path(args.output) if args.output else run.path / "report.html"
    _atomic_write(out, page)
    print(f"wrote {out}")
    return 0


# --------------------------------------------------------------------------- parser


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: use a number >= 1")
    return n


def build_parser() -> argparse.ArgumentParser:
    """The ``agentdescent`` argument parser (every command has ``--help``)."""
    parser = argparse.ArgumentParser(prog="agentdescent", description="Parallel self-evolution of LLM agent artifacts.")
    parser.add_argument("--version", action="version", version=f"agentdescent {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("demo", help="the offline demo (simulated domain, SQLite ledger, no API key)",
                       add_help=False)
    p.set_defaults(func=None)

    p = sub.add_parser("init", help="make a run directory: spec.json and a copy of the tasks")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--tasks", required=True, metavar="FILE.jsonl",
                   help='one JSON object per line: "prompt", optional "id" and "answer"')
    p.add_argument("--model", required=True, metavar="M")
    p.add_argument("--provider", choices=["openai", "anthropic"], default="openai")
    p.add_argument("--base-url", metavar="U", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8090/v1")
    p.add_argument("--api-key-env", metavar="VAR",
                   help="the environment variable holding the key (default OPENAI_API_KEY / ANTHROPIC_API_KEY); "
                   "only its name is stored")
    p.add_argument("--reward", default="contains", metavar="REWARD", help=f"{_REWARDS} (default contains)")
    p.add_argument("--strategy", choices=["append", "keyed", "single"], default="append")
    p.add_argument("--initial", metavar="FILE", help="a starting prompt or playbook (one rule per line)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--held-out-frac", type=float, default=0.4)
    p.add_argument("--call-tokens", type=_positive, default=None, help="max_tokens per model call")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--force", action="store_true", help="replace an existing spec")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("plan", help="the calls and tokens a round and the run cost at most")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--rounds", type=_positive, default=15)
    p.add_argument("--workers", type=_positive, default=4)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("run", help="run it, writing ledger.sqlite, rounds.jsonl, status.json, result.json")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--rounds", type=_positive, default=15)
    p.add_argument("--workers", type=_positive, default=4)
    p.add_argument("--max-tokens", type=_positive, default=None, help="the run's token budget")
    p.add_argument("--async", dest="asynchronous", action="store_true", help="the barrier-free runtime")
    p.add_argument("--restart", action="store_true", help="delete the ledger and rounds and start over")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("status", help="running / finished / failed / interrupted, with progress")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("show", help="the artifact at a version, or a diff between two versions")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--version", type=_positive, default=None, help="default: the head")
    p.add_argument("--diff", type=_positive, nargs=2, metavar=("A", "B"))
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("resume", help="continue an interrupted or finished run")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--rounds", type=_positive, default=None, help="rounds to add (default: what the run had left)")
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("export", help="write the rendered artifact to a file")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("-o", "--output", required=True, metavar="FILE")
    p.add_argument("--version", type=_positive, default=None)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("report", help="one self-contained HTML page about the run")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("-o", "--output", metavar="FILE.html", default=None)
    p.set_defaults(func=cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 done, 1 the run failed, 2 usage error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "demo":
        return demo_main(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help is 0, a bad flag is 2
        return int(exc.code or 0)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"agentdescent {args.command}: {exc}", file=sys.stderr)
        return 2
