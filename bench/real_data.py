"""Real data no one here wrote: BIG-bench tasks, our engine against DSPy, every call counted at the wire.

For each BIG-bench task named (``--tasks``) and each seed, the task's examples are shuffled
with ``random.Random(seed)`` (duplicate prompts dropped first) and cut into a **test set**
(``--test-size``, first: tasks no decision of any arm ever sees) and the engine's **pool**
(``--train-size`` + ``--held-out-size``), which the engine splits itself into train and
held-out (``held_out_frac``); DSPy trains on the same train split. Then every arm is run
and scored on the test set with the same reward (``one_of()`` for multiple choice,
``any_target`` for generative tasks):

- ``empty``: the empty artifact, `agentdescent.LLMAgent` at temperature 0;
- ``format`` (reference): a one-line hand-written format instruction as the system prompt;
- ``constant`` (reference, no model): the best constant answer, i.e. the share of the most
  frequent gold answer in the seed's test set;
- ``agentdescent-sync`` / ``agentdescent-async``: ``evolve`` / ``async_evolve`` with
  ``RulesAndDemos(demos=4)`` and ``proposal="auto"`` (skipped, with the reason, when this
  checkout has no ``RulesAndDemos``);
- ``dspy-labeled`` / ``dspy-bootstrap``: ``dspy.LabeledFewShot(k=4)`` and
  ``dspy.BootstrapFewShot(max_bootstrapped_demos=4, max_labeled_demos=4)`` on a
  ``dspy.Predict("question -> answer")`` (DSPy's default ChatAdapter, which falls back to
  its JSONAdapter when a reply does not parse), through ``dspy.LM(..., temperature=0,
  max_tokens=<the same cap>, cache=False, engine="litellm")`` (DSPy 3.4.1's default engine
  sends ``max_completion_tokens``, which the local llama.cpp server does not read as the cap);
  both the parsed ``answer`` field and the raw reply text (from the LM's history) are scored.

Every model call of every arm goes through one counting proxy (`bench._counting_proxy`):
calls and the ``usage`` tokens of the replies, as the server sent them; a call served from
our call cache (``--cache-dir``) never reaches it and is counted apart as a cache hit.

**Well-formed**: for multiple choice, the reply names exactly one of the choices (whole
words, the longest choice first, as ``one_of`` reads it); for a generative task whose
targets hold a number, the reply holds a number (digits, or a number word from zero to
twenty); for any other generative task, the reply is not empty.

It prints one table (arm x task x seed: test accuracy, well-formed share, model calls,
tokens, cache hits, seconds), a per-task summary (medians over seeds), the paired gain of
each agentdescent arm over ``empty`` on the same test tasks with a 95 % bootstrap interval
(`agentdescent.engine.testset.bootstrap_interval` over test tasks, seeds pooled), and the
distribution of each arm's test answers beside the gold one (flagged when 90 % or more of
the answers are one label). Over every agentdescent run it checks, and reports, that no
version of the artifact in the run's ledger (and no committed diff in
``result.history[*].reports``) holds a held-out or test prompt; a leak makes the script
exit 1.

The data: the ``bigbench`` 1.0.0 sdist (~358 MB) is downloaded on first use into
``$AGENTDESCENT_CACHE/bigbench`` (else ``~/.cache/agentdescent/bigbench``) with
``python -m pip download --no-deps --no-binary :all: bigbench==1.0.0``, and only
``bigbench-1.0.0/bigbench/benchmark_tasks/NAME/task.json`` of the requested tasks is
extracted (read member by member; no other path is written). Nothing of BIG-bench is
printed or written to the JSON (no prompt, no reply: ids, scores and answer labels only):
its tasks carry a canary string that must stay out of training corpora.

The command the docs record (a local OpenAI-compatible server with SmolLM2-135M-Instruct)::

    python bench/real_data.py --base-url http://127.0.0.1:8090/v1 --model smollm2-135m \\
        --api-key local --tasks sports_understanding --seeds 0,1,2 --test-size 30 \\
        --json bench/results/real_data.json

Needs the ``openai`` extra (our arms) and ``dspy`` (the ``bench`` extra; the DSPy arms are
skipped, with the reason, without it).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import logging
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentdescent import Task  # noqa: E402
from agentdescent.data.loader import bigbench_tasks, cache_root  # noqa: E402
from agentdescent.engine.config import Split  # noqa: E402
from agentdescent.engine.testset import Evaluation, bootstrap_interval  # noqa: E402
from agentdescent.rewards.builtin import any_target, named_choices, one_of  # noqa: E402
from bench._counting_proxy import CountingProxy, delta  # noqa: E402
from bench.jsonout import write_json  # noqa: E402

ARMS = ("empty", "format", "constant", "agentdescent-sync", "agentdescent-async", "dspy-labeled",
        "dspy-bootstrap")
#: Arms run only when named: the model's own rules, one failure per proposal request or three
#: (``LLMAgent(reflect_on=3)``), to measure what reflecting on several failures does.
EXTRA_ARMS = ("agentdescent-rules", "agentdescent-rules-reflect3")
ENGINE_ARMS = ("agentdescent-sync", "agentdescent-async", *EXTRA_ARMS)
ALL_ARMS = (*ARMS, *EXTRA_ARMS)
DSPY_ARMS = ("dspy-labeled", "dspy-bootstrap")
SDIST = "bigbench-1.0.0.tar.gz"
MEMBER = "bigbench-1.0.0/bigbench/benchmark_tasks/{name}/task.json"
#: The format instruction of the ``format`` arm, by task kind.
FORMAT_INSTRUCTION = {
    "multiple_choice": "Answer with exactly one of the options and nothing else.",
    "generative": "Answer with the answer alone (a number or a few words) and nothing else.",
}
#: A share of answers at or above this on one label is flagged.
DEGENERATE_SHARE = 0.9
NUMBER_WORDS = {w: i for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"])}
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w])|\b(?:" + "|".join(NUMBER_WORDS) + r")\b", re.I)


def progress(message: str) -> None:
    """One progress line on stderr."""
    print(f"[real_data {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- data


def data_folder(override: Path | None = None) -> Path:
    """Where the sdist and the extracted tasks live: ``override``, else ``cache_root() / "bigbench"``."""
    return Path(override).expanduser() if override is not None else cache_root() / "bigbench"


def ensure_sdist(folder: Path, *, python: str = sys.executable) -> Path:
    """The bigbench 1.0.0 sdist in ``folder``, downloaded with pip on first use."""
    path = folder / SDIST
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    command = [python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "bigbench==1.0.0",
               "-d", str(folder)]
    progress(f"downloading the bigbench 1.0.0 sdist (~358 MB, once) into {folder}: {' '.join(command)}")
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0 or not path.is_file():
        raise SystemExit(f"real_data: could not download bigbench==1.0.0 into {folder} (pip exit "
                         f"{proc.returncode}): {proc.stderr.strip()[-800:]}\nDownload it by hand with: "
                         f"{' '.join(command)}")
    progress(f"downloaded {path} ({path.stat().st_size / 1e6:.0f} MB)")
    return path


def check_task_name(name: str) -> str:
    """A BIG-bench task name: lower-case letters, digits and underscores only (no path can hide in it)."""
    if not re.fullmatch(r"[a-z0-9_]+", name or ""):
        raise SystemExit(f"real_data: --tasks {name!r}: a BIG-bench task name is lower-case letters, digits and "
                         "underscores (e.g. sports_understanding)")
    return name


def extract_tasks(sdist: Path, names: Sequence[str], folder: Path) -> dict[str, Path]:
    """``folder/tasks/NAME/task.json`` for each name, read out of ``sdist`` when not there yet.

    Only the members ``bigbench-1.0.0/bigbench/benchmark_tasks/NAME/task.json`` of the asked
    names are read (as regular files, their bytes copied to a path this function builds from
    the checked name: no member name is ever used as a path), each written atomically.

    Raises:
        SystemExit: a name the sdist has no task for (the message lists near names).
    """
    out = {name: folder / "tasks" / check_task_name(name) / "task.json" for name in names}
    missing = {MEMBER.format(name=n): n for n, p in out.items() if not p.is_file()}
    if not missing:
        return out
    progress(f"extracting {', '.join(sorted(missing.values()))} from {sdist}")
    available: list[str] = []
    with tarfile.open(sdist, "r:gz") as archive:
        for member in archive:
            if member.name.endswith("/task.json") and member.name.count("/") == 4:
                available.append(member.name.split("/")[3])
            name = missing.get(member.name)
            if name is None or not member.isfile():
                continue
            source = archive.extractfile(member)
            if source is None:
                continue
            target = out[name]
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "wb") as fh:
                fh.write(source.read())
            os.replace(tmp, target)
            del missing[member.name]
    if missing:
        wanted = sorted(missing.values())
        near = sorted(a for a in available if any(w[:5] in a for w in wanted))[:12]
        raise SystemExit(f"real_data: the bigbench sdist has no JSON task {', '.join(wanted)}"
                         + (f"; near names: {', '.join(near)}" if near else ""))
    return out


def load_examples(path: Path) -> tuple[list[Task], int, str]:
    """The task file's examples (duplicate prompts dropped: how many), and its kind."""
    tasks = bigbench_tasks(path)
    seen: set[str] = set()
    unique = []
    for task in tasks:
        key = " ".join(task.prompt.split()).lower()
        if key not in seen:
            seen.add(key)
            unique.append(task)
    kinds = {t.meta["kind"] for t in unique}
    kind = "multiple_choice" if kinds == {"multiple_choice"} else "generative"
    return unique, len(tasks) - len(unique), kind


