"""Merge overhead: cards per second through ``Aggregator.step()``, evaluation excluded.

What it measures: the serial cost of the merge pipeline itself (ingest, trust region,
staleness, conflict resolution, fusion, the acceptance test, the CAS commit), with a
zero-cost evaluator, on a MemoryLedger and on a SqliteLedger (a temporary file), at 1,
8 and 64 cards per step. Every card writes a new key, and the evaluator scores a state
by its key count, so each step's candidate beats the head and commits (the commit path
is part of what is timed). Time spent inside the evaluator is measured and subtracted.

Each configuration is run ``--repeats`` times on a fresh ledger, the configurations
interleaved round-robin; the table shows the median over repeats of the mean time per
step, the spread (min-max) of those means, and each row's ratio to the MemoryLedger at
the same batch size. The evaluator is a table and declares itself deterministic
(``AggregatorConfig(rescore="deterministic")``), so the paired test (sampling without
replacement) accepts each step's gain once the unscored tasks cannot undo it, and every
step commits (the ``commits`` column shows it). The acceptance test's own arithmetic
(`agentdescent.merge.acceptance.PairedTest` over every held-out task, fed and asked once
per batch) is timed alone too.

Run from the repository root::

    python bench/merge_overhead.py                  # defaults: --repeats 9 --steps 20
    python bench/merge_overhead.py --json out.json --repeats 9
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from agentdescent import Diff, EvidenceCard, MergeOutcome
from agentdescent.ledger import MemoryLedger, SqliteLedger
from agentdescent.merge.acceptance import PairedTest
from agentdescent.merge.aggregator import Aggregator, AggregatorConfig, Evaluator

ARTIFACT = "skill"
HELD_OUT_TASKS = 200
CARDS_PER_STEP = (1, 8, 64)
TARGET_MS = {"memory": 1.0, "sqlite": 5.0}
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "merge_overhead.json"


class ZeroCostEvaluator(Evaluator):
    """Scores a state by its key count: every task gets reward ``len(state) / capacity``.

    Graded rewards that rise with every added key, identical on every task, so a
    candidate with more keys beats the head and never regresses a task. The time
    spent in here is accumulated so the bench can subtract it.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.seconds = 0.0
        self.calls = 0

    def _reward(self, state: Mapping[str, str]) -> float:
        return min(1.0, len(state) / self.capacity)

    def held_out(self, artifact_id: str, state: Mapping[str, str]) -> Sequence[float]:
        t0 = time.perf_counter()
        scores = [self._reward(state)] * HELD_OUT_TASKS
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return scores

    def cheap(self, artifact_id: str, state: Mapping[str, str]) -> float:
        t0 = time.perf_counter()
        value = self._reward(state)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return value


def _cards(step: int, n: int, head_version: int) -> list[EvidenceCard]:
    cards = []
    for j in range(n):
        key = f"rule-{step:05d}-{j:03d}"
        diff = Diff(f"d{step}-{j}", ARTIFACT, {key: f"Rule {j} of step {step}: check the units."})
        cards.append(EvidenceCard(diff, {ARTIFACT: head_version}, 0.1, 0.0))
    return cards


def run_once(ledger_kind: str, cards_per_step: int, steps: int, folder: str) -> dict:
    """One repeat on a fresh ledger: mean ms per step and per decision, commits."""
    if ledger_kind == "memory":
        ledger = MemoryLedger()
    else:
        path = Path(folder) / f"ledger-{cards_per_step}-{time.monotonic_ns()}.sqlite"
        ledger = SqliteLedger(path)
    try:
        ledger.register(ARTIFACT, {}, 0.2)
        evaluator = ZeroCostEvaluator(capacity=steps * cards_per_step + 1)
        agg = Aggregator(ledger, evaluator, AggregatorConfig(rescore="deterministic"))
        total = 0.0
        decisions = 0
        commits = 0
        for step in range(steps):
            head_version = ledger.head(ARTIFACT)[0]
            cards = _cards(step, cards_per_step, head_version)
            t0 = time.perf_counter()
            for card in cards:
                agg.ingest(card)
            reports = agg.step()
            total += time.perf_counter() - t0
            decisions += len(reports)
            commits += sum(r.outcome is MergeOutcome.COMMITTED for r in reports)
        merge_seconds = total - evaluator.seconds
        return {
            "ms_per_step": 1000.0 * total / steps,
            "ms_per_decision": 1000.0 * merge_seconds / max(1, decisions),
            "eval_ms_per_step": 1000.0 * evaluator.seconds / steps,
            "commits": commits,
            "decisions": decisions,
        }
    finally:
        if isinstance(ledger, SqliteLedger):
            ledger.close()


