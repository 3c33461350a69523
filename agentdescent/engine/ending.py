"""How a run ends: the work still running as it returns, and the `EvolutionResult` assembled.

This module owns `finish` (both runtimes end there: the final head, its test-set report,
the grace for calls on the wire, the counters, the result) and `stragglers` (the work
still running, counted and logged). It must not merge, commit, or evaluate anything but
the final head's unmeasured held-out tasks and the test set's final scoring.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import RunFailed, RunTimeout
from .answers import answer_distribution
from .fullscore import measure_final
from .result import AsyncStats, EvolutionResult
from .runtime import RunEnv
from .testset import Evaluation, paired_difference

__all__ = ["finish", "stragglers"]

logger = logging.getLogger("agentdescent.runtime")


def stragglers(env: RunEnv, workers: Callable[[], set[int]] | None = None) -> int:
    """Work of the run still running as it returns, logged when there is any.

    Its calls still on the wire (or in a callable of yours), and the threads ``workers()``
    names (the async workers that have not exited) busy outside a call. None of them
    sends anything more.
    """
    calls = env.runner.running_calls()
    busy = (workers() if workers is not None else set()) - set(calls)
    count = len(calls) + len(busy)
    if count:
        logger.warning("%d call(s) of the run still running as it returns (they send nothing more; their "
                       "results are dropped)", count)
    return count


def finish(env: RunEnv, *, stop_reason: str, error: str | None, forced_refreshes: int = 0,
           async_stats: AsyncStats | None = None, extra_counters: Mapping[str, Any] | None = None,
           workers: Callable[[], set[int]] | None = None) -> EvolutionResult:
    """Assemble the `EvolutionResult` from the ledger head (both runtimes end here).

    The final head is first scored on every held-out task it was not measured on
    (`agentdescent.engine.fullscore.measure_final`; not after an error, nor when the starting evaluation never
    succeeded), so the final reward is its measured held-out mean; with the budget spent
    it stays the estimate (``counters["final_reward_measured"]`` of
    ``counters["final_reward_inherited"]`` + measured say how much is measured), and NaN
    when the run never measured one (``stop_reason``/``error`` say why). Tokens recorded after the last round (work in flight at the stop) count in
    the last round, so the rounds' tokens add up to ``result.usage.total_tokens`` and to
    ``result.budget["spent"]``; ``result.usage`` is a copy taken now, which work abandoned
    at the stop can no longer change. The work still running now (`stragglers`: the
    runner's calls, and the threads ``workers()`` names, the async workers not yet exited)
    is ``result.counters["stragglers"]`` (and ``async_stats.stragglers``). With a test set,
    ``result.test_answers`` (and ``test_answers_initial``) count the labels the final (and
    the starting) head's test replies give (`agentdescent.engine.answers`).
    """
    if error is None and env.last_reward is not None and stop_reason != "max_seconds":
        measure_final(env)  # the final head on every held-out task it was not measured on: a measured reward
    version, state = env.ledger.head(env.artifact_id)
    test, final_test = _test_report(env, state, error)  # its calls belong in the result's meter and counters
    if env.settle_by is not None:
        env.runner.wait_running(env.settle_by)  # calls on the wire get the grace to finish (never retried)
    straggling = stragglers(env, workers)
    if async_stats is not None:
        async_stats.stragglers = straggling
    estimate = env.aggregator.head_estimate(env.artifact_id)
    final = math.nan if env.last_reward is None and estimate.measured == 0 else estimate.reward
    usage = env.usage.copy()
    env.recorder.settle_tokens()
    env.recorder.settle_refusals()
    if env.history:
        env.save_progress()
    counters: dict[str, Any] = dict(env.counters.as_dict())
    counters.update({f"merge_{k}": v for k, v in sorted(env.aggregator.counters.items())})
    counters["eta_histogram"] = {str(k): v for k, v in sorted(env.aggregator.eta_histogram.items())}
    counters["noise"] = env.aggregator.noise.stats()
    counters.update(env.cycle.stats())
    counters["final_reward_measured"] = estimate.measured
    counters["final_reward_inherited"] = estimate.inherited
    if extra_counters:
        counters.update(extra_counters)
    if env.runner.cache_start:  # the run's call cache: what it served this run (counted in this process)
        now = env.runner.call_cache.stats()
        counters.update({f"cache_{k}": now[k] - env.runner.cache_start[k] for k in ("hits", "misses", "saved_tokens")})
    counters["stragglers"] = straggling
    return EvolutionResult(
        state=state,
        rendered=env.strategy.render(state),
        final_reward=final,
        error=error,
        stop_reason=stop_reason,
        history=env.history,
        forced_refreshes=forced_refreshes,
        usage=usage,
        budget=env.governor.summary() if env.governor.max_tokens is not None else None,
        artifact_id=env.artifact_id,
        version=version,
        initial_reward=env.initial_reward,
        rollouts=env.counters.get("rollouts"),
        counters=counters,
        async_stats=async_stats,
        test_initial=test["initial"]["mean"] if test and test.get("initial") else None,
        test_final=test["final"]["mean"] if test and test.get("final") else None,
        test=test,
        held_out_samples=_held_out_samples(env, version, state),
        test_answers=answer_distribution(final_test, env.config.split.test_tasks or ()),
        test_answers_initial=answer_distribution(env.test_initial, env.config.split.test_tasks or ()),
    )


def _held_out_samples(env: RunEnv, version: int, state: Mapping[str, str]) -> dict[str, Any] | None:
    """The head's per-task held-out results at the run's start and end (`EvolutionResult.held_out_samples`)."""
    samples = env.evaluator.samples
    first = next(iter(env.ledger.history(env.artifact_id)), None)
    if first is None:
        return None
    return {"initial": {"version": first.version, "tasks": samples(first.state)},
            "final": {"version": version, "tasks": samples(state)}}


def _test_report(env: RunEnv, state: Mapping[str, str],
                 error: str | None) -> tuple[dict[str, Any] | None, Evaluation | None]:
    """The test set's report (the starting and the final head scored, and their paired difference), and the final evaluation.

    The final head is scored unless the run failed or its hard deadline passed (then only
    the starting head's evaluation is reported).
    """
    if not env.config.split.test_tasks:
        return None, None
    final: Evaluation | None = None
    if error is None and env.ran:  # a call that ran nothing calls nothing
        try:
            final = env.score_test(state)
        except (RunTimeout, RunFailed) as exc:
            logger.warning("the final head was not scored on the test set: %s", exc)
    report: dict[str, Any] = {"initial": env.test_initial.to_json() if env.test_initial else None,
                              "final": final.to_json() if final else None, "difference": None}
    if env.test_initial is not None and final is not None:
        report["difference"] = paired_difference(env.test_initial, final).to_json()
    return report, final
