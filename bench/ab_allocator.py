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

Exit codes: 0 done, 2 usage error, 4 every arm failed.
"""

from __future__ import annotations

import argparse
import json
import math
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

from agentdescent import Task, Usage, ValueBudgetAllocator, evolve  # noqa: E402
from agentdescent.domains.valuesim import ValueSim  # noqa: E402

__all__ = ["ABReport", "ABRow", "HotpotWorkload", "SimWorkload", "Workload", "main", "run_ab"]

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
        import random

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


def exact_match(task: Task, output: str) -> float:
    """1.0 when the normalised output equals the normalised gold answer."""
    return 1.0 if normalize_answer(output) == normalize_answer(str(task.meta["answer"])) else 0.0


class HotpotWorkload:
    """HotpotQA rows through the dataloader, answered by a real provider with ``LLMAgent``.

    Args:
        rows: HotpotQA rows (``question``, ``answer``, ``context``).
        provider: the provider the agent calls.
        seed: the split seed.
        n_workers: workers per round.
        rounds: the round cap.
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]], provider: Any, seed: int,
                 n_workers: int = 4, rounds: int = 30) -> None:
        from agentdescent import LLMAgent

        tasks = []
        for i, row in enumerate(rows):
            ctx = row.get("context") or {}
            passages = [
                f"{title}: {' '.join(sents)}"
                for title, sents in zip(ctx.get("title", []), ctx.get("sentences", []))
            ]
            prompt = "\n".join(passages) + f"\n\nQuestion: {row['question']}\nAnswer with a short phrase."
            tasks.append(Task(id=str(row.get("id", i)), prompt=prompt, meta={"answer": row["answer"]}))
        import random

        random.Random(f"hotpot-{seed}").shuffle(tasks)
        cut = int(len(tasks) * 0.7)
        self.dev_tasks, self.test_tasks = tasks[:cut], tasks[cut:]
        self.provider = provider
        self.usage = Usage()  # the harness assigns the arm's meter here
        self.n_workers = n_workers
        self.rounds = rounds
        self.seed = seed
        self._llm_agent = LLMAgent

    def evolve_kwargs(self) -> dict[str, Any]:
        # The agent records every call into the arm's meter (the provider's own meter,
        # shared by both arms, is not what the budget reads).
        self.agent = self._llm_agent(self.provider, usage=self.usage)
        return {"tasks": self.dev_tasks, "reward": exact_match, "agent": self.agent,
                "n_workers": self.n_workers, "rounds": self.rounds, "seed": self.seed,
                "max_concurrency": self.n_workers}

    def score(self, result: Any) -> float:
        scores = [exact_match(t, self.agent.solve(result.rendered, t)) for t in self.test_tasks]
        return sum(scores) / len(scores)


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


def write_plot(report: ABReport, path: Path) -> None:
    """A PNG of test quality against tokens, one point per run, pairs joined."""
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
    ax.set_title(f"equal-budget A/B (max_tokens={report.max_tokens})")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------- CLI


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
    if args.provider is None or args.model is None:
        raise SystemExit(
            f"--source {args.source} answers HotpotQA questions with a real model: give "
            "--provider openai|anthropic and --model M (and --base-url U for a local server); "
            "the default --source sim runs offline"
        )
    from agentdescent import dataloader, providers

    if args.source == "hf":
        rows = dataloader.hf_rows(args.dataset or "hotpotqa/hotpot_qa", args.split,
                                  config=args.config, limit=args.rows)
    else:
        rows = dataloader.hf_rows_modelscope(args.dataset or "OmniData/HotpotQA", args.file,
                                             limit=args.rows)
    if args.provider == "openai":
        provider = providers.openai_compatible(args.model, base_url=args.base_url)
    else:
        provider = providers.anthropic(args.model, base_url=args.base_url)
    return lambda seed: HotpotWorkload(rows, provider, seed, n_workers=args.workers, rounds=args.rounds)


def main(argv: list[str] | None = None) -> int:
    """The CLI; returns the exit code (0 done, 2 usage error, 4 every arm failed)."""
    parser = argparse.ArgumentParser(description="Equal-budget A/B of the value-directed allocator.")
    parser.add_argument("--max-tokens", type=int, default=None, help="the budget both arms get (required)")
    parser.add_argument("--seeds", type=_parse_seeds, default=[0, 1, 2], help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--source", choices=["sim", "hf", "modelscope"], default="sim")
    parser.add_argument("--min-observations", type=int, default=None, help="passed to the allocator")
    parser.add_argument("--budget-start", type=float, default=None, help="passed to the allocator")
    parser.add_argument("--workers", type=int, default=2, help="workers per round (default 2)")
    parser.add_argument("--rows", type=int, default=100, help="HotpotQA rows for --source hf/modelscope")
    parser.add_argument("--rounds", type=int, default=30, help="round cap for --source hf/modelscope (default 30)")
    parser.add_argument("--dataset", default=None, help="dataset id for --source hf/modelscope")
    parser.add_argument("--config", default="distractor", help="datasets-server config (--source hf)")
    parser.add_argument("--split", default="validation", help="datasets-server split (--source hf)")
    parser.add_argument("--file", default="hotpot_dev_distractor_v1.json", help="file path (--source modelscope)")
    parser.add_argument("--provider", choices=["openai", "anthropic"], default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--base-url", default=None)
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
        payload["arguments"].update(source=args.source, workers=args.workers,
                                    command="python bench/ab_allocator.py " + " ".join(sys.argv[1:] if argv is None else argv))
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2, default=str), encoding="utf-8")
    if args.plot is not None:
        write_plot(report, args.plot)
    return 4 if report.summary()["all_failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
