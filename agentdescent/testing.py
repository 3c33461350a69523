"""Test doubles and conformance suites users can build their own tests on.

This module owns fakes that stand behind the package's real seams (the
`Provider` protocol above all) so that a user's test can
run the real engines offline and deterministically, and the conformance suite
(`LedgerConformance`) that checks a third-party `Ledger` keeps the contract the
engines rely on. Nothing here is used by the engines themselves, nothing here opens
a network connection, and nothing here imports pytest: the suites are plain classes
that raise ``AssertionError``, so the module imports without the dev extras.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .context import SUMMARY_REQUEST_TAG, RateCard, TokenCounter, default_token_counter
from .ledger import CASConflict, Ledger, LedgerError
from .model import Completion, Usage, estimate_tokens
from .providers import check_options, messages_to_prompt
from .types import stable_hash

__all__: list[str] = []
__all__.append("FakeProvider")


class FakeProvider:
    """A handler-backed `Provider`, like httpx's ``MockTransport``.

    Tests decide every reply in one function instead of standing up a server or
    scripting an SDK: ``handler(messages, **options)`` returns the reply text (or a full
    `Completion`), and raising from it simulates a provider
    failure. Options are validated exactly like the real adapters do, so a test cannot
    pass an option a real provider would reject.

    Thread-safe: requests are recorded under a lock, so it can stand behind several
    engine workers at once (the handler itself must be thread-safe if it keeps state).

    Args:
        handler: ``handler(messages, **options) -> str | Completion``; it receives only
            the options that carry a value. A returned `Completion`'s ``finish_reason``
            and ``tool_calls`` are passed through (return ``finish_reason="length"`` to
            simulate a reply cut off by the per-call limit).
        usage: the meter every call records into; a new one if ``None``.

    Attributes:
        requests: one ``{"messages": [...], "options": {...}}`` dict per call, in order
            (messages copied, so later mutation by the caller does not rewrite history).
        usage: the run meter. A ``str`` reply is counted with the offline estimate
            (``ceil(chars / 4)`` for the joined prompt and for the reply); a
            ``Completion`` with usage is counted as given.

    Examples:
        >>> fake = FakeProvider(lambda messages, **options: "42")
        >>> fake.complete([{"role": "user", "content": "6 * 7?"}]).text
        '42'
        >>> fake.requests[0]["messages"][0]["content"]
        '6 * 7?'
    """

    def __init__(self, handler: Callable[..., str | Completion], *, usage: Usage | None = None) -> None:
        if not callable(handler):
            raise TypeError(
                f"FakeProvider(handler={handler!r}): handler must be callable as "
                "handler(messages, **options) -> str | Completion"
            )
        self.handler = handler
        self.usage = usage if usage is not None else Usage()
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FakeProvider({getattr(self.handler, '__qualname__', self.handler)!r})"

    @property
    def calls(self) -> int:
        """How many requests were made."""
        with self._lock:
            return len(self.requests)

    def complete(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> Completion:
        """Record the request, ask the handler, meter and return the reply.

        Raises:
            TypeError: an unknown option, or the handler returned neither ``str`` nor
                ``Completion``.
            Exception: whatever the handler raises, unchanged.
        """
        opts = check_options(options, "FakeProvider")
        copied = [dict(m) for m in messages]
        with self._lock:
            self.requests.append({"messages": copied, "options": dict(opts)})
        result = self.handler([dict(m) for m in copied], **opts)
        finish_reason, tool_calls = None, ()
        if isinstance(result, str):
            text, call = result, None
        elif isinstance(result, Completion):
            text, call = result.text, result.usage
            finish_reason, tool_calls = result.finish_reason, tuple(result.tool_calls)
        else:
            raise TypeError(
                f"FakeProvider: the handler returned a {type(result).__name__}; return "
                "the reply as a str or a Completion"
            )
        if call is None:
            call = Usage(estimate_tokens(messages_to_prompt(copied)), estimate_tokens(text), 0, 1)
        self.usage.add(call)
        return Completion(text, call, finish_reason, tool_calls)


# --------------------------------------------------------------------------- prefix caching

__all__ += ["CachingProviderSim", "ManualClock", "SimCall"]


class ManualClock:
    """A clock that only moves when told to: virtual time for cache-TTL tests.

    Timing-heavy code is tested on virtual time, never with ``sleep``: pass an instance
    as ``clock=`` and call `advance`.

    Args:
        start: the initial reading, in seconds.
    """

    def __init__(self, start: float = 0.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        """The current virtual time in seconds."""
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the clock forward and return the new reading.

        Raises:
            ValueError: ``seconds`` is negative (time does not run backwards).
        """
        if seconds < 0:
            raise ValueError(f"ManualClock.advance({seconds!r}): time only moves forward; use seconds >= 0")
        self.now += float(seconds)
        return self.now


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


