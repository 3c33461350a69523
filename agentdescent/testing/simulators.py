"""`CachingProviderSim`: a provider that prices requests like a provider's prefix cache, on virtual time.

Whether a summarizer fork pays depends on what the provider's prompt cache holds, so the
compaction tests and `bench/fork_cost.py` need a provider that remembers earlier requests
and charges accordingly, without a network. This module owns that simulator and the
record of one call it served (`SimCall`).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..budget.pricing import RateCard
from ..clock import as_clock
from ..context.compaction import SUMMARY_REQUEST_TAG
from ..errors import InvalidArgument, InvalidArgumentType
from ..model import Completion, Provider, check_options
from ..tokens import TokenCounter, default_token_counter
from ..types import stable_hash
from ..usage import Usage

__all__ = ["CachingProviderSim", "SimCall"]


@dataclass(frozen=True)
class SimCall:
    """One call `CachingProviderSim` served, with its token split and price.

    Attributes:
        index: 0-based call number.
        time: the clock reading when the call was served.
        kind: ``"summary"`` for a context-compaction request, else ``"reply"``.
        model: the ``model`` option, or None.
        prompt_tokens: all prompt tokens (tools block included).
        cached_tokens: the part of ``prompt_tokens`` read from the cache.
        uncached_tokens: ``prompt_tokens - cached_tokens``.
        completion_tokens: reply tokens.
        cost: dollars under the simulator's rate card.
        digest: sha256 of the canonical JSON of the request (messages and options).
    """

    index: int
    time: float
    kind: str
    model: str | None
    prompt_tokens: int
    cached_tokens: int
    uncached_tokens: int
    completion_tokens: int
    cost: float
    digest: str


class _CacheNode:
    __slots__ = ("children", "expires")

    def __init__(self) -> None:
        self.children: dict[str, _CacheNode] = {}
        self.expires = -math.inf


class CachingProviderSim(Provider):
    """A `Provider` that prices requests like a prefix cache.

    Whether a summarizer fork pays depends on what the provider's prompt cache holds, so
    tests and benchmarks need a provider that remembers earlier requests and charges
    accordingly, on virtual time and without a network. Each request is a sequence of
    blocks: the ``tools`` option (one block, empty when absent), then each message. The
    cached part of a request is its longest common prefix, **whole blocks at a time**,
    with any earlier request to the same model still alive in the cache; those tokens pay
    the card's cached rate and the rest the uncached rate (no write surcharge: this is an
    automatic cache). An entry lives ``ttl`` seconds after the last request that used or
    wrote it. A message that differs by one character breaks the prefix there, as a real
    cache's hash chain does.

    Replies are deterministic, a function of the request alone: a summarization request
    (its last message starts with `agentdescent.context.mount.SUMMARY_REQUEST_TAG`) gets
    ``summary_words`` words, anything else ``reply_words`` words, both capped by the
    ``max_tokens`` option; or ``responder(messages, **options)`` decides (raising from it
    simulates an outage). Thread-safe.

    Args:
        rate_card: the prices (`agentdescent.context.mount.RateCard`).
        ttl: seconds a cache entry outlives its last use.
        clock: a ``() -> float`` seconds source; ``time.monotonic`` if None (pass a
            `ManualClock` in tests).
        token_counter: how tokens are counted; the package default if None.
        responder: optional ``(messages, **options) -> str`` producing the reply text.
        reply_words: length of a default reply.
        summary_words: length of a default summary.
        min_cached_tokens: a cache hit shorter than this is charged as a miss (some
            providers only cache prefixes of at least 1024 tokens).
        cache_hit_rate: the probability that a lookup reaches a replica holding the
            cache at all (real prompt caches are best-effort); a miss charges the whole
            prompt uncached. Drawn from ``stable_hash(seed, call index)``, so runs repeat
            and two runs with the same call sequence miss on the same calls.
        seed: the seed of those draws.
        record_requests: keep every request in `requests` (turn off for long
            benchmarks).
        usage: the meter every call records into; a new one if None.

    Attributes:
        calls: one `SimCall` per request, in order.
        requests: ``{"messages": [...], "options": {...}}`` per request (if recorded).
        usage: the run meter (``cached_tokens`` included).
    """

    def __init__(
        self,
        rate_card: RateCard,
        *,
        ttl: float = 300.0,
        clock: Callable[[], float] | None = None,
        token_counter: TokenCounter | None = None,
        responder: Callable[..., str] | None = None,
        reply_words: int = 40,
        summary_words: int = 48,
        min_cached_tokens: int = 0,
        cache_hit_rate: float = 1.0,
        seed: int = 0,
        record_requests: bool = True,
        usage: Usage | None = None,
    ) -> None:
        if not isinstance(rate_card, RateCard):
            raise InvalidArgumentType(
                f"CachingProviderSim(rate_card={rate_card!r}): pass an agentdescent.context.mount.RateCard"
            )
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl >= 0:
            raise InvalidArgument(f"CachingProviderSim(ttl={ttl!r}): use the cache lifetime in seconds, >= 0")
        for name, value in (("reply_words", reply_words), ("summary_words", summary_words),
                            ("min_cached_tokens", min_cached_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgument(f"CachingProviderSim({name}={value!r}): use an int >= 0")
        if isinstance(cache_hit_rate, bool) or not isinstance(cache_hit_rate, (int, float)) or not (
            0.0 <= cache_hit_rate <= 1.0
        ):
            raise InvalidArgument(
                f"CachingProviderSim(cache_hit_rate={cache_hit_rate!r}): use the probability, in "
                "[0, 1], that a lookup reaches a replica holding the cache"
            )
        if responder is not None and not callable(responder):
            raise InvalidArgumentType(f"CachingProviderSim(responder={responder!r}): pass a callable or None")
        self.rate_card = rate_card
        self.ttl = float(ttl)
        self.clock = as_clock(clock)
        self.token_counter = token_counter if token_counter is not None else default_token_counter()
        self.responder = responder
        self.reply_words = reply_words
        self.summary_words = summary_words
        self.min_cached_tokens = min_cached_tokens
        self.cache_hit_rate = float(cache_hit_rate)
        self.seed = seed
        self.record_requests = record_requests
        self.usage = usage if usage is not None else Usage()
        self.calls: list[SimCall] = []
        self.requests: list[dict[str, Any]] = []
        self._roots: dict[str | None, _CacheNode] = {}
        self._block_tokens: dict[str, int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CachingProviderSim(rate_card={self.rate_card.name or self.rate_card!r}, ttl={self.ttl})"

    @property
    def total_cost(self) -> float:
        """Dollars spent over every call so far."""
        with self._lock:
            return sum(call.cost for call in self.calls)

    def cost_by_kind(self) -> dict[str, float]:
        """Dollars per call kind: ``{"reply": ..., "summary": ...}``."""
        with self._lock:
            out = {"reply": 0.0, "summary": 0.0}
            for call in self.calls:
                out[call.kind] = out.get(call.kind, 0.0) + call.cost
            return out

    def clear_cache(self) -> None:
        """Forget every cached prefix (the call log and costs stay)."""
        with self._lock:
            self._roots.clear()

    def _blocks(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> list[tuple[str, int]]:
        """(digest, tokens) per block: the tools block first, then one per message."""
        out = []
        tools_json = json.dumps(tools, sort_keys=True, default=str) if tools else ""
        items: list[tuple[str, Any]] = [("tools:" + tools_json, None)]
        items += [("msg:" + json.dumps(dict(m), sort_keys=True, default=str), m) for m in messages]
        for key, message in items:
            digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
            tokens = self._block_tokens.get(digest)
            if tokens is None:
                if message is None:
                    tokens = self.token_counter.count_text(tools_json) if tools_json else 0
                else:
                    tokens = int(self.token_counter.count_message(message))
                self._block_tokens[digest] = tokens
            out.append((digest, tokens))
        return out

    def _reaches_cache(self, index: int) -> bool:
        """Whether call ``index`` lands on a replica holding the cache (deterministic)."""
        if self.cache_hit_rate >= 1.0:
            return True
        draw = stable_hash("CachingProviderSim", self.seed, index) / 2.0**64
        return draw < self.cache_hit_rate

    def _words(self, seed: str, n: int) -> str:
        words: list[str] = []
        counter = 0
        while len(words) < n:
            block = hashlib.sha256(f"{seed}:{counter}".encode()).hexdigest()
            words.extend(block[i:i + 4] for i in range(0, 64, 4))
            counter += 1
        return " ".join(words[:n])

    def complete(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> Completion:
        """Serve one request: price it against the cache, cache it, reply deterministically.

        Raises:
            TypeError: an option outside ``model``, ``tools``, ``max_tokens``, ``temperature``.
            Exception: whatever ``responder`` raises (the call is then neither cached nor charged).
        """
        opts = check_options(options, "CachingProviderSim")
        copied = [dict(m) for m in messages]
        last = copied[-1].get("content") if copied else None
        kind = "summary" if isinstance(last, str) and last.startswith(SUMMARY_REQUEST_TAG) else "reply"
        digest = hashlib.sha256(
            json.dumps({"messages": copied, "options": opts}, sort_keys=True, default=str).encode("utf-8")
        ).hexdigest()
        if self.responder is not None:
            text = self.responder([dict(m) for m in copied], **opts)
            if not isinstance(text, str):
                raise InvalidArgumentType(f"CachingProviderSim: responder returned a {type(text).__name__}; return a str")
        else:
            text = self._words(digest, self.summary_words if kind == "summary" else self.reply_words)
        max_out = opts.get("max_tokens")
        completion_tokens = self.token_counter.count_text(text)
        if isinstance(max_out, int) and completion_tokens > max_out:
            words = text.split()
            while words and self.token_counter.count_text(" ".join(words)) > max_out:
                words.pop()
            text = " ".join(words)
            completion_tokens = self.token_counter.count_text(text)
        with self._lock:
            now = float(self.clock())
            blocks = self._blocks(copied, opts.get("tools"))
            model = opts.get("model")
            root = self._roots.setdefault(model, _CacheNode())
            cached = 0
            node = root
            for block_digest, tokens in blocks:
                child = node.children.get(block_digest)
                if child is None or child.expires < now:
                    break
                cached += tokens
                node = child
            prompt_tokens = sum(tokens for _, tokens in blocks)
            if cached < self.min_cached_tokens or not self._reaches_cache(len(self.calls)):
                cached = 0
            node = root
            for block_digest, _ in blocks:
                child = node.children.get(block_digest)
                if child is None:
                    child = node.children[block_digest] = _CacheNode()
                child.expires = now + self.ttl
                node = child
            uncached = prompt_tokens - cached
            cost = self.rate_card.cost(uncached, cached, completion_tokens)
            self.calls.append(SimCall(
                index=len(self.calls), time=now, kind=kind, model=model,
                prompt_tokens=prompt_tokens, cached_tokens=cached, uncached_tokens=uncached,
                completion_tokens=completion_tokens, cost=cost, digest=digest,
            ))
            if self.record_requests:
                self.requests.append({"messages": copied, "options": dict(opts)})
        call_usage = Usage(prompt_tokens, completion_tokens, cached, 1)
        self.usage.add(call_usage)
        return Completion(text, call_usage)


