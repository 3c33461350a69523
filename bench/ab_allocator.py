"""The equal-budget A/B: does the value-directed allocator earn its place?

Off arm: ``allocator=None`` (the governor's clock degradation). On arm:
``ValueBudgetAllocator(seed=seed, **allocator_kwargs)``. Both arms get the same
workload, the same ``max_tokens`` and the same seed; each arm gets its own fresh
``Usage`` meter.

The harness is built so that it cannot report a win that did not happen:

- every planned (seed, arm) keeps a row, with its status and the tokens it spent even
  when it failed;
- quality and cost are compared over **complete pairs only** (both arms ``ok``), and an
  incomplete comparison says so;
- "fired" counts real skips only; counterfactual explorations are reported apart; an on
  arm that never skipped is reported as a control-vs-control run before any quality line;
- fewer than 3 complete pairs is "too few to compare", not a null result.

Usage::

    python bench/ab_allocator.py --max-tokens 300000 --seeds 0,1,2,3,4 --json ab.json --plot ab.png
    python bench/ab_allocator.py --source jsonl --data bench/data/ab_qa.jsonl --provider openai \
        --model smollm2-135m --base-url http://127.0.0.1:8090/v1 --api-key local --max-tokens 6000

``--source jsonl --data FILE`` reads one JSON object per line with ``question`` and
``answer`` (optional ``id``; other keys are ignored) and answers with a real model: fully
offline against a local server.

Exit codes: 0 done, 2 usage error, 4 every arm failed.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentdescent import LLMAgent, Task, Usage, ValueBudgetAllocator, evolve  # noqa: E402
from agentdescent.domains.valuesim import ValueSim  # noqa: E402

__all__ = ["ABReport", "ABRow", "HotpotWorkload", "JsonlWorkload", "QAWorkload", "SimWorkload", "Workload",
           "load_jsonl", "main", "run_ab"]

ARMS = ("off", "on")


class Workload(Protocol):
    """What ``run_ab`` needs from a workload built by ``make_workload(seed)``.

    ``evolve_kwargs()`` returns everything ``evolve()`` takes (``tasks`` and ``reward``
    included); the harness adds ``max_tokens``, ``allocator`` and ``usage``. A workload
    whose callables record tokens into their own ``usage`` attribute gets the arm's
    fresh meter assigned to that attribute before ``evolve_kwargs()`` is called.
    ``score(result)`` returns the test quality of a finished run.
    """

    def evolve_kwargs(self) -> dict[str, Any]: ...

    def score(self, result: Any) -> float: ...


@dataclass
class ABRow:
    """One planned (seed, arm) run."""

    seed: int
    arm: str
    status: str = "ok"
    test: float | None = None
    dev: float | None = None
    tokens: int = 0
    self_verify_tokens: int = 0
    commits: int = 0
    rounds: int = 0
    stop_reason: str | None = None
    n_observed: int | None = None
    n_skipped: int | None = None
    n_counterfactual: int | None = None
    allocator_seed: int | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class ABReport:
    """All rows of an A/B, and the honest comparison of its complete pairs."""

    rows: list[ABRow]
    max_tokens: int
    seeds: list[int]
    allocator_kwargs: dict[str, Any] = field(default_factory=dict)

    def row(self, seed: int, arm: str) -> ABRow:
        """The row of one (seed, arm)."""
        for r in self.rows:
            if r.seed == seed and r.arm == arm:
                return r
        raise KeyError((seed, arm))

    @property
    def complete_pairs(self) -> list[int]:
        """Seeds whose two arms are both ``ok``, in seed order."""
        return [s for s in self.seeds if all(self.row(s, a).status == "ok" for a in ARMS)]

    @property
    def incomplete_pairs(self) -> list[int]:
        """Seeds with at least one arm that did not finish ``ok``."""
        return [s for s in self.seeds if s not in self.complete_pairs]

    def summary(self) -> dict[str, Any]:
        """The comparison over complete pairs, with every caveat spelled out."""
        pairs = self.complete_pairs
        on_rows = [self.row(s, "on") for s in pairs]
        off_rows = [self.row(s, "off") for s in pairs]
        fired = sum(r.n_skipped or 0 for r in on_rows)
        counterfactual = sum(r.n_counterfactual or 0 for r in on_rows)
        failed_spend = sum(r.tokens for r in self.rows if r.status != "ok")
        out: dict[str, Any] = {
            "planned_pairs": len(self.seeds),
            "complete_pairs": pairs,
            "incomplete_pairs": self.incomplete_pairs,
            "comparison_complete": not self.incomplete_pairs,
            "fired": fired,
            "counterfactual_explorations": counterfactual,
            "failed_run_tokens": failed_spend,
            "all_failed": all(r.status != "ok" for r in self.rows),
        }
        if len(pairs) < 3:
            out["verdict"] = "too few to compare"
            out["reason"] = f"{len(pairs)} complete pair(s); at least 3 are needed"
            return out
        if fired == 0:
            out["verdict"] = "control-vs-control"
            out["reason"] = "the on arm never skipped a self-verify: both arms ran the same policy"
            return out
        deltas = [on.test - off.test for on, off in zip(on_rows, off_rows)]  # type: ignore[operator]
        out["quality_delta"] = _spread(deltas)
        out["tokens_ratio"] = _spread([_ratio(on.tokens, off.tokens) for on, off in zip(on_rows, off_rows)])
        sv_on = sum(r.self_verify_tokens for r in on_rows)
        sv_off = sum(r.self_verify_tokens for r in off_rows)
        out["self_verify_tokens"] = {"on": sv_on, "off": sv_off}
        out["self_verify_saving"] = 1.0 - sv_on / sv_off if sv_off else None
        if all(d > 0 for d in deltas):
            out["verdict"] = "above the control on every pair"
        elif all(d < 0 for d in deltas):
            out["verdict"] = "below the control on every pair"
        else:
            out["verdict"] = "overlapping"
        out["non_inferior"] = min(deltas) >= -0.02
        return out

    def to_json(self) -> dict[str, Any]:
        """Rows, summary and arguments, JSON-ready."""
        return {
            "arguments": {"max_tokens": self.max_tokens, "seeds": self.seeds,
                          "allocator_kwargs": self.allocator_kwargs},
            "rows": [asdict(r) for r in self.rows],
            "summary": self.summary(),
        }


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def run_ab(
    make_workload: Callable[[int], Workload],
    *,
    seeds: Sequence[int],
    max_tokens: int,
    allocator_kwargs: Mapping[str, Any] | None = None,
    on_row: Callable[[ABRow], None] | None = None,
) -> ABReport:
    """Run both arms for every seed on identical workloads and budgets.

    Args:
        make_workload: ``make_workload(seed)`` builds a fresh workload (called once per arm).
        seeds: the seeds; each is one pair.
        max_tokens: the budget both arms get.
        allocator_kwargs: extra ``ValueBudgetAllocator`` arguments for the on arm.
        on_row: called with each finished row (for progress output).

    Returns:
        The :class:`ABReport`.
    """
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens={max_tokens!r}: the A/B needs a positive budget")
    seeds = list(seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds={seeds!r}: give distinct seeds")
    kwargs = dict(allocator_kwargs or {})
    kwargs.pop("seed", None)
    rows: list[ABRow] = []
    for seed in seeds:
        for arm in ARMS:
            row = ABRow(seed=seed, arm=arm)
            usage = Usage()
            started = time.perf_counter()
            try:
                workload = make_workload(seed)
                if isinstance(getattr(workload, "usage", None), Usage):
                    workload.usage = usage  # type: ignore[attr-defined]
                evolve_kwargs = dict(workload.evolve_kwargs())
            except Exception as exc:
                row.status, row.error = "build-failed", _short(exc)
            else:
                allocator = ValueBudgetAllocator(seed=seed, **kwargs) if arm == "on" else None
                row.allocator_seed = seed if arm == "on" else None
                evolve_kwargs.update(max_tokens=max_tokens, allocator=allocator, usage=usage)
                result = None
                try:
                    result = evolve(**evolve_kwargs)
                    if result.error is not None:
                        raise RuntimeError(f"run ended with an error: {result.error}")
                except Exception as exc:
                    row.status, row.error = "evolve-failed", _short(exc)
                if result is not None:
                    row.dev = result.final_reward
                    row.commits = result.committed
                    row.rounds = len(result.history)
                    row.stop_reason = result.stop_reason
                row.tokens = usage.total_tokens  # the run's spend; test scoring is outside it
                row.self_verify_tokens = usage.by_phase().get("self_verify", 0)
                if allocator is not None:
                    row.n_observed = allocator.n_observed
                    row.n_skipped = allocator.n_skipped
                    row.n_counterfactual = allocator.n_counterfactual
                if row.status == "ok":
                    try:
                        row.test = float(workload.score(result))
                        if not math.isfinite(row.test):
                            raise ValueError(f"score returned {row.test!r}")
                    except Exception as exc:
                        row.status, row.error, row.test = "score-failed", _short(exc), None
            if row.status == "build-failed":
                row.tokens = usage.total_tokens
            row.seconds = time.perf_counter() - started
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return ABReport(rows=rows, max_tokens=max_tokens, seeds=seeds, allocator_kwargs=kwargs)


# --------------------------------------------------------------------------- workloads


class SimWorkload:
    """The offline simulated workload (:class:`agentdescent.domains.valuesim.ValueSim`).

    The run uses ``held_out_frac`` of the tasks as the dev set the engine accepts on;
    the test quality is the final state's reward on a separate test split it never sees.

    Args:
        seed: the workload seed.
        n_workers: workers per round (2 by default: fewer cards per merge, so the
            allocator gets one outcome per couple of candidates).
        rounds: the round cap (the budget normally ends the run first).
    """

    def __init__(self, seed: int, n_workers: int = 2, rounds: int = 400) -> None:
        self.sim = ValueSim(seed=seed)
        cut = int(len(self.sim.tasks) * 0.75)
        order = list(self.sim.tasks)
        random.Random(f"split-{seed}").shuffle(order)
        self.dev_tasks = order[:cut]
        self.test_tasks = order[cut:]
        self.n_workers = n_workers
        self.rounds = rounds

    @property
    def usage(self) -> Usage:
        return self.sim.usage

    @usage.setter
    def usage(self, meter: Usage) -> None:
        self.sim.usage = meter

    def evolve_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.sim.evolve_kwargs())
        kwargs.update(tasks=self.dev_tasks, n_workers=self.n_workers, rounds=self.rounds,
                      held_out_frac=0.3, shuffle=False)
        return kwargs

    def score(self, result: Any) -> float:
        outputs = [self.sim.reward(t, _offline_run(self.sim, result.rendered, t)) for t in self.test_tasks]
        return sum(outputs) / len(outputs)


def _offline_run(sim: ValueSim, rendered: str, task: Task) -> str:
    """Score without charging the arm's meter (test scoring is outside the budget)."""
    saved, sim.usage = sim.usage, Usage()
    try:
        return sim.run(rendered, task)
    finally:
        sim.usage = saved


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = re.compile(r"[^\w\s]")


