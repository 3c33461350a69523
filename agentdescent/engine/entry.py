"""The engines' one entry point: ``evolve()`` and ``async_evolve()`` build a config, open a run, drive it.

Both public functions (SPEC §7) are thin doors onto `run_engine`: their keyword arguments
are the fields of `agentdescent.engine.config.RunConfig` and of its knob families
(`agentdescent.engine.config.Split`, `agentdescent.engine.config.Limits`,
`agentdescent.engine.config.Retry`, `agentdescent.engine.config.Schedule`), each declared
and documented once there; their signatures are written from them. Every check of a call
(an unknown keyword, a knob the engine cannot apply, an asynchronous run with no stop
rule) is the config's, so it holds whichever door was used. *When* things run is
`agentdescent.engine.sync_scheduler`'s or `agentdescent.engine.async_scheduler`'s;
everything else is the runtime's. It must not print anything unless asked
(``progress=True``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InvalidArgument
from ..types import Task
from ..validation import check_bool
from .async_scheduler import run_async
from .config import ASYNC_ENGINE, SYNC_ENGINE, RunConfig, engine_signature
from .ending import finish
from .evaluation import look_width
from .result import EvolutionResult, RoundInfo
from .runtime import close_run, drive, idle_reason, open_run
from .sync_scheduler import run_rounds

__all__ = ["EvolutionResult", "RoundInfo", "async_evolve", "evolve", "run_engine"]


def run_engine(tasks: Sequence[Task], reward: Callable[[Task, str], Any], keywords: dict[str, Any], *,
               engine: str, label: str) -> EvolutionResult:
    """Run one engine call from its keywords: the body both public functions share.

    Args:
        tasks: the tasks.
        reward: the reward.
        keywords: the call's keyword arguments (the fields of `RunConfig` and its families).
        engine: `SYNC_ENGINE` (rounds with a barrier) or `ASYNC_ENGINE` (workers and one merger).
        label: the progress bar's name (the function the user called).

    Returns:
        The `EvolutionResult`.
    """
    config = RunConfig.from_keywords(tasks, reward, engine=engine, **keywords)
    if engine == ASYNC_ENGINE:
        # the merger's pool: one thread per worker, and never narrower than one look of the test
        threads = max(config.schedule.n_workers, look_width(config.aggregator_config()))
        env = open_run(config, unit="sweep", pool_threads=threads)
        try:
            if config.progress:
                env.recorder.open_bar(config.limits.max_rollouts, label, rollouts=True)
            return run_async(env)
        finally:
            close_run(env)
    env = open_run(config)
    try:
        if config.progress:
            env.recorder.open_bar(env.recorder.resumed_rounds + config.limits.rounds, label)
        stop_reason, error = drive(env, lambda: run_rounds(env), idle=idle_reason(config.limits, sync=True))
        return finish(env, stop_reason=stop_reason, error=error)
    finally:
        close_run(env)


def evolve(tasks: Sequence[Task], reward: Callable[[Task, str], Any], **keywords: Any) -> EvolutionResult:
    """Evolve an artifact with parallel workers that merge through a versioned ledger.

    Each round every worker rolls out a train task on its snapshot of the artifact; an
    unsolved rollout leads to a proposal, which the strategy turns into a diff; an
    optional self-verify rollout measures the diff on the same task; the card goes to
    the aggregator, and at the round's barrier all of the round's cards are merged in
    one decision (so complementary proposals fuse). The held-out reward of the head
    is recorded after every round.

    Args:
        tasks: at least 4 tasks with unique ids (see `agentdescent.engine.config.Split` for how
            they split into train and held-out).
        reward: ``reward(task, output) -> float`` in [0, 1].
        **keywords: every field of `agentdescent.engine.config.RunConfig` (``agent``, ``run``,
            ``propose``, ``strategy``, ``ledger``, ``max_tokens``...) and of its families
            `agentdescent.engine.config.Split`, `agentdescent.engine.config.Limits`,
            `agentdescent.engine.config.Retry` and `agentdescent.engine.config.Schedule`, by
            name, or a family whole (``limits=Limits(...)``); each is documented there. And
            ``asynchronous``: run the barrier-free scheduler, exactly as `async_evolve`
            does (``rounds``, ``max_concurrency`` and ``refresh_interval`` cannot apply).

    Returns:
        The `EvolutionResult`; everything committed stays in the ledger. A run that
        cannot go on (see the Failures page) returns with ``stop_reason == "error"`` and
        ``error`` saying why.

    Raises:
        InvalidArgument: a bad knob, an unknown keyword, or one that cannot apply (the
            message names it and the accepted values); an asynchronous run with no stop
            rule; also a ``ValueError``.
        InvalidArgumentType: a knob or callable of the wrong type or shape; also a
            ``TypeError``.
        RewardContractError: the reward returned something outside [0, 1].
        ProposalContractError: a proposal that is neither ``str`` nor ``None``.
    """
    asynchronous = check_bool(keywords.pop("asynchronous", False), "asynchronous")
    engine = ASYNC_ENGINE if asynchronous else SYNC_ENGINE
    return run_engine(tasks, reward, keywords, engine=engine, label="evolve")


def async_evolve(tasks: Sequence[Task], reward: Callable[[Task, str], Any], **keywords: Any) -> EvolutionResult:
    """Evolve an artifact without round barriers: workers stream cards to one merger.

    Workers (``n_workers`` threads) loop admit -> snapshot -> rollout -> propose ->
    self-verify -> queue; the calling thread is the merger, which sweeps the queue into
    the aggregator whenever cards arrive. Each sweep is one `RoundInfo`. The keyword
    arguments are those of `evolve` that apply to an asynchronous run, with one default
    of its own (``max_seconds=20.0``: `agentdescent.engine.config.ASYNC_DEFAULTS`);
    ``max_iters`` is the older name of ``max_rollouts`` (give one or the other).

    Args:
        tasks: see `evolve`.
        reward: see `evolve`.
        **keywords: see `evolve` and `agentdescent.engine.config`; the run needs a stop
            rule (``max_seconds`` is 20 unless given).

    Returns:
        The `EvolutionResult`, with ``async_stats`` (`agentdescent.engine.result.AsyncStats`:
        sweeps, admitted rollouts, discarded stale cards, resyncs, stragglers...); the
        same counts are in ``counters`` (``sweeps``, ``stragglers``,
        ``late_results_dropped``, ``wasted_rollouts``, ``pacing_waits``,
        ``backpressure_waits``, ``resyncs``, ``admitted``).

    Raises:
        InvalidArgument: see `evolve`; also no stop rule at all, or both ``max_iters``
            and ``max_rollouts``.
    """
    if "max_iters" in keywords:
        max_iters = keywords.pop("max_iters")
        if max_iters is not None:
            if keywords.get("max_rollouts") is not None:
                raise InvalidArgument(
                    f"max_iters={max_iters!r} and max_rollouts={keywords['max_rollouts']!r}: they are the "
                    "same knob (max_iters is its older name); give one"
                )
            keywords["max_rollouts"] = max_iters
    return run_engine(tasks, reward, keywords, engine=ASYNC_ENGINE, label="async_evolve")


evolve.__signature__ = engine_signature(  # type: ignore[attr-defined]
    SYNC_ENGINE, extras=[inspect.Parameter("asynchronous", inspect.Parameter.KEYWORD_ONLY, default=False,
                                           annotation="bool")])
async_evolve.__signature__ = engine_signature(  # type: ignore[attr-defined]
    ASYNC_ENGINE, extras=[inspect.Parameter("max_iters", inspect.Parameter.KEYWORD_ONLY, default=None,
                                            annotation="int | None")])
