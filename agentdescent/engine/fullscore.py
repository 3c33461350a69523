"""Scoring the head on every held-out task: as a run ends, and when an estimate reaches the target.

A round's held-out reward is an estimate where some tasks' scores are inherited from the
versions before the head (`agentdescent.merge.scoreboard`). This module owns the two moments
the runtime pays to make it a measurement: `measure_final` (the reported ``final_reward``)
and `confirm_target` (a ``target_reward`` is met on a measured value, never on inherited
scores). Both spend at most the held-out set once per version, counted as evaluation and
within the budget. It must not commit or save progress.
"""

from __future__ import annotations

from typing import Any

from ..errors import BackendFailure, RunTimeout
from .result import RoundInfo

__all__ = ["confirm_target", "measure_final"]


def measure_final(env: Any) -> None:
    """Score the final head of ``env`` (a `agentdescent.engine.runtime.RunEnv`) on every held-out task not yet measured on it.

    So ``result.final_reward`` is the final artifact's measured held-out mean, not partly
    inherited from the versions before it. A budget already spent leaves the estimate
    (``final_measure_skipped_budget``; the result's ``final_reward_measured`` counter says
    how much of it is measured; the budget's calls are refused, never overspent), and so
    does an evaluation that fails or finds the run's clock out (``final_measure_failures``);
    a run stopped by its clock (``max_seconds``) is not measured again past it
    (`agentdescent.engine.ending.finish` skips it).
    """
    _measure_in_full(env, "final_tasks_scored", skipped="final_measure_skipped_budget",
                     failed="final_measure_failures")


def confirm_target(env: Any, info: RoundInfo) -> bool:
    """Measure the head in full when the round's estimate reaches ``target_reward``; True if it did.

    Called after the commit's block of ledger writes, so no write waits on it. The round's
    reward and its ``measured_share`` become the measurement, its tokens join the round's
    (``target_checks`` counts the checks, ``target_tasks_scored`` the tasks scored), and
    the target rule (`agentdescent.engine.stopping.TargetReward`) then compares a measured
    value. A spent budget (``target_checks_skipped_budget``) or a failed evaluation
    (``target_check_failures``) leaves the estimate, which never meets the target.
    """
    target = env.stops.limits.target_reward
    if target is None or info.held_out_reward < target or info.measured:
        return False
    estimate = _measure_in_full(env, "target_tasks_scored", skipped="target_checks_skipped_budget",
                                failed="target_check_failures")
    if estimate is None:
        return False
    env.counters.add("target_checks")
    info.held_out_reward = env.last_reward = estimate.reward
    info.measured_share = estimate.measured / estimate.tasks if estimate.tasks else None
    env.recorder.settle_tokens()
    return True


def _measure_in_full(env: Any, counter: str, *, skipped: str, failed: str) -> Any:
    """The head scored on every held-out task (a `agentdescent.merge.scoreboard.HeadEstimate`), or None.

    None, counted under ``skipped``, when the budget is spent; None, counted under
    ``failed``, when a call failed or the run's clock ran out (the estimate stands).
    """
    if env.governor.over_budget():
        env.counters.add(skipped)
        return None
    try:
        return env.aggregator.measure_final(env.artifact_id, counter=counter)
    except (BackendFailure, RunTimeout):
        env.counters.add(failed)
        return None