def normalize_answer(text: str) -> str:
    """The standard QA answer normalisation: lower case, no punctuation, articles or extra spaces."""
    text = _PUNCT.sub(" ", text.lower())
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(task: Task) -> list[str]:
    answer = task.meta["answer"]
    return [str(a) for a in answer] if isinstance(answer, (list, tuple)) else [str(answer)]


def exact_match(task: Task, output: str) -> float:
    """1.0 when the normalised output equals a normalised gold answer."""
    out = normalize_answer(output)
    return 1.0 if any(out == normalize_answer(g) for g in _golds(task)) else 0.0


def contains_answer(task: Task, output: str) -> float:
    """1.0 when a normalised gold answer appears as whole words in the normalised output."""
    out = f" {normalize_answer(output)} "
    return 1.0 if any(f" {normalize_answer(g)} " in out for g in _golds(task) if normalize_answer(g)) else 0.0


METRICS: dict[str, Callable[[Task, str], float]] = {"exact": exact_match, "contains": contains_answer}


class QAWorkload:
    """Question-answer tasks answered by a real provider through `LLMAgent`.

    The tasks are shuffled with the seed and split: ``test_frac`` of them is the test set
    the finished run is scored on (outside the budget), the rest go to ``evolve()``, which
    holds out ``held_out_frac`` of those as the dev set it accepts commits on.

    Args:
        tasks: the tasks (``meta["answer"]``: the gold answer, or a list of them).
        provider: the provider the agent calls (shared by both arms; each arm's spend is
            counted by the arm's own meter, which the harness passes as ``evolve(usage=)``).
        seed: the split seed.
        n_workers: workers per round.
        rounds: the round cap.
        reward: ``reward(task, output)``; default `exact_match`.
        agent_kwargs: more `LLMAgent` arguments (``call_tokens``, the per-call limit;
            ``temperature``; ``model``...).
        test_frac: the share of tasks kept for the test score.
        held_out_frac: the share of the rest ``evolve()`` holds out.
    """

    def __init__(self, tasks: Sequence[Task], provider: Any, seed: int, n_workers: int = 4,
                 rounds: int = 30, reward: Callable[[Task, str], float] = exact_match,
                 agent_kwargs: Mapping[str, Any] | None = None, test_frac: float = 0.3,
                 held_out_frac: float = 0.4) -> None:
        tasks = list(tasks)
        random.Random(f"qa-{seed}").shuffle(tasks)
        cut = len(tasks) - max(1, round(len(tasks) * test_frac))
        self.dev_tasks, self.test_tasks = tasks[:cut], tasks[cut:]
        self.provider = provider
        self.n_workers = n_workers
        self.rounds = rounds
        self.seed = seed
        self.reward = reward
        self.held_out_frac = held_out_frac
        self.agent_kwargs = dict(agent_kwargs or {})
        self.agent: Any = None

    def evolve_kwargs(self) -> dict[str, Any]:
        # The arm's meter is the harness's evolve(usage=...): every call of the run lands
        # there once. Giving it to the agent as well (LLMAgent(usage=...)) would count each
        # call twice: once forwarded by the run, once mirrored by the agent.
        self.agent = LLMAgent(self.provider, **self.agent_kwargs)
        return {"tasks": self.dev_tasks, "reward": self.reward, "agent": self.agent,
                "n_workers": self.n_workers, "rounds": self.rounds, "seed": self.seed,
                "max_concurrency": self.n_workers, "held_out_frac": self.held_out_frac}

    def score(self, result: Any) -> float:
        scores = [self.reward(t, self.agent.solve(result.rendered, t)) for t in self.test_tasks]
        return sum(scores) / len(scores)


