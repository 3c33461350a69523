"""Monte-Carlo audit of the acceptance test: its false-accept rate and its power, through the public API only.

One **decision** is a fresh `MemoryLedger` (artifact ``skill``, empty state, blast radius 0.2:
a fast L2 artifact), an `Aggregator` on a synthetic `Evaluator`, one `EvidenceCard` ingested
and one ``step()``; it *accepted* iff the head moved past version 1. Decision ``i`` of a
condition draws everything (the head's passing tasks, the tasks the candidate fixes and
breaks, the op's nonce, the evaluator's noise seed) from
``random.Random(zlib.crc32(f"{seed_key}:{i}".encode()))``, so a decision repeats bit for
bit across processes; variants of one scenario (``auto-...``, ``...-undeclared``, the
``per_run`` runs) share its seed key and are paired decision by decision.

The evaluator holds N held-out tasks ``Task(f"t{i}", f"route the request about kw{i:03d}
please")``, each with a distinct rare keyword, and a true score per task for the head and
for the candidate (the state holding the diff's op key). ``held_out_subset`` and
``rescore`` score with the condition's noise: a score flips (``x -> 1 - x``) with
probability p on every call, from the evaluator's own seeded RNG; near-duplicate tasks
(``dup-*``) share one coin per group per call (a task repeated within one call draws a
new shared coin per repeat). A deterministic evaluator redraws too (the same scores).
Every task scored, on either side and by any method (``cheap`` included), counts as a
held-out call. The diff's op text names the keywords of the tasks it fixes (*hit*), or of
as many tasks it leaves unchanged (*miss*: the relevance ranking points elsewhere); a junk
diff names two tasks the head fails (``dup-*``: one failing group).

Null conditions (the candidate's full held-out mean is not above the head's; every
acceptance is a false accept), PASS when the upper end of the Clopper-Pearson 95% interval
is <= the config's ``false_accept_rate`` + 0.02:

- ``det-swap-k{1,2,4}-n24``, ``det-swap-k{1,4}-n96``: binary, head passes half; the candidate
  fixes k failed tasks and breaks k passed ones; ``rescore="deterministic"``
  (``auto-det-swap-*``: the same decisions with ``rescore="auto"``).
- ``graded-k{1,4}-n24``: head uniform in [0.3, 0.7], candidate +0.25 on k tasks, -0.25 on k others.
- ``small-n{6,8,12}``: binary, 1 fixed + 1 broken, declared deterministic.
- ``flip0.1-swap8-n{24,96}``: flip 0.1, 8 fixed + 8 broken (true scores), ``rescore="auto"``.
- ``dup-g4`` (N=24) / ``dup-g8`` (N=32): junk (candidate == head) on near-duplicate groups of
  4 / 8 tasks sharing their noise, flip 0.2, with ``evidence_groups="group"``;
  ``-undeclared``: the same without it (the docs state the grouping as an assumption).
- ``probe-2pct``: flip 0.02, 20 seeds x 60 junk decisions on one aggregator per seed (each
  card built on the current head); the unit is a decision, and the seeds with a junk commit
  are reported (``--decisions`` scales the 60: 60 x decisions / 1000).
- ``per-run-flip{0.1,0.2}`` (default config) and ``...-per_run``
  (``error_control="per_run"``): ``--runs`` runs of ``--rounds`` rounds, 4 junk cards a
  round then one step, N=96; the unit is a run, accepted = a run with >= 1 junk commit.

Power conditions (the candidate fixes g failed tasks, changes nothing else):
``power-det-{hit,miss}-g{1,2,4,8}-n{24,96}`` (declared deterministic) and
``power-flip0.1-{hit,miss}-g{1,2,4,8}-n{24,96}`` (``rescore="auto"``).

A condition whose config names a knob the installed library does not know
(``error_control``, ``evidence_groups``, ``acceptance_null``) is reported
``skipped: <message>``; the others run. ``ms/step`` is the mean wall time of one
``step()`` (the evaluator's arithmetic is trivial, so it is the aggregator's).
The scenarios, the evaluator and the condition list live in ``bench/_audit_conditions.py``.

Usage::

    python bench/acceptance_audit.py --json bench/results/acceptance_audit.json
    python bench/acceptance_audit.py --decisions 200 --runs 10 --rounds 50
    python bench/acceptance_audit.py --conditions det-swap,small --decisions 500
    python bench/acceptance_audit.py --null local --json bench/results/acceptance_audit_local.json
    python bench/acceptance_audit.py --set false_accept_rate=0.1 --conditions power-det

``--set KEY=VALUE`` changes an `AggregatorConfig` field in every condition; ``--null local``
adds ``acceptance_null="local"`` to every condition. Exit codes: 0 done (whatever the
verdicts), 2 usage error.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import random
import sys
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentdescent import Aggregator, AggregatorConfig, MemoryLedger  # noqa: E402
from bench._audit_conditions import (  # noqa: E402
    ARTIFACT,
    AuditEvaluator,
    Condition,
    card,
    conditions,
    draw,
    junk_named,
    nonce,
)
from bench.jsonout import write_json  # noqa: E402

__all__ = ["Result", "binom_cdf", "clopper_pearson", "main", "render", "run_condition", "select"]

MARGIN = 0.02  # PASS: the interval's upper end <= the stated rate + this
PROBE_SEEDS = 20
PROBE_PER_SEED = 60  # at --decisions 1000
CARDS_PER_ROUND = 4


# --------------------------------------------------------------------------- Clopper-Pearson


def _log_sum_exp(logs: Sequence[float]) -> float:
    top = max(logs)
    return top + math.log(sum(math.exp(v - top) for v in logs))


def binom_cdf(k: int, n: int, p: float) -> float:
    """``P(X <= k)`` for ``X ~ Binomial(n, p)``, summed in log space over the shorter tail."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    lp, lq, top = math.log(p), math.log1p(-p), math.lgamma(n + 1)

    def term(j: int) -> float:
        return top - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp + (n - j) * lq

    if k + 1 <= n - k:
        value = math.exp(_log_sum_exp([term(j) for j in range(k + 1)]))
    else:
        value = 1.0 - math.exp(_log_sum_exp([term(j) for j in range(k + 1, n + 1)]))
    return min(1.0, max(0.0, value))


