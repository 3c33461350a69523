"""The barrier-free engine, ``async_evolve()``: build the run's config, open it, run workers and one merger.

``async_evolve`` is the public entry point (SPEC §7). Its keyword arguments are the fields
of `agentdescent.config.RunConfig` and of its knob families, as for
`agentdescent.evolution.evolve`, with one default of its own (``max_seconds=20.0``:
`agentdescent.config.ASYNC_DEFAULTS`) and one older name (``max_iters`` for
``max_rollouts``). *When* things run is `agentdescent.async_scheduler`'s.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from .async_scheduler import run_async
from .config import RunConfig, engine_signature
from .errors import InvalidArgument
from .result import EvolutionResult
from .runtime import close_run, open_run
from .types import Task

__all__ = ["async_evolve"]


def async_evolve(tasks: Sequence[Task], reward: Callable[[Task, str], Any], **keywords: Any) -> EvolutionResult:
    """Evolve an artifact without round barriers: workers stream cards to one merger.

    Workers (``n_workers`` threads) loop admit -> snapshot -> rollout -> propose ->
    self-verify -> queue; the calling thread is the merger, which sweeps the queue into
    the aggregator whenever cards arrive. Each sweep is one `RoundInfo`. The keyword
    arguments are those of `agentdescent.evolution.evolve` that apply to an asynchronous
    run; ``max_iters`` is the older name of ``max_rollouts`` (give one or the other).

    Args:
        tasks: see `agentdescent.evolution.evolve`.
        reward: see `agentdescent.evolution.evolve`.
        **keywords: see `agentdescent.evolution.evolve` and `agentdescent.config`; the
            run needs a stop rule (``max_seconds`` is 20 unless given).

    Returns:
        The `EvolutionResult`, with ``async_stats`` (`agentdescent.result.AsyncStats`:
        sweeps, admitted rollouts, discarded stale cards, resyncs, stragglers...); the
        same counts are in ``counters`` (``sweeps``, ``stragglers``,
        ``late_results_dropped``, ``wasted_rollouts``, ``pacing_waits``,
        ``backpressure_waits``, ``resyncs``, ``admitted``).

    Raises:
        InvalidArgument: see `agentdescent.evolution.evolve`; also no stop rule at all,
            or both ``max_iters`` and ``max_rollouts``.
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
    config = RunConfig.from_keywords(tasks, reward, engine="async", **keywords)
    limits = config.limits
    if all(v is None for v in (limits.max_seconds, limits.max_rollouts, limits.target_reward,
                               limits.max_tokens, limits.patience)):
        raise InvalidArgument(
            "async_evolve needs a stop rule: give max_seconds, max_rollouts, target_reward, "
            "patience or max_tokens"
        )
    env = open_run(config, unit="sweep", pool_threads=config.schedule.n_workers)
    try:
        if config.progress:
            env.recorder.open_bar(config.limits.max_rollouts, "async_evolve", rollouts=True)
        return run_async(env)
    finally:
        close_run(env)


async_evolve.__signature__ = engine_signature(  # type: ignore[attr-defined]
    "async", extras=[inspect.Parameter("max_iters", inspect.Parameter.KEYWORD_ONLY, default=None,
                                       annotation="int | None")])