class HotpotWorkload(QAWorkload):
    """HotpotQA rows through the dataloader, answered by a real provider with ``LLMAgent``.

    Args:
        rows: HotpotQA rows (``question``, ``answer``, ``context``).
        provider: the provider the agent calls.
        seed: the split seed.
        n_workers: workers per round.
        rounds: the round cap.
        **kwargs: more `QAWorkload` arguments.
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]], provider: Any, seed: int,
                 n_workers: int = 4, rounds: int = 30, **kwargs: Any) -> None:
        tasks = []
        for i, row in enumerate(rows):
            ctx = row.get("context") or {}
            passages = [
                f"{title}: {' '.join(sents)}"
                for title, sents in zip(ctx.get("title", []), ctx.get("sentences", []))
            ]
            prompt = "\n".join(passages) + f"\n\nQuestion: {row['question']}\nAnswer with a short phrase."
            tasks.append(Task(id=str(row.get("id", i)), prompt=prompt, meta={"answer": row["answer"]}))
        super().__init__(tasks, provider, seed, n_workers, rounds, **kwargs)


class JsonlWorkload(QAWorkload):
    """Questions from a JSON-lines file (see `load_jsonl`), answered by a real provider.

    The prompt is the question as written; the skill has to teach the answer's form.

    Args:
        tasks: the tasks `load_jsonl` read.
        provider: the provider the agent calls.
        seed: the split seed.
        **kwargs: more `QAWorkload` arguments (``reward`` defaults to `contains_answer`).
    """

    def __init__(self, tasks: Sequence[Task], provider: Any, seed: int, **kwargs: Any) -> None:
        kwargs.setdefault("reward", contains_answer)
        super().__init__(tasks, provider, seed, **kwargs)


def load_jsonl(path: Path, limit: int | None = None) -> list[Task]:
    """Read one JSON object per line: ``question`` and ``answer`` (optional ``id``).

    ``answer`` is a string or a number, or a list of accepted answers; other keys are
    kept in ``Task.meta``. Blank lines are skipped.

    Raises:
        ValueError: a line is not a JSON object, lacks ``question`` or ``answer``, or
            repeats an ``id``; or the file holds fewer than 8 questions (too few to split
            into train, held-out and test). The message names the file and the line.
    """
    tasks: list[Task] = []
    ids: set[str] = set()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"--data {path}: cannot read it ({exc.strerror or exc})") from None
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {n}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{where}: not JSON ({exc.msg}); write one object per line") from None
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected an object with question and answer, got {type(row).__name__}")
        question, answer = row.get("question"), row.get("answer")
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"{where}: no question (a non-empty string)")
        ok = (isinstance(answer, (str, int, float)) and not isinstance(answer, bool) and str(answer).strip()) or (
            isinstance(answer, list) and answer and all(isinstance(a, (str, int, float)) for a in answer))
        if not ok:
            raise ValueError(f"{where}: no answer (a string or number, or a list of them)")
        task_id = str(row.get("id", f"row-{n}"))
        if task_id in ids:
            raise ValueError(f"{where}: id {task_id!r} appears twice")
        ids.add(task_id)
        meta = {k: v for k, v in row.items() if k not in ("id", "question")}
        meta["answer"] = [str(a) for a in answer] if isinstance(answer, list) else str(answer)
        tasks.append(Task(id=task_id, prompt=question.strip(), meta=meta))
        if limit is not None and len(tasks) >= limit:
            break
    if len(tasks) < 8:
        raise ValueError(f"--data {path}: {len(tasks)} question(s); give at least 8 (train, held-out and test)")
    return tasks


# --------------------------------------------------------------------------- output


def _fmt(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def render_markdown(report: ABReport) -> str:
    """Per-arm tables over complete pairs, the incomplete pairs, and the verdict."""
    summary = report.summary()
    pairs = summary["complete_pairs"]
    lines = [f"max_tokens={report.max_tokens}, seeds={report.seeds}, "
             f"allocator_kwargs={report.allocator_kwargs or {}}", ""]
    lines += ["| arm | runs | test min / median / max | tokens (median) | self-verify tokens (sum) "
              "| fired (skips) | counterfactuals | commits (sum) |",
              "|---|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        rows = [report.row(s, arm) for s in pairs]
        tests = [r.test for r in rows if r.test is not None]
        tokens = [r.tokens for r in rows]
        fired = "-" if arm == "off" else str(sum(r.n_skipped or 0 for r in rows))
        cf = "-" if arm == "off" else str(sum(r.n_counterfactual or 0 for r in rows))
        lines.append(
            f"| {arm} | {len(rows)} | {_fmt(tests)} | {statistics.median(tokens) if tokens else '-'} "
            f"| {sum(r.self_verify_tokens for r in rows)} | {fired} | {cf} | {sum(r.commits for r in rows)} |"
        )
    lines.append("")
    lines.append("| seed | arm | status | test | dev | tokens | self-verify tokens | skips | counterfactuals | error |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in report.rows:
        test = f"{r.test:.3f}" if r.test is not None else "-"
        dev = f"{r.dev:.3f}" if r.dev is not None else "-"
        lines.append(f"| {r.seed} | {r.arm} | {r.status} | {test} | {dev} | {r.tokens} | "
                     f"{r.self_verify_tokens} | {r.n_skipped if r.n_skipped is not None else '-'} | "
                     f"{r.n_counterfactual if r.n_counterfactual is not None else '-'} | {r.error or ''} |")
    lines.append("")
    if summary["incomplete_pairs"]:
        lines.append(f"INCOMPLETE comparison: seeds {summary['incomplete_pairs']} are missing an arm; "
                     f"they are left out of every comparison. Failed-run spend: "
                     f"{summary['failed_run_tokens']} tokens.")
    else:
        lines.append(f"All {len(pairs)} planned pairs are complete. Failed-run spend: "
                     f"{summary['failed_run_tokens']} tokens.")
    lines.append(f"Fired (real skips): {summary['fired']}; counterfactual explorations (not skips): "
                 f"{summary['counterfactual_explorations']}.")
    verdict = summary["verdict"]
    if verdict == "control-vs-control":
        lines.append("CONTROL-VS-CONTROL: the on arm never skipped, so the arms ran the same "
                     "policy; no quality claim can be made.")
    elif verdict == "too few to compare":
        lines.append(f"TOO FEW TO COMPARE: {summary['reason']}.")
    else:
        q = summary["quality_delta"]
        qmin, qmed, qmax = (round(q[k], 3) + 0.0 for k in ("min", "median", "max"))
        lines.append(f"Test quality, on - off per pair: min {qmin:+.3f}, median {qmed:+.3f}, "
                     f"max {qmax:+.3f} -> {verdict}.")
        saving = summary["self_verify_saving"]
        sv = summary["self_verify_tokens"]
        lines.append(f"Self-verify tokens: on {sv['on']} vs off {sv['off']}"
                     + (f" ({saving:+.1%} saved)." if saving is not None else "."))
        t = summary["tokens_ratio"]
        lines.append(f"Total tokens on/off per pair: min {t['min']:.3f}, median {t['median']:.3f}, max {t['max']:.3f}.")
    return "\n".join(lines)


def plot_title(report: ABReport, source: str = "sim", workers: int | None = None) -> str:
    """A title that tells one A/B's plot from another's: source, budget, workers, allocator knobs."""
    parts = [f"max_tokens={report.max_tokens}"]
    if workers is not None:
        parts.append(f"workers={workers}")
    parts += [f"{k}={v}" for k, v in sorted(report.allocator_kwargs.items())]
    return f"A/B on {source}, {len(report.seeds)} seeds: " + ", ".join(parts)


def write_plot(report: ABReport, path: Path, title: str | None = None) -> None:
    """A PNG of test quality against tokens, one point per run, pairs joined (``title``: see `plot_title`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for seed in report.complete_pairs:
        off, on = report.row(seed, "off"), report.row(seed, "on")
        ax.plot([off.tokens, on.tokens], [off.test, on.test], color="0.7", zorder=1)
    for arm, color in (("off", "tab:blue"), ("on", "tab:orange")):
        pts = [(r.tokens, r.test) for r in report.rows if r.arm == arm and r.test is not None]
        if pts:
            ax.scatter(*zip(*pts), label=f"{arm} arm", color=color, zorder=2)
    ax.set_xlabel("tokens spent")
    ax.set_ylabel("test quality")
    ax.set_title(title or plot_title(report), fontsize=9)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------- CLI


def _redact_key(argv: list[str]) -> list[str]:
    """The command line with the value of ``--api-key`` replaced: a key never reaches a file."""
    out = []
    hide = False
    for arg in argv:
        if hide:
            out.append("[redacted]")
            hide = False
        elif arg == "--api-key":
            out.append(arg)
            hide = True
        elif arg.startswith("--api-key="):
            out.append("--api-key=[redacted]")
        else:
            out.append(arg)
    return out


def _parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give comma-separated integers, e.g. 0,1,2") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give distinct integers, e.g. 0,1,2")
    return seeds