def _bisect(f: Any, target: float, increasing: bool, iterations: int = 80) -> float:
    low, high = 0.0, 1.0
    for _ in range(iterations):
        mid = (low + high) / 2
        if (f(mid) < target) == increasing:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval for ``k`` successes in ``n`` trials.

    The ends are Beta quantiles, found by bisection on the regularized incomplete beta
    function written as a binomial tail: the lower end ``p`` solves
    ``I_p(k, n - k + 1) = P(X >= k; p) = (1 - level) / 2`` (0 when ``k == 0``), the upper end
    solves ``1 - I_p(k + 1, n - k) = P(X <= k; p) = (1 - level) / 2`` (1 when ``k == n``).
    """
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"clopper_pearson(k={k}, n={n}): need 0 <= k <= n and n >= 1")
    tail = (1.0 - level) / 2
    low = 0.0 if k == 0 else _bisect(lambda p: 1.0 - binom_cdf(k - 1, n, p), tail, increasing=True)
    high = 1.0 if k == n else _bisect(lambda p: binom_cdf(k, n, p), tail, increasing=False)
    return low, high


# --------------------------------------------------------------------------- running


@dataclass
class Result:
    """One condition's outcome (``decisions`` counts units: decisions, or runs for ``kind="runs"``)."""

    name: str
    kind: str
    null: bool
    unit: str
    config: dict[str, Any]
    decisions: int = 0
    accepted: int = 0
    rate: float | None = None
    interval: list[float] | None = None
    calls_per_unit: float | None = None
    ms_per_step: float | None = None
    stated_rate: float | None = None
    verdict: str = ""
    skipped: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class _Meter:
    """Timed steps and held-out calls, summed over a condition."""

    def __init__(self) -> None:
        self.steps = 0
        self.seconds = 0.0
        self.calls = 0
        self.noise: collections.Counter[str] = collections.Counter()

    def step(self, agg: Aggregator) -> None:
        started = time.perf_counter()
        agg.step()
        self.seconds += time.perf_counter() - started
        self.steps += 1

    def close(self, agg: Aggregator, ev: AuditEvaluator) -> None:
        self.calls += ev.calls
        self.noise[str(getattr(agg.noise, "state", "?"))] += 1


def _fresh(ev: AuditEvaluator, config: AggregatorConfig) -> tuple[MemoryLedger, Aggregator]:
    ledger = MemoryLedger()
    ledger.register(ARTIFACT, {}, 0.2)
    return ledger, Aggregator(ledger, ev, config)


def _head(ledger: MemoryLedger) -> int:
    return ledger.head(ARTIFACT)[0]


def _rng(key: str, i: int) -> random.Random:
    return random.Random(zlib.crc32(f"{key}:{i}".encode()))


def _run_decisions(cond: Condition, config: AggregatorConfig, decisions: int, meter: _Meter) -> tuple[int, int, dict]:
    accepted = 0
    for i in range(decisions):
        inst = draw(cond.scenario, _rng(cond.key, i))
        cand_key = f"rule-{inst.nonce}"
        ev = AuditEvaluator(inst.tasks, inst.head, inst.cand, cand_key, cond.scenario.flip, inst.groups,
                            inst.noise_seed)
        ledger, agg = _fresh(ev, config)
        agg.ingest(card(f"{cond.name}-{i}-{inst.nonce}", inst.named, inst.nonce, 1))
        meter.step(agg)
        accepted += _head(ledger) > 1
        meter.close(agg, ev)
    return decisions, accepted, {}


