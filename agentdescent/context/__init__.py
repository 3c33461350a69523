"""Context compaction and the summarizer fork (SPEC §9), under the name users know.

Owns `ContextManager` (`compaction`, over its `history` and the pure `summaryrequest`), the fork
rule (`forkrule`, pure) and `mount` (a manager from a config mapping); re-exports the token
counter and the prices it uses. Imports the ground floor and `budget` (prices); it
must not import the merge, the engine, the agents or above.
"""

from .mount import (
    DEFAULT_FORK_MIN_SPAN_RATIO,
    MEASURED_CACHE_HIT_FRACTION,
    MEASURED_RATE_CARD,
    SUMMARY_CALL_MODES,
    SUMMARY_MESSAGE_HEADER,
    SUMMARY_REQUEST_TAG,
    ContextManager,
    HeuristicTokenCounter,
    RateCard,
    TokenCounter,
    default_token_counter,
    estimate_tokens,
    fork_break_even,
    mount,
)

__all__ = [
    "ContextManager",
    "DEFAULT_FORK_MIN_SPAN_RATIO",
    "default_token_counter",
    "estimate_tokens",
    "fork_break_even",
    "HeuristicTokenCounter",
    "MEASURED_CACHE_HIT_FRACTION",
    "MEASURED_RATE_CARD",
    "mount",
    "RateCard",
    "SUMMARY_CALL_MODES",
    "SUMMARY_MESSAGE_HEADER",
    "SUMMARY_REQUEST_TAG",
    "TokenCounter",
]