def reward_for(kind: str) -> Callable[[Task, str], Any]:
    """The reward every arm is scored with: ``one_of()`` for multiple choice, ``any_target`` otherwise."""
    return one_of() if kind == "multiple_choice" else any_target


@dataclass
class Splits:
    """One (task, seed): the test set, the engine's pool, and the pool's train / held-out split."""

    test: list[Task]
    pool: list[Task]
    train: list[Task]
    held_out: list[Task]
    held_out_frac: float


def make_splits(tasks: Sequence[Task], seed: int, *, test_size: int, train_size: int,
                held_out_size: int) -> Splits:
    """Shuffle with ``random.Random(seed)``; the test set first, then the pool (train + held-out).

    The pool's split is the engine's own (`agentdescent.engine.config.Split` with the same
    seed and ``held_out_frac = held_out_size / (train_size + held_out_size)``), so DSPy
    trains on exactly the engine's train tasks.

    Raises:
        SystemExit: not enough examples for the sizes asked.
    """
    need = test_size + train_size + held_out_size
    if min(test_size, train_size, held_out_size) < 1 or train_size + held_out_size < 4:
        raise SystemExit("real_data: --test-size, --train-size and --held-out-size must be >= 1, and the pool "
                         "(train + held-out) at least 4")
    if len(tasks) < need:
        raise SystemExit(f"real_data: the task has {len(tasks)} distinct examples; --test-size {test_size} + "
                         f"--train-size {train_size} + --held-out-size {held_out_size} = {need}: ask for fewer")
    order = list(tasks)
    random.Random(seed).shuffle(order)
    test = order[:test_size]
    pool = order[test_size:need]
    frac = held_out_size / (train_size + held_out_size)
    train, held = Split(held_out_frac=frac).split(pool, seed)
    return Splits(test, pool, list(train), list(held), frac)