def _junk_aggregator(cond: Condition, config: AggregatorConfig, index: int) -> tuple[random.Random, Any,
                                                                                    AuditEvaluator, MemoryLedger,
                                                                                    Aggregator]:
    """One seeded junk instance (the candidate scores as the head) on a fresh aggregator: a run's start."""
    rng = _rng(cond.key, index)
    inst = draw(cond.scenario, rng)
    ev = AuditEvaluator(inst.tasks, inst.head, inst.head, None, cond.scenario.flip, inst.groups, inst.noise_seed)
    ledger, agg = _fresh(ev, config)
    return rng, inst, ev, ledger, agg


def _run_probe(cond: Condition, config: AggregatorConfig, decisions: int, meter: _Meter) -> tuple[int, int, dict]:
    per_seed = max(1, round(PROBE_PER_SEED * decisions / 1000))
    commits = []
    for seed in range(PROBE_SEEDS):
        rng, inst, ev, ledger, agg = _junk_aggregator(cond, config, seed)
        count = 0
        for j in range(per_seed):
            before = _head(ledger)
            agg.ingest(card(f"{cond.name}-{seed}-{j}", junk_named(inst.failing, inst.groups, rng), nonce(rng), before))
            meter.step(agg)
            count += _head(ledger) > before
        commits.append(count)
        meter.close(agg, ev)
    extra = {"seeds": PROBE_SEEDS, "decisions_per_seed": per_seed, "commits_per_seed": commits,
             "seeds_with_a_junk_commit": sum(c > 0 for c in commits)}
    return PROBE_SEEDS * per_seed, sum(commits), extra


def _run_runs(cond: Condition, config: AggregatorConfig, runs: int, rounds: int, meter: _Meter,
              quiet: bool) -> tuple[int, int, dict]:
    dirty = 0
    commits = []
    for r in range(runs):
        rng, inst, ev, ledger, agg = _junk_aggregator(cond, config, r)
        for k in range(rounds):
            base = _head(ledger)
            for c in range(CARDS_PER_ROUND):
                agg.ingest(card(f"{cond.name}-{r}-{k}-{c}", junk_named(inst.failing, inst.groups, rng),
                                nonce(rng), base))
            meter.step(agg)
        commits.append(_head(ledger) - 1)
        dirty += commits[-1] > 0
        meter.close(agg, ev)
        if not quiet and (r + 1) % 10 == 0:
            print(f"  {cond.name}: {r + 1}/{runs} runs, {dirty} with a junk commit", file=sys.stderr)
    steps = runs * rounds
    extra = {"rounds": rounds, "cards_per_round": CARDS_PER_ROUND, "junk_commits": sum(commits),
             "junk_commits_per_run": commits, "per_step_rate": sum(commits) / steps if steps else None,
             "calls_per_step": meter.calls / steps if steps else None}
    return runs, dirty, extra


def build_config(cond: Condition, overrides: Mapping[str, Any]) -> tuple[dict[str, Any], AggregatorConfig | str]:
    """The condition's config fields with ``overrides``, and the `AggregatorConfig` (or why it cannot be built)."""
    fields = {**cond.config, **overrides}
    try:
        return fields, AggregatorConfig(**fields)
    except (TypeError, ValueError) as exc:  # a knob this library does not know, or a value it refuses
        return fields, f"{type(exc).__name__}: {exc}"


def run_condition(cond: Condition, overrides: Mapping[str, Any], decisions: int, runs: int, rounds: int,
                  quiet: bool = True) -> Result:
    """Run one condition and summarize it (a config the library refuses: ``skipped``)."""
    unit = "run" if cond.kind == "runs" else "decision"
    fields, config = build_config(cond, overrides)
    result = Result(cond.name, cond.kind, cond.null, unit, fields)
    if isinstance(config, str):
        result.skipped = config
        result.verdict = f"skipped: {config}"
        return result
    meter = _Meter()
    if cond.kind == "decisions":
        units, accepted, extra = _run_decisions(cond, config, decisions, meter)
    elif cond.kind == "probe":
        units, accepted, extra = _run_probe(cond, config, decisions, meter)
    else:
        units, accepted, extra = _run_runs(cond, config, runs, rounds, meter, quiet)
    low, high = clopper_pearson(accepted, units)
    result.decisions, result.accepted = units, accepted
    result.rate, result.interval = accepted / units, [low, high]
    result.calls_per_unit = meter.calls / units
    result.ms_per_step = 1000 * meter.seconds / max(1, meter.steps)
    result.stated_rate = config.false_accept_rate
    if cond.null:
        result.verdict = "PASS" if high <= config.false_accept_rate + MARGIN + 1e-12 else "FAIL"
    else:
        result.verdict = "power"
    result.extra = {**extra, "steps": meter.steps, "noise_states": dict(meter.noise)}
    return result


