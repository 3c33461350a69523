"""Sample efficiency of acceptance: calls to a held-out target, wrong rules, and what evaluation costs.

Two arms run in the same process on the same seeds and the same workload:

- **today**: the rule and split before issue 12: ``AggregatorConfig(self_verify_counts=True,
  sequential=False)`` (one lucky self-verify can carry a tie; every candidate is scored on
  the whole held-out set) and ``shuffle=False`` (the positional split);
- **new**: the library defaults (the evidence rule, sequential held-out evaluation, the
  seeded-shuffle split).

A third pass, **audit**, repeats the new arm with an aggregator that also scores every
early-stopped candidate on the *full* held-out set and records the decision the full
evaluation would have made. That extra evaluation spends calls, so the audit pass reports
only its agreement table, never costs; the decisions (and so the run) are the new arm's,
which the script checks (``same_trajectory``).

Every run holds out a **test set the engine never sees** and scores the head on it after
each round with a separate meter, so test scoring never counts as run spend:

- ``router-0.25`` / ``router-0.4``: `agentdescent.domains.router` (24 keywords) at that
  noise; the run gets openers 0..9 of ``make_tasks(12)`` (240 tasks) and openers 10..11
  (48 tasks) are the test set. A wrong rule is a ``keyword: label`` line whose label is not
  the keyword's (`agentdescent.domains.router.KEYWORDS`).
- ``valuesim``: `agentdescent.domains.valuesim.ValueSim` (30 skills x 8 items); items 0..5
  go to the run (180 tasks), items 6..7 are the test set (60 tasks). ValueSim never proposes
  a wrong label; what it does propose is junk notes, counted apart (``junk``).

Recorded per run: run calls and tokens until the head *first* scores >= the target (0.8) on
the test set (read from the workload's meter in ``on_round``; it receives every call of the
run once), final test quality, wrong rules (and junk notes) in the final artifact, calls by
phase (``result.counters``: rollouts, proposals, self-verify rollouts, evaluation rollouts)
and the share of held-out evaluation, and the sequential evaluation's counters. Per measured
candidate: held-out tasks scored, the decision, and whether it is *good* by the domain's
ground truth (every rule it writes is correct, no junk).

The issue-12 targets are printed as PASS/FAIL lines with their numbers: median run calls to
target <= 0.6 x today's (router workloads); zero wrong rules in the final artifact on >= 9 of
10 seeds (router workloads; ValueSim cannot propose one); final quality never more than 0.02
below today's on a seed; held-out evaluation below half of all calls (every seed of the new arm).

Usage::

    python bench/sample_efficiency.py --json bench/results/sample_efficiency.json
    python bench/sample_efficiency.py --workloads router-0.25 --set futility=0.2
    python bench/sample_efficiency.py --set held_out_frac=0.2 --set stratify=category

``--set KEY=VALUE`` changes the new and audit arms only (an `AggregatorConfig` field, or one
of ``held_out_frac``, ``cheap_eval_tasks``, ``shuffle``, ``stratify``; ``stratify=category``
names the workload's category key), so a knob is always compared with today's configuration.
The whole default run (3 workloads x 10 seeds x 3 arms) takes well under a minute.

Exit codes: 0 done (whatever the targets say), 2 usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentdescent import Aggregator, AggregatorConfig, MemoryLedger, Usage, evolve  # noqa: E402
from agentdescent.config import Split  # noqa: E402
from agentdescent.domains.router import KEYWORDS, RouterDomain, make_tasks, parse_rules  # noqa: E402
from agentdescent.domains.valuesim import ValueSim  # noqa: E402

__all__ = ["ARMS", "WORKLOADS", "Instance", "RunRow", "main", "run_bench", "run_one"]

ARMS = ("today", "new", "audit")
TARGET = 0.8
PHASES = (("rollout", "rollouts"), ("proposal", "proposals"), ("self_verify", "self_verify_rollouts"),
          ("evaluation", "eval_rollouts"))
TODAY_CONFIG = AggregatorConfig(self_verify_counts=True, sequential=False)
# Run arguments `--set` may change besides the AggregatorConfig fields (new and audit arms only);
# ``stratify=category`` stratifies the split by the workload's category key (router: keyword,
# valuesim: skill).
RUN_KNOBS = ("held_out_frac", "cheap_eval_tasks", "shuffle", "stratify")


# --------------------------------------------------------------------------- workloads


@dataclass
class Instance:
    """One seeded workload: what the run gets, the test set, and the ground truth.

    Args:
        kwargs: the ``evolve()`` arguments of the run (tasks, callables, strategy, usage, seed).
        meter: the workload's meter; every call of the run lands in it once.
        test_quality: the mean test-set reward of a rendered artifact (charged to no run meter).
        wrong_rules: rules in a rendered artifact that contradict the ground truth.
        junk: entries in a rendered artifact that are not rules at all (ValueSim's notes).
        correct: whether one op ``(key, value)`` writes a correct rule (a candidate is *good*
            when all its ops are correct).
        category: the ``task.meta`` key naming a task's category (what ``--set stratify=category`` splits on).
    """

    kwargs: dict[str, Any]
    meter: Usage
    test_quality: Callable[[str], float]
    wrong_rules: Callable[[str], int]
    junk: Callable[[str], int]
    correct: Callable[[str, str | None], bool]
    category: str


def router_instance(seed: int, noise: float) -> Instance:
    """The router domain at ``noise``: openers 0..9 to the run, 10..11 as the test set."""
    domain = RouterDomain(seed=seed, noise=noise, texts_per_keyword=12)
    tasks = make_tasks(12)
    run_tasks = [t for t in tasks if int(t.id.rsplit("-", 1)[1]) < 10]
    test_tasks = [t for t in tasks if int(t.id.rsplit("-", 1)[1]) >= 10]
    scorer = RouterDomain(seed=seed, noise=noise, texts_per_keyword=1, usage=Usage())  # its own meter

    def test_quality(rendered: str) -> float:
        return sum(scorer.reward(t, scorer.run(rendered, t)) for t in test_tasks) / len(test_tasks)

    def wrong_rules(rendered: str) -> int:
        return sum(KEYWORDS.get(k) != v for k, v in parse_rules(rendered).items())

    def correct(key: str, value: str | None) -> bool:
        return key.startswith("slot:") and value is not None and KEYWORDS.get(key[5:]) == value.strip().lower()

    kwargs = dict(domain.evolve_kwargs(), tasks=run_tasks, n_workers=4, seed=seed)
    return Instance(kwargs, domain.usage, test_quality, wrong_rules, lambda rendered: 0, correct, "keyword")


_SIM_RULE = re.compile(r"^\s*(?:-\s*)?when (\w+)\s*=>\s*(\w+)\s*$")


def valuesim_instance(seed: int) -> Instance:
    """ValueSim: items 0..5 of every skill to the run, items 6..7 as the test set."""
    sim = ValueSim(seed=seed)
    run_tasks = [t for t in sim.tasks if int(t.id.rsplit("-", 1)[1]) < 6]
    test_tasks = [t for t in sim.tasks if int(t.id.rsplit("-", 1)[1]) >= 6]
    scorer = ValueSim(seed=seed, usage=Usage())

    def test_quality(rendered: str) -> float:
        return sum(scorer.reward(t, scorer.run(rendered, t)) for t in test_tasks) / len(test_tasks)

    def entries(rendered: str) -> list[str]:
        return [line[2:] for line in rendered.splitlines() if line.startswith("- ")]

    def wrong_rules(rendered: str) -> int:
        return sum(1 for e in entries(rendered)
                   if (m := _SIM_RULE.match(e)) and sim.skills.get(m.group(1)) != m.group(2))

    def junk(rendered: str) -> int:
        return sum(1 for e in entries(rendered) if not _SIM_RULE.match(e))

    def correct(key: str, value: str | None) -> bool:
        m = _SIM_RULE.match(value or "")
        return m is not None and sim.skills.get(m.group(1)) == m.group(2)

    kwargs = dict(sim.evolve_kwargs(), tasks=run_tasks, n_workers=4)
    return Instance(kwargs, sim.usage, test_quality, wrong_rules, junk, correct, "skill")


@dataclass(frozen=True)
class WorkloadSpec:
    """A named workload: how to build a seed's instance, and its default round count."""

    name: str
    build: Callable[[int], Instance]
    rounds: int
    router: bool


WORKLOADS: dict[str, WorkloadSpec] = {
    "router-0.25": WorkloadSpec("router-0.25", lambda s: router_instance(s, 0.25), 30, True),
    "router-0.4": WorkloadSpec("router-0.4", lambda s: router_instance(s, 0.4), 40, True),
    "valuesim": WorkloadSpec("valuesim", valuesim_instance, 40, False),
}


# --------------------------------------------------------------------------- the audited aggregator


class RecordingAggregator(Aggregator):
    """The library's `Aggregator`, recording every measured candidate (decisions unchanged).

    With ``audit=True`` a candidate whose sequential evaluation stopped early is also scored
    on the full held-out set, and the decision the full evaluation makes is recorded beside
    the sequential one. That spends evaluation calls (the engine's evaluator caches per
    state and task, so only the unscored tasks run), which is why the audit is its own pass.
    """

    def __init__(self, *args: Any, correct: Callable[[str, str | None], bool],
                 log: list[dict[str, Any]], audit: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._correct = correct
        self._log = log
        self._audit = audit

    def _measure(self, prepared: Any) -> Any:
        futility_before = self.counters["futility_stops"]
        measurement = super()._measure(prepared)
        n = len(measurement.head_scores)
        early = measurement.scored < n
        record: dict[str, Any] = {
            "version": prepared.head_version,
            "ops": len(prepared.candidate.ops),
            "fused": prepared.fused,
            "scored": measurement.scored,
            "n": n,
            "accept": measurement.acceptance.accept,
            "good": all(self._correct(k, v) for k, v in prepared.candidate.ops.items()),
            "some_good": any(self._correct(k, v) for k, v in prepared.candidate.ops.items()),
            "stop": ("futility" if self.counters["futility_stops"] > futility_before else "curtailed") if early else None,
            "p_improve": measurement.acceptance.p_improve,
            "required": measurement.acceptance.required,
            "reason": measurement.acceptance.reason,
        }
        if self._audit:
            if early:
                state = prepared.candidate.apply(prepared.head_state)
                full = [float(x) for x in self.evaluator.held_out(prepared.artifact_id, state)]
                record["full_accept"] = self._full_decision(full, measurement.head_scores, prepared, None).accept
            else:
                record["full_accept"] = measurement.acceptance.accept
        self._log.append(record)
        return measurement


# --------------------------------------------------------------------------- one run


@dataclass
class RunRow:
    """One (workload, seed, arm) run."""

    workload: str
    seed: int
    arm: str
    rounds: int
    reached: bool = False
    round_to_target: int | None = None
    calls_to_target: int | None = None
    tokens_to_target: int | None = None
    eval_token_share_to_target: float | None = None
    initial_quality: float = math.nan
    final_quality: float = math.nan
    wrong_rules: int = 0
    junk: int = 0
    commits: int = 0
    calls: int = 0
    tokens: int = 0
    calls_by_phase: dict[str, int] = field(default_factory=dict)
    eval_share: float = math.nan
    held_out_tasks_scored: int = 0
    held_out_tasks_saved: int = 0
    futility_stops: int = 0
    curtailed_stops: int = 0
    not_evaluated: int = 0
    stop_reason: str = ""
    fewest_train_per_category: int = 0
    categories_without_held_out: int = 0
    final_state: dict[str, str] = field(default_factory=dict)
    candidates: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def run_one(spec: WorkloadSpec, seed: int, arm: str, rounds: int,
            overrides: Mapping[str, Any] | None = None) -> RunRow:
    """Run one arm of one workload on one seed and measure it.

    Args:
        spec: the workload.
        seed: seeds the domain, the split and the run.
        arm: ``today``, ``new`` or ``audit`` (see the module docstring).
        rounds: sync rounds of the run.
        overrides: `AggregatorConfig` fields and `RUN_KNOBS` for the new and audit arms.
    """
    if arm not in ARMS:
        raise ValueError(f"arm={arm!r}: use one of {ARMS}")
    inst = spec.build(seed)
    kwargs = dict(inst.kwargs)
    overrides = dict(overrides or {})
    if arm == "today":
        kwargs.update(agg_config=TODAY_CONFIG, shuffle=False)
    else:
        run_knobs = {k: overrides.pop(k) for k in list(overrides) if k in RUN_KNOBS}
        if run_knobs.get("stratify") == "category":
            run_knobs["stratify"] = inst.category
        kwargs.update(run_knobs, agg_config=AggregatorConfig(**overrides))
    log: list[dict[str, Any]] = []

    def factory(ledger: Any, evaluator: Any, config: AggregatorConfig, staleness_policy: Any,
                allocator: Any, *, tournament_gate: Any) -> Aggregator:
        return RecordingAggregator(ledger, evaluator, config, staleness_policy, allocator,
                                   tournament_gate=tournament_gate, correct=inst.correct, log=log,
                                   audit=arm == "audit")

    ledger = MemoryLedger()
    row = RunRow(spec.name, seed, arm, rounds)
    strategy = kwargs["strategy"]
    artifact = kwargs.get("artifact_id", "artifact")

    def on_round(info: Any) -> None:
        if row.reached:
            return
        _, state = ledger.head(artifact)
        if inst.test_quality(strategy.render(state)) >= TARGET:
            row.reached, row.round_to_target = True, info.index
            row.calls_to_target, row.tokens_to_target = inst.meter.calls, inst.meter.total_tokens
            phases = inst.meter.by_phase()
            row.eval_token_share_to_target = phases.get("evaluation", 0) / max(1, inst.meter.total_tokens)

    row.initial_quality = inst.test_quality(strategy.render(strategy.initial()))
    # The split this run gets (the engine's own function, the run's own arguments): how
    # balanced it is per category.
    train, held = Split(kwargs.get("held_out_frac", 0.4), kwargs.get("shuffle", True),
                        kwargs.get("stratify")).split(kwargs["tasks"], kwargs.get("seed", 0))
    categories = {str(t.meta[inst.category]) for t in kwargs["tasks"]}
    row.fewest_train_per_category = min(sum(str(t.meta[inst.category]) == c for t in train) for c in categories)
    row.categories_without_held_out = len(categories - {str(t.meta[inst.category]) for t in held})
    started = time.perf_counter()
    result = evolve(**kwargs, rounds=rounds, ledger=ledger, on_round=on_round, aggregator_factory=factory)
    row.seconds = time.perf_counter() - started
    if result.error is not None:
        raise RuntimeError(f"{spec.name} seed {seed} arm {arm}: the run failed: {result.error}")
    if inst.meter.calls != result.usage.calls:  # test scoring must never reach the run's meter
        raise RuntimeError(f"{spec.name} seed {seed} arm {arm}: workload meter {inst.meter.calls} calls, "
                           f"run meter {result.usage.calls}: test scoring leaked into the run")
    c = result.counters
    row.final_quality = inst.test_quality(result.rendered)
    row.wrong_rules = inst.wrong_rules(result.rendered)
    row.junk = inst.junk(result.rendered)
    row.commits = int(c.get("merge_committed", 0))
    row.calls, row.tokens = result.usage.calls, result.usage.total_tokens
    row.calls_by_phase = {phase: int(c.get(key, 0)) for phase, key in PHASES}
    if sum(row.calls_by_phase.values()) != row.calls:
        raise RuntimeError(f"{spec.name} seed {seed} arm {arm}: calls by phase {row.calls_by_phase} "
                           f"do not add up to the run's {row.calls} calls")
    row.eval_share = row.calls_by_phase["evaluation"] / max(1, row.calls)
    for name in ("held_out_tasks_scored", "held_out_tasks_saved", "futility_stops", "curtailed_stops", "not_evaluated"):
        setattr(row, name, int(c.get(f"merge_{name}", 0)))
    row.stop_reason = result.stop_reason
    row.final_state = dict(result.state)
    row.candidates = log
    return row


def run_bench(workloads: Sequence[str], seeds: Sequence[int], rounds: int | None = None,
              overrides: Mapping[str, Any] | None = None,
              on_row: Callable[[RunRow], None] | None = None) -> list[RunRow]:
    """Every arm of every workload on every seed; one `RunRow` each."""
    rows = []
    for name in workloads:
        spec = WORKLOADS[name]
        for seed in seeds:
            for arm in ARMS:
                row = run_one(spec, seed, arm, rounds or spec.rounds, overrides)
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    return rows


# --------------------------------------------------------------------------- summary


def _med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def _spread(values: Sequence[float], fmt: str = "{:.0f}") -> str:
    """``median [min–max]``, with unreached (infinite) values shown as ``—``."""
    if not values:
        return "—"

    def f(v: float) -> str:
        return "—" if not math.isfinite(v) else fmt.format(v)

    return f"{f(_med(values))} [{f(min(values))}–{f(max(values))}]"


def _to_target(row: RunRow, what: str) -> float:
    value = getattr(row, what)
    return float(value) if value is not None else math.inf


def summarize(rows: Sequence[RunRow], workload: str) -> dict[str, Any]:
    """Per-workload numbers: per arm medians and spreads, per seed pairs, agreement, targets."""
    by = {arm: sorted((r for r in rows if r.workload == workload and r.arm == arm), key=lambda r: r.seed)
          for arm in ARMS}
    seeds = [r.seed for r in by["today"]]
    arms: dict[str, Any] = {}
    for arm in ("today", "new"):
        rs = by[arm]
        arms[arm] = {
            "reached": sum(r.reached for r in rs),
            "runs": len(rs),
            "calls_to_target": [_to_target(r, "calls_to_target") for r in rs],
            "tokens_to_target": [_to_target(r, "tokens_to_target") for r in rs],
            "round_to_target": [_to_target(r, "round_to_target") for r in rs],
            "final_quality": [r.final_quality for r in rs],
            "wrong_rules": [r.wrong_rules for r in rs],
            "junk": [r.junk for r in rs],
            "commits": [r.commits for r in rs],
            "calls": [r.calls for r in rs],
            "eval_share": [r.eval_share for r in rs],
            "eval_token_share_to_target": [r.eval_token_share_to_target for r in rs
                                           if r.eval_token_share_to_target is not None],
            "calls_by_phase": {p: [r.calls_by_phase[p] for r in rs] for p, _ in PHASES},
            "held_out_tasks_scored": [r.held_out_tasks_scored for r in rs],
            "held_out_tasks_saved": [r.held_out_tasks_saved for r in rs],
            "fewest_train_per_category": [r.fewest_train_per_category for r in rs],
            "categories_without_held_out": [r.categories_without_held_out for r in rs],
            "futility_stops": sum(r.futility_stops for r in rs),
            "curtailed_stops": sum(r.curtailed_stops for r in rs),
            # Where the evaluation calls went, summed over seeds (tasks scored per candidate;
            # the evaluator's per-state cache makes a re-scored state free, so "rest" is the
            # cheap subset and rebase re-verifications net of cache hits).
            "eval_calls": sum(r.calls_by_phase["evaluation"] for r in rs),
            "eval_initial_head": sum(r.candidates[0]["n"] if r.candidates else 0 for r in rs),
            "eval_accepted": sum(c["scored"] for r in rs for c in r.candidates if c["accept"]),
            "eval_rejected": sum(c["scored"] for r in rs for c in r.candidates if not c["accept"]),
            "candidates_accepted": sum(c["accept"] for r in rs for c in r.candidates),
            "candidates_rejected": sum(not c["accept"] for r in rs for c in r.candidates),
        }
    t, n = arms["today"], arms["new"]
    med_t, med_n = _med(t["calls_to_target"]), _med(n["calls_to_target"])
    ratio = med_n / med_t if math.isfinite(med_t) and math.isfinite(med_n) and med_t > 0 else math.nan
    quality_delta = [b - a for a, b in zip(t["final_quality"], n["final_quality"])]
    audit = [c for r in by["audit"] for c in r.candidates]
    early = [c for c in audit if c["stop"] is not None]
    agreement = {
        "candidates": len(audit),
        "full_evaluations": len(audit) - len(early),
        "stopped_curtailed": sum(c["stop"] == "curtailed" for c in audit),
        "stopped_futility": sum(c["stop"] == "futility" for c in audit),
        "false_accepts": sum(c["accept"] and not c["full_accept"] for c in audit),
        "false_rejects": sum(not c["accept"] and c["full_accept"] for c in audit),
        "false_rejects_curtailed": sum(c["stop"] == "curtailed" and c["full_accept"] for c in audit),
        "false_rejects_futility": sum(c["stop"] == "futility" and c["full_accept"] for c in audit),
        "tasks_scored": sum(c["scored"] for c in audit),
        "tasks_full": sum(c["n"] for c in audit),
        "same_trajectory": sum(a.final_state == b.final_state and a.commits == b.commits
                               for a, b in zip(by["new"], by["audit"])),
        "seeds": len(by["audit"]),
    }

    def truth(cands: Sequence[Mapping[str, Any]], key: str) -> dict[str, int]:
        return {
            "good_accepted": sum(c["good"] and c[key] for c in cands),
            "good_rejected": sum(c["good"] and not c[key] for c in cands),
            "bad_accepted": sum(not c["good"] and c[key] for c in cands),
            "bad_rejected": sum(not c["good"] and not c[key] for c in cands),
            "bad_accepted_with_a_correct_rule": sum(not c["good"] and c["some_good"] and c[key] for c in cands),
        }

    ground_truth = {
        "today (old rule, full evaluation)": truth([c for r in by["today"] for c in r.candidates], "accept"),
        "new (sequential evaluation)": truth(audit, "accept"),
        "new, full evaluation of the same candidates": truth(audit, "full_accept"),
    }
    return {
        "workload": workload, "seeds": seeds, "arms": arms, "ratio_calls_to_target": ratio,
        "quality_delta": quality_delta, "agreement": agreement, "ground_truth": ground_truth,
    }


def targets(summary: Mapping[str, Any], router: bool) -> list[tuple[str, bool | None, str]]:
    """The issue's targets for one workload: ``(name, passed, numbers)``; passed None when it does not apply."""
    t, n = summary["arms"]["today"], summary["arms"]["new"]
    out: list[tuple[str, bool | None, str]] = []
    ratio = summary["ratio_calls_to_target"]
    if router:
        ok = math.isfinite(ratio) and ratio <= 0.6
        out.append(("median run calls to target <= 0.6 x today's", ok,
                    f"new {_med(n['calls_to_target']):.0f} / today {_med(t['calls_to_target']):.0f} = "
                    f"{ratio:.2f} (reached: new {n['reached']}/{n['runs']}, today {t['reached']}/{t['runs']})"))
    clean = sum(w == 0 for w in n["wrong_rules"])
    need = math.ceil(0.9 * n["runs"])
    if router:
        out.append(("zero wrong rules in the final artifact on >= 9 of 10 seeds", clean >= need,
                    f"new: {clean}/{n['runs']} seeds clean (wrong rules per seed {n['wrong_rules']}); "
                    f"today: {sum(w == 0 for w in t['wrong_rules'])}/{t['runs']}"))
    else:
        out.append(("zero wrong rules in the final artifact on >= 9 of 10 seeds", None,
                    f"n/a: this workload never proposes a wrong label ({clean}/{n['runs']} clean); junk notes per "
                    f"seed: new {n['junk']}, today {t['junk']}"))
    worst = min(summary["quality_delta"]) if summary["quality_delta"] else math.nan
    below = sum(d < -0.02 - 1e-12 for d in summary["quality_delta"])
    out.append(("final quality never more than 0.02 below today's on a seed", below == 0,
                f"worst new - today {worst:+.3f}; {below} seed(s) below -0.02"))
    shares = n["eval_share"]
    out.append(("held-out evaluation below half of all calls", max(shares) < 0.5,
                f"new: median {_med(shares):.1%}, max {max(shares):.1%} (today: median {_med(t['eval_share']):.1%})"))
    return out


# --------------------------------------------------------------------------- output


def _ratio(today: Sequence[float], new: Sequence[float]) -> str:
    a, b = _med(today), _med(new)
    return f"{b / a:.2f}" if math.isfinite(a) and math.isfinite(b) and a else "—"


def render_markdown(summaries: Sequence[Mapping[str, Any]]) -> str:
    """Per workload: the arms table, the per-seed table, calls by phase, agreement, targets."""
    lines: list[str] = []
    for s in summaries:
        t, n = s["arms"]["today"], s["arms"]["new"]
        lines += [f"### {s['workload']} ({len(s['seeds'])} seeds, target: test quality >= {TARGET})", ""]
        lines += ["| metric | today median [min–max] | new median [min–max] | new/today (medians) |",
                  "|---|---|---|---|"]
        lines.append(f"| reached target | {t['reached']}/{t['runs']} | {n['reached']}/{n['runs']} | |")
        for key, label, fmt in (
            ("calls_to_target", "run calls to target", "{:.0f}"),
            ("tokens_to_target", "tokens to target", "{:.0f}"),
            ("round_to_target", "rounds to target", "{:.0f}"),
            ("calls", "run calls, whole run", "{:.0f}"),
            ("commits", "commits", "{:.0f}"),
            ("final_quality", "final test quality", "{:.3f}"),
            ("wrong_rules", "wrong rules, final artifact", "{:.0f}"),
            ("junk", "junk notes, final artifact", "{:.0f}"),
            ("eval_share", "evaluation share of calls", "{:.3f}"),
            ("eval_token_share_to_target", "evaluation share of tokens to target", "{:.3f}"),
            ("held_out_tasks_saved", "held-out tasks saved", "{:.0f}"),
            ("fewest_train_per_category", "split: fewest train tasks of a category", "{:.0f}"),
            ("categories_without_held_out", "split: categories with no held-out task", "{:.0f}"),
        ):
            lines.append(f"| {label} | {_spread(t[key], fmt)} | {_spread(n[key], fmt)} | {_ratio(t[key], n[key])} |")
        lines += ["", "| seed | calls to target today | new | new/today | final quality today | new | new − today "
                  "| wrong rules today | new | eval share today | new |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for i, seed in enumerate(s["seeds"]):
            a, b = t["calls_to_target"][i], n["calls_to_target"][i]
            r = f"{b / a:.2f}" if math.isfinite(a) and math.isfinite(b) else "—"
            fa, fb = ("—" if not math.isfinite(v) else f"{v:.0f}" for v in (a, b))
            lines.append(f"| {seed} | {fa} | {fb} | {r} | {t['final_quality'][i]:.3f} | {n['final_quality'][i]:.3f} "
                         f"| {s['quality_delta'][i]:+.3f} | {t['wrong_rules'][i]} | {n['wrong_rules'][i]} "
                         f"| {t['eval_share'][i]:.3f} | {n['eval_share'][i]:.3f} |")
        lines += ["", "| phase | today: median calls (share of all) | new: median calls (share of all) |", "|---|---|---|"]
        for phase, _ in PHASES:
            cells = []
            for arm in (t, n):
                total = sum(arm["calls"])
                cells.append(f"{_med(arm['calls_by_phase'][phase]):.0f} ({sum(arm['calls_by_phase'][phase]) / max(1, total):.1%})")
            lines.append(f"| {phase} | {cells[0]} | {cells[1]} |")
        lines += ["", "| evaluation calls, all seeds | today | new |", "|---|---|---|"]
        for key, label in (
            ("eval_initial_head", "the starting head's held-out set"),
            ("eval_accepted", "accepted candidates (always the full set)"),
            ("eval_rejected", "rejected candidates (what the sequential test can save)"),
        ):
            lines.append(f"| {label} | {t[key]} ({t[key] / max(1, t['eval_calls']):.1%}) "
                         f"| {n[key]} ({n[key] / max(1, n['eval_calls']):.1%}) |")
        rest_t = t["eval_calls"] - t["eval_initial_head"] - t["eval_accepted"] - t["eval_rejected"]
        rest_n = n["eval_calls"] - n["eval_initial_head"] - n["eval_accepted"] - n["eval_rejected"]
        lines.append(f"| rest: cheap subset, rebase re-verification (net of cache hits) "
                     f"| {rest_t} ({rest_t / max(1, t['eval_calls']):.1%}) | {rest_n} ({rest_n / max(1, n['eval_calls']):.1%}) |")
        lines.append(f"| candidates measured: accepted / rejected | {t['candidates_accepted']} / {t['candidates_rejected']} "
                     f"| {n['candidates_accepted']} / {n['candidates_rejected']} |")
        g = s["agreement"]
        lines += ["", f"Sequential vs full evaluation of the same candidates (audit pass, {g['seeds']} seeds; "
                  f"same run as the new arm on {g['same_trajectory']}/{g['seeds']} seeds):", "",
                  "| candidates | full evaluations | stopped: curtailed | stopped: futility | false accepts "
                  "| false rejects (curtailed / futility) | held-out tasks scored / full |",
                  "|---|---|---|---|---|---|---|",
                  f"| {g['candidates']} | {g['full_evaluations']} | {g['stopped_curtailed']} | {g['stopped_futility']} "
                  f"| {g['false_accepts']} | {g['false_rejects']} ({g['false_rejects_curtailed']} / "
                  f"{g['false_rejects_futility']}) | {g['tasks_scored']} / {g['tasks_full']} |", "",
                  "| decisions, against ground truth | good accepted | good rejected | bad accepted "
                  "(of which also carry a correct rule) | bad rejected |",
                  "|---|---|---|---|---|"]
        for label, counts in s["ground_truth"].items():
            lines.append(f"| {label} | {counts['good_accepted']} | {counts['good_rejected']} "
                         f"| {counts['bad_accepted']} ({counts['bad_accepted_with_a_correct_rule']}) "
                         f"| {counts['bad_rejected']} |")
        lines.append("")
        for name, passed, numbers in s["targets"]:
            verdict = "n/a " if passed is None else ("PASS" if passed else "FAIL")
            lines.append(f"{verdict} {s['workload']}: {name}: {numbers}")
        lines.append("")
    return "\n".join(lines)


def compare_table(paths: Sequence[Path]) -> str:
    """One row per JSON written by earlier runs (``--json``): the knob, calls, quality, evaluation share.

    Columns per workload of the file: median run calls to target new/today, seeds where the new
    arm ends more than 0.02 below today, the new arm's median evaluation share of calls, and the
    held-out tasks the audit pass's candidates were scored on, as a share of a full evaluation.
    """
    lines = ["| file | `--set` (new arm) | workload | calls to target new/today | seeds > 0.02 below today "
             "| eval share (median) | held-out tasks scored / full | false rejects | false accepts |",
             "|---|---|---|---|---|---|---|---|---|"]
    for path in paths:
        payload = json.loads(Path(path).read_text(encoding="utf-8"))
        knobs = " ".join(f"{k}={v}" for k, v in payload["arguments"]["set"].items()) or "(defaults)"
        if payload["arguments"].get("rounds"):
            knobs += f", --rounds {payload['arguments']['rounds']}"
        for s in payload["summaries"]:
            g = s["agreement"]
            ratio = s["ratio_calls_to_target"]
            below = sum(q < -0.02 - 1e-12 for q in s["quality_delta"])
            lines.append(
                f"| {Path(path).name} | {knobs} | {s['workload']} "
                f"| {'—' if ratio is None else f'{ratio:.2f}'} | {below}/{len(s['quality_delta'])} "
                f"| {_med(s['arms']['new']['eval_share']):.1%} | {g['tasks_scored'] / max(1, g['tasks_full']):.1%} "
                f"| {g['false_rejects']} | {g['false_accepts']} |"
            )
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


# --------------------------------------------------------------------------- CLI


def _parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                low, high = (int(x) for x in part.split("-", 1))
                seeds.extend(range(low, high + 1))
            elif part:
                seeds.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give integers and ranges, e.g. 0-9 or 0,3,5") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give distinct integers, e.g. 0-9")
    return seeds


def _parse_workloads(text: str) -> list[str]:
    names = [w.strip() for w in text.split(",") if w.strip()]
    unknown = [w for w in names if w not in WORKLOADS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"--workloads {text!r}: choose from {', '.join(WORKLOADS)}")
    return names


def _parse_set(items: Sequence[str]) -> dict[str, Any]:
    fields = {f.name: f for f in dataclasses.fields(AggregatorConfig)}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or (key not in fields and key not in RUN_KNOBS):
            raise ValueError(f"--set {item!r}: use KEY=VALUE with KEY an AggregatorConfig field "
                             f"({', '.join(fields)}) or one of {', '.join(RUN_KNOBS)}")
        if raw in ("None", "True", "False"):
            out[key] = {"None": None, "True": True, "False": False}[raw]
        else:
            try:
                out[key] = json.loads(raw)
            except ValueError:
                out[key] = raw  # a bare word: stratify=category

    AggregatorConfig(**{k: v for k, v in out.items() if k in fields})  # fail here, naming the knob
    return out


def main(argv: list[str] | None = None) -> int:
    """The CLI; returns the exit code (0 done, 2 usage error)."""
    parser = argparse.ArgumentParser(description="Calls to a held-out target and evaluation cost: today's rule vs the defaults.")
    parser.add_argument("--seeds", type=_parse_seeds, default=list(range(10)), help="seeds, e.g. 0-9 (default) or 0,2,4")
    parser.add_argument("--workloads", type=_parse_workloads, default=list(WORKLOADS),
                        help=f"comma-separated, from {', '.join(WORKLOADS)} (default: all)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="sync rounds for every workload (default: router-0.25 30, router-0.4 40, valuesim 40)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="change the new (and audit) arm: an AggregatorConfig field or "
                        f"{'/'.join(RUN_KNOBS)} (stratify=category: the workload's category key); "
                        "repeatable, e.g. --set futility=0.2")
    parser.add_argument("--json", type=Path, default=None, help="write rows, summaries and targets here")
    parser.add_argument("--quiet", action="store_true", help="no per-run progress on stderr")
    parser.add_argument("--compare", type=Path, nargs="+", default=None, metavar="JSON",
                        help="run nothing: print one comparison row per workload of each JSON written by --json")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.compare is not None:
        missing = [str(p) for p in args.compare if not p.is_file()]
        if missing:
            print(f"sample_efficiency: --compare: no such file {', '.join(missing)}; write them with --json",
                  file=sys.stderr)
            return 2
        print(compare_table(args.compare))
        return 0
    if args.rounds is not None and args.rounds < 1:
        print(f"sample_efficiency: --rounds {args.rounds}: give a positive round count", file=sys.stderr)
        return 2
    try:
        overrides = _parse_set(args.set)
    except (ValueError, TypeError) as exc:
        print(f"sample_efficiency: {exc}", file=sys.stderr)
        return 2

    def progress(row: RunRow) -> None:
        if not args.quiet:
            print(f"  {row.workload} seed {row.seed} {row.arm:>5}: target at {row.calls_to_target} calls, "
                  f"final {row.final_quality:.3f}, {row.calls} calls, {row.seconds:.1f}s", file=sys.stderr)

    started = time.perf_counter()
    rows = run_bench(args.workloads, args.seeds, args.rounds, overrides, on_row=progress)
    summaries = []
    for name in args.workloads:
        s = summarize(rows, name)
        s["targets"] = targets(s, WORKLOADS[name].router)
        summaries.append(s)
    command = "python bench/sample_efficiency.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"`{command.strip()}` — arms: today = AggregatorConfig(self_verify_counts=True, sequential=False), "
          f"shuffle=False; new = library defaults{' + ' + str(overrides) if overrides else ''}; 4 workers\n")
    print(render_markdown(summaries))
    print(f"({len(rows)} runs in {time.perf_counter() - started:.0f}s)")
    if args.json is not None:
        payload = {
            "arguments": {"command": command.strip(), "seeds": args.seeds, "workloads": args.workloads,
                          "rounds": args.rounds, "set": overrides, "target": TARGET},
            "summaries": summaries,
            "rows": [dataclasses.asdict(r) for r in rows],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(_jsonable(payload), indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
