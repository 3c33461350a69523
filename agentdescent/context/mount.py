"""The public home of context compaction (SPEC §9): one import for the manager, its counters and prices.

`ContextManager` lives in `agentdescent.context.compaction`, the fork rule in
`agentdescent.context.forkrule`, the `TokenCounter` seam and its offline default in
`agentdescent.tokens`, `RateCard` and `fork_break_even` in `agentdescent.budget.pricing`; this
module gathers them under the name users know (``from agentdescent.context.mount import
ContextManager``), and owns `mount`: a manager from a config mapping. It must not hold
state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..budget.pricing import (
    MEASURED_CACHE_HIT_FRACTION,
    MEASURED_RATE_CARD,
    RateCard,
    fork_break_even,
)
from ..errors import InvalidArgument, InvalidArgumentType
from ..model import Provider
from ..tokens import HeuristicTokenCounter, TokenCounter, default_token_counter, estimate_tokens
from .compaction import SUMMARY_MESSAGE_HEADER, SUMMARY_REQUEST_TAG, ContextManager
from .forkrule import DEFAULT_FORK_MIN_SPAN_RATIO, SUMMARY_CALL_MODES

__all__ = [
    "DEFAULT_FORK_MIN_SPAN_RATIO",
    "MEASURED_CACHE_HIT_FRACTION",
    "MEASURED_RATE_CARD",
    "SUMMARY_CALL_MODES",
    "SUMMARY_MESSAGE_HEADER",
    "SUMMARY_REQUEST_TAG",
    "ContextManager",
    "HeuristicTokenCounter",
    "RateCard",
    "TokenCounter",
    "default_token_counter",
    "estimate_tokens",
    "fork_break_even",
    "mount",
]


_CONSTRUCTOR_KEYS = (
    "max_tokens", "summary_trigger", "target_usage", "protected_recent",
    "summary_call_mode", "summary_fork_min_span_ratio", "token_counter",
)
_MOUNT_KEYS = (*_CONSTRUCTOR_KEYS, "rate_card", "cache_hit_fraction", "summary_model")


def mount(config: Mapping[str, Any], *, provider: Provider) -> ContextManager:
    """Build a `ContextManager` from a config mapping.

    Configuration files and agent harnesses carry the context settings as plain keys;
    this threads every one of them, both fork knobs included, into the manager, and
    refuses keys it does not know rather than ignoring a typo.

    Args:
        config: ``max_tokens`` (required) and optionally ``summary_trigger``,
            ``target_usage``, ``protected_recent``, ``summary_call_mode``,
            ``summary_fork_min_span_ratio``, ``token_counter``, ``rate_card`` (a
            `RateCard` or a mapping of its fields), ``cache_hit_fraction`` and
            ``summary_model``.
        provider: where summary calls go.

    Returns:
        The configured manager.

    Raises:
        InvalidArgument: ``config`` is not a mapping, misses ``max_tokens``, has an unknown
            key, or holds a bad value (named).
    """
    if not isinstance(config, Mapping):
        raise InvalidArgumentType(f"mount(config={config!r}): pass a mapping of context settings")
    unknown = sorted(set(config) - set(_MOUNT_KEYS))
    if unknown:
        raise InvalidArgument(f"mount(config=...) has unknown keys {unknown}; known keys: {list(_MOUNT_KEYS)}")
    if "max_tokens" not in config:
        raise InvalidArgument("mount(config=...) needs 'max_tokens', the context budget in tokens")
    kwargs = {k: config[k] for k in _CONSTRUCTOR_KEYS if k in config}
    manager = ContextManager(provider, **kwargs)
    if config.get("rate_card") is not None:
        manager.rate_card = config["rate_card"]
    if "cache_hit_fraction" in config:
        manager.cache_hit_fraction = config["cache_hit_fraction"]
    if config.get("summary_model") is not None:
        model = config["summary_model"]
        if not isinstance(model, str):
            raise InvalidArgumentType(f"summary_model={model!r}: pass a model name as a str, or None")
        manager.summary_model = model
    return manager
