"""Agents and the model seam: the token meter, completions, the Provider protocol.

This module owns what an agent is to the engines (``solve`` and ``propose``), the
thread-safe :class:`Usage` meter every token budget reads, and the one primitive seam
to a language model, :class:`Provider`. It must not import a provider SDK: the
adapters live in :mod:`agentdescent.providers` and load their SDKs lazily.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .types import Task

__all__ = ["Agent", "Completion", "Provider", "Usage"]


class Usage:
    """A thread-safe token meter.

    Engines read it for token budgets; providers record into it; plain callables may
    record into the ``usage=`` they were given. All counters only grow.

    Args:
        prompt_tokens: prompt (input) tokens, cached ones included.
        completion_tokens: generated (output) tokens.
        cached_tokens: the part of ``prompt_tokens`` served from a provider's prompt cache.
        calls: model calls (or simulated calls) recorded.
    """

    __slots__ = ("_lock", "cache_write_tokens", "cached_tokens", "calls", "completion_tokens", "prompt_tokens")

    def __init__(
        self,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cached_tokens: int = 0,
        calls: int = 0,
    ) -> None:
        self._lock = threading.Lock()
        self.prompt_tokens = int(prompt_tokens)
        self.completion_tokens = int(completion_tokens)
        self.cached_tokens = int(cached_tokens)
        self.cache_write_tokens = 0
        self.calls = int(calls)

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
        """Add one call's tokens (or several calls' with ``calls=N``).

        Raises:
            ValueError: a count is negative (a meter never runs backwards).
        """
        values = (prompt_tokens, completion_tokens, cached_tokens, calls, cache_write_tokens)
        if any(int(v) < 0 for v in values):
            raise ValueError(f"Usage.record got a negative count: {values!r}")
        with self._lock:
            self.prompt_tokens += int(prompt_tokens)
            self.completion_tokens += int(completion_tokens)
            self.cached_tokens += int(cached_tokens)
            self.cache_write_tokens += int(cache_write_tokens)
            self.calls += int(calls)

    def add(self, other: Usage) -> None:
        """Add everything another meter has recorded."""
        snap = other.snapshot()
        self.record(
            snap["prompt_tokens"],
            snap["completion_tokens"],
            snap["cached_tokens"],
            snap["calls"],
            cache_write_tokens=snap["cache_write_tokens"],
        )

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


@dataclass
class Completion:
    """One model reply.

    Args:
        text: the reply's text.
        usage: the tokens this call used, when the provider reports them.
    """

    text: str
    usage: Usage | None = None


@runtime_checkable
class Provider(Protocol):
    """The one primitive seam to a language model.

    ``complete`` may be called from several worker threads at once; implementations
    must be thread-safe. Options the engines pass: ``model``, ``tools``,
    ``max_tokens``, ``temperature``; a provider ignores none silently (an option it
    cannot honour raises ``TypeError`` naming it). Failures are raised as
    :class:`agentdescent.ProviderError` (or a subclass), never as SDK exceptions.
    """

    def complete(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> Completion:
        """Send ``messages`` (OpenAI-style role/content dicts) and return the reply."""
        ...


@runtime_checkable
class Agent(Protocol):
    """What the engines drive: solve a task with the artifact, propose a change to it.

    Both methods are called from worker threads, possibly concurrently.
    """

    def solve(self, rendered: str, task: Task) -> str:
        """Run ``task`` with the rendered artifact and return the output."""
        ...

    def propose(self, rendered: str, task: Task, output: str, reward: float) -> str | None:
        """Propose one change to the artifact after a rollout, or None for no change."""
        ...