def _make_factory(args: argparse.Namespace) -> Callable[[int], Workload]:
    if args.source == "sim":
        return lambda seed: SimWorkload(seed, n_workers=args.workers)
    if args.source == "jsonl" and args.data is None:
        raise SystemExit("--source jsonl reads questions from a file: give --data FILE (one JSON "
                         "object per line with question and answer, e.g. bench/data/ab_qa.jsonl)")
    if args.provider is None or args.model is None:
        what = "the questions in --data" if args.source == "jsonl" else "HotpotQA questions"
        raise SystemExit(
            f"--source {args.source} answers {what} with a real model: give "
            "--provider openai|anthropic and --model M (and --base-url U --api-key K for a local "
            "server); the default --source sim runs offline"
        )
    from agentdescent import dataloader, providers

    if args.source == "jsonl":
        try:
            tasks = load_jsonl(args.data, limit=args.rows)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
    elif args.source == "hf":
        rows = dataloader.hf_rows(args.dataset or "hotpotqa/hotpot_qa", args.split,
                                  config=args.config, limit=args.rows)
    else:
        rows = dataloader.hf_rows_modelscope(args.dataset or "OmniData/HotpotQA", args.file,
                                             limit=args.rows)
    factory = providers.openai_compatible if args.provider == "openai" else providers.anthropic
    try:
        provider = factory(args.model, base_url=args.base_url, api_key=args.api_key)
    except providers.ProviderAuthError as exc:
        raise SystemExit(f"{exc} (on the command line: --api-key K; any string for a local server)") from None
    agent_kwargs: dict[str, Any] = {"call_tokens": args.call_tokens}
    if args.temperature is not None:
        agent_kwargs["temperature"] = args.temperature
    common = {"n_workers": args.workers, "rounds": args.rounds, "agent_kwargs": agent_kwargs}
    if args.metric is not None:
        common["reward"] = METRICS[args.metric]
    if args.source == "jsonl":
        return lambda seed: JsonlWorkload(tasks, provider, seed, **common)
    return lambda seed: HotpotWorkload(rows, provider, seed, **common)