# --------------------------------------------------------------------------- scoring replies


def _as_number(token: str) -> str:
    word = NUMBER_WORDS.get(token.lower())
    if word is not None:
        return str(word)
    value = float(token)
    return str(int(value)) if value == int(value) else repr(value)


def numeric_targets(task: Task) -> list[str]:
    """The task's targets that are numbers, written as digits (number words read as numbers)."""
    out = []
    for target in task.meta.get("targets") or [task.meta.get("answer", "")]:
        text = str(target).strip()
        if re.fullmatch(r"[-+]?\d+(?:\.\d+)?", text) or text.lower() in NUMBER_WORDS:
            out.append(_as_number(text))
    return out


def answer_label(task: Task, text: str) -> str:
    """What a reply answers, as one label: the choice it names, or ``(none)`` / ``(several)``; for a
    numeric generative task the first number (as digits) or ``(no number)``; for any other
    generative task ``(a target)`` or ``(other)`` (never the reply's own text)."""
    if task.meta.get("kind") == "multiple_choice":
        named = named_choices(task.meta["choices"], text)
        return named[0] if len(named) == 1 else "(none)" if not named else "(several)"
    if numeric_targets(task):
        m = _NUMBER.search(text)
        return _as_number(m.group(0)) if m else "(no number)"
    return "(a target)" if float(any_target(task, text)) == 1.0 else "(other)" if text.strip() else "(empty)"


def gold_label(task: Task) -> str:
    """The gold answer as `answer_label` writes it (digits for a numeric target)."""
    if task.meta.get("kind") == "multiple_choice":
        return str(task.meta["answer"])
    numbers = numeric_targets(task)
    return numbers[0] if numbers else "(a target)"


def well_formed(task: Task, text: str) -> bool:
    """Multiple choice: exactly one choice named; numeric generative: a number; other generative: not empty."""
    if task.meta.get("kind") == "multiple_choice":
        return len(named_choices(task.meta["choices"], text)) == 1
    if numeric_targets(task):
        return _NUMBER.search(text) is not None
    return bool(text.strip())


def score_replies(tasks: Sequence[Task], replies: Mapping[str, str], reward: Callable[[Task, str], Any]
                  ) -> dict[str, Any]:
    """Accuracy, well-formed share, per-task scores and answer labels of ``replies`` (task id -> text)."""
    per_task = {t.id: float(reward(t, replies.get(t.id, ""))) for t in tasks}
    formed = [well_formed(t, replies.get(t.id, "")) for t in tasks]
    return {"accuracy": sum(per_task.values()) / len(tasks), "well_formed": sum(formed) / len(tasks),
            "per_task": per_task, "answers": {t.id: answer_label(t, replies.get(t.id, "")) for t in tasks}}


def constant_accuracy(tasks: Sequence[Task]) -> tuple[float, str]:
    """The best constant answer's accuracy on ``tasks`` (the most frequent gold label's share), and that label."""
    counts = Counter(gold_label(t) for t in tasks)
    label, n = max(sorted(counts.items()), key=lambda kv: kv[1])
    return n / len(tasks), label


def distribution(labels: Iterable[str]) -> dict[str, Any]:
    """Label -> share (largest first), the top share and whether it is degenerate (>= `DEGENERATE_SHARE`)."""
    counts = Counter(labels)
    total = sum(counts.values())
    if not total:
        return {"shares": {}, "top": None, "top_share": 0.0, "degenerate": False}
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    top, n = ordered[0]
    return {"shares": {k: v / total for k, v in ordered}, "top": top, "top_share": n / total,
            "degenerate": n / total >= DEGENERATE_SHARE}


# --------------------------------------------------------------------------- the leak check


def _strings(value: str) -> list[str]:
    """``value`` and, when it is JSON, every string inside it (a demonstration slot is JSON)."""
    out = [value]
    try:
        data = json.loads(value)
    except (ValueError, TypeError):
        return out
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def find_leaks(states: Iterable[Mapping[str, str]], forbidden: Sequence[Task], allowed: Sequence[Task]
               ) -> dict[str, Any]:
    """Which ``forbidden`` tasks (held-out, test) show up in any of ``states``.

    A task shows up when its raw input (``meta["input"]``, else its prompt), white space
    and case folded, is inside a state value or a string of a JSON value. A forbidden input
    that is itself inside an ``allowed`` (train) prompt cannot be told apart from that train
    task, so it is counted as ``ambiguous`` instead.

    Returns:
        ``{"states": n, "checked": n, "ambiguous": n, "leaks": [task ids]}``.
    """
    allowed_text = [_norm(t.prompt) for t in allowed]
    needles = []
    ambiguous = 0
    for task in forbidden:
        needle = _norm(str(task.meta.get("input") or task.prompt))
        if not needle:
            continue
        if any(needle in text for text in allowed_text):
            ambiguous += 1
            continue
        needles.append((task.id, needle))
    haystacks = []
    n_states = 0
    for state in states:
        n_states += 1
        haystacks.extend(_norm(s) for value in state.values() if isinstance(value, str) for s in _strings(value))
    leaks = sorted({tid for tid, needle in needles if any(needle in h for h in haystacks)})
    return {"states": n_states, "checked": len(needles), "ambiguous": ambiguous, "leaks": leaks}


