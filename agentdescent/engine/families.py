"""The four knob families of a run, each a small frozen value that validates itself when built.

This module owns `Split` (how the tasks split into train and held-out, and the split
itself), `Limits` (when a run stops, and the asynchronous engine's need of a stop rule),
`Retry` (how backend failures are retried) and `Schedule` (workers, threads, snapshots,
async pacing), with the engine each knob applies to (`SYNC_ENGINE`, `ASYNC_ENGINE`) and the
asynchronous engine's own defaults (`ASYNC_DEFAULTS`). `agentdescent.engine.config.RunConfig`
is composed of them (and re-exports them). It must not open a ledger, start a thread or
call anything the user passed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ContractError, InvalidArgument, InvalidArgumentType
from ..types import Task, stable_hash
from ..validation import (
    check_bool,
    check_fraction,
    check_int,
    check_seconds,
    check_text,
    is_int,
)

__all__ = [
    "ASYNC_DEFAULTS",
    "ASYNC_ENGINE",
    "FAMILIES",
    "MAX_WORKERS",
    "SYNC_ENGINE",
    "Limits",
    "Retry",
    "Schedule",
    "Split",
]

#: The most workers (and pool threads) one run may start: each is an OS thread.
MAX_WORKERS = 1024

#: The one default `async_evolve` gives differently: a barrier-free run needs a stop rule,
#: so it stops after 20 seconds unless told otherwise.
ASYNC_DEFAULTS: Mapping[str, Any] = {"max_seconds": 20.0}

#: The two engines a config is built for: rounds with a barrier, or workers and one merger.
SYNC_ENGINE, ASYNC_ENGINE = "sync", "async"
_SYNC, _ASYNC = SYNC_ENGINE, ASYNC_ENGINE


def _only(engine: str) -> dict[str, str]:
    """Field metadata: the knob applies to one engine only."""
    return {"engine": engine}


# =========================================================================== the families


@dataclass(frozen=True)
class Split:
    """How the tasks split into train (what workers roll out) and held-out (what acceptance scores).

    Args:
        held_out_frac: share of tasks held out, strictly between 0 and 1.
        shuffle: shuffle the tasks (seeded) before the split; False keeps the positional
            split (the last tasks held out). On by default: sorted task files would
            otherwise hold out whole categories no worker ever sees.
        stratify: a ``task.meta`` key: split each of its values on its own, so every
            category is on both sides (a category of one task stays in train).
        cheap_eval_tasks: size of (or the tasks of) the cheap scoring subset that conflict
            resolution, rebase checks and the fusion tournament rank on (default
            ``min(held_out, max(8, held_out // 4))``, drawn from the held-out tasks).
        test_tasks: a test set: tasks the run never uses for any decision (not among
            ``tasks``), on which the starting and the final head are scored
            (``result.test_initial``, ``result.test_final``, ``result.test``; see
            `agentdescent.engine.testset`).
        test_repeats: draws per test task (more than 1 with a sampled model narrows the
            interval of the difference).

    Raises:
        InvalidArgument: a knob out of range (named).
    """

    held_out_frac: float = 0.4
    shuffle: bool = True
    stratify: str | None = None
    cheap_eval_tasks: int | Sequence[Task] | None = None
    test_tasks: Sequence[Task] | None = None
    test_repeats: int = 1

    def __post_init__(self) -> None:
        check_int(self.test_repeats, "test_repeats", low=1, hint="draws per test task")
        test = self.test_tasks
        if test is not None:
            if isinstance(test, (str, bytes, Mapping)) or not isinstance(test, Sequence) or not test or not all(
                isinstance(t, Task) for t in test
            ):
                raise InvalidArgumentType(f"test_tasks={test!r:.80}: give a non-empty list of Task, or None")
            if len({t.id for t in test}) != len(test):
                raise InvalidArgument("test_tasks: two test tasks share an id; give each its own id")
        check_fraction(self.held_out_frac, "held_out_frac", low_open=True, high_open=True,
                       hint="a fraction strictly between 0 and 1: the share of tasks held out for acceptance")
        check_bool(self.shuffle, "shuffle")
        check_text(self.stratify, "stratify", optional=True, hint="a task.meta key")
        cheap = self.cheap_eval_tasks
        if cheap is None:
            return
        if is_int(cheap):
            check_int(cheap, "cheap_eval_tasks", low=1, hint="a count, or a list of tasks")
        elif isinstance(cheap, (str, bytes, Mapping)) or not isinstance(cheap, Sequence) or not cheap or not all(
            isinstance(t, Task) for t in cheap
        ):
            raise InvalidArgumentType(
                f"cheap_eval_tasks={cheap!r:.80}: give a count >= 1, or a non-empty sequence of Task objects"
            )

    def split(self, tasks: Sequence[Task], seed: int) -> tuple[list[Task], list[Task]]:
        """``(train, held_out)``: a seeded shuffle, stratified by a meta key if named.

        The same seed gives the same split on every machine.

        Raises:
            ContractError: ``stratify`` names a key some task's meta lacks, or every group
                is too small to hold out a task.
        """
        ordered = list(tasks)
        rng = random.Random(stable_hash(seed, "shuffle"))
        if self.stratify is None:
            if self.shuffle:
                rng.shuffle(ordered)
            n_held = min(len(ordered) - 1, max(1, round(len(ordered) * self.held_out_frac)))
            return ordered[: len(ordered) - n_held], ordered[len(ordered) - n_held:]
        groups: dict[str, list[Task]] = {}
        for task in ordered:
            if self.stratify not in task.meta:
                raise ContractError(
                    f"stratify={self.stratify!r}: task {task.id!r} has no meta[{self.stratify!r}]; give "
                    "every task that key, or stratify=None"
                )
            groups.setdefault(str(task.meta[self.stratify]), []).append(task)
        train: list[Task] = []
        held: list[Task] = []
        for key in sorted(groups):
            group = groups[key]
            if self.shuffle:
                rng.shuffle(group)
            n_held = min(len(group) - 1, round(len(group) * self.held_out_frac))
            train += group[: len(group) - n_held]
            held += group[len(group) - n_held:]
        if not held or not train:
            raise ContractError(
                f"stratify={self.stratify!r}: every group is too small to hold out a task; use fewer "
                "groups, more tasks, or stratify=None"
            )
        return train, held

    def cheap_subset(self, held_out: Sequence[Task], seed: int) -> list[Task]:
        """The cheap scoring subset: the given tasks, or a seeded draw from ``held_out``."""
        cheap = self.cheap_eval_tasks
        if cheap is not None and not is_int(cheap):
            return list(cheap)
        k = min(len(held_out), max(8, len(held_out) // 4)) if cheap is None else min(len(held_out), cheap)
        ranked = sorted(held_out, key=lambda t: stable_hash(seed, "cheap", t.id))
        return ranked[:k]


@dataclass(frozen=True)
class Limits:
    """When a run stops: the first of these to bind ends it, and ``stop_reason`` names it.

    Args:
        rounds: sync rounds this call runs (`evolve` only). On a ledger that holds the
            run's saved progress they come on top of the rounds it already did (numbered
            on from them); ``0`` runs nothing: no call at all, the result is the saved run's
            (what a finished run has left).
        max_seconds: stop admitting work after this many seconds of the run's clock.
        grace_seconds: how long work in flight may run past ``max_seconds``; the call
            returns by ``max_seconds + grace_seconds`` whatever the backend does.
        max_rollouts: rollouts this call admits in all (the last sync round is cut short
            to honour it; every admitted async rollout is merged before the stop); ``0``
            runs nothing, as ``rounds=0``.
        max_tokens: the run's token budget. It binds on every meter the run's calls record
            into (the provider's, the agent's, ``usage``): checked before admitting work
            (a sync round: the mean round so far must still fit; an async rollout: the
            spend of the work admitted and not yet merged, its merges' evaluation
            included, and its own) and after every merge; once it is spent no new call
            starts and no running call is retried, so a run ends within ``max_tokens``
            plus what the calls then in flight spend. It also thins optional spend as it
            runs out (see `agentdescent.budget.governor.BudgetGovernor`).
        target_reward: stop once the held-out reward reaches this.
        patience: stop after this many rounds' worth of rollouts (``n_workers`` each,
            in both engines) merged without a new best held-out reward.
        stop_on_diminishing_returns: with a budget, stop when reward per token stalls.
        test_in_budget: count the test set's calls (phase ``test``) against
            ``max_tokens``; by default they are metered but outside the budget.

    Raises:
        InvalidArgument: a knob out of range (named).
    """

    rounds: int = field(default=15, metadata=_only(_SYNC))
    max_seconds: float | None = None
    grace_seconds: float = 2.0
    max_rollouts: int | None = None
    max_tokens: int | None = None
    target_reward: float | None = None
    patience: int | None = None
    stop_on_diminishing_returns: bool = False
    test_in_budget: bool = False

    def __post_init__(self) -> None:
        check_bool(self.test_in_budget, "test_in_budget")
        check_int(self.rounds, "rounds", low=0, hint="0 runs nothing (a finished run resumed)")
        check_seconds(self.max_seconds, "max_seconds", positive=True, optional=True)
        check_seconds(self.grace_seconds, "grace_seconds")
        check_int(self.max_rollouts, "max_rollouts", low=0, optional=True, hint="0 runs nothing")
        check_int(self.max_tokens, "max_tokens", low=1, optional=True, hint="the run's token budget")
        check_fraction(self.target_reward, "target_reward", optional=True, hint="a held-out reward in [0, 1]")
        check_int(self.patience, "patience", low=1, optional=True)
        check_bool(self.stop_on_diminishing_returns, "stop_on_diminishing_returns")

    def check_async_stop_rule(self) -> None:
        """Refuse an asynchronous run with nothing to end it (its workers never wait for a round).

        Raises:
            InvalidArgument: none of ``max_seconds``, ``max_rollouts``, ``target_reward``,
                ``max_tokens`` and ``patience`` is set.
        """
        if all(v is None for v in (self.max_seconds, self.max_rollouts, self.target_reward,
                                   self.max_tokens, self.patience)):
            raise InvalidArgument(
                "an asynchronous run (async_evolve, or evolve(asynchronous=True)) needs a stop rule: "
                "give max_seconds, max_rollouts, target_reward, patience or max_tokens"
            )

    def hard_deadline(self, started: float) -> float | None:
        """The clock reading by which the run returns: ``started + max_seconds + grace_seconds``."""
        return None if self.max_seconds is None else started + self.max_seconds + self.grace_seconds


@dataclass(frozen=True)
class Retry:
    """How a run treats a failing backend (see the Failures page).

    Args:
        call_attempts: attempts of a call that raises something other than a
            `agentdescent.errors.ProviderError` (a provider retries on its own; a
            non-retryable provider error ends the run at once).
        failure_limit: failed calls in a row of one phase (rollout, proposal, self-verify,
            evaluation) that end the run with ``error`` set.

    Raises:
        InvalidArgument: a knob out of range (named).
    """

    call_attempts: int = 3
    failure_limit: int = 3

    def __post_init__(self) -> None:
        check_int(self.call_attempts, "call_attempts", low=1, high=100)
        check_int(self.failure_limit, "failure_limit", low=1)


@dataclass(frozen=True)
class Schedule:
    """How work is scheduled: workers, threads, snapshot refreshes, async pacing.

    Args:
        n_workers: workers (rollouts per sync round; worker threads in async).
        max_concurrency: threads for the run's calls when no ``executor`` is given
            (`evolve` only; 1 is serial and bit-for-bit repeatable).
        refresh_interval: a worker re-reads the head every this many rounds, staggered by
            worker id, so diffs can be stale (`evolve` only; 1 means always fresh).
        async_ratio: an async worker resyncs once the head is more than this many
            versions past its snapshot (with ``evolve(asynchronous=True)`` too). Set it no
            higher than the staleness policy's alpha, or stale cards get discarded.
        pacing: admission pacing (`async_evolve` only; the AReaL capacity rule): at most
            ``(alpha + v + 1) * n_workers`` rollouts admitted by merger sweep ``v``, each
            starting on the current head, so the expected staleness at merge stays
            within alpha.
        max_pending: queued cards at which async workers wait for the merger (default
            ``2 * n_workers``).
        stall_sweeps: sweeps without a commit after which every async worker is forced to
            resync (default ``max(3, n_workers)``); not once the head's held-out reward is
            1.0, which no candidate can beat (sweeps then count toward no stall).

    Raises:
        InvalidArgument: a knob out of range (named).
    """

    n_workers: int = 4
    max_concurrency: int = field(default=1, metadata=_only(_SYNC))
    refresh_interval: int = field(default=1, metadata=_only(_SYNC))
    async_ratio: int = 3
    pacing: bool = field(default=False, metadata=_only(_ASYNC))
    max_pending: int | None = field(default=None, metadata=_only(_ASYNC))
    stall_sweeps: int | None = field(default=None, metadata=_only(_ASYNC))

    def __post_init__(self) -> None:
        check_int(self.n_workers, "n_workers", low=1, high=MAX_WORKERS)
        check_int(self.max_concurrency, "max_concurrency", low=1, high=MAX_WORKERS)
        check_int(self.refresh_interval, "refresh_interval", low=1)
        check_int(self.async_ratio, "async_ratio", low=0)
        check_bool(self.pacing, "pacing")
        check_int(self.max_pending, "max_pending", low=1, optional=True)
        check_int(self.stall_sweeps, "stall_sweeps", low=1, optional=True)


#: Each family by the keyword that passes it whole (``limits=Limits(...)``).
FAMILIES: dict[str, type] = {"split": Split, "limits": Limits, "retry": Retry, "schedule": Schedule}


# =========================================================================== the run's config
