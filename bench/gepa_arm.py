"""The peer arm of ``bench/sample_efficiency.py``: GEPA 0.1.4 on the same router workload.

GEPA (``pip install gepa==0.1.4``, the ``bench`` extra) optimizes a text candidate with
its own engine: a child of a selected parent is scored on a minibatch of 3 train tasks and
kept if its sum strictly improves; every kept child is then scored on the whole validation
set (Pareto selection). Here it runs on **the same workload** as the library's arms:

- the same tasks and the same split: the run tasks split by the library's own
  `agentdescent.engine.config.Split` on the seed (train -> GEPA's trainset, held-out -> its valset);
- the same agent and reward (`agentdescent.domains.router.RouterDomain.run` / ``reward``),
  wrapped in a GEPA adapter whose ``evaluate`` calls them task by task;
- **the same proposer** (``custom_candidate_proposer``): for each failed example of the
  reflective minibatch, ``RouterDomain.propose(rendered, task, output, reward)`` — the call
  the library's workers make — turned into a new artifact by the same strategy
  (``KeyedRules.to_diff``) and rendered;
- **the same meter**: every ``run`` and ``propose`` lands in the domain's `Usage`, so both
  engines' calls are counted the same way; the test set is scored by a separate noise-free
  scorer on its own meter.

Calls to target are read after each GEPA iteration (a stop callback): the best candidate by
validation mean, scored on the test set; the first time it reaches the target (0.8), the
meter's calls are recorded. A run stops at ``budget`` run calls (checked between
iterations, so it may overshoot by one iteration), with ``cache_evaluation=False``.
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sample_efficiency import TARGET, WORKLOADS

from agentdescent.engine.config import Split

__all__ = ["GEPA_BUDGET", "render_gepa", "run_gepa_arm", "run_gepa_one"]

#: Run calls each GEPA run may spend (the library's router runs spend 400-800 in all).
GEPA_BUDGET = 3000


def _gepa() -> Any:
    try:
        import gepa
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit("--gepa needs GEPA 0.1.4: pip install -e '.[bench]'") from exc
    return gepa


def run_gepa_one(workload: str, seed: int, budget: int = GEPA_BUDGET) -> dict[str, Any]:
    """One GEPA run on ``workload`` (a router workload of ``bench/sample_efficiency.py``) and seed."""
    gepa = _gepa()
    from gepa.core.adapter import EvaluationBatch

    spec = WORKLOADS[workload]
    if not spec.router:
        raise ValueError(f"workload={workload!r}: the GEPA arm runs the router workloads only")
    inst = spec.build(seed)
    kw = inst.kwargs
    run, reward, propose, strategy = kw["run"], kw["reward"], kw["propose"], kw["strategy"]
    train, held_out = Split().split(kw["tasks"], kw["seed"])
    meter = inst.meter
    states: dict[str, dict[str, str]] = {}  # rendered text -> the state that renders to it
    initial = strategy.initial()
    states[strategy.render(initial)] = initial
    proposals = [0]

    class Adapter:
        """GEPA's adapter over the library's workload: one component, the rendered artifact."""

        propose_new_texts = None

        def evaluate(self, batch: Sequence[Any], candidate: Mapping[str, str], capture_traces: bool = False) -> Any:
            text = candidate["playbook"]
            outputs, scores, traces = [], [], []
            for task in batch:
                output = run(text, task)
                score = float(reward(task, output))
                outputs.append(output)
                scores.append(score)
                traces.append({"task": task, "output": output, "reward": score})
            return EvaluationBatch(outputs=outputs, scores=scores, trajectories=traces if capture_traces else None)

        def make_reflective_dataset(self, candidate: Mapping[str, str], eval_batch: Any,
                                    components_to_update: list[str]) -> dict[str, list[dict[str, Any]]]:
            return {"playbook": list(eval_batch.trajectories or [])}

    def proposer(candidate: Mapping[str, str], reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
                 components_to_update: list[str]) -> dict[str, str]:
        text = candidate["playbook"]
        state = dict(states.get(text, initial))
        for record in reflective_dataset.get("playbook", []):
            if record["reward"] >= 1.0:
                continue
            proposals[0] += 1
            proposal = propose(strategy.render(state), record["task"], record["output"], record["reward"])
            if proposal is None:
                continue
            diff = strategy.to_diff(state, proposal, "gepa", 0, "artifact")
            if diff is not None:
                state = diff.apply(state)
        new_text = strategy.render(state)
        states.setdefault(new_text, state)
        return {"playbook": new_text}

    row: dict[str, Any] = {"workload": workload, "arm": "gepa", "seed": seed, "budget": budget,
                           "reached": False, "calls_to_target": None, "tokens_to_target": None, "iterations": 0}

    def best_text(state: Any) -> str:
        scores = state.program_full_scores_val_set
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))
        return state.program_candidates[best]["playbook"]

    def stopper(state: Any) -> bool:
        row["iterations"] = int(state.i) + 1
        if not row["reached"] and inst.test_quality(best_text(state)) >= TARGET:
            row.update(reached=True, calls_to_target=meter.calls, tokens_to_target=meter.total_tokens)
        return meter.calls >= budget

    class Quiet:
        """GEPA's per-iteration log, kept (the last lines) instead of printed."""

        def __init__(self) -> None:
            self.lines: list[str] = []

        def log(self, message: str) -> None:
            self.lines = [*self.lines[-19:], str(message)]

    started = time.perf_counter()
    result = gepa.optimize(
        logger=Quiet(),
        seed_candidate={"playbook": strategy.render(initial)},
        trainset=train, valset=held_out, adapter=Adapter(), custom_candidate_proposer=proposer,
        candidate_selection_strategy="pareto", stop_callbacks=[stopper], max_metric_calls=10 * budget,
        cache_evaluation=False, seed=seed, display_progress_bar=False, raise_on_exception=True,
        skip_perfect_score=True,
    )
    final = result.best_candidate["playbook"]
    row.update(
        seconds=time.perf_counter() - started, calls=meter.calls, tokens=meter.total_tokens,
        proposals=proposals[0], final_quality=inst.test_quality(final), wrong_rules=inst.wrong_rules(final),
        candidates=len(result.candidates),
    )
    return row


