"""The synchronous engine, ``evolve()``: build the run's config, open it, run rounds, return the result.

``evolve`` is the public entry point (SPEC §7). Its keyword arguments are the fields of
`agentdescent.config.RunConfig` and of its knob families (`agentdescent.config.Split`,
`agentdescent.config.Limits`, `agentdescent.config.Retry`,
`agentdescent.config.Schedule`), each declared and documented once there; its signature
is written from them. *When* things run is `agentdescent.sync_scheduler`'s (or, with
``asynchronous=True``, `agentdescent.async_scheduler`'s); everything else is the
runtime's. It must not print anything unless asked (``progress=True``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from .async_scheduler import run_async
from .config import RunConfig, engine_signature
from .result import EvolutionResult, RoundInfo
from .runtime import close_run, drive, finish, idle_reason, open_run
from .sync_scheduler import run_rounds
from .types import Task
from .validation import check_bool

__all__ = ["EvolutionResult", "RoundInfo", "evolve"]


def evolve(tasks: Sequence[Task], reward: Callable[[Task, str], Any], **keywords: Any) -> EvolutionResult:
    """Evolve an artifact with parallel workers that merge through a versioned ledger.

    Each round every worker rolls out a train task on its snapshot of the artifact; an
    unsolved rollout leads to a proposal, which the strategy turns into a diff; an
    optional self-verify rollout measures the diff on the same task; the card goes to
    the aggregator, and at the round's barrier all of the round's cards are merged in
    one decision (so complementary proposals fuse). The held-out reward of the head
    is recorded after every round.

    Args:
        tasks: at least 4 tasks with unique ids (see `agentdescent.config.Split` for how
            they split into train and held-out).
        reward: ``reward(task, output) -> float`` in [0, 1].
        **keywords: every field of `agentdescent.config.RunConfig` (``agent``, ``run``,
            ``propose``, ``strategy``, ``ledger``, ``max_tokens``...) and of its families
            `agentdescent.config.Split`, `agentdescent.config.Limits`,
            `agentdescent.config.Retry` and `agentdescent.config.Schedule`, by name, or a
            family whole (``limits=Limits(...)``); each is documented there. And
            ``asynchronous``: delegate to the barrier-free scheduler (as `async_evolve`
            does; ``rounds``, ``max_concurrency`` and ``refresh_interval`` cannot apply).

    Returns:
        The `EvolutionResult`; everything committed stays in the ledger. A run that
        cannot go on (see the Failures page) returns with ``stop_reason == "error"`` and
        ``error`` saying why.

    Raises:
        InvalidArgument: a bad knob, an unknown keyword, or one that cannot apply (the
            message names it and the accepted values); also a ``ValueError``.
        InvalidArgumentType: a knob or callable of the wrong type or shape; also a
            ``TypeError``.
        RewardContractError: the reward returned something outside [0, 1].
        ProposalContractError: a proposal that is neither ``str`` nor ``None``.
    """
    asynchronous = check_bool(keywords.pop("asynchronous", False), "asynchronous")
    if asynchronous:
        config = RunConfig.from_keywords(tasks, reward, engine="async", **keywords)
        env = open_run(config, unit="sweep", pool_threads=config.schedule.n_workers)
        try:
            if config.progress:
                env.recorder.open_bar(config.limits.max_rollouts, "evolve", rollouts=True)
            return run_async(env)
        finally:
            close_run(env)
    config = RunConfig.from_keywords(tasks, reward, engine="sync", **keywords)
    env = open_run(config)
    try:
        if config.progress:
            env.recorder.open_bar(env.recorder.resumed_rounds + config.limits.rounds, "evolve")
        stop_reason, error = drive(env, lambda: run_rounds(env), idle=idle_reason(config.limits, sync=True))
        return finish(env, stop_reason=stop_reason, error=error)
    finally:
        close_run(env)


evolve.__signature__ = engine_signature(  # type: ignore[attr-defined]
    "sync", extras=[inspect.Parameter("asynchronous", inspect.Parameter.KEYWORD_ONLY, default=False,
                                      annotation="bool")])
