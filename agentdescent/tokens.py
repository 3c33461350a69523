"""Counting tokens offline: the one estimate every budget and the compactor share, and the `TokenCounter` seam.

This module owns `estimate_tokens` (``ceil(len(text) / 4)``: deterministic, no
download, the same number on every machine; the fallback that meters a call whose
provider reports no usage, and the count the compactor budgets with unless given another
counter), the `TokenCounter` seam (text and message counts), its offline default
`HeuristicTokenCounter` (the same estimate, plus a framing overhead per message), and
`default_token_counter` (a locally cached tiktoken encoding when one is already on disk,
never downloaded). It must not open a network connection.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, ClassVar

from .errors import InvalidArgumentType
from .messages import message_text
from .seams import Seam, adopt
from .validation import check_int, check_real

__all__ = [
    "HeuristicTokenCounter",
    "TokenCounter",
    "as_token_counter",
    "default_token_counter",
    "estimate_tokens",
    "tools_tokens",
]


def estimate_tokens(text: str) -> int:
    """A deterministic offline token estimate: ``ceil(len(text) / 4)``.

    Used wherever a real tokenizer's count is not available (plain callables, fakes, an
    endpoint that reports no usage, the compactor's default counter) so that token
    budgets still bind. It needs no download and gives the same number on every machine;
    it is not a tokenizer.

    Args:
        text: the text to count.

    Returns:
        The estimated token count (0 for empty text).
    """
    return math.ceil(len(text) / 4)


class TokenCounter(Seam):
    """How many tokens a text or a message costs: the seam behind every context budget.

    Called by `agentdescent.context.compaction.ContextManager` (and
    `agentdescent.testing.CachingProviderSim`) from the thread that owns the
    conversation. Implementations must be deterministic (the same input always gives the
    same count) and must never touch the network. Both members are required.
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("count_text", "count_message")

    def count_text(self, text: str) -> int:
        """Tokens in ``text``."""
        raise NotImplementedError

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Tokens one OpenAI-style message costs, role and framing overhead included."""
        raise NotImplementedError


class HeuristicTokenCounter(TokenCounter):
    """The offline default: `estimate_tokens` for text, plus a framing overhead per message.

    Real tokenizers need vocabulary files that cannot be downloaded here, and budgets only
    need a stable, roughly right count: ``ceil(len(text) / chars_per_token)`` tokens for a
    text (the package's one estimate at the default 4), and ``message_overhead`` more
    for each message's role and framing. Same text, same count, on every machine.

    Args:
        chars_per_token: characters that make one token.
        message_overhead: tokens added per message for its role and framing.

    Raises:
        InvalidArgument: a knob out of range (named).
    """

    def __init__(self, chars_per_token: float = 4.0, message_overhead: int = 4) -> None:
        self.chars_per_token = check_real(chars_per_token, "chars_per_token", low=0.0, low_open=True,
                                          owner="HeuristicTokenCounter")
        self.message_overhead = check_int(message_overhead, "message_overhead", low=0,
                                          owner="HeuristicTokenCounter")

    def count_text(self, text: str) -> int:
        """``ceil(len(text) / chars_per_token)``: `estimate_tokens` at the default."""
        if self.chars_per_token == 4.0:
            return estimate_tokens(text)
        return math.ceil(len(text) / self.chars_per_token)

    def count_message(self, message: Mapping[str, Any]) -> int:
        """The message's payload tokens plus the framing overhead."""
        return self.message_overhead + self.count_text(message_text(message))

    def __repr__(self) -> str:
        return (
            f"HeuristicTokenCounter(chars_per_token={self.chars_per_token}, "
            f"message_overhead={self.message_overhead})"
        )


class _TextFunctionCounter(TokenCounter):
    """Adapts a plain ``str -> int`` callable to `TokenCounter`."""

    def __init__(self, fn: Callable[[str], int], message_overhead: int = 4) -> None:
        self._fn = fn
        self.message_overhead = message_overhead

    def count_text(self, text: str) -> int:
        return int(self._fn(text))

    def count_message(self, message: Mapping[str, Any]) -> int:
        return self.message_overhead + self.count_text(message_text(message))


class _TiktokenCounter(_TextFunctionCounter):
    """Counts with a tiktoken encoding that was already available locally."""

    def __init__(self, encoding: Any) -> None:
        super().__init__(lambda text: len(encoding.encode(text, disallowed_special=())))
        self.encoding_name = getattr(encoding, "name", "?")

    def __repr__(self) -> str:
        return f"TiktokenCounter({self.encoding_name!r})"


_TIKTOKEN_LOCK = threading.Lock()


def _cached_tiktoken_encoding() -> Any | None:
    """A tiktoken encoding if tiktoken is installed and the encoding is already on disk.

    tiktoken fetches its vocabulary over the network on first use; that must never
    happen from here. While asking for an encoding, its remote fetch function is
    replaced by one that refuses, so only an on-disk cache hit can succeed. Any
    failure (not installed, not cached, an incompatible tiktoken) means None.
    """
    try:
        import tiktoken  # type: ignore[import-not-found]
        import tiktoken.load as tk_load  # type: ignore[import-not-found]
    except Exception:
        return None

    def _refuse(blobpath: str, *args: Any, **kwargs: Any) -> bytes:
        raise RuntimeError(f"agentdescent never downloads tokenizer files ({blobpath})")

    with _TIKTOKEN_LOCK:
        original = getattr(tk_load, "read_file", None)
        if original is None:
            return None
        try:
            tk_load.read_file = _refuse
            for name in ("o200k_base", "cl100k_base"):
                try:
                    return tiktoken.get_encoding(name)
                except Exception:
                    continue
            return None
        except Exception:
            return None
        finally:
            tk_load.read_file = original




@lru_cache(maxsize=1)
def default_token_counter() -> TokenCounter:
    """The token counter used when none is given.

    A tiktoken encoding when tiktoken is installed and its vocabulary is already cached
    on this machine (never downloaded); otherwise `HeuristicTokenCounter`. The
    choice is made once per process.

    Returns:
        A `TokenCounter`.
    """
    encoding = _cached_tiktoken_encoding()
    if encoding is not None:
        return _TiktokenCounter(encoding)
    return HeuristicTokenCounter()


def as_token_counter(value: Any) -> TokenCounter:
    if value is None:
        return default_token_counter()
    if isinstance(value, TokenCounter):
        return value
    if callable(getattr(value, "count_text", None)) or callable(getattr(value, "count_message", None)):
        return adopt(value, TokenCounter, "token_counter")
    if callable(value):
        return _TextFunctionCounter(value)
    raise InvalidArgumentType(
        f"token_counter={value!r} is neither a TokenCounter (count_text and count_message "
        "methods) nor a callable str -> int; pass one of those, or None for the default"
    )


def tools_tokens(tools: Any, counter: TokenCounter) -> int:
    if not tools:
        return 0
    return counter.count_text(json.dumps(tools, sort_keys=True, default=str))

