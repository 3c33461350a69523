"""The public home of context compaction (SPEC §9): one import for the manager, its counters and prices.

`ContextManager` and `mount` live in `agentdescent.compaction`, the `TokenCounter` seam
and its offline default in `agentdescent.tokens`, `RateCard` and `fork_break_even` in
`agentdescent.pricing`; this module gathers them under the name users know
(``from agentdescent.context import ContextManager``). It defines nothing of its own.
"""

from __future__ import annotations

from .compaction import (
    DEFAULT_FORK_MIN_SPAN_RATIO,
    SUMMARY_CALL_MODES,
    SUMMARY_MESSAGE_HEADER,
    SUMMARY_REQUEST_TAG,
    ContextManager,
    mount,
)
from .pricing import MEASURED_CACHE_HIT_FRACTION, MEASURED_RATE_CARD, RateCard, fork_break_even
from .tokens import HeuristicTokenCounter, TokenCounter, default_token_counter, estimate_tokens

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
