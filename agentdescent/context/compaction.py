"""Context compaction for long-lived agent sessions, and the summarizer fork.

This module owns `ContextManager` (an append-only message history with stable ids,
per-request views, and compaction of old spans into summaries), the decision of how a
summary call is sent (standalone, or forked off the prefix the provider already has in
its prompt cache, gated by the span-to-prefix ratio: the rule itself is
`agentdescent.context.forkrule`'s), the call itself and what the manager counts and logs
about it. The history, its summaries and its views are `agentdescent.context.history`'s,
the requests a summary call sends `agentdescent.context.summaryrequest`'s. `mount` (a
manager from a config mapping) is `agentdescent.context.mount`'s. Token counts come from
`agentdescent.tokens`, prices and the break-even from `agentdescent.budget.pricing`, message
shapes from `agentdescent.messages`.

It must not import a provider SDK, open a network connection, read the clock, or edit a
message it was given: history only grows, and every view is built from it.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..budget.pricing import RateCard
from ..errors import InvalidArgumentType
from ..messages import clone, validate_message
from ..model import Provider
from ..seams import adopt
from ..tokens import TokenCounter, as_token_counter
from ..validation import check_fraction, check_int, check_real
from .forkrule import (
    canonical_mode,
    fork_verdict,
    min_span_ratio,
    ratio_warning,
)
from .history import History
from .history import _Summary as _Summary
from .summaryrequest import (
    SUMMARY_MESSAGE_HEADER,
    SUMMARY_REQUEST_TAG,
    _Sent,
    fork_misalignment,
    fork_request,
    header_tokens,
    record_sent,
    standalone_request,
    summary_budget,
)

__all__ = [
    "SUMMARY_MESSAGE_HEADER",
    "SUMMARY_REQUEST_TAG",
    "ContextManager",
]

logger = logging.getLogger("agentdescent.compaction")

# --------------------------------------------------------------------------- the manager


class ContextManager:
    """A compacting conversation: append-only history, per-request views, summaries.

    A long agent session outgrows its context window. Rather than editing history, the
    manager keeps every message (with a stable id such as ``"m7"``) and builds each
    request's *view* from it: leading system messages, then the summaries made so far
    (user messages, never system ones, which providers hoist into the cached block), then
    the messages not yet summarised. When a view passes ``summary_trigger × max_tokens``,
    the oldest eligible span (never the protected recent tail, never an earlier summary,
    never a tool call without its results) is summarised down toward
    ``target_usage × max_tokens``.

    How the summary call is sent is ``summary_call_mode``: ``"standalone"`` (alias
    ``"inline"``) sends the span alone and pays the uncached rate on it; ``"fork"``
    appends one instruction to the exact prefix last reported through
    `note_request_sent` (same tools, same model), so the provider reads that
    prefix from its cache; ``"auto"`` forks only when the span is a large enough share
    of the prefix: ``S / P >= summary_fork_min_span_ratio`` (default
    `DEFAULT_FORK_MIN_SPAN_RATIO`, or `fork_break_even` of
    `rate_card` when one is set). A fork that cannot be aligned with what was sent
    falls back to standalone (WARNING, ``fork_fallbacks``); a fork the predicate finds
    too expensive is declined (INFO once per kind, ``fork_declines``) and issues exactly
    the standalone request.

    One manager holds one conversation; its methods take a lock, so it may be handed
    between threads, but one conversation is inherently sequential.

    Args:
        provider: where summary calls go (``provider.complete(messages, **options)``).
        max_tokens: the context budget in tokens.
        summary_trigger: compact once a view passes this fraction of ``max_tokens``.
        target_usage: compact down toward this fraction of ``max_tokens``.
        protected_recent: the most recent messages up to this fraction of ``max_tokens``
            are never summarised (the newest message always is protected).
        summary_call_mode: ``"standalone"``, ``"inline"``, ``"fork"`` or ``"auto"``.
        summary_fork_min_span_ratio: ``None`` (predicate off in ``"fork"``, the default
            ratio in ``"auto"``), ``0`` (predicate off, silently), a positive ratio
            (armed; above 1 means never fork). Negative, non-finite or non-numeric
            values disable the predicate with a WARNING.
        token_counter: a `TokenCounter` or a ``str -> int`` callable; ``None``
            means `default_token_counter`.

    Attributes:
        summary_model: a model the summarizer must use (None: the model of the recorded
            prefix); a fork to a prefix sent to another model is a fallback.
        rate_card: prices that set ``"auto"``'s ratio via `fork_break_even`.
        cache_hit_fraction: the hit fraction used with ``rate_card`` (default 1.0).
        fork_fallbacks: misaligned forks sent standalone instead (session total).
        fork_declines: forks the predicate found too expensive (session total).
        forks: summary calls sent as forks. The other counters (``summary_calls``,
            ``compactions``, ``summaries_refused``, ``summary_failures``) are in
            `counters`.

    Raises:
        InvalidArgument: a knob is out of range or of the wrong type (the message names it).
    """

    def __init__(
        self,
        provider: Provider,
        *,
        max_tokens: int,
        summary_trigger: float = 0.6,
        target_usage: float = 0.5,
        protected_recent: float = 0.3,
        summary_call_mode: str = "standalone",
        summary_fork_min_span_ratio: float | None = None,
        token_counter: TokenCounter | Callable[[str], int] | None = None,
    ) -> None:
        self.provider = adopt(provider, Provider, "provider")
        self.max_tokens = check_int(max_tokens, "max_tokens", low=1, owner="ContextManager",
                                    hint="the context budget in tokens")
        self.summary_trigger = check_fraction(
            summary_trigger, "summary_trigger", low_open=True, owner="ContextManager",
            hint="it is the fraction of max_tokens at which compaction starts",
        )
        self.target_usage = check_real(
            target_usage, "target_usage", low=0.0, high=self.summary_trigger, low_open=True, high_open=True,
            owner="ContextManager",
            hint=f"it must be below summary_trigger={self.summary_trigger} so compaction frees room",
        )
        self.protected_recent = check_fraction(
            protected_recent, "protected_recent", high_open=True, owner="ContextManager",
            hint="it is the fraction of max_tokens kept verbatim at the end of every view",
        )
        self.token_counter: TokenCounter = as_token_counter(token_counter)
        self._lock = threading.RLock()
        self._mode = canonical_mode(summary_call_mode)
        self._ratio_value: Any = summary_fork_min_span_ratio
        self._rate_card: RateCard | None = None
        self._cache_hit_fraction = 1.0
        #: A model the summarizer must use; a fork is only aligned with a prefix sent to
        #: this same model (``None``: whatever model the prefix was sent with).
        self.summary_model: str | None = None
        self._history = History()
        self._last_view: list[tuple[str, dict[str, Any], int]] | None = None
        self._sent: _Sent | None = None
        self._declined_kinds: set[str] = set()
        self._refused_span: tuple[str, str] | None = None
        self._last_stats: dict[str, Any] | None = None
        self.fork_fallbacks = 0
        self.fork_declines = 0
        self.forks = 0
        self.summary_calls = 0
        self.compactions = 0
        self.summaries_refused = 0
        self.summary_failures = 0
        self._announce_ratio()

    # ----------------------------------------------------------------- knobs

    @property
    def summary_call_mode(self) -> str:
        """The summary call mode (``"inline"`` reads back as ``"standalone"``)."""
        return self._mode

    @summary_call_mode.setter
    def summary_call_mode(self, value: str) -> None:
        with self._lock:
            self._mode = canonical_mode(value)
            self._announce_ratio()

    @property
    def summary_fork_min_span_ratio(self) -> Any:
        """The ratio knob exactly as given (``None`` when unset)."""
        return self._ratio_value

    @summary_fork_min_span_ratio.setter
    def summary_fork_min_span_ratio(self, value: Any) -> None:
        with self._lock:
            self._ratio_value = value
            self._announce_ratio()

    @property
    def rate_card(self) -> RateCard | None:
        """Prices that set ``"auto"``'s default ratio through `fork_break_even`."""
        return self._rate_card

    @rate_card.setter
    def rate_card(self, value: RateCard | Mapping[str, Any] | None) -> None:
        if isinstance(value, Mapping):
            value = RateCard.from_mapping(value)
        if value is not None and not isinstance(value, RateCard):
            raise InvalidArgumentType(f"rate_card={value!r}: pass a RateCard, a mapping of its fields, or None")
        self._rate_card = value

    @property
    def cache_hit_fraction(self) -> float:
        """The expected cache hit fraction used with `rate_card` (default 1.0)."""
        return self._cache_hit_fraction

    @cache_hit_fraction.setter
    def cache_hit_fraction(self, value: float) -> None:
        self._cache_hit_fraction = check_fraction(value, "cache_hit_fraction", hint="the expected fraction of a fork's prefix served from the cache")

    def _announce_ratio(self) -> None:
        """Say, once per setting, when the ratio knob cannot do what it seems to ask."""
        warning = ratio_warning(self._ratio_value, self._mode)
        if warning is not None:
            logger.warning("%s", warning)

    def _min_span_ratio(self) -> float | None:
        """The ratio the predicate compares against, or None when the predicate is off."""
        return min_span_ratio(self._ratio_value, self._mode, self._rate_card, self._cache_hit_fraction)

    # ----------------------------------------------------------------- history

    def add_message(self, message: Mapping[str, Any]) -> str:
        """Append one message to the history and return its stable id.

        The message is copied, so later changes to the caller's dict change nothing here.

        Args:
            message: an OpenAI-style dict (``role``, ``content``; ``tool_calls`` with ids
                on assistant messages; ``tool_call_id`` on tool messages).

        Returns:
            The message id (``"m1"``, ``"m2"``, ... in order of arrival).

        Raises:
            InvalidArgument: an unknown role, a tool message without ``tool_call_id``, a
                tool call without an id, or a message that is not JSON-serialisable.
        """
        stored = validate_message(message)
        with self._lock:
            return self._history.add(stored, self.token_counter)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The full history in order (copies; nothing in it is ever edited or removed)."""
        with self._lock:
            return [clone(m) for m in self._history.messages]

    @property
    def message_ids(self) -> list[str]:
        """The ids of `messages`, in the same order."""
        with self._lock:
            return list(self._history.ids)

    @property
    def view_ids(self) -> list[str]:
        """The ids of the current view (message ids and summary ids), without compacting."""
        with self._lock:
            return [entry_id for entry_id, _, _ in self._history.view_entries()]

    @property
    def summaries(self) -> list[dict[str, Any]]:
        """Every summary made so far: ``id``, ``covers`` (message ids), ``message``, ``tokens``."""
        with self._lock:
            return [
                {
                    "id": s.id,
                    "covers": self._history.ids[s.start:s.end],
                    "message": copy.deepcopy(s.message),
                    "tokens": s.tokens,
                }
                for s in self._history.summaries
            ]

    @property
    def counters(self) -> dict[str, int]:
        """What the manager did: summary calls, compactions, forks, fallbacks, declines, refusals, failures."""
        with self._lock:
            return {
                "summary_calls": self.summary_calls,
                "compactions": self.compactions,
                "forks": self.forks,
                "fork_fallbacks": self.fork_fallbacks,
                "fork_declines": self.fork_declines,
                "summaries_refused": self.summaries_refused,
                "summary_failures": self.summary_failures,
            }

    @property
    def last_summary_call_stats(self) -> dict[str, Any] | None:
        """How the last summary call went (None before the first).

        Keys: ``mode``, ``forked``, ``fork_fallbacks`` and ``fork_declines``
        (session-cumulative), ``span_measure`` (``{span_tokens, prefix_tokens,
        span_ratio, min_span_ratio}`` when the predicate was evaluated, else None),
        ``fallback_reason`` / ``decline_reason`` (a kind, or None), ``outcome``
        (``"compacted"``, ``"refused"`` or ``"failed"``), ``span_ids``, ``span_tokens``,
        ``summary_tokens``, ``request_messages``, ``usage`` and ``error``.
        """
        with self._lock:
            return copy.deepcopy(self._last_stats)

    @property
    def sent_tokens(self) -> int | None:
        """Tokens of the request last reported through `note_request_sent` (the
        prefix ``P`` a fork would re-read, tools included), or None if none was."""
        with self._lock:
            return self._sent.tokens if self._sent is not None else None

    @property
    def current_tokens(self) -> int:
        """Tokens of the current view (without compacting)."""
        with self._lock:
            return sum(tokens for _, _, tokens in self._history.view_entries())

    def get_messages_for_request(self) -> list[dict[str, Any]]:
        """The messages to send now, compacting first if the view has grown too large.

        Compaction runs at most once per call: when the view passes
        ``summary_trigger × max_tokens``, one summary call replaces the oldest eligible
        span. A failed or refused summary leaves everything as it was and the full view
        is returned (counted, and logged at WARNING); a refused span is not retried here
        until it has grown.

        Returns:
            A list of message dicts (copies) in wire order.
        """
        with self._lock:
            if self.current_tokens > self.summary_trigger * self.max_tokens:
                self._compact(automatic=True)
            entries = self._history.view_entries()
            self._last_view = entries
            return [clone(message) for _, message, _ in entries]

    def summarize_now(self) -> bool:
        """Summarise the oldest eligible span now, whatever the usage.

        The span is the one compaction would choose (enough of the oldest eligible
        messages to bring the view toward ``target_usage``, at least one message or tool
        group), sent in the configured mode.

        Returns:
            True if a summary replaced a span; False if no span is eligible (or the oldest
            one is too small for any summary to shrink it), or the call failed or its
            summary was refused (see `last_summary_call_stats`).
        """
        with self._lock:
            return self._compact()

    def note_request_sent(
        self,
        messages: Sequence[Mapping[str, Any]] | None = None,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        model: str | None = None,
    ) -> None:
        """Record the exact request that went to the provider, the prefix a fork re-reads.

        A fork is only cheap if it repeats, byte for byte, a prefix the provider has just
        cached, with the same tools and model; this is how the manager learns it.

        Args:
            messages: the messages sent; None means the view last returned by
                `get_messages_for_request` (or the current view if none was).
            tools: the ``tools`` option sent with them, if any.
            model: the ``model`` option sent with them, if any.

        Raises:
            InvalidArgument: ``messages`` is not a sequence of dicts, or ``model`` is not a str.
        """
        if model is not None and not isinstance(model, str):
            raise InvalidArgumentType(f"note_request_sent(model={model!r}): pass the model name as a str, or None")
        if messages is not None:
            if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
                raise InvalidArgumentType(
                    f"note_request_sent(messages=...) got a {type(messages).__name__}; pass the "
                    "list of message dicts that was sent, or None for the last view"
                )
            for message in messages:
                if not isinstance(message, Mapping):
                    raise InvalidArgumentType(
                        f"note_request_sent(messages=...) contains a {type(message).__name__}; "
                        "every message must be a dict"
                    )
        with self._lock:
            reference = self._last_view
            if reference is None:
                reference = self._history.view_entries()
            self._sent = record_sent(messages, reference, tools=tools, model=model, counter=self.token_counter)

    # ----------------------------------------------------------------- compaction

    def _compact(self, automatic: bool = False) -> bool:
        """Select a span, send one summary call (fork or standalone), apply the summary.

        Returns True when a summary replaced a span; history is never edited either way.
        """
        span = self._history.select_span(self.protected_recent * self.max_tokens,
                                         self.target_usage * self.max_tokens)
        if not span:
            return False
        span_ids = [self._history.ids[i] for i in span]
        if automatic and self._refused_span == (span_ids[0], span_ids[-1]):
            # The same span was just refused; wait until it grows rather than pay again.
            return False
        span_tokens = sum(self._history.tokens[i] for i in span)
        budget = summary_budget(span_tokens)
        if span_tokens <= budget + header_tokens(self.token_counter):
            # Even a summary at its budget would not be smaller: not worth a call.
            logger.debug("span %s (%d tokens) is too small to summarise", span_ids, span_tokens)
            return False
        stats: dict[str, Any] = {
            "mode": self._mode,
            "forked": False,
            "fork_fallbacks": self.fork_fallbacks,
            "fork_declines": self.fork_declines,
            "span_measure": None,
            "fallback_reason": None,
            "decline_reason": None,
            "outcome": None,
            "span_ids": span_ids,
            "span_tokens": span_tokens,
            "summary_tokens": None,
            "request_messages": None,
            "usage": None,
            "error": None,
        }
        fork = False
        if self._mode != "standalone":
            # Alignment first: only a fork that can reuse the sent prefix is worth pricing.
            misaligned = fork_misalignment(self._sent, span_ids, self.summary_model)
            if misaligned is not None:
                kind, why = misaligned
                self.fork_fallbacks += 1
                stats["fallback_reason"] = kind
                logger.warning(
                    "summarizer fork fell back to a standalone call (%s): %s "
                    "[summary_call_mode=%r, fork_fallbacks=%d]",
                    kind, why, self._mode, self.fork_fallbacks,
                )
            else:
                fork = self._predicate(span_tokens, stats)
        if fork:
            messages, options = fork_request(self._sent, span_ids, budget)
        else:
            messages, options = standalone_request([self._history.messages[i] for i in span], budget,
                                                    self.summary_model, self._sent)
        stats["forked"] = fork
        stats["fork_fallbacks"] = self.fork_fallbacks
        stats["fork_declines"] = self.fork_declines
        stats["request_messages"] = len(messages)
        self.summary_calls += 1
        if fork:
            self.forks += 1
        self._last_stats = stats
        try:
            completion = self.provider.complete(messages, **options)
            text = completion.text
            if completion.usage is not None:
                stats["usage"] = completion.usage.snapshot()
        except Exception as exc:  # any backend failure: history stays as it was
            self.summary_failures += 1
            stats["outcome"] = "failed"
            stats["error"] = f"{type(exc).__name__}: {exc}"
            logger.warning(
                "summary call failed (%s: %s); history left untouched, the view stays "
                "uncompacted [summary_failures=%d]", type(exc).__name__, exc, self.summary_failures,
            )
            return False
        text = text.strip() if isinstance(text, str) else ""
        summary_message = {"role": "user", "content": f"{SUMMARY_MESSAGE_HEADER}\n{text}"}
        summary_tokens = int(self.token_counter.count_message(summary_message))
        stats["summary_tokens"] = summary_tokens
        if not text or summary_tokens >= span_tokens:
            self.summaries_refused += 1
            self._refused_span = (span_ids[0], span_ids[-1])
            stats["outcome"] = "refused"
            logger.warning(
                "summary refused: %s (%d tokens for a span of %d); history left untouched "
                "[summaries_refused=%d]",
                "it was empty" if not text else "it is not smaller than the span it replaces",
                summary_tokens, span_tokens, self.summaries_refused,
            )
            return False
        self._history.cover(span, summary_message, summary_tokens)
        self.compactions += 1
        stats["outcome"] = "compacted"
        logger.debug(
            "compacted %d messages (%d tokens) into %d tokens, forked=%s",
            len(span), span_tokens, summary_tokens, fork,
        )
        return True

    def _predicate(self, span_tokens: int, stats: dict[str, Any]) -> bool:
        """Decide, for an aligned fork, whether it is worth its prefix (`agentdescent.context.forkrule.fork_verdict`). True means fork."""
        min_ratio = self._min_span_ratio()
        if min_ratio is None:
            return True  # predicate off: not even evaluated
        assert self._sent is not None
        fork, stats["span_measure"], kind = fork_verdict(span_tokens, self._sent.tokens, min_ratio)
        if fork:
            return True
        self.fork_declines += 1
        stats["decline_reason"] = kind
        level = logging.INFO if kind not in self._declined_kinds else logging.DEBUG
        self._declined_kinds.add(kind)
        measure = stats["span_measure"]
        logger.log(
            level,
            "summarizer fork declined (%s): span ratio %.4f = %d/%d is below "
            "summary_fork_min_span_ratio %.4f, a standalone call is cheaper; sending it "
            "instead [fork_declines=%d; later declines of this kind log at DEBUG]",
            kind, measure["span_ratio"], span_tokens, measure["prefix_tokens"], min_ratio, self.fork_declines,
        )
        return False

    def __repr__(self) -> str:
        return (
            f"ContextManager(max_tokens={self.max_tokens}, summary_call_mode={self._mode!r}, "
            f"summary_fork_min_span_ratio={self._ratio_value!r}, messages={len(self._history.messages)}, "
            f"summaries={len(self._history.summaries)})"
        )