# --------------------------------------------------------------------------- output


def render(results: Sequence[Result]) -> str:
    """The results as a markdown table, then the verdict counts."""
    lines = ["| condition | unit | n | accepted | rate | 95% CI | held-out calls/unit | ms/step | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.skipped is not None:
            lines.append(f"| {r.name} | {r.unit} | — | — | — | — | — | — | {r.verdict} |")
            continue
        low, high = r.interval or (math.nan, math.nan)
        note = ""
        if r.kind == "probe":
            note = f" ({r.extra['seeds_with_a_junk_commit']}/{r.extra['seeds']} seeds with a junk commit)"
        elif r.kind == "runs":
            note = f" ({r.extra['junk_commits']} junk commits, {r.extra['per_step_rate']:.4f}/step)"
        lines.append(f"| {r.name} | {r.unit} | {r.decisions} | {r.accepted} | {r.rate:.3f} | "
                     f"{low:.3f}–{high:.3f} | {r.calls_per_unit:.1f} | {r.ms_per_step:.2f} | {r.verdict}{note} |")
    verdicts = collections.Counter(r.verdict.split(":")[0] for r in results)
    lines += ["", "null conditions (PASS: upper 95% end <= stated rate + 0.02): "
              f"{verdicts['PASS']} PASS, {verdicts['FAIL']} FAIL; {verdicts['power']} power conditions; "
              f"{verdicts['skipped']} skipped"]
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI


def _parse_set(items: Sequence[str]) -> dict[str, Any]:
    fields = {f.name for f in dataclasses.fields(AggregatorConfig)}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in fields:
            raise ValueError(f"--set {item!r}: use KEY=VALUE with KEY an AggregatorConfig field ({', '.join(sorted(fields))})")
        if raw in ("None", "True", "False"):
            out[key] = {"None": None, "True": True, "False": False}[raw]
        else:
            try:
                out[key] = json.loads(raw)
            except ValueError:
                out[key] = raw  # a bare word: rescore=auto
    AggregatorConfig(**out)  # fail here, naming the knob
    return out


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive integer")
    return value


def select(all_conditions: Sequence[Condition], text: str | None) -> list[Condition]:
    """The conditions whose name contains any of the comma-separated substrings (None: all)."""
    if not text:
        return list(all_conditions)
    parts = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in parts if not any(p in c.name for c in all_conditions)]
    if not parts or unknown:
        raise ValueError(f"--conditions {text!r}: {', '.join(unknown) or 'nothing'} matches no condition; "
                         f"the conditions are {', '.join(c.name for c in all_conditions)}")
    return [c for c in all_conditions if any(p in c.name for p in parts)]


def main(argv: list[str] | None = None) -> int:
    """The CLI; returns the exit code (0 done, 2 usage error)."""
    parser = argparse.ArgumentParser(description="Monte-Carlo audit of the acceptance test's false-accept rate and power.")
    parser.add_argument("--conditions", default=None, help="comma-separated substrings of condition names (default: all)")
    parser.add_argument("--decisions", type=_positive, default=1000, help="decisions per condition (default 1000)")
    parser.add_argument("--runs", type=_positive, default=100, help="runs per per-run condition (default 100)")
    parser.add_argument("--rounds", type=_positive, default=200, help="rounds per run (default 200)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="change an AggregatorConfig field in every condition")
    parser.add_argument("--null", choices=("local",), default=None,
                        help="add acceptance_null=<this> to every condition's config")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        overrides = _parse_set(args.set)
        chosen = select(conditions(), args.conditions)
    except Exception as exc:  # a bad knob or filter: the message names it
        print(f"acceptance_audit.py: {exc}", file=sys.stderr)
        return 2
    if args.null is not None:
        overrides["acceptance_null"] = args.null
    started = time.perf_counter()
    results = []
    for cond in chosen:
        t0 = time.perf_counter()
        result = run_condition(cond, overrides, args.decisions, args.runs, args.rounds, args.quiet)
        results.append(result)
        if not args.quiet:
            what = result.verdict if result.skipped else (f"{result.accepted}/{result.decisions} accepted, "
                                                          f"{result.verdict}")
            print(f"{cond.name}: {what} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
    print(render(results))
    print(f"({len(results)} conditions in {time.perf_counter() - started:.0f}s)")
    write_json(args.json, {
        "arguments": {"conditions": args.conditions, "decisions": args.decisions, "runs": args.runs,
                      "rounds": args.rounds, "set": args.set, "null": args.null},
        "margin": MARGIN,
        "conditions": [dataclasses.asdict(r) for r in results],
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