class CachingProviderSim:
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
    (its last message starts with `agentdescent.context.SUMMARY_REQUEST_TAG`) gets
    ``summary_words`` words, anything else ``reply_words`` words, both capped by the
    ``max_tokens`` option; or ``responder(messages, **options)`` decides (raising from it
    simulates an outage). Thread-safe.

    Args:
        rate_card: the prices (`agentdescent.context.RateCard`).
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
            raise TypeError(
                f"CachingProviderSim(rate_card={rate_card!r}): pass an agentdescent.context.RateCard"
            )
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl >= 0:
            raise ValueError(f"CachingProviderSim(ttl={ttl!r}): use the cache lifetime in seconds, >= 0")
        for name, value in (("reply_words", reply_words), ("summary_words", summary_words),
                            ("min_cached_tokens", min_cached_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"CachingProviderSim({name}={value!r}): use an int >= 0")
        if isinstance(cache_hit_rate, bool) or not isinstance(cache_hit_rate, (int, float)) or not (
            0.0 <= cache_hit_rate <= 1.0
        ):
            raise ValueError(
                f"CachingProviderSim(cache_hit_rate={cache_hit_rate!r}): use the probability, in "
                "[0, 1], that a lookup reaches a replica holding the cache"
            )
        if responder is not None and not callable(responder):
            raise TypeError(f"CachingProviderSim(responder={responder!r}): pass a callable or None")
        self.rate_card = rate_card
        self.ttl = float(ttl)
        self.clock = clock if clock is not None else time.monotonic
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
                raise TypeError(f"CachingProviderSim: responder returned a {type(text).__name__}; return a str")
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


# --------------------------------------------------------------------------- ledger conformance

__all__ += ["LedgerConformance"]


def _check(condition: bool, message: str) -> None:
    # Not ``assert``: ``python -O`` strips asserts, and a suite that passes because its
    # checks were compiled away is worse than no suite.
    if not condition:
        raise AssertionError(message)


def _expect_raises(error: type[BaseException], call: Callable[[], object], what: str) -> Any:
    """Call ``call``; return the ``error`` it raised, else fail naming ``what``."""
    try:
        call()
    except error as exc:
        return exc
    except Exception as exc:
        raise AssertionError(
            f"{what}: expected {error.__name__}, got {type(exc).__name__}: {exc}"
        ) from exc
    raise AssertionError(f"{what}: expected {error.__name__}, nothing was raised")


class LedgerConformance:
    """The behaviour every `agentdescent.ledger.Ledger` must have, as a pytest-style test class.

    The engines trust a ledger for version numbering and compare-and-swap, so a
    third-party ledger (Postgres, Redis, a service) has to keep exactly the rules the
    shipped `MemoryLedger` and `SqliteLedger` keep. Subclass this class in a test module
    under a name starting with ``Test`` and define `make_ledger`; pytest then runs every
    ``test_*`` method below against a fresh ledger each. The checks cover: ``register``
    creates version 1 and is a no-op on a known artifact; ``head``, ``versions`` and
    ``history`` agree; ``commit`` returns ``base + 1``; a stale or future base raises
    `CASConflict` with the right attributes and changes nothing; threads committing
    at once never lose or duplicate a version, and never see a torn head; unknown
    artifacts raise `LedgerError`; states, audit records and blast radii round-trip
    exactly, as copies the caller may mutate.

    Input validation (which ``TypeError`` a bad state raises) and log output are the
    shipped ledgers' house style, not part of the contract, so they are not checked.

    The class imports nothing from pytest: a failed check raises ``AssertionError``
    whose message names the property that broke (even under ``python -O``). Each
    ``test_*`` method is a plain method taking a scratch folder, so another runner can
    call it directly.

    Attributes:
        threads: how many threads race in the concurrency checks.
        commits_per_thread: how many commits each racing thread lands.
        join_timeout: seconds to wait for the racing threads before failing.

    Examples:
        In ``tests/test_my_ledger.py``:

        ```python
        from agentdescent.testing import LedgerConformance
        from my_package import PostgresLedger

        class TestPostgresLedger(LedgerConformance):
            commits_per_thread = 10  # a remote store: keep the race short

            def make_ledger(self, tmp_path):
                return PostgresLedger(DSN, schema=f"t_{tmp_path.name}")

            def close_ledger(self, ledger):
                ledger.drop_schema_and_close()
        ```
    """

    threads: int = 4
    commits_per_thread: int = 25
    join_timeout: float = 60.0

    def make_ledger(self, tmp_path: Path) -> Ledger:
        """Return a new, empty ledger; every check calls this once.

        Args:
            tmp_path: a scratch folder for this check only (pytest's ``tmp_path``).

        Raises:
            NotImplementedError: always, here; a subclass must override it.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.make_ledger(self, tmp_path) is not defined; return a "
            "new, empty Ledger from it (for example SqliteLedger(tmp_path / 'ledger.sqlite'))"
        )

    def close_ledger(self, ledger: Ledger) -> None:
        """Release what `make_ledger` opened, after each check; does nothing by default.

        Args:
            ledger: the ledger `make_ledger` returned.
        """

    @contextmanager
    def _ledger(self, tmp_path: Path) -> Iterator[Ledger]:
        ledger = self.make_ledger(tmp_path)
        try:
            yield ledger
        finally:
            self.close_ledger(ledger)

    # ----------------------------------------------------------------- register

    def test_implements_the_protocol(self, tmp_path: Path) -> None:
        """The ledger has every method of the `Ledger` protocol."""
        with self._ledger(tmp_path) as ledger:
            _check(
                isinstance(ledger, Ledger),
                f"implements the Ledger protocol: {type(ledger).__name__} lacks one of "
                "register, head, versions, commit, history, blast_radius",
            )

    def test_register_creates_version_one(self, tmp_path: Path) -> None:
        """``register`` stores the state as version 1, seen alike by head, versions, history."""
        with self._ledger(tmp_path) as ledger:
            _check(ledger.versions() == {}, "a new ledger is empty: versions() must be {}")
            ledger.register("a", {"k": "v"}, 0.2)
            _check(
                ledger.head("a") == (1, {"k": "v"}),
                f"register creates version 1: head('a') is {ledger.head('a')!r}, "
                "expected (1, {'k': 'v'})",
            )
            _check(
                ledger.versions() == {"a": 1},
                f"register creates version 1: versions() is {ledger.versions()!r}",
            )
            history = ledger.history("a")
            _check(
                [(e.artifact_id, e.version, e.state, e.meta) for e in history]
                == [("a", 1, {"k": "v"}, {})],
                f"register creates version 1: history('a') is {history!r}, expected one "
                "entry ('a', 1, {'k': 'v'}, meta={})",
            )

    def test_register_of_a_known_artifact_is_a_noop(self, tmp_path: Path) -> None:
        """Registering a known id again keeps its head and history (a resumed run)."""
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {"k": "first"}, 0.2)
            ledger.commit("a", {"k": "second"}, 1)
            ledger.register("a", {"k": "other"}, 0.2)
            _check(
                ledger.head("a") == (2, {"k": "second"}),
                f"register of a known artifact is a no-op: head('a') became {ledger.head('a')!r}",
            )
            versions = [e.version for e in ledger.history("a")]
            _check(
                versions == [1, 2],
                f"register of a known artifact is a no-op: history versions became {versions}",
            )

    def test_register_copies_the_state(self, tmp_path: Path) -> None:
        """Changing the caller's dict after ``register`` does not change the ledger."""
        with self._ledger(tmp_path) as ledger:
            state = {"k": "v"}
            ledger.register("a", state, 0.2)
            state["k"] = "changed"
            _check(
                ledger.head("a") == (1, {"k": "v"}),
                "register stores a copy: mutating the caller's dict changed the ledger",
            )

    # ----------------------------------------------------------------- commit

    def test_commit_returns_base_plus_one(self, tmp_path: Path) -> None:
        """Each commit on the head creates and returns ``base + 1``."""
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {"k": "1"}, 0.2)
            for base in range(1, 6):
                new = ledger.commit("a", {"k": str(base + 1)}, base)
                _check(
                    new == base + 1, f"commit returns base + 1: commit on {base} returned {new!r}"
                )
                _check(
                    ledger.head("a") == (base + 1, {"k": str(base + 1)}),
                    f"commit moves the head: after committing on {base}, head('a') is "
                    f"{ledger.head('a')!r}",
                )

    def test_stale_or_future_base_raises_cas_conflict_and_changes_nothing(
        self, tmp_path: Path
    ) -> None:
        """A base that is not the head raises `CASConflict` naming both; nothing is written."""
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {"k": "1"}, 0.2)
            ledger.commit("a", {"k": "2"}, 1)
            for base in (1, 3, 7):
                err = _expect_raises(
                    CASConflict,
                    lambda base=base: ledger.commit("a", {"k": "lost"}, base),
                    f"a commit on base {base} while the head is 2",
                )
                got = (err.artifact_id, err.base_version, err.head_version)
                _check(
                    got == ("a", base, 2),
                    f"CASConflict names the artifact, the stale base and the head: got "
                    f"(artifact_id, base_version, head_version) = {got!r}, expected "
                    f"('a', {base}, 2)",
                )
                _check(
                    isinstance(err, LedgerError),
                    "CASConflict is a LedgerError (raise agentdescent.ledger.CASConflict)",
                )
                _check(
                    ledger.head("a") == (2, {"k": "2"}) and len(ledger.history("a")) == 2,
                    f"a refused commit changes nothing: after the conflict on base {base}, "
                    f"head('a') is {ledger.head('a')!r} with {len(ledger.history('a'))} versions",
                )

    def test_commit_copies_the_state(self, tmp_path: Path) -> None:
        """Changing the caller's dict after ``commit`` does not change the ledger."""
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {}, 0.2)
            new = {"k": "v"}
            ledger.commit("a", new, 1)
            new["k"] = "changed"
            _check(
                ledger.head("a") == (2, {"k": "v"}),
                "commit stores a copy: mutating the caller's dict changed the ledger",
            )

    def test_artifacts_are_independent(self, tmp_path: Path) -> None:
        """Commits to one artifact neither move nor unlock another."""
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {"x": "1"}, 0.1)
            ledger.register("b", {"y": "1"}, 0.8)
            ledger.commit("a", {"x": "2"}, 1)
            _check(
                ledger.versions() == {"a": 2, "b": 1},
                f"artifacts are independent: versions() is {ledger.versions()!r}, expected "
                "{'a': 2, 'b': 1}",
            )
            _expect_raises(
                CASConflict,
                lambda: ledger.commit("b", {"y": "2"}, 2),
                "a commit on 'b' at the head version of 'a'",
            )
            _check(
                ledger.head("b") == (1, {"y": "1"}),
                f"artifacts are independent: head('b') became {ledger.head('b')!r}",
            )

    # ----------------------------------------------------------------- reading

    def test_head_versions_and_history_agree(self, tmp_path: Path) -> None:
        """Every version is in history, oldest first, with its meta; head is its last entry."""
        with self._ledger(tmp_path) as ledger:
            for i, aid in enumerate(["a", "b", "c"]):
                ledger.register(aid, {"n": "1"}, 0.2)
                for base in range(1, i + 3):
                    meta = {"diff_id": f"{aid}{base}", "n": base, "ok": True, "tags": ["x"]}
                    ledger.commit(aid, {"n": str(base + 1)}, base, meta=meta)
            versions = ledger.versions()
            _check(
                versions == {"a": 3, "b": 4, "c": 5},
                f"versions() maps every artifact to its head: got {versions!r}, expected "
                "{'a': 3, 'b': 4, 'c': 5}",
            )
            for aid, head in versions.items():
                history = ledger.history(aid)
                got = [(e.artifact_id, e.version, e.state) for e in history]
                want = [(aid, v, {"n": str(v)}) for v in range(1, head + 1)]
                _check(
                    got == want,
                    f"history({aid!r}) holds every version oldest first: got {got!r}",
                )
                metas = [e.meta for e in history]
                want_metas = [{}] + [
                    {"diff_id": f"{aid}{v}", "n": v, "ok": True, "tags": ["x"]}
                    for v in range(1, head)
                ]
                _check(
                    metas == want_metas,
                    f"history({aid!r}) keeps each commit's meta (and {{}} for version 1): "
                    f"got {metas!r}",
                )
                _check(
                    ledger.head(aid) == (head, history[-1].state),
                    f"head({aid!r}) is the last history entry: head is {ledger.head(aid)!r}, "
                    f"history ends at {history[-1].version}",
                )

    def test_head_and_history_return_copies(self, tmp_path: Path) -> None:
        """Mutating what ``head`` or ``history`` returned does not change the ledger."""
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {"k": "v"}, 0.2)
            ledger.commit("a", {"k": "w"}, 1, meta={"m": [1]})
            _, state = ledger.head("a")
            state["k"] = "mutated"
            state["new"] = "x"
            _check(
                ledger.head("a") == (2, {"k": "w"}),
                "head returns a copy: mutating the returned state changed the ledger",
            )
            entries = ledger.history("a")
            entries[1].state["k"] = "mutated"
            entries[1].meta["m"].append(2)
            again = ledger.history("a")[1]
            _check(
                again.state == {"k": "w"},
                "history returns copies: mutating an entry's state changed the ledger",
            )
            _check(
                again.meta == {"m": [1]},
                "history returns copies: mutating an entry's meta (deep) changed the ledger",
            )

    def test_unknown_artifact_raises_ledger_error(self, tmp_path: Path) -> None:
        """``head``, ``history``, ``blast_radius`` and ``commit`` of an unknown id raise `LedgerError`."""
        with self._ledger(tmp_path) as ledger:

            def check_unknown(label: str) -> None:
                calls = {
                    "head": lambda: ledger.head("gamma"),
                    "history": lambda: ledger.history("gamma"),
                    "blast_radius": lambda: ledger.blast_radius("gamma"),
                    "commit": lambda: ledger.commit("gamma", {}, 1),
                }
                for method, call in calls.items():
                    err = _expect_raises(LedgerError, call, f"{method}('gamma') on {label}")
                    _check(
                        not isinstance(err, CASConflict),
                        f"{method}('gamma') on {label} raised CASConflict; an unknown "
                        "artifact is a plain LedgerError (retrying cannot help)",
                    )
                    _check(
                        "gamma" in str(err),
                        f"{method}('gamma') on {label}: the LedgerError must name the unknown "
                        f"id, got {str(err)!r}",
                    )

            check_unknown("an empty ledger")
            ledger.register("alpha", {}, 0.2)
            ledger.register("beta", {}, 0.2)
            check_unknown("a ledger holding 'alpha' and 'beta'")
            _check(
                ledger.versions() == {"alpha": 1, "beta": 1},
                f"a failed call on an unknown id registers nothing: versions() is "
                f"{ledger.versions()!r}",
            )

    def test_blast_radius_round_trips(self, tmp_path: Path) -> None:
        """``blast_radius`` returns exactly the float given to ``register``."""
        with self._ledger(tmp_path) as ledger:
            radii = {"zero": 0, "zero-float": 0.0, "fast": 0.3, "one": 1, "odd": 0.123456789}
            for aid, radius in radii.items():
                ledger.register(aid, {}, radius)
            for aid, radius in radii.items():
                got = ledger.blast_radius(aid)
                _check(
                    isinstance(got, float) and got == float(radius),
                    f"blast_radius round-trips: registered {radius!r} for {aid!r}, got {got!r} "
                    "(expected that exact value as a float)",
                )

    def test_any_text_round_trips(self, tmp_path: Path) -> None:
        """Keys and values keep every character: accents, emoji, quotes, newlines, NUL, empty."""
        state = {
            "règle 1": "ne jamais «deviner»",
            "emoji 🧪": "line\nbreak\ttab\x00nul",
            "": '"quoted" \\ back',
            "long": "x" * 100_000,
        }
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", state, 0.2)
            ledger.commit("a", {**state, "k": "2"}, 1, meta={"note": "é\x00🧪"})
            _check(
                ledger.history("a")[0].state == state,
                "state text round-trips exactly: version 1 came back changed",
            )
            _check(
                ledger.head("a") == (2, {**state, "k": "2"}),
                "state text round-trips exactly: the head came back changed",
            )
            _check(
                ledger.history("a")[1].meta == {"note": "é\x00🧪"},
                f"meta text round-trips exactly: got {ledger.history('a')[1].meta!r}",
            )

    # ----------------------------------------------------------------- concurrency

    def _run_threads(self, targets: list[Callable[[], None]], what: str) -> None:
        errors: list[BaseException] = []

        def guarded(target: Callable[[], None]) -> None:
            try:
                target()
            except BaseException as exc:  # reported on the calling thread below
                errors.append(exc)

        threads = [threading.Thread(target=guarded, args=(t,), daemon=True) for t in targets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(self.join_timeout)
        _check(
            not any(thread.is_alive() for thread in threads),
            f"{what}: a thread was still running after join_timeout={self.join_timeout} s "
            "(a deadlock, or raise join_timeout for a slow ledger)",
        )
        if errors:
            raise errors[0]

    def test_concurrent_commits_lose_and_duplicate_nothing(self, tmp_path: Path) -> None:
        """Threads racing compare-and-swap each land every commit exactly once."""
        n, attempts = self.threads, self.commits_per_thread
        won: list[tuple[int, dict[str, str]]] = []
        lock = threading.Lock()
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {}, 0.2)
            barrier = threading.Barrier(n)

            def racer(wid: int) -> None:
                barrier.wait(timeout=self.join_timeout)
                for attempt in range(attempts):
                    while True:
                        version, state = ledger.head("a")
                        state[f"t{wid}-{attempt}"] = f"{wid}:{attempt}:{version}"
                        try:
                            new = ledger.commit("a", state, version)
                        except CASConflict:
                            continue
                        with lock:
                            won.append((new, state))
                        break

            self._run_threads(
                [lambda wid=wid: racer(wid) for wid in range(n)], "concurrent commits"
            )
            total = n * attempts
            landed = sorted(v for v, _ in won)
            _check(
                landed == list(range(2, total + 2)),
                f"concurrent commits: {total} successful commits should have created versions "
                f"2..{total + 1} once each; they returned {_duplicates_and_gaps(landed, total)}",
            )
            history = ledger.history("a")
            _check(
                [e.version for e in history] == list(range(1, total + 2))
                and ledger.versions() == {"a": total + 1},
                f"concurrent commits: history holds {len(history)} versions and versions() is "
                f"{ledger.versions()!r}; expected 1..{total + 1}",
            )
            lost = [v for v, state in won if history[v - 1].state != state]
            _check(
                not lost,
                f"concurrent commits: the stored state of versions {lost[:10]} is not the "
                "state that commit wrote (an update was lost or overwritten)",
            )
            _check(
                len(ledger.head("a")[1]) == total,
                f"concurrent commits: the head holds {len(ledger.head('a')[1])} keys, expected "
                f"all {total} (each commit added one on top of the head it read)",
            )

    def test_head_is_never_torn(self, tmp_path: Path) -> None:
        """Readers racing a committer always get a version together with that version's state."""
        commits = self.threads * self.commits_per_thread
        with self._ledger(tmp_path) as ledger:
            ledger.register("a", {"v": "1"}, 0.2)
            done = threading.Event()
            torn: list[tuple[int, dict[str, str]]] = []

            def writer() -> None:
                try:
                    for base in range(1, commits + 1):
                        ledger.commit("a", {"v": str(base + 1), "pad": "p" * (base % 7)}, base)
                finally:
                    done.set()

            def reader() -> None:
                while not done.is_set():
                    version, state = ledger.head("a")
                    if state.get("v") != str(version):
                        torn.append((version, state))
                        return

            readers = [reader for _ in range(max(1, self.threads - 1))]
            self._run_threads([writer, *readers], "readers racing a committer")
            _check(
                not torn,
                f"head is never torn: head() returned {torn[:1]!r}, a version paired with "
                "another version's state",
            )
            _check(
                ledger.head("a")[0] == commits + 1,
                f"readers racing a committer: the head is {ledger.head('a')[0]}, expected "
                f"{commits + 1}",
            )


def _duplicates_and_gaps(landed: list[int], total: int) -> str:
    counts = Counter(landed)
    duplicates = sorted(v for v, n in counts.items() if n > 1)
    missing = sorted(set(range(2, total + 2)) - set(counts))
    return f"duplicates {duplicates[:10]}, never returned {missing[:10]}"
