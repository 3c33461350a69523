"""The model seam: one reply (`Completion`), the `Provider` that gives it, and the `Agent` the engines drive.

This module owns what every part of the package agrees on about a language model: the
reply (`Completion`), the `Provider` seam (``complete(messages, **options)``, with the
options every provider accepts checked by `check_options`, and the meter it records
into), and the `Agent` seam (``solve`` and ``propose``). It imports nothing above the
meters (`agentdescent.usage`), so the agents, the compactor, the providers and the
engines build on it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .errors import InvalidArgument, InvalidArgumentType
from .seams import Seam
from .types import Task
from .usage import Usage
from .validation import is_real

__all__ = ["PROVIDER_OPTIONS", "Agent", "Completion", "Provider", "check_options"]

#: The options every provider's ``complete`` accepts (SPEC §8). Anything else is an
#: `InvalidArgumentType` naming it: an option silently dropped would be a knob that does nothing.
PROVIDER_OPTIONS = frozenset({"model", "tools", "max_tokens", "temperature"})


@dataclass
class Completion:
    """One model reply.

    Args:
        text: the reply's text.
        usage: the tokens this call used, when the provider reports them.
        finish_reason: why generation stopped, as the provider said (``"stop"``,
            ``"length"`` for a reply cut off by the per-call limit, ``"tool_calls"``...),
            or None when it did not say.
        tool_calls: the tool calls the model asked for, as the provider returned them.
    """

    text: str
    usage: Usage | None = None
    finish_reason: str | None = None
    tool_calls: tuple[Any, ...] = ()



class Provider(Seam):
    """The one primitive seam to a language model.

    Who calls it: the agents (`agentdescent.agents.llm.LLMAgent`), the compactor's summarizer
    and the judge reward, from any worker thread, possibly at once: implementations must
    be thread-safe. ``complete`` is required; ``usage`` is optional (default None).

    ``complete(messages, **options)`` takes OpenAI-style role/content dicts and the
    options `check_options` accepts (``model``, ``tools``, ``max_tokens``,
    ``temperature``); a provider ignores none silently (an option it cannot honour raises
    `InvalidArgumentType` naming it). Failures are raised as `agentdescent.ProviderError`
    (or a subclass), never as SDK exceptions, and say through ``ProviderError.retryable``
    whether trying again can help.

    ``usage`` is the `Usage` meter the provider records every call into, or None when it
    records nothing itself (an agent then counts the call from the reply's own usage, or
    from `Usage.estimate`). Subclass this class to inherit the default, or give any object
    with ``complete``: the engines and agents wrap it (`agentdescent.seams.adopt`).
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("complete",)
    OPTIONAL: ClassVar[tuple[str, ...]] = ("usage",)

    #: The meter this provider records every call into, or None.
    usage: Usage | None = None

    def complete(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> Completion:
        """Send ``messages`` (OpenAI-style role/content dicts) and return the reply."""
        raise NotImplementedError


class Agent(Seam):
    """What the engines drive: solve a task with the artifact, propose a change to it.

    Who calls it: the engines' workers, from worker threads, possibly concurrently (both
    methods are required). ``usage`` is optional: the meter the agent records into, or None.
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("solve", "propose")
    OPTIONAL: ClassVar[tuple[str, ...]] = ("usage",)

    #: The meter this agent records every call into, or None.
    usage: Usage | None = None

    def solve(self, rendered: str, task: Task) -> str:
        """Run ``task`` with the rendered artifact and return the output."""
        raise NotImplementedError

    def propose(self, rendered: str, task: Task, output: str, reward: float) -> str | None:
        """Propose one change to the artifact after a rollout, or None for no change."""
        raise NotImplementedError


def check_options(options: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """Validate ``complete`` options and drop the ones set to ``None``.

    A ``None`` value means "not given" (so callers can pass their own defaults through
    unconditionally); any name outside `PROVIDER_OPTIONS` is a mistake worth an
    error rather than a silently ignored knob.

    Args:
        options: the keyword arguments ``complete`` received.
        owner: the provider's class name, for the error text.

    Returns:
        The options that carry a value.

    Raises:
        InvalidArgumentType: an option name is not one of ``model``, ``tools``,
            ``max_tokens``, ``temperature``; ``max_tokens`` is not an int or
            ``temperature`` not a number.
        InvalidArgument: ``max_tokens`` < 1 (a server may read 0 as "no limit") or
            ``temperature`` < 0.
    """
    unknown = sorted(set(options) - PROVIDER_OPTIONS)
    if unknown:
        raise InvalidArgumentType(
            f"{owner}.complete() got unknown option(s) {', '.join(map(repr, unknown))}; "
            f"the options are {', '.join(sorted(PROVIDER_OPTIONS))}"
        )
    given = {k: v for k, v in options.items() if v is not None}
    limit = given.get("max_tokens")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise InvalidArgumentType(
                f"{owner}.complete(max_tokens={limit!r}): max_tokens is the per-call limit on "
                "the reply's length in tokens; use an int > 0"
            )
        if limit < 1:
            # llama.cpp servers read 0 (and negatives) as "no limit": never send one
            raise InvalidArgument(
                f"{owner}.complete(max_tokens={limit!r}): max_tokens is the per-call limit on "
                "the reply's length in tokens; use an int > 0 (or None for the default)"
            )
    temperature = given.get("temperature")
    if temperature is not None:
        if not is_real(temperature):
            raise InvalidArgumentType(f"{owner}.complete(temperature={temperature!r}): use a number >= 0")
        if not 0 <= temperature < float("inf"):
            raise InvalidArgument(f"{owner}.complete(temperature={temperature!r}): use a number >= 0")
    return given