def main(argv: list[str] | None = None) -> int:
    """The CLI; returns the exit code (0 done, 2 usage error, 4 every arm failed)."""
    parser = argparse.ArgumentParser(description="Equal-budget A/B of the value-directed allocator.")
    parser.add_argument("--max-tokens", type=int, default=None, help="the budget both arms get (required)")
    parser.add_argument("--seeds", type=_parse_seeds, default=[0, 1, 2], help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--source", choices=["sim", "hf", "modelscope", "jsonl"], default="sim")
    parser.add_argument("--data", type=Path, default=None,
                        help="--source jsonl: one JSON object per line with question and answer (optional id)")
    parser.add_argument("--min-observations", type=int, default=None, help="passed to the allocator")
    parser.add_argument("--budget-start", type=float, default=None, help="passed to the allocator")
    parser.add_argument("--workers", type=int, default=2, help="workers per round (default 2)")
    parser.add_argument("--rows", type=int, default=None,
                        help="rows to use with a real-model source (default: 100 for hf/modelscope, all for jsonl)")
    parser.add_argument("--rounds", type=int, default=30, help="round cap with a real-model source (default 30)")
    parser.add_argument("--dataset", default=None, help="dataset id for --source hf/modelscope")
    parser.add_argument("--config", default="distractor", help="datasets-server config (--source hf)")
    parser.add_argument("--split", default="validation", help="datasets-server split (--source hf)")
    parser.add_argument("--file", default="hotpot_dev_distractor_v1.json", help="file path (--source modelscope)")
    parser.add_argument("--provider", choices=["openai", "anthropic"], default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible server, with /v1")
    parser.add_argument("--api-key", default=None,
                        help="default: OPENAI_API_KEY / ANTHROPIC_API_KEY; any string for a local server")
    parser.add_argument("--call-tokens", type=int, default=64,
                        help="per-call limit on each reply with a real model (LLMAgent call_tokens; default 64)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="sampling temperature with a real model (default: the server's)")
    parser.add_argument("--metric", choices=sorted(METRICS), default=None,
                        help="scoring with a real model: exact (default for hf/modelscope) or contains "
                             "(default for jsonl: the gold answer as whole words in the reply)")
    parser.add_argument("--json", type=Path, default=None, help="write rows + summary + arguments here")
    parser.add_argument("--plot", type=Path, default=None, help="write a PNG of quality against tokens here")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.max_tokens is None:
        print("ab_allocator: --max-tokens is required. Below the budget the allocator is never "
              "consulted, so without a budget both arms are the same run and the A/B would "
              "compare a control with itself.", file=sys.stderr)
        return 2
    if args.max_tokens < 1:
        print(f"ab_allocator: --max-tokens {args.max_tokens}: give a positive token count", file=sys.stderr)
        return 2
    if args.call_tokens < 1:
        print(f"ab_allocator: --call-tokens {args.call_tokens}: the per-call limit must be at least 1",
              file=sys.stderr)
        return 2
    if args.source in ("hf", "modelscope") and args.rows is None:
        args.rows = 100
    allocator_kwargs: dict[str, Any] = {}
    if args.min_observations is not None:
        allocator_kwargs["min_observations"] = args.min_observations
    if args.budget_start is not None:
        allocator_kwargs["budget_start"] = args.budget_start
    try:
        factory = _make_factory(args)
    except SystemExit as exc:
        print(f"ab_allocator: {exc}", file=sys.stderr)
        return 2

    def progress(row: ABRow) -> None:
        print(f"  seed {row.seed} {row.arm:>3}: {row.status}, test={row.test}, tokens={row.tokens}, "
              f"skips={row.n_skipped}", file=sys.stderr)

    report = run_ab(factory, seeds=args.seeds, max_tokens=args.max_tokens,
                    allocator_kwargs=allocator_kwargs, on_row=progress)
    print(render_markdown(report))
    if args.json is not None:
        payload = report.to_json()
        argv_shown = _redact_key(list(sys.argv[1:] if argv is None else argv))
        payload["arguments"].update(source=args.source, workers=args.workers,
                                    command="python bench/ab_allocator.py " + " ".join(argv_shown))
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2, default=str), encoding="utf-8")
    if args.plot is not None:
        write_plot(report, args.plot, plot_title(report, args.source, args.workers))
    return 4 if report.summary()["all_failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
