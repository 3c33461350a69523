"""The sync scheduler: rounds with a barrier, and nothing else.

This module owns only *when* things run in a sync run: each round reads the head once and
gives that snapshot to every worker that refreshes in the round (a worker refreshes every
``refresh_interval`` rounds, staggered by worker id), runs the round's rollouts and worker
steps on the run's pool, and merges every card the round produced in one decision at the
barrier (so two complementary proposals of one round fuse). The worker step, the rules and the recording are the runtime's, shared with
`agentdescent.engine.async_scheduler`. It must not commit except through the aggregator.
"""

from __future__ import annotations

from ..types import EvidenceCard, Task
from .runtime import RunEnv
from .worker import Rollout, card_step, rollout_step

__all__ = ["run_rounds"]


def run_rounds(env: RunEnv) -> str:
    """Run up to ``limits.rounds`` rounds (more after a resume); return the stop reason."""
    aid = env.artifact_id
    rounds = env.config.limits.rounds
    refresh = env.config.schedule.refresh_interval
    done_before = env.recorder.resumed_rounds
    snapshots: dict[int, tuple[int, dict[str, str]]] = {}
    admitted = 0
    for index in range(1, rounds + 1):
        reason = env.admission_check(admitted, env.governor.mean_round_tokens())
        if reason is not None:
            return reason
        refreshing = [w for w in range(env.n_workers)
                      if index == 1 or (done_before + index - 1 + w) % refresh == 0]
        if refreshing:  # one read of the head per round, shared by every worker that refreshes in it
            head = env.ledger.head(aid)
            snapshots.update(dict.fromkeys(refreshing, head))
        left = env.stops.rollouts_left(admitted)
        workers = range(env.n_workers if left is None else min(env.n_workers, left))
        jobs = [(w, env.cycle.next()) for w in workers]
        admitted += len(jobs)

        def do_rollout(job: tuple[int, Task]) -> Rollout:
            w, task = job
            version, state = snapshots[w]
            return rollout_step(env, w, task, version, state)

        rollouts = [r for r in env.runner.map(do_rollout, jobs) if isinstance(r, Rollout)]
        cards = [c for c in env.runner.map(lambda r: card_step(env, r), rollouts) if isinstance(c, EvidenceCard)]
        info = env.merge_and_record(rollouts=len(rollouts), cards=cards)
        reason = env.stops.after_merge(info.held_out_reward, info.rollouts, measured=info.measured)
        if reason is None and env.stops.rollouts_left(admitted) == 0:
            reason = "max_rollouts"
        if reason is not None:
            return reason
    return "rounds"