def committed_states(result: Any, ledger: Any, artifact_id: str) -> list[dict[str, str]]:
    """Every version of the artifact in ``ledger``, the final state, and every committed diff's ops."""
    states: list[dict[str, str]] = []
    if ledger is not None:
        with contextlib.suppress(Exception):
            states += [dict(entry.state) for entry in ledger.history(artifact_id)]
    states.append(dict(getattr(result, "state", {}) or {}))
    for info in getattr(result, "history", []) or []:
        for report in getattr(info, "reports", []) or []:
            accepted = getattr(report, "accepted", None)
            ops = getattr(accepted, "ops", None) if accepted is not None else None
            if isinstance(ops, Mapping):
                states.append({str(k): v for k, v in ops.items() if isinstance(v, str)})
    return states


# --------------------------------------------------------------------------- the arms


@dataclass
class Context:
    """What every arm of one (task, seed) shares."""

    args: argparse.Namespace
    proxy: Any
    task: str
    kind: str
    seed: int
    splits: Splits
    reward: Callable[[Task, str], Any]
    call_tokens: int
    empty: dict[str, float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def cache_path(self, arm: str) -> Path | None:
        """The call cache folder of this (task, seed, arm), under ``--cache-dir``; None without one."""
        folder = self.args.cache_dir
        return None if folder is None else Path(folder) / f"{self.task}-seed{self.seed}-{arm}"


def _row(ctx: Context, arm: str, **values: Any) -> dict[str, Any]:
    row = {"task": ctx.task, "kind": ctx.kind, "seed": ctx.seed, "arm": arm, "status": "ok", "reason": "",
           "accuracy": math.nan, "raw_accuracy": None, "well_formed": math.nan, "raw_well_formed": None,
           "calls": 0, "tokens": 0, "prompt_tokens": 0, "completion_tokens": 0, "errors": 0, "cache_hits": 0,
           "seconds": 0.0, "per_task": {}, "answers": {}, "extra": {}}
    row.update(values)
    return row


def _skip(ctx: Context, arm: str, reason: str) -> dict[str, Any]:
    progress(f"{ctx.task} seed {ctx.seed}: {arm} skipped: {reason}")
    return _row(ctx, arm, status="skipped", reason=reason)


def _agent(ctx: Context, cache: Any = None, reflect_on: int = 1) -> Any:
    from agentdescent import LLMAgent
    from agentdescent.providers import openai_compatible

    provider = openai_compatible(ctx.args.model, base_url=ctx.proxy.base_url, api_key=ctx.args.api_key,
                                 timeout=600.0)
    options: dict[str, Any] = {"model": ctx.args.model, "temperature": 0.0, "call_tokens": ctx.call_tokens}
    if reflect_on > 1:
        options["reflect_on"] = reflect_on
    if cache is not None and "call_cache" in inspect.signature(LLMAgent).parameters:
        options["call_cache"] = cache
    return LLMAgent(provider, **options)


def run_prompted(ctx: Context, arm: str) -> dict[str, Any]:
    """``empty`` (no artifact) or ``format`` (the one-line instruction as the system prompt)."""
    from agentdescent.engine.testset import evaluate

    cache = None
    path = ctx.cache_path(arm)
    if path is None and arm == "empty":
        # kept for the engine's arms: their starting artifact is this one, scored on the same test
        # tasks with the same calls, so they replay these replies instead of paying for them again
        path = Path(tempfile.mkdtemp(prefix="agentdescent-empty-calls-"))
        ctx.extra["scratch"] = [*ctx.extra.get("scratch", []), path]
    if path is not None:
        with contextlib.suppress(ImportError):
            from agentdescent.agents.callcache import CallCache

            cache = CallCache(path)
    if arm == "empty" and path is not None:
        ctx.extra["empty_cache"] = path
    agent = _agent(ctx, cache)
    rendered = FORMAT_INSTRUCTION[ctx.kind] if arm == "format" else None
    evaluation = evaluate(ctx.splits.test, ctx.reward, agent=agent, rendered=rendered)
    scored = score_replies(ctx.splits.test, evaluation.outputs, ctx.reward)
    hits = int(getattr(cache, "hits", 0) or 0) if cache is not None else 0
    return _row(ctx, arm, **scored, cache_hits=hits,
                extra={"system_prompt": rendered or "", "mean_check": evaluation.mean})


def run_constant(ctx: Context, arm: str) -> dict[str, Any]:
    """The best constant answer on the seed's test set: no model call."""
    tasks = ctx.splits.test
    accuracy, label = constant_accuracy(tasks)
    gold = {t.id: gold_label(t) for t in tasks}
    return _row(ctx, arm, accuracy=accuracy, well_formed=1.0,
                per_task={t.id: float(gold[t.id] == label) for t in tasks},
                answers=dict.fromkeys(gold, label), extra={"label": label})


def run_engine(ctx: Context, arm: str) -> dict[str, Any]:
    """Our engine: ``evolve`` or ``async_evolve`` with ``RulesAndDemos(demos=4)``, ``proposal="auto"``.

    The rules arms (`EXTRA_ARMS`): ``evolve`` with ``AppendRules()`` and ``proposal="model"``.
    """
    try:
        from agentdescent import AppendRules, RulesAndDemos, async_evolve, evolve
        from agentdescent.ledger import MemoryLedger
    except ImportError as exc:
        return _skip(ctx, arm, f"agentdescent.RulesAndDemos is not importable yet ({exc})")
    args = ctx.args
    artifact = f"bigbench-{ctx.task}"
    ledger = MemoryLedger()
    rules_only = arm.startswith("agentdescent-rules")
    keywords: dict[str, Any] = {
        # the rules arms: the model's own rules only (no demonstration slots), one failure per
        # proposal request or three (reflect_on: GEPA's reflective minibatch)
        "agent": _agent(ctx, reflect_on=3 if arm.endswith("reflect3") else 1),
        "strategy": AppendRules() if rules_only else RulesAndDemos(demos=args.demos),
        "proposal": "model" if rules_only else "auto",
        "test_tasks": ctx.splits.test, "n_workers": args.workers, "seed": ctx.seed,
        "held_out_frac": ctx.splits.held_out_frac, "ledger": ledger, "artifact_id": artifact,
    }
    # the engine's own cache of model calls: a repeated identical temperature-0 call inside the run
    # (a noise probe, a head scored again) is served from disk; under --cache-dir it persists, so a
    # second identical bench run replays (cache hits are counted apart, never as calls)
    path = ctx.cache_path(arm)
    scratch = None
    if path is None:
        scratch = tempfile.TemporaryDirectory(prefix="agentdescent-calls-")
        path = Path(scratch.name)
    keywords["call_cache"] = str(path)
    seeded = _seed_from_empty(ctx, path)
    if arm != "agentdescent-async":
        result = evolve(ctx.splits.pool, ctx.reward, rounds=args.rounds, **keywords)
    else:
        result = async_evolve(ctx.splits.pool, ctx.reward, max_rollouts=args.rounds * args.workers,
                              max_seconds=args.max_seconds, **keywords)
    if scratch is not None:
        scratch.cleanup()
    test = result.test or {}
    if not test.get("final"):
        return _row(ctx, arm, status="error", reason=f"no test evaluation: stop {result.stop_reason}, "
                                                     f"error {result.error}")
    final = Evaluation.from_json(test["final"])
    scored = score_replies(ctx.splits.test, final.outputs, ctx.reward)
    forbidden = [*ctx.splits.held_out, *ctx.splits.test]
    states = committed_states(result, ledger, artifact)
    leaks = find_leaks(states, forbidden, ctx.splits.train)
    demos = sum(1 for k in (result.state or {}) if str(k).startswith("demo:"))
    if leaks["leaks"]:
        progress(f"LEAK: {ctx.task} seed {ctx.seed} {arm}: the artifact holds held-out/test task(s) "
                 f"{', '.join(leaks['leaks'][:5])}")
    return _row(ctx, arm, **scored, cache_hits=int(result.counters.get("cache_hits", 0) or 0),
                extra={"test_initial": result.test_initial, "test_final": result.test_final,
                       "initial_reward": result.initial_reward, "final_reward": result.final_reward,
                       "version": result.version, "committed": _committed(result), "demos": demos,
                       "rules_chars": len(result.rendered or ""), "stop_reason": result.stop_reason,
                       "error": result.error, "outcomes": result.outcomes(), "leak_check": leaks,
                       "test_difference": test.get("difference"), "replayed_from_empty": seeded})


def _seed_from_empty(ctx: Context, path: Path) -> int:
    """Copy the ``empty`` arm's cached calls into an engine arm's cache; how many were copied.

    The engine scores its starting artifact (the empty one) on the test set; those are
    exactly the ``empty`` row's calls, so they are read from its cache instead of being paid
    twice. Nothing else can hit: every other call of the run has an artifact in it.
    """
    source = ctx.extra.get("empty_cache")
    if source is None or not Path(source).is_dir():
        return 0
    path.mkdir(parents=True, exist_ok=True)
    copied = 0
    for entry in Path(source).glob("*.json"):
        target = path / entry.name
        if not target.exists():
            shutil.copyfile(entry, target)
            copied += 1
    return copied


def _committed(result: Any) -> int:
    """How many commits the run made (``result.committed``, a property or a method)."""
    value = getattr(result, "committed", 0)
    return int(value() if callable(value) else value or 0)


def run_dspy(ctx: Context, arm: str) -> dict[str, Any]:
    """DSPy: LabeledFewShot(k=4) or BootstrapFewShot(4, 4) on ``question -> answer``, scored parsed and raw."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch of litellm's price list
    try:
        import dspy
    except ImportError as exc:
        return _skip(ctx, arm, f"dspy is not installed ({exc}); pip install -e '.[bench]'")
    logging.getLogger("dspy").setLevel(logging.ERROR)
    options = {"api_base": ctx.proxy.base_url, "api_key": ctx.args.api_key, "temperature": 0,
               "max_tokens": ctx.call_tokens, "cache": False}
    path = ctx.cache_path(arm)
    if path is not None:
        # under --cache-dir DSPy keeps its own disk cache per (task, seed, arm), as our arms keep
        # theirs: a first run starts from an empty folder and pays every call; a second identical
        # run replays. (No memory cache: it would serve one arm from another's calls.)
        dspy.configure_cache(enable_disk_cache=True, enable_memory_cache=False, disk_cache_dir=str(path),
                             restrict_pickle=True)
        options["cache"] = True
    try:
        lm = dspy.LM(f"openai/{ctx.args.model}", engine="litellm", **options)
    except TypeError:  # a DSPy without engines
        lm = dspy.LM(f"openai/{ctx.args.model}", **options)
    by_question = {t.prompt: t for t in ctx.splits.train}
    train = [dspy.Example(question=t.prompt, answer=str(t.meta["answer"])).with_inputs("question")
             for t in ctx.splits.train]

    def metric(example: Any, prediction: Any, trace: Any = None) -> bool:
        task = by_question[example.question]
        return float(ctx.reward(task, str(getattr(prediction, "answer", "") or ""))) >= 1.0

    student = dspy.Predict("question -> answer")
    with dspy.context(lm=lm):
        try:
            if arm == "dspy-labeled":
                program = dspy.LabeledFewShot(k=4).compile(student, trainset=train)
            else:
                program = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=4,
                                                max_labeled_demos=4).compile(student, trainset=train)
        except Exception as exc:  # DSPy gives up (too many parse errors...): reported, not fatal
            return _row(ctx, arm, status="error", reason=f"compile failed: {type(exc).__name__}: {str(exc)[:200]}")
        parsed: dict[str, str] = {}
        raw: dict[str, str] = {}
        failures = 0
        for task in ctx.splits.test:
            before = len(lm.history)
            try:
                parsed[task.id] = str(program(question=task.prompt).answer or "")
            except Exception:  # a reply no adapter could parse: the parsed answer is empty
                parsed[task.id] = ""
                failures += 1
            raw[task.id] = _history_text(lm.history[before:])
    demos = sum(len(getattr(p, "demos", []) or []) for p in program.predictors())
    scored = score_replies(ctx.splits.test, parsed, ctx.reward)
    raw_scored = score_replies(ctx.splits.test, raw, ctx.reward)
    return _row(ctx, arm, **scored, raw_accuracy=raw_scored["accuracy"], raw_well_formed=raw_scored["well_formed"],
                extra={"adapter": "ChatAdapter (falls back to JSONAdapter)", "demos": demos,
                       "parse_failures": failures, "raw_per_task": raw_scored["per_task"],
                       "raw_answers": raw_scored["answers"], "engine": "litellm"})


def _history_text(entries: Sequence[Mapping[str, Any]]) -> str:
    """The raw text of the first LM call of one prediction (the ChatAdapter's reply), '' if none."""
    for entry in entries:
        outputs = entry.get("outputs") or []
        if outputs:
            first = outputs[0]
            return str(first.get("text", "") if isinstance(first, Mapping) else first or "")
    return ""


RUNNERS: dict[str, Callable[[Context, str], dict[str, Any]]] = {
    "empty": run_prompted, "format": run_prompted, "constant": run_constant,
    "agentdescent-sync": run_engine, "agentdescent-async": run_engine,
    "agentdescent-rules": run_engine, "agentdescent-rules-reflect3": run_engine,
    "dspy-labeled": run_dspy, "dspy-bootstrap": run_dspy,
}


def run_arm(ctx: Context, arm: str) -> dict[str, Any]:
    """Run one arm, counted at the proxy (calls, tokens), timed; a failure is a row with the reason."""
    before = ctx.proxy.snapshot() if ctx.proxy is not None else {}
    start = time.monotonic()
    try:
        row = RUNNERS[arm](ctx, arm)
    except Exception as exc:  # one arm failing must not lose the others' numbers
        row = _row(ctx, arm, status="error", reason=f"{type(exc).__name__}: {str(exc)[:300]}")
    row["seconds"] = round(time.monotonic() - start, 1)
    if ctx.proxy is not None:
        spent = delta(ctx.proxy.snapshot(), before)
        row.update(calls=spent["calls"], tokens=spent["total_tokens"], prompt_tokens=spent["prompt_tokens"],
                   completion_tokens=spent["completion_tokens"], errors=spent["errors"])
    return row


# --------------------------------------------------------------------------- the report


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and math.isnan(x):
        return "n/a"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def paired_gains(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each agentdescent arm minus ``empty`` on the same test tasks, per task name (seeds pooled), with a 95 % interval."""
    out = []
    empties = {(r["task"], r["seed"]): r for r in rows if r["arm"] == "empty" and r["status"] == "ok"}
    for arm in ENGINE_ARMS:
        for task in sorted({r["task"] for r in rows}):
            diffs: list[float] = []
            seeds = []
            for r in rows:
                base = empties.get((r["task"], r["seed"]))
                if r["arm"] != arm or r["task"] != task or r["status"] != "ok" or base is None:
                    continue
                seeds.append(r["seed"])
                diffs += [r["per_task"][t] - base["per_task"][t] for t in r["per_task"] if t in base["per_task"]]
            if diffs:
                low, high = bootstrap_interval(diffs)
                out.append({"arm": arm, "task": task, "seeds": seeds, "test_tasks": len(diffs),
                            "gain": sum(diffs) / len(diffs), "low": low, "high": high,
                            "separated": low > 0 or high < 0})
    return out


def summarize(rows: Sequence[Mapping[str, Any]], gold: Mapping[tuple[str, int], Sequence[str]]) -> dict[str, Any]:
    """The per-task medians over seeds, the paired gains, the answer distributions and the leak verdict."""
    summary = []
    keys = sorted({(r["task"], r["arm"]) for r in rows}, key=lambda k: (k[0], ALL_ARMS.index(k[1])))
    for task, arm in keys:
        mine = [r for r in rows if r["task"] == task and r["arm"] == arm and r["status"] == "ok"]
        entry: dict[str, Any] = {"task": task, "arm": arm, "seeds": len(mine)}
        for name in ("accuracy", "raw_accuracy", "well_formed", "calls", "tokens", "cache_hits", "seconds"):
            values = [r[name] for r in mine if r.get(name) is not None]
            entry[name] = statistics.median(values) if values else None
        summary.append(entry)
    dists = []
    for task in sorted({r["task"] for r in rows}):
        labels = [lab for (t, _), labs in gold.items() if t == task for lab in labs]
        dists.append({"task": task, "arm": "gold", **distribution(labels)})
        for arm in ALL_ARMS:
            mine = [r for r in rows if r["task"] == task and r["arm"] == arm and r["status"] == "ok"]
            if mine:
                dists.append({"task": task, "arm": arm,
                              **distribution(a for r in mine for a in r["answers"].values())})
                if arm in DSPY_ARMS:
                    dists.append({"task": task, "arm": f"{arm} (raw)",
                                  **distribution(a for r in mine for a in r["extra"].get("raw_answers", {}).values())})
    checks = [r["extra"]["leak_check"] for r in rows if r["arm"] in ENGINE_ARMS and r["status"] == "ok"
              and "leak_check" in r["extra"]]
    leaks = {"runs": len(checks), "states": sum(c["states"] for c in checks),
             "prompts_checked": sum(c["checked"] for c in checks),
             "ambiguous": sum(c["ambiguous"] for c in checks),
             "leaks": [f"{r['task']}/seed{r['seed']}/{r['arm']}: {tid}" for r in rows if r["arm"] in ENGINE_ARMS
                       and r["status"] == "ok" for tid in r["extra"].get("leak_check", {}).get("leaks", [])]}
    return {"summary": summary, "gains": paired_gains(rows), "distributions": dists, "leak_check": leaks}


def render(report: Mapping[str, Any]) -> str:
    """The tables, as Markdown."""
    rows = report["rows"]
    lines = [f"model {report['model']} at {report['base_url']}; tasks {', '.join(report['tasks'])}; seeds "
             f"{', '.join(map(str, report['seeds']))}; test {report['test_size']}, train {report['train_size']}, "
             f"held-out {report['held_out_size']}; per-call cap {report['call_tokens']}", ""]
    for split in report["splits"]:
        lines.append(f"- {split['task']} seed {split['seed']}: {split['examples']} distinct examples "
                     f"({split['duplicates_dropped']} duplicate prompts dropped); test {split['test']}, pool "
                     f"{split['pool']} = train {split['train']} + held-out {split['held_out']}")
    lines += ["", "| arm | task | seed | test accuracy | raw-text accuracy | well-formed | model calls | tokens | "
              "cache hits | seconds | note |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        note = r["reason"] if r["status"] != "ok" else ""
        extra = r.get("extra", {})
        if r["status"] == "ok" and r["arm"] in ENGINE_ARMS:
            note = (f"v{extra.get('version')}, {extra.get('committed')} commit(s), {extra.get('demos')} demo(s); "
                    f"stop {extra.get('stop_reason')}")
        elif r["status"] == "ok" and r["arm"] in DSPY_ARMS:
            note = f"{extra.get('demos')} demo(s), {extra.get('parse_failures')} unparsed"
        elif r["arm"] == "constant" and r["status"] == "ok":
            note = f"always {extra.get('label')!r}"
        lines.append(f"| {r['arm']} | {r['task']} | {r['seed']} | {_fmt(r['accuracy'])} | {_fmt(r['raw_accuracy'])} | "
                     f"{_fmt(r['well_formed'])} | {r['calls']} | {r['tokens']} | {r['cache_hits']} | "
                     f"{r['seconds']} | {note} |")
    lines += ["", "Per task, medians over seeds:", "",
              "| task | arm | seeds | test accuracy | raw-text accuracy | well-formed | calls | tokens |",
              "|---|---|---|---|---|---|---|---|"]
    for s in report["summary"]:
        lines.append(f"| {s['task']} | {s['arm']} | {s['seeds']} | {_fmt(s['accuracy'])} | {_fmt(s['raw_accuracy'])} "
                     f"| {_fmt(s['well_formed'])} | {_fmt(s['calls'], 0)} | {_fmt(s['tokens'], 0)} |")
    lines += ["", "Paired gain over `empty` on the same test tasks (seeds pooled; 95 % bootstrap interval):", ""]
    if not report["gains"]:
        lines.append("- none (no agentdescent arm ran)")
    for g in report["gains"]:
        lines.append(f"- {g['arm']} on {g['task']}: {g['gain']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}] over "
                     f"{g['test_tasks']} test task(s), seeds {g['seeds']}"
                     + (" (separated from 0)" if g["separated"] else " (contains 0)"))
    lines += ["", f"Answer distributions (test replies; flagged when one label has >= {DEGENERATE_SHARE:.0%}):", ""]
    for d in report["distributions"]:
        shares = ", ".join(f"{k} {v:.2f}" for k, v in d["shares"].items())
        flag = "" if not d["degenerate"] else "  (one label by construction)" if d["arm"] == "constant" \
            else "  **DEGENERATE**"
        lines.append(f"- {d['task']} / {d['arm']}: {shares}{flag}")
    leak = report["leak_check"]
    lines += ["", f"Leak check over {leak['runs']} agentdescent run(s): {leak['states']} artifact states and committed "
              f"diffs searched for {leak['prompts_checked']} held-out/test inputs ({leak['ambiguous']} ambiguous: "
              f"inside a train prompt): " + ("no leak" if not leak["leaks"] else "LEAKS: " + "; ".join(leak["leaks"]))]
    lines += ["", f"Total wall time: {report['seconds']:.0f} s"]
    return "\n".join(lines)


def _csv(text: str, kind: Callable[[str], Any] = str) -> list[Any]:
    return [kind(x.strip()) for x in text.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    doc = (__doc__ or "").split("\n\n")
    parser = argparse.ArgumentParser(
        description=doc[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="The command the docs record:\n\n"
               "  python bench/real_data.py --base-url http://127.0.0.1:8090/v1 --model smollm2-135m \\\n"
               "      --api-key local --tasks sports_understanding --seeds 0,1,2 --test-size 30 \\\n"
               "      --json bench/results/real_data.json\n\n"
               f"Arms: {', '.join(ARMS)}. BIG-bench is read from $AGENTDESCENT_CACHE/bigbench (else "
               "~/.cache/agentdescent/bigbench), downloaded there on first use; none of it is printed or written.")
    parser.add_argument("--base-url", required=True, help="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8090/v1")
    parser.add_argument("--model", required=True, help="the model name the endpoint knows")
    parser.add_argument("--api-key", default="local", help="any string for a local server (default: local)")
    parser.add_argument("--tasks", default="sports_understanding", help="comma-separated BIG-bench JSON task names")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    parser.add_argument("--test-size", type=int, default=30, help="test tasks per (task, seed) (default 30)")
    parser.add_argument("--train-size", type=int, default=40, help="the engine's train tasks (default 40)")
    parser.add_argument("--held-out-size", type=int, default=20, help="the engine's held-out tasks (default 20)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms (default all: {','.join(ARMS)})")
    parser.add_argument("--rounds", type=int, default=3, help="sync rounds; the async arm admits rounds x workers "
                                                              "rollouts (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="engine workers (default 2)")
    parser.add_argument("--demos", type=int, default=4, help="RulesAndDemos demonstration slots (default 4)")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="the async arm's time limit (default 600)")
    parser.add_argument("--call-tokens", type=int, default=None,
                        help="per-call reply cap for every arm (default 24 for multiple choice, 32 for generative)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="give each (task, seed, arm) a call cache under this folder: a second identical "
                             "run replays from disk (cache hits are counted apart)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where the bigbench sdist and the extracted tasks are (default "
                             "$AGENTDESCENT_CACHE/bigbench, else ~/.cache/agentdescent/bigbench)")
    parser.add_argument("--json", type=Path, help="write the rows and the summaries as JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 1 when an artifact held a held-out or test prompt, else 0."""
    args = build_parser().parse_args(argv)
    started = time.monotonic()
    names = [check_task_name(n) for n in _csv(args.tasks)]
    seeds = _csv(args.seeds, int)
    arms = _csv(args.arms)
    unknown = sorted(set(arms) - set(ALL_ARMS))
    if unknown or not arms or not names or not seeds:
        raise SystemExit(f"real_data: give --tasks, --seeds and --arms (arms: {', '.join(ALL_ARMS)}); "
                         f"unknown: {unknown}")
    folder = data_folder(args.data_dir)
    paths = {n: folder / "tasks" / n / "task.json" for n in names}
    if not all(p.is_file() for p in paths.values()):
        paths = extract_tasks(ensure_sdist(folder), names, folder)
    rows: list[dict[str, Any]] = []
    splits_report = []
    gold: dict[tuple[str, int], list[str]] = {}
    caps = []
    with CountingProxy(args.base_url) as proxy:
        progress(f"counting proxy {proxy.base_url} -> {args.base_url}")
        for name in names:
            examples, dropped, kind = load_examples(paths[name])
            reward = reward_for(kind)
            cap = args.call_tokens or (24 if kind == "multiple_choice" else 32)
            caps.append(cap)
            for seed in seeds:
                splits = make_splits(examples, seed, test_size=args.test_size, train_size=args.train_size,
                                     held_out_size=args.held_out_size)
                splits_report.append({"task": name, "seed": seed, "kind": kind, "examples": len(examples),
                                      "duplicates_dropped": dropped, "test": len(splits.test),
                                      "pool": len(splits.pool), "train": len(splits.train),
                                      "held_out": len(splits.held_out), "test_ids": [t.id for t in splits.test],
                                      "train_ids": [t.id for t in splits.train],
                                      "held_out_ids": [t.id for t in splits.held_out]})
                gold[(name, seed)] = [gold_label(t) for t in splits.test]
                ctx = Context(args, proxy, name, kind, seed, splits, reward, cap)
                for arm in arms:
                    progress(f"{name} seed {seed}: {arm} ...")
                    row = run_arm(ctx, arm)
                    rows.append(row)
                    progress(f"{name} seed {seed}: {arm}: {row['status']} accuracy {_fmt(row['accuracy'])}, "
                             f"{row['calls']} calls, {row['tokens']} tokens, {row['seconds']} s"
                             + (f" ({row['reason']})" if row["reason"] else ""))
                for folder in ctx.extra.get("scratch", []):
                    shutil.rmtree(folder, ignore_errors=True)
    report: dict[str, Any] = {
        "model": args.model, "base_url": args.base_url, "tasks": names, "seeds": seeds, "arms": arms,
        "test_size": args.test_size, "train_size": args.train_size, "held_out_size": args.held_out_size,
        "rounds": args.rounds, "workers": args.workers, "demos": args.demos,
        "call_tokens": caps[0] if len(set(caps)) == 1 else caps, "format_instruction": FORMAT_INSTRUCTION,
        "splits": splits_report, "rows": rows, **summarize(rows, gold),
        "seconds": round(time.monotonic() - started, 1),
    }
    print(render(report))
    write_json(args.json, report)
    progress(f"total wall time {report['seconds']:.0f} s")
    return 1 if report["leak_check"]["leaks"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