def run_gepa_arm(workload: str, seeds: Sequence[int], budget: int = GEPA_BUDGET,
                 progress: bool = False) -> list[dict[str, Any]]:
    """GEPA on ``workload`` for every seed (rows as ``run_gepa_one`` returns them)."""
    rows = []
    for seed in seeds:
        random.seed(seed)  # GEPA draws from its own seeded RNG; this only pins anything global it touches
        row = run_gepa_one(workload, seed, budget)
        if progress:
            calls = "—" if row["calls_to_target"] is None else row["calls_to_target"]
            print(f"{workload} gepa seed {seed}: calls to target {calls}, final {row['final_quality']:.3f}, "
                  f"wrong {row['wrong_rules']} ({row['seconds']:.1f}s)", file=sys.stderr)
        rows.append(row)
    return rows


def _fmt(value: float) -> str:
    return f"{value:.0f}" if math.isfinite(value) else "—"


def _spread(values: Sequence[float]) -> str:
    """``median [min–max]``; a run that never reached the target counts as infinite."""
    return f"{_fmt(statistics.median(values))} [{_fmt(min(values))}–{_fmt(max(values))}]"


def render_gepa(rows: Sequence[Mapping[str, Any]], summaries: Sequence[Mapping[str, Any]]) -> str:
    """The peers table: GEPA beside the library's arms, per router workload, with the ratio of medians."""
    lines: list[str] = []
    for s in summaries:
        workload = s["workload"]
        mine = [r for r in rows if r["workload"] == workload]
        if not mine:
            continue
        gepa_calls = [float(r["calls_to_target"]) if r["calls_to_target"] is not None else math.inf for r in mine]
        lines += [f"### {workload}: the library beside GEPA 0.1.4 (same workload, proposer and meter)", "",
                  "| engine | run calls to target, median [range] | never reached | wrong rules, final | "
                  "final test quality | calls to target / GEPA's (median of per-seed ratios [range]) |",
                  "|---|---|---|---|---|---|"]
        by_seed = {r["seed"]: g for r, g in zip(mine, gepa_calls)}
        for arm, a in s["arms"].items():
            if arm not in ("sync", "async"):
                continue
            ratios = [c / by_seed[seed] for seed, c in zip(a["seeds"], a["calls_to_target"])
                      if seed in by_seed and math.isfinite(c) and math.isfinite(by_seed[seed])]
            ratio = (f"{statistics.median(ratios):.2f} [{min(ratios):.2f}–{max(ratios):.2f}]" if ratios else "—")
            lines.append(f"| agentdescent {arm} | {_spread(a['calls_to_target'])} | {a['runs'] - a['reached']}/"
                         f"{a['runs']} | {statistics.median(a['wrong_rules']):.1f} "
                         f"[{min(a['wrong_rules'])}–{max(a['wrong_rules'])}] | "
                         f"{statistics.median(a['final_quality']):.3f} | {ratio} |")
        wrong = [r["wrong_rules"] for r in mine]
        quality = [r["final_quality"] for r in mine]
        lines.append(f"| GEPA 0.1.4, pareto | {_spread(gepa_calls)} | {sum(not r['reached'] for r in mine)}/"
                     f"{len(mine)} | {statistics.median(wrong):.1f} [{min(wrong)}–{max(wrong)}] | "
                     f"{statistics.median(quality):.3f} | 1 |")
        lines.append("")
    return "\n".join(lines)
