"""Token meters and the per-thread scopes that route every recorded token to a run's budget.

This module owns the thread-safe `Usage` meter every token budget reads, and the scopes
the engines open around a call: its phase (`usage_phase`), its worker (`worker_scope`),
the run meters it must also land in (`run_meters`), and the fresh meter a call that
travels to another process records into (`recording`, replayed on the driver by
`replay_usage`). It also owns the one fallback for a call whose provider reported no
usage: `Usage.estimate` (the offline estimate of `agentdescent.tokens`, each way).

**How tokens reach a run's budget.** A provider records a call's tokens into *its own*
meter; a user's callable may record into the ``usage=`` it was given; an agent may keep a
third. The engines do not need to know which: around every call they open
`run_meters(...)`, and each `Usage.record` made in that thread inside the scope is also
recorded, once, into the run's meters. Copying a call that was already recorded into a
second meter (`Usage.mirror`) is not new spend and is not forwarded again.

**Across processes.** A call that runs in another process (a process pool, a Dask worker)
cannot reach the run's meters. It runs inside `recording` there, which gives it a fresh
meter as its only run meter; the meter pickles and comes back with the result, and the
driver adds it to the run with `replay_usage`, once, phases kept.

It must not import anything of the package but the errors, the validation helpers and
the token estimate.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from .errors import InvalidArgument, InvalidArgumentType
from .tokens import estimate_tokens
from .validation import is_real

__all__ = [
    "Usage",
    "current_worker",
    "recording",
    "replay_usage",
    "run_meters",
    "thread_tokens",
    "usage_phase",
    "worker_scope",
]

_LOCAL = threading.local()


@contextlib.contextmanager
def worker_scope(worker_id: int | None) -> Iterator[None]:
    """Mark the calls made *in this thread* inside the block as worker ``worker_id``'s.

    The engines wrap each worker's rollout, proposal and self-verify calls in it, so an
    agent can keep per-worker state (``LLMAgent(conversation=True)`` keeps one
    conversation per worker) without the Agent protocol carrying a worker id.
    """
    previous = getattr(_LOCAL, "worker", None)
    _LOCAL.worker = worker_id
    try:
        yield
    finally:
        _LOCAL.worker = previous


def current_worker() -> int | None:
    """The worker id set by `worker_scope` in this thread, or None outside a worker."""
    return getattr(_LOCAL, "worker", None)


def thread_tokens() -> int:
    """Tokens recorded by *this thread* on any `Usage` meter since it started.

    Mirrors (`Usage.mirror`) are not counted: the same call is counted once, however many
    meters it lands in. The engines read it before and after a call to know what that
    call cost.
    """
    return getattr(_LOCAL, "tokens", 0)


@contextlib.contextmanager
def usage_phase(name: str) -> Iterator[None]:
    """Attribute every token recorded *in this thread* inside the block to ``name``.

    The engines wrap their calls in phases (``"rollout"``, ``"proposal"``,
    ``"self_verify"``, ``"evaluation"``) so that `Usage.by_phase` can say where
    a budget went, without providers or user callables knowing about phases: they
    record into a meter from the calling thread, and the meter reads the phase.
    """
    previous = getattr(_LOCAL, "phase", None)
    _LOCAL.phase = name
    try:
        yield
    finally:
        _LOCAL.phase = previous


@contextlib.contextmanager
def run_meters(*meters: Usage) -> Iterator[None]:
    """Also record, into each of ``meters``, every call recorded in this thread in the block.

    The engines open it around every backend call with the run's meter, so a token budget
    binds whichever meter the call's provider, agent or callable records into. A record
    made directly into one of ``meters`` is not recorded into it twice.
    """
    previous = getattr(_LOCAL, "sinks", ())
    _LOCAL.sinks = tuple(dict.fromkeys((*previous, *meters)))
    try:
        yield
    finally:
        _LOCAL.sinks = previous


@contextlib.contextmanager
def recording(phase: str, worker_id: int | None = None) -> Iterator[Usage]:
    """Record every call made *in this thread* in the block into a fresh meter, and only there.

    What a call that travels to another process runs in: the block's records land in the
    yielded meter (attributed to ``phase``, the calls marked as worker ``worker_id``'s),
    which the call returns with its result for `replay_usage` on the driver. The scope
    *replaces* the thread's run meters (a forked process may inherit its parent's), so
    nothing recorded here is counted anywhere else in this process.

    Args:
        phase: the phase the block's tokens are attributed to (see `usage_phase`).
        worker_id: the worker the calls belong to (see `worker_scope`).
    """
    meter = Usage()
    previous = getattr(_LOCAL, "sinks", ())
    _LOCAL.sinks = (meter,)
    try:
        with usage_phase(phase), worker_scope(worker_id):
            yield meter
    finally:
        _LOCAL.sinks = previous


def replay_usage(record: Usage) -> None:
    """Record, in this thread, spend that was recorded elsewhere (``record``: another process's meter).

    Each run meter of this thread's `run_meters` scope receives it once, its phases kept
    as they were recorded; `thread_tokens` counts it, as if the call had run here. The
    engines call it on the driver with what a traveling call brought back.
    """
    with record._lock:
        counts = (record.prompt_tokens, record.completion_tokens, record.cached_tokens,
                  record.calls, record.cache_write_tokens)
        phases = dict(record._phases)
    _LOCAL.tokens = getattr(_LOCAL, "tokens", 0) + counts[0] + counts[1]
    for sink in getattr(_LOCAL, "sinks", ()):
        sink._merge(counts, phases)



def _count(value: Any, name: str) -> int:
    if not is_real(value) or value != value or value in (float("inf"), float("-inf")):
        raise InvalidArgumentType(f"Usage: {name}={value!r} is not a token count; use an integer >= 0")
    if value < 0:
        raise InvalidArgument(f"Usage: {name}={value!r} is negative; a meter never runs backwards")
    return int(value)


class Usage:
    """A thread-safe token meter.

    Engines read it for token budgets; providers record into it; plain callables may
    record into the ``usage=`` they were given. All counters only grow. A ``Usage`` built
    with counts (``Usage(12, 3)``) is one call's record: building it spends nothing.

    Args:
        prompt_tokens: prompt (input) tokens, cached ones included.
        completion_tokens: generated (output) tokens.
        cached_tokens: the part of ``prompt_tokens`` served from a provider's prompt cache.
        calls: model calls (or simulated calls) recorded.
        cache_write_tokens: prompt tokens written to a provider's cache.

    Raises:
        ValueError: a count is negative or not a number.
    """

    __slots__ = (
        "_lock", "_phases", "cache_write_tokens", "cached_tokens", "calls", "completion_tokens",
        "prompt_tokens",
    )

    def __init__(
        self,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cached_tokens: int = 0,
        calls: int = 0,
        *,
        cache_write_tokens: int = 0,
    ) -> None:
        self._lock = threading.Lock()
        self.prompt_tokens = _count(prompt_tokens, "prompt_tokens")
        self.completion_tokens = _count(completion_tokens, "completion_tokens")
        self.cached_tokens = _count(cached_tokens, "cached_tokens")
        self.cache_write_tokens = _count(cache_write_tokens, "cache_write_tokens")
        self.calls = _count(calls, "calls")
        self._phases: dict[str, int] = {}

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def record(
        self,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cached_tokens: int = 0,
        calls: int = 1,
        *,
        cache_write_tokens: int = 0,
    ) -> None:
        """Record new spend: one call's tokens (or several calls' with ``calls=N``).

        The spend is also recorded into the run meters of this thread's `run_meters`
        scope, and counted by `thread_tokens`.

        Raises:
            ValueError: a count is negative or not a number (a meter never runs backwards).
        """
        counts = (
            _count(prompt_tokens, "prompt_tokens"), _count(completion_tokens, "completion_tokens"),
            _count(cached_tokens, "cached_tokens"), _count(calls, "calls"),
            _count(cache_write_tokens, "cache_write_tokens"),
        )
        phase = getattr(_LOCAL, "phase", None) or "other"
        _LOCAL.tokens = getattr(_LOCAL, "tokens", 0) + counts[0] + counts[1]
        self._add(counts, phase)
        for sink in getattr(_LOCAL, "sinks", ()):
            if sink is not self:
                sink._add(counts, phase)

    @classmethod
    def estimate(cls, prompt: str, reply: str) -> Usage:
        """One call's record from its texts, for a provider that reported no usage.

        The package's one metering fallback: `agentdescent.tokens.estimate_tokens` of the
        prompt and of the reply, one call. Building it spends nothing; ``add`` it to a meter.
        """
        return cls(estimate_tokens(prompt), estimate_tokens(reply), 0, 1)

    def add(self, other: Usage) -> None:
        """Record everything another meter (typically one call's record) holds as new spend."""
        snap = other.snapshot()
        self.record(snap["prompt_tokens"], snap["completion_tokens"], snap["cached_tokens"],
                    snap["calls"], cache_write_tokens=snap["cache_write_tokens"])

    def mirror(self, other: Usage) -> None:
        """Copy a call that another meter already recorded: not new spend.

        Neither counted by `thread_tokens` nor forwarded to the run meters, so an agent
        that keeps its own meter beside its provider's does not count a call twice.
        """
        if any(sink is self for sink in getattr(_LOCAL, "sinks", ())):
            return  # the engine already forwards every recorded call to this meter
        snap = other.snapshot()
        phase = getattr(_LOCAL, "phase", None) or "other"
        self._add((snap["prompt_tokens"], snap["completion_tokens"], snap["cached_tokens"],
                   snap["calls"], snap["cache_write_tokens"]), phase)

    def _add(self, counts: tuple[int, int, int, int, int], phase: str) -> None:
        prompt, completion, cached, calls, cache_write = counts
        with self._lock:
            self._phases[phase] = self._phases.get(phase, 0) + prompt + completion
            self.prompt_tokens += prompt
            self.completion_tokens += completion
            self.cached_tokens += cached
            self.cache_write_tokens += cache_write
            self.calls += calls

    def _merge(self, counts: tuple[int, int, int, int, int], phases: Mapping[str, int]) -> None:
        prompt, completion, cached, calls, cache_write = counts
        with self._lock:
            for phase, tokens in phases.items():
                self._phases[phase] = self._phases.get(phase, 0) + tokens
            self.prompt_tokens += prompt
            self.completion_tokens += completion
            self.cached_tokens += cached
            self.cache_write_tokens += cache_write
            self.calls += calls

    def __getstate__(self) -> dict[str, Any]:
        """Counts and phases (taken under the lock): a meter pickles, its lock does not travel."""
        with self._lock:
            state = {name: getattr(self, name) for name in self.__slots__ if name != "_lock"}
            state["_phases"] = dict(self._phases)
        return state

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self._lock = threading.Lock()
        for name, value in state.items():
            setattr(self, name, value)

    def to_json(self) -> dict[str, Any]:
        """Every counter and the per-phase totals, JSON-ready (`from_json` reads it back)."""
        with self._lock:
            return {
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cached_tokens": self.cached_tokens, "cache_write_tokens": self.cache_write_tokens,
                "calls": self.calls, "total_tokens": self.prompt_tokens + self.completion_tokens,
                "phases": dict(sorted(self._phases.items())),
            }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Usage:
        """A meter holding what `to_json` (or `snapshot`) wrote; building it spends nothing."""
        meter = cls(data["prompt_tokens"], data["completion_tokens"], data["cached_tokens"], data["calls"],
                    cache_write_tokens=data.get("cache_write_tokens", 0))
        meter._phases.update({str(k): int(v) for k, v in data.get("phases", {}).items()})
        return meter

    def copy(self) -> Usage:
        """An independent meter holding the same counts and phases (taken under the lock)."""
        with self._lock:
            twin = Usage(self.prompt_tokens, self.completion_tokens, self.cached_tokens, self.calls,
                         cache_write_tokens=self.cache_write_tokens)
            twin._phases = dict(self._phases)
        return twin

    def by_phase(self) -> dict[str, int]:
        """Total tokens per phase (see `usage_phase`); unattributed ones under ``"other"``."""
        with self._lock:
            return dict(sorted(self._phases.items()))

    def snapshot(self) -> dict[str, int]:
        """A consistent copy of every counter (taken under the lock)."""
        with self._lock:
            return {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "cached_tokens": self.cached_tokens,
                "cache_write_tokens": self.cache_write_tokens,
                "calls": self.calls,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
            }

    def __repr__(self) -> str:
        s = self.snapshot()
        return (
            f"Usage(prompt_tokens={s['prompt_tokens']}, completion_tokens={s['completion_tokens']}, "
            f"cached_tokens={s['cached_tokens']}, calls={s['calls']})"
        )