def bench(repeats: int, steps: int, cards: Sequence[int]) -> list[dict]:
    """Run every configuration ``repeats`` times, round-robin.

    Interleaving the configurations (rather than running each one's repeats back to
    back) spreads the noise of a shared machine over all rows alike, so the rows stay
    comparable even when the absolute numbers wobble.
    """
    configs = [(kind, n) for kind in ("memory", "sqlite") for n in cards]
    runs: dict[tuple[str, int], list[dict]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory(prefix="merge-overhead-") as folder:
        for _ in range(repeats):
            for kind, n in configs:
                runs[(kind, n)].append(run_once(kind, n, steps, folder))
    rows = []
    for kind, n in configs:
        mine = runs[(kind, n)]
        per_step = [r["ms_per_step"] for r in mine]
        median_step = statistics.median(per_step)
        rows.append(
            {
                "ledger": kind,
                "cards_per_step": n,
                "median_ms_per_step": median_step,
                "median_ms_per_decision": statistics.median(r["ms_per_decision"] for r in mine),
                "cards_per_second": n / (median_step / 1000.0),
                "min_ms_per_step": min(per_step),
                "max_ms_per_step": max(per_step),
                "median_eval_ms_per_step": statistics.median(r["eval_ms_per_step"] for r in mine),
                "commits_per_repeat": min(r["commits"] for r in mine),
                "steps": steps,
                "repeats": repeats,
                "runs": mine,
            }
        )
    memory = {r["cards_per_step"]: r["median_ms_per_step"] for r in rows if r["ledger"] == "memory"}
    for r in rows:
        r["ratio_vs_memory"] = r["median_ms_per_step"] / memory[r["cards_per_step"]]
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| ledger | cards/step | median ms/step | ms/decision (eval excluded) | cards/s "
        "| spread ms/step (min-max) | vs memory | commits |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['ledger']} | {r['cards_per_step']} | {r['median_ms_per_step']:.3f} "
            f"| {r['median_ms_per_decision']:.3f} | {r['cards_per_second']:,.0f} "
            f"| {r['min_ms_per_step']:.3f}-{r['max_ms_per_step']:.3f} "
            f"| {r['ratio_vs_memory']:.2f}x | {r['commits_per_repeat']}/{r['steps']} |"
        )
    return "\n".join(lines)


def targets(rows: list[dict]) -> dict[str, dict]:
    """Is the serial cost of one decision below the target, at every batch size?"""
    out = {}
    for kind, limit in TARGET_MS.items():
        mine = [r for r in rows if r["ledger"] == kind]
        if not mine:
            continue
        worst = max(mine, key=lambda r: r["median_ms_per_decision"])
        single = min(mine, key=lambda r: r["cards_per_step"])
        out[kind] = {
            "target_ms": limit,
            "single_card_ms": single["median_ms_per_decision"],
            "worst_ms": worst["median_ms_per_decision"],
            "worst_cards_per_step": worst["cards_per_step"],
            "met_single_card": single["median_ms_per_decision"] < limit,
            "met_every_batch": worst["median_ms_per_decision"] < limit,
        }
    return out


