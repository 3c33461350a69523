"""Sample efficiency of acceptance: calls to a held-out target, wrong rules, false accepts, evaluation cost.

Every run holds out a **test set the engine never sees** and scores the head on it after
each round with a separate, noise-free scorer on its own meter, so test scoring never
counts as run spend. The workloads:

- ``router-0.25`` / ``router-0.4``: `agentdescent.domains.router` (24 keywords) at that
  proposer noise (the share of proposals that name a wrong label); the run gets openers
  0..9 of ``make_tasks(12)`` (240 tasks) and openers 10..11 (48 tasks) are the test set. A
  wrong rule is a ``keyword: label`` line whose label is not the keyword's.
- ``valuesim``: `agentdescent.domains.valuesim.ValueSim` (30 skills x 8 items, graded
  rewards); items 0..5 go to the run (180 tasks), items 6..7 are the test set.

The **arms**, all on the library's defaults, each on every seed:

- ``sync`` and ``async`` (``async_evolve`` with ``max_rollouts`` = the sync run's rollouts);
- ``flip-0.1`` / ``flip-0.2`` (sync): the same workload with a reward that flips each
  score (``r -> 1 - r``) with that probability, drawn per call from the run's seeded RNG, so
  re-scoring a task draws again;
- ``junk-0.1`` / ``junk-0.2`` (router, sync, ``self_verify_gate=False``): a proposer whose
  every rule names a word no prompt contains (the rule changes nothing) on the flipping
  reward: every commit is a false accept.

Recorded per run: run calls and tokens until the head *first* scores >= the target (0.8) on
the test set, final test quality, wrong rules (and ValueSim's junk notes) in the final
artifact, calls by phase and the evaluation share, the rollouts that found a failure; and
per measured candidate (an audit that spends no run calls): held-out tasks scored, the
decision, whether it stopped early, and the decision a full, noise-free evaluation of the
same candidate against the same head would make (the paired test on every held-out
task), whether it is truly better (noise-free held-out mean above the head's), and whether
it is *good* by the domain's ground truth (every rule it writes is correct).

The issue-19 targets are printed as PASS/FAIL lines with their numbers, against the
defaults before issue 19 recorded in ``bench/data/acceptance_baseline.json`` (router-0.25:
1182 calls to target, router-0.4: 1565): median run calls to target <= 0.4 x those, sync and
async; held-out evaluation below half of all calls on every run; zero wrong rules on >= 9
of 10 seeds; final test quality never more than 0.02 below the baseline's on a seed (the
sync arm against the old sync run of that seed, the async arm against the median of three
old async runs of that seed: the async engine does not repeat); the false-accept rate of
the flip arms and the commit rate of the junk arms within the stated rate (0.05) inside
their 95% Wilson interval.

Usage::

    python bench/sample_efficiency.py --json bench/results/sample_efficiency.json
    python bench/sample_efficiency.py --arms sync --workloads router-0.25 --seeds 0-2
    python bench/sample_efficiency.py --set acceptance_null=local --arms sync

``--set KEY=VALUE`` changes every arm's `AggregatorConfig` field (or ``held_out_frac``,
``shuffle``, ``stratify``; ``stratify=category`` names the workload's category key).
``--gepa`` adds GEPA 0.1.4 on the router workloads (``bench/gepa_arm.py``).

Exit codes: 0 done (whatever the targets say), 2 usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentdescent import (  # noqa: E402
    Aggregator,
    AggregatorConfig,
    MemoryLedger,
    MergeOutcome,
    Task,
    Usage,
    async_evolve,
    evolve,
)
from agentdescent.domains.router import KEYWORDS, RouterDomain, make_tasks, parse_rules  # noqa: E402
from agentdescent.domains.valuesim import ValueSim  # noqa: E402

__all__ = ["ARMS", "WORKLOADS", "Instance", "RunRow", "main", "run_bench", "run_one", "summarize"]

TARGET = 0.8
BASELINE = ROOT / "bench" / "data" / "acceptance_baseline.json"
ARMS = ("sync", "async", "flip-0.1", "flip-0.2", "junk-0.1", "junk-0.2")
#: Arms that run only when asked for (``run_one``; ``bench/run_level_errors.py``): the junk
#: arms on the asynchronous engine.
EXTRA_ARMS = ("async-junk-0.1", "async-junk-0.2")
PHASES = (("rollout", "rollouts"), ("proposal", "proposals"), ("self_verify", "self_verify_rollouts"),
          ("evaluation", "eval_rollouts"))
RUN_KNOBS = ("held_out_frac", "shuffle", "stratify")
#: The issue's calls-to-target thresholds: 0.4 x the recorded baseline's medians.
CALL_TARGETS = {"router-0.25": 473, "router-0.4": 626}


# --------------------------------------------------------------------------- workloads


@dataclass
class Instance:
    """One seeded workload: the run's arguments, the test set, and the ground truth.

    Args:
        kwargs: the ``evolve()`` arguments of the run (tasks, callables, strategy, usage, seed).
        meter: the workload's meter; every call of the run lands in it once.
        score: ``score(rendered, task)``: the noise-free reward of an artifact on a task,
            charged to no run meter (the test set, and the audit's ground truth).
        test_tasks: the test set.
        wrong_rules: rules in a rendered artifact that contradict the ground truth.
        junk: entries in a rendered artifact that are not rules at all (ValueSim's notes).
        correct: whether one op ``(key, value)`` writes a correct rule.
        category: the ``task.meta`` key naming a task's category.
    """

    kwargs: dict[str, Any]
    meter: Usage
    score: Callable[[str, Task], float]
    test_tasks: list[Task]
    wrong_rules: Callable[[str], int]
    junk: Callable[[str], int]
    correct: Callable[[str, str | None], bool]
    category: str

    def test_quality(self, rendered: str) -> float:
        """Mean noise-free reward of ``rendered`` on the test set."""
        return sum(self.score(rendered, t) for t in self.test_tasks) / len(self.test_tasks)


def router_instance(seed: int, noise: float) -> Instance:
    """The router domain at proposer ``noise``: openers 0..9 to the run, 10..11 as the test set."""
    domain = RouterDomain(seed=seed, noise=noise, texts_per_keyword=12)
    tasks = make_tasks(12)
    run_tasks = [t for t in tasks if int(t.id.rsplit("-", 1)[1]) < 10]
    test_tasks = [t for t in tasks if int(t.id.rsplit("-", 1)[1]) >= 10]
    scorer = RouterDomain(seed=seed, noise=noise, texts_per_keyword=1, usage=Usage())  # its own meter

    def wrong_rules(rendered: str) -> int:
        return sum(KEYWORDS.get(k) != v for k, v in parse_rules(rendered).items() if k in KEYWORDS)

    def correct(key: str, value: str | None) -> bool:
        return key.startswith("slot:") and value is not None and KEYWORDS.get(key[5:]) == value.strip().lower()

    kwargs = dict(domain.evolve_kwargs(), tasks=run_tasks, n_workers=4, seed=seed)
    return Instance(kwargs, domain.usage, lambda r, t: scorer.reward(t, scorer.run(r, t)), test_tasks,
                    wrong_rules, lambda rendered: 0, correct, "keyword")


_SIM_RULE = re.compile(r"^\s*(?:-\s*)?when (\w+)\s*=>\s*(\w+)\s*$")


def valuesim_instance(seed: int) -> Instance:
    """ValueSim: items 0..5 of every skill to the run, items 6..7 as the test set."""
    sim = ValueSim(seed=seed)
    run_tasks = [t for t in sim.tasks if int(t.id.rsplit("-", 1)[1]) < 6]
    test_tasks = [t for t in sim.tasks if int(t.id.rsplit("-", 1)[1]) >= 6]
    scorer = ValueSim(seed=seed, usage=Usage())

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
    return Instance(kwargs, sim.usage, lambda r, t: scorer.reward(t, scorer.run(r, t)), test_tasks,
                    wrong_rules, junk, correct, "skill")


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


class FlippingReward:
    """A reward that flips each score (``r -> 1 - r``) with probability ``p``, from its own seeded RNG.

    Every call draws, so scoring the same output again may give the other score: a noisy
    judge, or a sampled model. Thread-safe (the async engine calls it from several threads).
    """

    def __init__(self, reward: Callable[[Task, str], float], p: float, seed: int) -> None:
        self.reward = reward
        self.p = p
        self._rng = random.Random(f"flip-{seed}-{p}")
        self._lock = threading.Lock()
        self.calls = 0
        self.flips = 0

    def __call__(self, task: Task, output: str) -> float:
        value = float(self.reward(task, output))
        with self._lock:
            self.calls += 1
            if self._rng.random() < self.p:
                self.flips += 1
                return 1.0 - value
        return value


def junk_proposer(domain_propose: Callable[..., str | None]) -> Callable[..., str | None]:
    """A proposer whose every rule names a word that no prompt contains: a rule that changes nothing."""
    counter = [0]
    lock = threading.Lock()

    def propose(rendered: str, task: Task, output: str, reward: float) -> str | None:
        domain_propose(rendered, task, output, reward)  # spend what a proposal spends
        with lock:
            counter[0] += 1
            n = counter[0]
        return f"zq{n:04d}x: billing"

    return propose


# --------------------------------------------------------------------------- the audited aggregator


class RecordingAggregator(Aggregator):
    """The library's `Aggregator`, recording every measured candidate with its ground truth (decisions unchanged).

    For each candidate that reaches the paired test it records the run's decision and, from
    the workload's noise-free scorer (which spends no run calls), what a full evaluation of
    the same candidate against the same head would decide, whether the candidate is truly
    better, and whether every rule it writes is correct.
    """

    def __init__(self, *args: Any, inst: Instance, log: list[dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._inst = inst
        self._log = log

    def _decide(self, prepared: Any, measurement: Any) -> Any:
        report = super()._decide(prepared, measurement)
        acc = measurement.acceptance
        strategy = self._inst.kwargs["strategy"]
        held = list(self.evaluator.held_out_tasks or ())
        head_text = strategy.render(prepared.head_state)
        cand_text = strategy.render(prepared.candidate.apply(prepared.head_state))
        head = [self._inst.score(head_text, t) for t in held]
        cand = [self._inst.score(cand_text, t) for t in held]
        # the full evaluation's decision, noise-free: the sign of the full held-out mean
        # difference (the null the test bounds), within the regression guard
        regressions = sum(h >= 0.5 > c for c, h in zip(cand, head))
        limit = self.config.max_regressions
        full_accept = sum(cand) > sum(head) + 1e-9 and (limit is None or regressions <= limit)
        certain = self.measurer.noise.deterministic  # the rule the run's own decision used
        self._log.append({
            "version": prepared.head_version,
            "ops": len(prepared.candidate.ops),
            "fused": prepared.fused,
            "scored": measurement.scored,
            "n": measurement.n,
            "early": measurement.scored < measurement.n,
            "accept": acc.accept,
            "committed": report.outcome is MergeOutcome.COMMITTED,
            "e_value": acc.e_value,
            "gains": acc.gains,
            "losses": acc.losses,
            "certain": certain,
            "full_accept": full_accept,
            "truly_better": sum(cand) > sum(head) + 1e-9,
            "good": all(self._inst.correct(k, v) for k, v in prepared.candidate.ops.items()),
            "some_good": any(self._inst.correct(k, v) for k, v in prepared.candidate.ops.items()),
            "reason": acc.reason,
        })
        return report


# --------------------------------------------------------------------------- one run


@dataclass
class RunRow:
    """One (workload, arm, seed) run."""

    workload: str
    arm: str
    seed: int
    rounds: int
    reached: bool = False
    round_to_target: int | None = None
    calls_to_target: int | None = None
    tokens_to_target: int | None = None
    initial_quality: float = math.nan
    final_quality: float = math.nan
    wrong_rules: int = 0
    junk: int = 0
    commits: int = 0
    calls: int = 0
    tokens: int = 0
    calls_by_phase: dict[str, int] = field(default_factory=dict)
    eval_share: float = math.nan
    rollouts: int = 0
    rollouts_failed: int = 0
    held_out_tasks_scored: int = 0
    head_tasks_scored: int = 0
    gate_dropped: int = 0
    noise: dict[str, Any] = field(default_factory=dict)
    stop_reason: str = ""
    candidates: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def _arm_parts(arm: str) -> tuple[str, float, bool]:
    """``(engine, flip probability, junk proposer)`` of an arm."""
    if arm in ("sync", "async"):
        return arm, 0.0, False
    engine = "sync"
    if arm.startswith("async-"):
        engine, arm = "async", arm[len("async-"):]
    kind, p = arm.split("-")
    return engine, float(p), kind == "junk"


def run_one(spec: WorkloadSpec, seed: int, arm: str, rounds: int,
            overrides: Mapping[str, Any] | None = None) -> RunRow:
    """Run one arm of one workload on one seed and measure it."""
    if arm not in ARMS + EXTRA_ARMS:
        raise ValueError(f"arm={arm!r}: use one of {ARMS + EXTRA_ARMS}")
    engine, flip, junk = _arm_parts(arm)
    inst = spec.build(seed)
    kwargs = dict(inst.kwargs)
    overrides = dict(overrides or {})
    run_knobs = {k: overrides.pop(k) for k in list(overrides) if k in RUN_KNOBS}
    if run_knobs.get("stratify") == "category":
        run_knobs["stratify"] = inst.category
    kwargs.update(run_knobs)
    if junk:
        overrides.setdefault("self_verify_gate", False)
        kwargs["propose"] = junk_proposer(kwargs["propose"])
    if flip:
        kwargs["reward"] = FlippingReward(kwargs["reward"], flip, seed)
    config = AggregatorConfig(**overrides)
    log: list[dict[str, Any]] = []

    def factory(ledger: Any, evaluator: Any, cfg: AggregatorConfig, staleness_policy: Any,
                allocator: Any, *, budget: Any) -> Aggregator:
        return RecordingAggregator(ledger, evaluator, cfg, staleness_policy, allocator,
                                   budget=budget, inst=inst, log=log)

    ledger = MemoryLedger()
    row = RunRow(spec.name, arm, seed, rounds)
    strategy = kwargs["strategy"]
    artifact = kwargs.get("artifact_id", "artifact")

    def on_round(info: Any) -> None:
        if row.reached:
            return
        _, state = ledger.head(artifact)
        if inst.test_quality(strategy.render(state)) >= TARGET:
            row.reached, row.round_to_target = True, info.index
            row.calls_to_target, row.tokens_to_target = inst.meter.calls, inst.meter.total_tokens

    row.initial_quality = inst.test_quality(strategy.render(strategy.initial()))
    started = time.perf_counter()
    common = dict(kwargs, ledger=ledger, on_round=on_round, aggregator_factory=factory, agg_config=config)
    if engine == "sync":
        result = evolve(**common, rounds=rounds)
    else:
        result = async_evolve(**common, max_rollouts=rounds * kwargs.get("n_workers", 4), max_seconds=600.0)
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
    row.rollouts, row.rollouts_failed = int(c.get("rollouts", 0)), int(c.get("rollouts_failed", 0))
    row.held_out_tasks_scored = int(c.get("merge_held_out_tasks_scored", 0))
    row.head_tasks_scored = int(c.get("merge_head_tasks_scored", 0))
    row.gate_dropped = int(c.get("merge_gate_dropped", 0))
    row.noise = dict(c.get("noise", {}))
    row.stop_reason = result.stop_reason
    row.candidates = log
    return row


def run_bench(workloads: Sequence[str], seeds: Sequence[int], arms: Sequence[str], rounds: int | None = None,
              overrides: Mapping[str, Any] | None = None,
              on_row: Callable[[RunRow], None] | None = None) -> list[RunRow]:
    """Every arm of every workload on every seed (junk arms on router workloads only); one `RunRow` each."""
    rows = []
    for name in workloads:
        spec = WORKLOADS[name]
        for arm in arms:
            if arm.startswith("junk") and not spec.router:
                continue
            for seed in seeds:
                row = run_one(spec, seed, arm, rounds or spec.rounds, overrides)
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    return rows


# --------------------------------------------------------------------------- summary


def _med(values: Sequence[float]) -> float:
    finite = [v for v in values]
    return statistics.median(finite) if finite else math.nan


def _spread(values: Sequence[float], fmt: str = "{:.0f}") -> str:
    """``median [min–max]``, with unreached (infinite) values shown as ``—``."""
    if not values:
        return "—"

    def f(v: float) -> str:
        return "—" if not math.isfinite(v) else fmt.format(v)

    return f"{f(_med(values))} [{f(min(values))}–{f(max(values))}]"


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a rate ``k / n``."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def load_baseline(path: Path = BASELINE) -> dict[str, dict[str, dict[int, Mapping[str, Any]]]]:
    """The recorded pre-issue-19 rows: workload -> engine (``sync``, ``async``) -> seed -> row.

    The sync rows are one run per seed (the engine repeats bit for bit); the async rows the
    median of three runs per seed (its interleaving does not), with the three in ``repeats``.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    out: dict[str, dict[str, dict[int, Mapping[str, Any]]]] = {}
    for key, engine in (("rows", "sync"), ("async_rows", "async")):
        for row in data.get(key, []):
            out.setdefault(row["workload"], {}).setdefault(engine, {})[int(row["seed"])] = row
    return out


def _to_target(row: RunRow) -> float:
    return float(row.calls_to_target) if row.calls_to_target is not None else math.inf


def summarize(rows: Sequence[RunRow], workload: str,
              baselines: Mapping[str, Mapping[int, Mapping[str, Any]]]) -> dict[str, Any]:
    """Per workload: per arm medians and spreads, per seed numbers, decisions against ground truth, targets.

    ``baselines`` maps an engine (``sync``, ``async``) to its recorded rows by seed; the
    async arm is compared with the async baseline, every other arm with the sync one.
    """
    arms: dict[str, Any] = {}
    baseline: Mapping[int, Mapping[str, Any]] = {}
    for arm in ARMS:
        baseline = baselines.get("async" if arm == "async" else "sync", {})
        rs = sorted((r for r in rows if r.workload == workload and r.arm == arm), key=lambda r: r.seed)
        if not rs:
            continue
        cands = [c for r in rs for c in r.candidates]
        decisions = len(cands)
        false_accepts = sum(c["committed"] and not c["truly_better"] for c in cands)
        arms[arm] = {
            "runs": len(rs), "seeds": [r.seed for r in rs], "reached": sum(r.reached for r in rs),
            "calls_to_target": [_to_target(r) for r in rs],
            "tokens_to_target": [float(r.tokens_to_target) if r.tokens_to_target is not None else math.inf for r in rs],
            "round_to_target": [float(r.round_to_target) if r.round_to_target is not None else math.inf for r in rs],
            "final_quality": [r.final_quality for r in rs],
            "baseline_quality": [baseline.get(r.seed, {}).get("final_quality", math.nan) for r in rs],
            "wrong_rules": [r.wrong_rules for r in rs], "junk": [r.junk for r in rs],
            "commits": [r.commits for r in rs], "calls": [r.calls for r in rs],
            "eval_share": [r.eval_share for r in rs],
            "calls_by_phase": {p: [r.calls_by_phase[p] for r in rs] for p, _ in PHASES},
            "failed_rollout_share": [r.rollouts_failed / max(1, r.rollouts) for r in rs],
            "head_tasks_scored": [r.head_tasks_scored for r in rs],
            "held_out_tasks_scored": [r.held_out_tasks_scored for r in rs],
            "gate_dropped": [r.gate_dropped for r in rs],
            "noise_states": [r.noise.get("state") for r in rs],
            "decisions": decisions,
            "committed": sum(c["committed"] for c in cands),
            "early": sum(c["early"] for c in cands),
            "tasks_scored": sum(c["scored"] for c in cands), "tasks_full": sum(c["n"] for c in cands),
            "false_accepts_vs_full": sum(c["accept"] and not c["full_accept"] for c in cands),
            "false_rejects_vs_full": sum(not c["accept"] and c["full_accept"] for c in cands),
            "false_accepts": false_accepts,
            "false_accept_rate": false_accepts / decisions if decisions else 0.0,
            "false_accept_interval": wilson(false_accepts, decisions),
            "good_accepted": sum(c["good"] and c["committed"] for c in cands),
            "good_rejected": sum(c["good"] and not c["committed"] for c in cands),
            "bad_accepted": sum(not c["good"] and c["committed"] for c in cands),
            "bad_accepted_with_a_correct_rule": sum(not c["good"] and c["some_good"] and c["committed"] for c in cands),
            "bad_rejected": sum(not c["good"] and not c["committed"] for c in cands),
        }
    base = [row["calls_to_target"] for row in baselines.get("sync", {}).values()
            if row.get("calls_to_target") is not None]
    return {"workload": workload, "arms": arms, "baseline_calls_to_target": _med(base) if base else math.nan}


def targets(summary: Mapping[str, Any], router: bool, alpha: float) -> list[tuple[str, bool | None, str]]:
    """The issue's targets for one workload: ``(name, passed, numbers)``; passed None when it does not apply."""
    out: list[tuple[str, bool | None, str]] = []
    arms = summary["arms"]
    workload = summary["workload"]
    for engine in ("sync", "async"):
        a = arms.get(engine)
        if a is None:
            continue
        if workload in CALL_TARGETS:
            med = _med(a["calls_to_target"])
            limit = CALL_TARGETS[workload]
            out.append((f"{engine}: median run calls to target <= {limit} (0.4 x the baseline's "
                        f"{summary['baseline_calls_to_target']:.0f})", math.isfinite(med) and med <= limit,
                        f"{_spread(a['calls_to_target'])} (reached {a['reached']}/{a['runs']})"))
        shares = a["eval_share"]
        out.append((f"{engine}: held-out evaluation below half of all calls (every run)", max(shares) < 0.5,
                    f"median {_med(shares):.1%}, max {max(shares):.1%}"))
        if router:
            clean = sum(w == 0 for w in a["wrong_rules"])
            out.append((f"{engine}: zero wrong rules in the final artifact on >= 9 of 10 seeds",
                        clean >= math.ceil(0.9 * a["runs"]), f"{clean}/{a['runs']} clean ({a['wrong_rules']})"))
        deltas = [q - b for q, b in zip(a["final_quality"], a["baseline_quality"]) if math.isfinite(b)]
        below = sum(d < -0.02 - 1e-12 for d in deltas)
        out.append((f"{engine}: final test quality never more than 0.02 below the baseline's on a seed",
                    below == 0 and bool(deltas), f"worst {min(deltas):+.3f}; {below} seed(s) below -0.02"
                    if deltas else "no baseline"))
    for arm in ("flip-0.1", "flip-0.2", "junk-0.1", "junk-0.2"):
        a = arms.get(arm)
        if a is None:
            continue
        low, high = a["false_accept_interval"]
        what = "junk commits" if arm.startswith("junk") else "false accepts (commits not truly better)"
        out.append((f"{arm}: {what} within the stated rate {alpha:g}", low <= alpha,
                    f"{a['false_accepts']}/{a['decisions']} decisions = {a['false_accept_rate']:.3f} "
                    f"[95% CI {low:.3f}–{high:.3f}]"))
    return out


# --------------------------------------------------------------------------- output


def render_markdown(summaries: Sequence[Mapping[str, Any]], alpha: float) -> str:
    """Per workload: the arms table, decisions against full evaluation and ground truth, the targets."""
    lines: list[str] = []
    for s in summaries:
        arms = s["arms"]
        names = list(arms)
        lines += [f"### {s['workload']} (target: test quality >= {TARGET}; baseline median calls to target "
                  f"{s['baseline_calls_to_target']:.0f})", ""]
        lines += ["| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for key, label, fmt in (
            ("calls_to_target", "run calls to target", "{:.0f}"),
            ("tokens_to_target", "tokens to target", "{:.0f}"),
            ("round_to_target", "rounds to target", "{:.0f}"),
            ("calls", "run calls, whole run", "{:.0f}"),
            ("commits", "commits", "{:.0f}"),
            ("final_quality", "final test quality", "{:.3f}"),
            ("baseline_quality", "baseline final test quality", "{:.3f}"),
            ("wrong_rules", "wrong rules, final artifact", "{:.0f}"),
            ("junk", "junk notes, final artifact", "{:.0f}"),
            ("eval_share", "evaluation share of calls", "{:.3f}"),
            ("failed_rollout_share", "rollouts that found a failure", "{:.2f}"),
            ("head_tasks_scored", "head tasks scored", "{:.0f}"),
            ("gate_dropped", "candidates dropped by the self-verify gate", "{:.0f}"),
        ):
            lines.append(f"| {label} | " + " | ".join(_spread(arms[a][key], fmt) for a in names) + " |")
        lines += ["", "| phase: median calls (share of all) | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for phase, _ in PHASES:
            cells = [f"{_med(arms[a]['calls_by_phase'][phase]):.0f} "
                     f"({sum(arms[a]['calls_by_phase'][phase]) / max(1, sum(arms[a]['calls'])):.1%})" for a in names]
            lines.append(f"| {phase} | " + " | ".join(cells) + " |")
        lines += ["", "| decisions, all seeds | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for key, label in (
            ("decisions", "candidates measured"), ("committed", "committed"), ("early", "stopped early"),
            ("false_accepts_vs_full", "accepted where a full noise-free evaluation refuses"),
            ("false_rejects_vs_full", "refused where a full noise-free evaluation accepts"),
            ("false_accepts", "committed but not truly better (false accepts)"),
            ("good_accepted", "good (every rule correct) committed"), ("good_rejected", "good refused"),
            ("bad_accepted", "bad (a wrong rule or junk) committed"),
            ("bad_accepted_with_a_correct_rule", "  of which also carry a correct rule"),
            ("bad_rejected", "bad refused"),
        ):
            lines.append(f"| {label} | " + " | ".join(str(arms[a][key]) for a in names) + " |")
        lines.append("| held-out tasks scored / full, candidates | " + " | ".join(
            f"{arms[a]['tasks_scored']} / {arms[a]['tasks_full']}" for a in names) + " |")
        lines.append("")
        for name, passed, numbers in s["targets"]:
            verdict = "n/a " if passed is None else ("PASS" if passed else "FAIL")
            lines.append(f"{verdict} {s['workload']}: {name}: {numbers}")
        lines.append("")
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


def _parse_list(choices: Sequence[str], flag: str) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [w.strip() for w in text.split(",") if w.strip()]
        unknown = [w for w in names if w not in choices]
        if not names or unknown:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: choose from {', '.join(choices)}")
        return names
    return parse


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
                out[key] = raw  # a bare word: stratify=category, rescore=auto
    AggregatorConfig(**{k: v for k, v in out.items() if k in fields})  # fail here, naming the knob
    return out


def main(argv: list[str] | None = None) -> int:
    """The CLI; returns the exit code (0 done, 2 usage error)."""
    parser = argparse.ArgumentParser(description="Calls to a held-out target, false accepts and evaluation cost.")
    parser.add_argument("--seeds", type=_parse_seeds, default=list(range(10)), help="seeds, e.g. 0-9 (default)")
    parser.add_argument("--workloads", type=_parse_list(list(WORKLOADS), "--workloads"), default=list(WORKLOADS),
                        help=f"comma-separated, from {', '.join(WORKLOADS)} (default: all)")
    parser.add_argument("--arms", type=_parse_list(ARMS, "--arms"), default=list(ARMS),
                        help=f"comma-separated, from {', '.join(ARMS)} (default: all)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="sync rounds for every workload (default: router-0.25 30, router-0.4 40, valuesim 40)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="change every arm: an AggregatorConfig field or held_out_frac/shuffle/stratify")
    parser.add_argument("--gepa", action="store_true", help="also run GEPA 0.1.4 on the router workloads")
    parser.add_argument("--json", type=Path, default=None, help="write rows, summaries and targets here")
    parser.add_argument("--quiet", action="store_true", help="no per-run progress on stderr")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        overrides = _parse_set(args.set)
    except Exception as exc:  # a bad knob: the message names it
        print(f"sample_efficiency.py: {exc}", file=sys.stderr)
        return 2
    alpha = AggregatorConfig(**{k: v for k, v in overrides.items() if k not in RUN_KNOBS}).false_accept_rate
    started = time.perf_counter()

    def progress(row: RunRow) -> None:
        if not args.quiet:
            calls = "—" if row.calls_to_target is None else row.calls_to_target
            print(f"{row.workload} {row.arm} seed {row.seed}: calls to target {calls}, final {row.final_quality:.3f}, "
                  f"wrong {row.wrong_rules}, eval share {row.eval_share:.2f}, commits {row.commits} "
                  f"({row.seconds:.1f}s)", file=sys.stderr)

    rows = run_bench(args.workloads, args.seeds, args.arms, args.rounds, overrides, progress)
    baseline = load_baseline()
    summaries = []
    for name in args.workloads:
        s = summarize(rows, name, baseline.get(name, {}))
        s["targets"] = targets(s, WORKLOADS[name].router, alpha)
        summaries.append(s)
    gepa_rows: list[dict[str, Any]] = []
    if args.gepa:
        from gepa_arm import run_gepa_arm  # bench/gepa_arm.py, beside this script

        for name in args.workloads:
            if WORKLOADS[name].router:
                gepa_rows += run_gepa_arm(name, args.seeds, progress=not args.quiet)
    print(render_markdown(summaries, alpha))
    if gepa_rows:
        from gepa_arm import render_gepa

        print(render_gepa(gepa_rows, summaries))
    print(f"({len(rows)} runs in {time.perf_counter() - started:.0f}s)")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"arguments": {"seeds": args.seeds, "workloads": args.workloads, "arms": args.arms,
                                 "rounds": args.rounds, "set": args.set},
                   "summaries": summaries, "rows": [dataclasses.asdict(r) for r in rows], "gepa": gepa_rows}
        args.json.write_text(json.dumps(_jsonable(payload), indent=1, sort_keys=True), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