def acceptance_arithmetic(repeats: int, n_tasks: int = HELD_OUT_TASKS, batch: int = 4) -> dict:
    """The paired test alone: one decision over every held-out task, fed and asked once per batch.

    The worst case for the statistics: no early stop (graded pairs that never settle it
    until the last batch), ``n_tasks / batch`` looks of sampling without replacement, each
    asked with the bounds on the unscored tasks (kept as suffix sums, as the measurement
    keeps them). Median and spread over ``repeats`` of the mean over 50 decisions.
    """
    per = []
    for r in range(repeats):
        t0 = time.perf_counter()
        for k in range(50):
            test = PairedTest(n_tasks, max_regressions=None)  # nothing stops it early
            for start in range(0, n_tasks, batch):
                stop = min(n_tasks, start + batch)
                for i in range(start, stop):
                    test.add(i, [(0.5 + 0.01 * ((i + k + r) % 3 - 1), 0.5)])
                left = n_tasks - stop
                test.verdict(0.5 * left if left else None, -0.5 * left if left else None)
        per.append(1000.0 * (time.perf_counter() - t0) / 50)
    return {"n_tasks": n_tasks, "batch": batch, "median_ms_per_decision": statistics.median(per),
            "min_ms": min(per), "max_ms": max(per), "target_ms": 1.0,
            "met": statistics.median(per) < 1.0}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9, help="fresh-ledger repeats per row")
    parser.add_argument("--steps", type=int, default=20, help="merge steps per repeat")
    parser.add_argument(
        "--cards",
        default=",".join(map(str, CARDS_PER_STEP)),
        help="comma-separated cards per step (default 1,8,64)",
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write JSON")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.steps < 1:
        parser.error("--repeats and --steps must be >= 1")
    try:
        cards = [int(c) for c in args.cards.split(",") if c.strip()]
    except ValueError:
        parser.error(f"--cards={args.cards!r}: give comma-separated integers, e.g. 1,8,64")
    if not cards or min(cards) < 1:
        parser.error(f"--cards={args.cards!r}: every batch size must be >= 1")

    t0 = time.perf_counter()
    rows = bench(args.repeats, args.steps, cards)
    arithmetic = acceptance_arithmetic(args.repeats)
    elapsed = time.perf_counter() - t0
    verdict = targets(rows)

    machine = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "processor": platform.processor() or platform.machine(),
    }
    print(
        f"merge overhead: {args.repeats} repeats x {args.steps} steps, zero-cost evaluator, "
        f"{HELD_OUT_TASKS} held-out tasks; {machine['cpus']} CPUs, Python {machine['python']}"
    )
    print()
    print(table(rows))
    print()
    for kind, v in verdict.items():
        ok = "met" if v["met_single_card"] else "NOT met"
        every = "met" if v["met_every_batch"] else "NOT met"
        print(
            f"{kind}: one decision over one card {v['single_card_ms']:.3f} ms "
            f"(target < {v['target_ms']:g} ms: {ok}); worst {v['worst_ms']:.3f} ms at "
            f"{v['worst_cards_per_step']} cards/step ({every} at every batch size)"
        )
    a = arithmetic
    print(
        f"the paired test's arithmetic alone, one decision over all {a['n_tasks']} tasks in batches of "
        f"{a['batch']}: {a['median_ms_per_decision']:.3f} ms [{a['min_ms']:.3f}-{a['max_ms']:.3f}] "
        f"(target < {a['target_ms']:g} ms: {'met' if a['met'] else 'NOT met'})"
    )
    print(f"\nwall time {elapsed:.1f} s")

    args.json.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "bench": "merge_overhead",
        "command": "python bench/merge_overhead.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine,
        "repeats": args.repeats,
        "steps": args.steps,
        "held_out_tasks": HELD_OUT_TASKS,
        "rows": rows,
        "targets": verdict,
        "acceptance_arithmetic": arithmetic,
        "wall_seconds": elapsed,
    }
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
