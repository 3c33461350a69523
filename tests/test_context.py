"""Context compaction and the summarizer-fork predicate (SPEC §9).

Every test drives a real :class:`ContextManager` against
:class:`agentdescent.testing.CachingProviderSim` on virtual time, with the heuristic
token counter pinned so that counts are the same on every machine.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import math
import sys
import types
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentdescent import ContractError, tokens
from agentdescent import context as ctx
from agentdescent.context.mount import (
    DEFAULT_FORK_MIN_SPAN_RATIO,
    MEASURED_CACHE_HIT_FRACTION,
    MEASURED_RATE_CARD,
    SUMMARY_REQUEST_TAG,
    ContextManager,
    HeuristicTokenCounter,
    RateCard,
    TokenCounter,
    fork_break_even,
    mount,
)
from agentdescent.testing import CachingProviderSim, FakeProvider, ManualClock
from agentdescent.tokens import as_token_counter, estimate_tokens

#: One token per word (the helpers below build texts of known word counts), with the
#: default framing overhead: the compaction tests count in words.
COUNTER = as_token_counter(lambda text: len(text.split()))
MODEL = "model-a"
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
LOGGER = "agentdescent.compaction"


def words(tag: str, n: int) -> str:
    """``n`` four-character words: exactly ``n`` tokens to ``COUNTER``."""
    return " ".join(f"{tag}{i % 1000:03d}" for i in range(n))


class Fixture:
    """A manager with a scripted history, one request sent, ready for ``summarize_now``."""

    def __init__(
        self,
        mode: str = "auto",
        ratio: Any = None,
        *,
        first_words: int = 60,
        pairs: int = 12,
        send: bool = True,
        counter: Any = COUNTER,
        sim: CachingProviderSim | None = None,
        **knobs: Any,
    ) -> None:
        self.clock = ManualClock()
        self.sim = sim or CachingProviderSim(MEASURED_RATE_CARD, clock=self.clock, token_counter=COUNTER)
        knobs.setdefault("max_tokens", 20_000)
        knobs.setdefault("protected_recent", 0.05)
        self.cm = ContextManager(
            self.sim, summary_call_mode=mode, summary_fork_min_span_ratio=ratio,
            token_counter=counter, **knobs,
        )
        self.cm.add_message({"role": "system", "content": "You are a careful agent. " + words("s", 40)})
        self.cm.add_message({"role": "user", "content": words("f", first_words)})
        self.cm.add_message({"role": "assistant", "content": words("g", 60)})
        for i in range(pairs):
            self.cm.add_message({"role": "user", "content": words(chr(ord("a") + i % 20), 60)})
            self.cm.add_message({"role": "assistant", "content": words("z", 60)})
        self.view: list[dict[str, Any]] | None = None
        if send:
            self.send()

    def send(self) -> list[dict[str, Any]]:
        self.view = self.cm.get_messages_for_request()
        self.sim.complete(self.view, model=MODEL, tools=TOOLS)
        self.cm.note_request_sent(self.view, tools=TOOLS, model=MODEL)
        return self.view

    def summarize(self) -> dict[str, Any]:
        assert self.cm.summarize_now() is True
        stats = self.cm.last_summary_call_stats
        assert stats is not None
        return stats

    def last_request(self) -> dict[str, Any]:
        return self.sim.requests[-1]


def digest(request: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode("utf-8")).hexdigest()


def measured_ratio(**kwargs: Any) -> float:
    """The fixture's own span ratio, read from a fork with the predicate armed near zero."""
    stats = Fixture("auto", 1e-12, **kwargs).summarize()
    assert stats["forked"] is True
    return stats["span_measure"]["span_ratio"]


# --------------------------------------------------------------------------- defaults


def test_signature_and_defaults_are_the_contract() -> None:
    params = inspect.signature(ContextManager).parameters
    assert list(params) == [
        "provider", "max_tokens", "summary_trigger", "target_usage", "protected_recent",
        "summary_call_mode", "summary_fork_min_span_ratio", "token_counter",
    ]
    defaults = {name: p.default for name, p in params.items() if p.default is not inspect.Parameter.empty}
    assert defaults == {
        "summary_trigger": 0.6, "target_usage": 0.5, "protected_recent": 0.3,
        "summary_call_mode": "standalone", "summary_fork_min_span_ratio": None, "token_counter": None,
    }
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for n, p in params.items() if n != "provider")
    assert DEFAULT_FORK_MIN_SPAN_RATIO == 0.22
    assert round(0.00077 / 0.00350, 10) == DEFAULT_FORK_MIN_SPAN_RATIO
    cm = ContextManager(CachingProviderSim(MEASURED_RATE_CARD, clock=ManualClock()), max_tokens=1000)
    assert cm.summary_call_mode == "standalone"
    assert cm.summary_fork_min_span_ratio is None
    assert cm.last_summary_call_stats is None


def test_standalone_evaluates_nothing(caplog: pytest.LogCaptureFixture) -> None:
    fx = Fixture("standalone")
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        stats = fx.summarize()
    assert stats["mode"] == "standalone"
    assert stats["forked"] is False
    assert stats["span_measure"] is None
    assert (stats["fork_fallbacks"], stats["fork_declines"]) == (0, 0)
    request = fx.last_request()
    assert len(request["messages"]) == 1
    assert request["messages"][0]["content"].startswith(SUMMARY_REQUEST_TAG)
    assert "tools" not in request["options"]
    assert not [r for r in caplog.records if "declined" in r.getMessage() or "fell back" in r.getMessage()]


def test_standalone_without_any_request_sent_is_not_a_fallback() -> None:
    fx = Fixture("standalone", send=False)
    stats = fx.summarize()
    assert stats["fallback_reason"] is None and fx.cm.fork_fallbacks == 0


def test_inline_is_an_alias_of_standalone() -> None:
    fx = Fixture("inline")
    assert fx.cm.summary_call_mode == "standalone"
    assert fx.summarize()["forked"] is False


def test_unknown_mode_is_refused_naming_the_knob() -> None:
    with pytest.raises(ContractError, match="summary_call_mode='forked'.*'standalone'"):
        Fixture("forked")


def test_plain_fork_without_ratio_forks_unconditionally() -> None:
    small = Fixture("fork")
    stats = small.summarize()
    assert stats["forked"] is True
    assert stats["span_measure"] is None  # predicate off: not even evaluated
    # The same span would be declined by the default predicate: the fork is unconditional.
    assert measured_ratio() < DEFAULT_FORK_MIN_SPAN_RATIO
    assert small.cm.fork_declines == 0 and small.cm.forks == 1


def test_auto_resolves_to_the_default_ratio() -> None:
    small = Fixture("auto")
    stats = small.summarize()
    assert stats["span_measure"]["min_span_ratio"] == DEFAULT_FORK_MIN_SPAN_RATIO
    assert stats["span_measure"]["span_ratio"] < DEFAULT_FORK_MIN_SPAN_RATIO
    assert stats["forked"] is False and stats["decline_reason"] == "span-below-ratio"
    big = Fixture("auto", first_words=900)
    stats = big.summarize()
    assert stats["span_measure"]["span_ratio"] >= DEFAULT_FORK_MIN_SPAN_RATIO
    assert stats["forked"] is True and big.cm.fork_declines == 0


# --------------------------------------------------------------------------- the boundary


@pytest.mark.parametrize("first_words", [60, 900])
def test_boundary_is_pinned_from_both_sides_and_inclusive(first_words: int) -> None:
    ratio = measured_ratio(first_words=first_words)
    assert 0 < ratio < 1
    at = Fixture("auto", ratio, first_words=first_words).summarize()
    assert at["span_measure"]["span_ratio"] == ratio
    assert at["forked"] is True, "S/P == ratio must fork: the comparison is >="
    above = Fixture("auto", math.nextafter(ratio, math.inf), first_words=first_words).summarize()
    assert above["forked"] is False and above["fork_declines"] == 1
    below = Fixture("auto", math.nextafter(ratio, 0.0), first_words=first_words).summarize()
    assert below["forked"] is True and below["fork_declines"] == 0
    # Plain "fork" honours an explicit ratio the same way.
    fork_above = Fixture("fork", math.nextafter(ratio, math.inf), first_words=first_words).summarize()
    assert fork_above["forked"] is False


def test_zero_token_prefix_gives_no_opinion_and_no_division() -> None:
    # With a consistent counter the prefix always holds the span, so P = 0 only happens
    # when a counter sees nothing in what was sent; simulate exactly that.
    fx = Fixture("auto", 0.5)
    fx.cm._sent.tokens = 0
    assert fx.cm.sent_tokens == 0
    stats = fx.summarize()
    assert stats["span_measure"]["prefix_tokens"] == 0
    assert stats["span_measure"]["span_ratio"] is None
    assert stats["span_measure"]["span_tokens"] > 0
    assert stats["forked"] is True and fx.cm.fork_declines == 0


def test_ratio_above_one_is_legal_and_never_forks(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        fx = Fixture("fork", 1.5, first_words=900)
        stats = fx.summarize()
    assert stats["forked"] is False
    assert stats["decline_reason"] == "ratio-above-one"
    assert stats["span_measure"]["min_span_ratio"] == 1.5
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("zero", [0, 0.0])
@pytest.mark.parametrize("mode", ["fork", "auto"])
def test_zero_disables_the_predicate_silently(zero: Any, mode: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        fx = Fixture(mode, zero)
        stats = fx.summarize()
    assert stats["forked"] is True
    assert stats["span_measure"] is None
    assert fx.cm.summary_fork_min_span_ratio == zero
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]


@pytest.mark.parametrize("bad", [-0.1, -1, float("nan"), float("inf"), "0.3", True, [0.2]])
@pytest.mark.parametrize("mode", ["fork", "auto"])
def test_bad_ratio_disables_the_predicate_loudly(bad: Any, mode: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        fx = Fixture(mode, bad)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"summary_fork_min_span_ratio={bad!r}" in warnings[0].getMessage()
    stats = fx.summarize()
    assert stats["forked"] is True and stats["span_measure"] is None
    assert fx.cm.fork_declines == 0


def test_ratio_in_standalone_mode_warns_that_it_does_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        fx = Fixture("standalone", 0.3)
    assert any("no effect" in r.getMessage() for r in caplog.records)
    assert fx.summarize()["span_measure"] is None


# --------------------------------------------------------------------------- decline vs fallback


def test_decline_is_byte_identical_to_a_standalone_request() -> None:
    standalone = Fixture("standalone")
    declined = Fixture("auto", 0.9)
    ids_before = declined.cm.message_ids
    history_before = declined.cm.messages
    a, b = standalone.summarize(), declined.summarize()
    assert b["forked"] is False and b["decline_reason"] == "span-below-ratio"
    assert a["forked"] is False
    assert digest(declined.last_request()) == digest(standalone.last_request())
    assert declined.cm.messages == history_before == standalone.cm.messages
    assert declined.cm.message_ids == ids_before == standalone.cm.message_ids
    assert declined.cm.view_ids == standalone.cm.view_ids
    assert declined.cm.get_messages_for_request() == standalone.cm.get_messages_for_request()


def _assert_fallback(fx: Fixture, kind: str) -> None:
    stats = fx.summarize()
    assert stats["forked"] is False
    assert stats["fallback_reason"] == kind
    assert stats["span_measure"] is None
    assert (fx.cm.fork_fallbacks, fx.cm.fork_declines) == (1, 0)
    assert (stats["fork_fallbacks"], stats["fork_declines"]) == (1, 0)
    assert len(fx.last_request()["messages"]) == 1  # the standalone request


@pytest.mark.parametrize("ratio", [None, 0.9, 1e-9])
def test_nothing_sent_is_a_fallback_even_with_the_predicate_armed(ratio: Any) -> None:
    _assert_fallback(Fixture("auto", ratio, send=False), "nothing-sent")


def test_span_outside_the_recorded_prefix_is_a_fallback() -> None:
    fx = Fixture("auto", 0.9, send=False)
    view = fx.cm.get_messages_for_request()
    fx.cm.note_request_sent(view[:1], tools=TOOLS, model=MODEL)  # only the system message
    _assert_fallback(fx, "span-not-in-prefix")


def test_prefix_ending_in_unanswered_tool_calls_is_a_fallback() -> None:
    fx = Fixture("auto", 0.9, send=False)
    view = fx.cm.get_messages_for_request()
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]}
    fx.cm.note_request_sent([*view, call], tools=TOOLS, model=MODEL)
    _assert_fallback(fx, "unanswered-tool-calls")


def test_a_different_summarization_model_is_a_fallback() -> None:
    fx = Fixture("auto", 1e-9)
    fx.cm.summary_model = "model-b"
    _assert_fallback(fx, "model-mismatch")
    assert fx.last_request()["options"]["model"] == "model-b"


def test_fallbacks_warn_every_time_declines_inform_once_per_kind(caplog: pytest.LogCaptureFixture) -> None:
    fx = Fixture("auto", 0.9, send=False, pairs=20)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        assert fx.cm.summarize_now() and fx.cm.summarize_now()  # two fallbacks
        fx.send()
        assert fx.cm.summarize_now() and fx.cm.summarize_now()  # two declines, same kind
        fx.cm.summary_fork_min_span_ratio = 2.0
        assert fx.cm.summarize_now()  # a decline of another kind
    assert (fx.cm.fork_fallbacks, fx.cm.fork_declines) == (2, 3)
    fallback_logs = [r for r in caplog.records if "fell back" in r.getMessage()]
    assert [r.levelno for r in fallback_logs] == [logging.WARNING, logging.WARNING]
    decline_logs = [r for r in caplog.records if "declined" in r.getMessage()]
    assert [r.levelno for r in decline_logs] == [logging.INFO, logging.DEBUG, logging.INFO]
    assert "span-below-ratio" in decline_logs[0].getMessage()
    assert "ratio-above-one" in decline_logs[2].getMessage()


def test_counters_are_separate_and_cumulative_in_stats() -> None:
    fx = Fixture("auto", 0.9, send=False, pairs=20)
    fx.cm.summarize_now()
    fx.send()
    fx.cm.summarize_now()
    stats = fx.cm.last_summary_call_stats
    assert (stats["fork_fallbacks"], stats["fork_declines"]) == (1, 1)
    assert fx.cm.counters["fork_fallbacks"] == 1 and fx.cm.counters["fork_declines"] == 1


# --------------------------------------------------------------------------- the fork request


def test_fork_request_is_the_sent_prefix_plus_one_user_message() -> None:
    fx = Fixture("fork")
    sent = fx.view
    fx.summarize()
    request = fx.last_request()
    assert request["messages"][:-1] == sent
    extra = request["messages"][-1]
    assert extra["role"] == "user" and extra["content"].startswith(SUMMARY_REQUEST_TAG)
    assert request["options"]["tools"] == TOOLS
    assert request["options"]["model"] == MODEL
    systems = [m for m in request["messages"] if m["role"] == "system"]
    assert systems == [m for m in sent if m["role"] == "system"]
    # The simulator read the whole prefix from its cache.
    call = fx.sim.calls[-1]
    assert call.kind == "summary"
    assert call.prompt_tokens - call.cached_tokens == COUNTER.count_message(extra)


def test_summary_is_inserted_as_a_user_message_in_place_of_its_span() -> None:
    fx = Fixture("fork")
    ids = fx.cm.message_ids
    fx.summarize()
    summary = fx.cm.summaries[0]
    assert summary["message"]["role"] == "user"
    assert summary["covers"] == [ids[1]]
    assert fx.cm.view_ids == [ids[0], summary["id"], *ids[2:]]
    assert fx.cm.messages[1]["content"] == words("f", 60)  # history itself untouched


def test_shrink_guard_refuses_a_summary_that_is_not_smaller() -> None:
    # A provider that ignores max_tokens and answers at length.
    provider = FakeProvider(lambda messages, **options: words("x", 500))
    cm = ContextManager(provider, max_tokens=20_000, protected_recent=0.05, token_counter=COUNTER)
    for message in Fixture("standalone", send=False).cm.messages:
        cm.add_message(message)
    fx = types.SimpleNamespace(cm=cm)
    before = (fx.cm.messages, fx.cm.message_ids, fx.cm.view_ids)
    assert fx.cm.summarize_now() is False
    assert fx.cm.last_summary_call_stats["outcome"] == "refused"
    assert fx.cm.summaries_refused == 1
    assert (fx.cm.messages, fx.cm.message_ids, fx.cm.view_ids) == before


def test_failed_summary_call_leaves_history_untouched(caplog: pytest.LogCaptureFixture) -> None:
    def down(messages: Any, **options: Any) -> str:
        raise ConnectionError("provider down")

    sim = CachingProviderSim(MEASURED_RATE_CARD, clock=ManualClock(), token_counter=COUNTER, responder=down)
    fx = Fixture("fork", sim=sim, send=False, max_tokens=2000)
    before = (fx.cm.messages, fx.cm.message_ids, fx.cm.view_ids)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        view = fx.cm.get_messages_for_request()  # over the trigger: tries, fails, carries on
    assert fx.cm.summary_failures == 1
    assert fx.cm.last_summary_call_stats["outcome"] == "failed"
    assert "provider down" in fx.cm.last_summary_call_stats["error"]
    assert (fx.cm.messages, fx.cm.message_ids, fx.cm.view_ids) == before
    assert view == fx.cm.messages
    assert any("summary call failed" in r.getMessage() for r in caplog.records)


def test_automatic_compaction_keeps_the_view_near_target() -> None:
    clock = ManualClock()
    sim = CachingProviderSim(MEASURED_RATE_CARD, clock=clock, token_counter=COUNTER)
    cm = ContextManager(sim, max_tokens=3000, summary_call_mode="auto", token_counter=COUNTER)
    cm.add_message({"role": "system", "content": words("s", 50)})
    for turn in range(60):
        clock.advance(10)
        cm.add_message({"role": "user", "content": words("u", 40 + turn % 7)})
        view = cm.get_messages_for_request()
        reply = sim.complete(view, model=MODEL)
        cm.note_request_sent(view, model=MODEL)
        cm.add_message({"role": "assistant", "content": reply.text})
    assert cm.compactions >= 3
    assert cm.current_tokens <= 0.6 * 3000 + 200
    assert len(cm.messages) == 121 and cm.message_ids[-1] == "m121"
    covered = [i for s in cm.summaries for i in s["covers"]]
    assert len(covered) == len(set(covered))
    assert all(not i.startswith("s") for i in covered)  # summaries are never re-summarised
    assert cm.forks + cm.fork_declines + cm.fork_fallbacks == cm.summary_calls


def test_protected_recent_messages_are_never_summarised() -> None:
    fx = Fixture("standalone", max_tokens=4000, protected_recent=0.3, send=False)
    tail = fx.cm.message_ids
    while fx.cm.summarize_now():
        pass
    covered = {i for s in fx.cm.summaries for i in s["covers"]}
    tokens = dict(zip(fx.cm.message_ids, (COUNTER.count_message(m) for m in fx.cm.messages)))
    protected, total = [], 0
    for message_id in reversed(tail):
        if total + tokens[message_id] > 0.3 * 4000:
            break
        total += tokens[message_id]
        protected.append(message_id)
    assert protected and not covered & set(protected)
    assert tail[0] not in covered  # the pinned system message


# --------------------------------------------------------------------------- tool calls


def _add_tool_turn(cm: ContextManager, n: int, calls: int, size: int, answer: bool = True) -> None:
    ids = [f"call{n}_{k}" for k in range(calls)]
    cm.add_message({"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}} for i in ids]})
    if answer:
        for i in ids:
            cm.add_message({"role": "tool", "tool_call_id": i, "content": words("t", size)})


def _check_tool_pairs(cm: ContextManager, view: list[dict[str, Any]] | None = None) -> None:
    """Every tool result in the view follows its call, and no pair straddles a summary."""
    history = dict(zip(cm.message_ids, cm.messages))
    summaries = {s["id"]: s["message"] for s in cm.summaries}
    view_ids = cm.view_ids
    expected = [history[i] if i in history else summaries[i] for i in view_ids]
    if view is not None:
        assert view == expected
    issued: set[str] = set()
    for message in expected:
        if message.get("tool_calls"):
            issued.update(c["id"] for c in message["tool_calls"])
        if message["role"] == "tool":
            assert message["tool_call_id"] in issued, "a tool result lost its call"
    in_view = set(view_ids)
    for message_id, message in history.items():
        if message.get("tool_calls"):
            call_ids = {c["id"] for c in message["tool_calls"]}
            for other_id, other in history.items():
                if other["role"] == "tool" and other["tool_call_id"] in call_ids:
                    assert (message_id in in_view) == (other_id in in_view), "a tool pair was split"


def test_tool_call_pairs_stay_intact() -> None:
    clock = ManualClock()
    sim = CachingProviderSim(MEASURED_RATE_CARD, clock=clock, token_counter=COUNTER)
    cm = ContextManager(sim, max_tokens=2500, summary_call_mode="fork", token_counter=COUNTER)
    cm.add_message({"role": "system", "content": words("s", 30)})
    for n in range(25):
        cm.add_message({"role": "user", "content": words("u", 30)})
        _add_tool_turn(cm, n, calls=1 + n % 3, size=40 + 30 * (n % 4))
        view = cm.get_messages_for_request()
        _check_tool_pairs(cm, view)
        sim.complete(view, model=MODEL, tools=TOOLS)
        cm.note_request_sent(view, model=MODEL, tools=TOOLS)
        cm.add_message({"role": "assistant", "content": words("r", 20)})
    assert cm.compactions >= 2


def test_unanswered_tool_calls_are_never_summarised() -> None:
    fx = Fixture("standalone", send=False, pairs=2)
    _add_tool_turn(fx.cm, 0, calls=1, size=10, answer=False)
    for i in range(10):
        fx.cm.add_message({"role": "user", "content": words("q", 60 + i)})
    while fx.cm.summarize_now():
        pass
    covered = {i for s in fx.cm.summaries for i in s["covers"]}
    call_index = next(i for i, m in zip(fx.cm.message_ids, fx.cm.messages) if m.get("tool_calls"))
    assert call_index not in covered


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.integers(1, 120)),
        st.tuples(st.just("tool"), st.integers(1, 3), st.integers(1, 200)),
        st.tuples(st.just("open_tool"), st.integers(1, 2)),
        st.tuples(st.just("send"), st.booleans()),
        st.tuples(st.just("summarize"), st.just(0)),
    ),
    min_size=8, max_size=50,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, mode=st.sampled_from(["standalone", "fork", "auto"]), ratio=st.sampled_from([None, 0, 0.2, 2.0]))
def test_history_is_append_only_and_views_never_split_tool_pairs(ops: list[tuple], mode: str, ratio: Any) -> None:
    logging.getLogger(LOGGER).disabled = True
    try:
        clock = ManualClock()
        sim = CachingProviderSim(MEASURED_RATE_CARD, clock=clock, token_counter=COUNTER, record_requests=False)
        cm = ContextManager(sim, max_tokens=700, summary_call_mode=mode,
                            summary_fork_min_span_ratio=ratio, token_counter=COUNTER)
        cm.add_message({"role": "system", "content": words("s", 20)})
        previous: list[dict[str, Any]] = cm.messages
        pending: list[str] = []
        for n, op in enumerate(ops):
            if op[0] == "user":
                for call_id in pending:  # answer open calls before the next user turn
                    cm.add_message({"role": "tool", "tool_call_id": call_id, "content": words("p", 5)})
                pending = []
                cm.add_message({"role": "user", "content": words("u", op[1])})
            elif op[0] == "tool":
                _add_tool_turn(cm, n, calls=op[1], size=op[2])
            elif op[0] == "open_tool" and not pending:
                _add_tool_turn(cm, n, calls=op[1], size=1, answer=False)
                pending = [f"call{n}_{k}" for k in range(op[1])]
            elif op[0] == "send":
                view = cm.get_messages_for_request()
                _check_tool_pairs(cm, view)
                if op[1]:
                    sim.complete(view, model=MODEL)
                    cm.note_request_sent(view, model=MODEL)
            elif op[0] == "summarize":
                cm.summarize_now()
            clock.advance(5)
            current = cm.messages
            assert current[: len(previous)] == previous
            assert cm.message_ids == [f"m{i}" for i in range(1, len(current) + 1)]
            previous = current
            _check_tool_pairs(cm)
            covered = [i for s in cm.summaries for i in s["covers"]]
            assert len(covered) == len(set(covered))
            assert cm.message_ids[-1] not in covered
            assert all(s["message"]["role"] == "user" for s in cm.summaries)
            assert cm.forks + cm.fork_declines + cm.fork_fallbacks <= cm.summary_calls
            if mode == "standalone":
                assert cm.forks == cm.fork_declines == cm.fork_fallbacks == 0
    finally:
        logging.getLogger(LOGGER).disabled = False


# --------------------------------------------------------------------------- mount


def test_mount_threads_both_knobs() -> None:
    sim = CachingProviderSim(MEASURED_RATE_CARD, clock=ManualClock(), token_counter=COUNTER)
    cm = mount({"max_tokens": 20_000, "summary_call_mode": "auto", "summary_fork_min_span_ratio": 0.9,
                "protected_recent": 0.05, "token_counter": COUNTER}, provider=sim)
    assert cm.summary_call_mode == "auto" and cm.summary_fork_min_span_ratio == 0.9
    assert cm.provider is sim and cm.max_tokens == 20_000 and cm.protected_recent == 0.05
    for message in Fixture(send=False).cm.messages:  # the fixture's script, on the mounted manager
        cm.add_message(message)
    view = cm.get_messages_for_request()
    cm.note_request_sent(view, tools=TOOLS, model=MODEL)
    assert cm.summarize_now()
    stats = cm.last_summary_call_stats
    assert stats["span_measure"]["min_span_ratio"] == 0.9 and stats["forked"] is False
    assert stats["decline_reason"] == "span-below-ratio"
    fork = mount({"max_tokens": 1000, "summary_call_mode": "fork", "summary_fork_min_span_ratio": 0}, provider=sim)
    assert (fork.summary_call_mode, fork.summary_fork_min_span_ratio) == ("fork", 0)
    inline = mount({"max_tokens": 1000, "summary_call_mode": "inline"}, provider=sim)
    assert (inline.summary_call_mode, inline.summary_fork_min_span_ratio) == ("standalone", None)


def test_mount_threads_rate_card_and_refuses_unknown_keys() -> None:
    sim = CachingProviderSim(MEASURED_RATE_CARD, clock=ManualClock())
    cm = mount({"max_tokens": 1000, "summary_call_mode": "auto", "rate_card": {
        "input_per_mtok": 3.0, "cached_input_per_mtok": 0.3}, "cache_hit_fraction": 1.0,
        "summary_model": MODEL}, provider=sim)
    assert cm.rate_card == RateCard(3.0, 0.3) and cm.summary_model == MODEL
    assert cm._min_span_ratio() == pytest.approx(0.1)
    with pytest.raises(ContractError, match="summary_fork_min_ratio"):
        mount({"max_tokens": 1000, "summary_fork_min_ratio": 0.2}, provider=sim)
    with pytest.raises(ContractError, match="max_tokens"):
        mount({"summary_call_mode": "fork"}, provider=sim)


@pytest.mark.parametrize(
    ("knob", "value"),
    [("max_tokens", 0), ("max_tokens", 1.5), ("summary_trigger", 1.5), ("target_usage", 0.7),
     ("protected_recent", 1.0), ("summary_trigger", float("nan"))],
)
def test_bad_knobs_are_refused_by_name(knob: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"max_tokens": 1000, knob: value}
    with pytest.raises(ContractError, match=knob):
        ContextManager(CachingProviderSim(MEASURED_RATE_CARD, clock=ManualClock()), **kwargs)


def test_bad_messages_are_refused() -> None:
    cm = ContextManager(CachingProviderSim(MEASURED_RATE_CARD, clock=ManualClock()), max_tokens=1000)
    with pytest.raises(ContractError, match="tool_call_id"):
        cm.add_message({"role": "tool", "content": "x"})
    with pytest.raises(ContractError, match="role"):
        cm.add_message({"role": "robot", "content": "x"})
    with pytest.raises(TypeError):
        cm.add_message("hello")  # type: ignore[arg-type]
    message = {"role": "user", "content": "hi"}
    cm.add_message(message)
    message["content"] = "edited"
    assert cm.messages[0]["content"] == "hi"


# --------------------------------------------------------------------------- pricing


def test_fork_break_even_values() -> None:
    assert fork_break_even(MEASURED_RATE_CARD, MEASURED_CACHE_HIT_FRACTION) == pytest.approx(0.22, abs=1e-12)
    assert 0.85 < MEASURED_CACHE_HIT_FRACTION < 0.88
    ninety_off = RateCard(input_per_mtok=3.0, cached_input_per_mtok=0.3)
    assert fork_break_even(ninety_off) == pytest.approx(0.1)
    assert fork_break_even(ninety_off, 0.0) == math.inf
    anthropic_like = RateCard(3.0, 0.3, cache_write_multiplier=1.25)
    assert fork_break_even(anthropic_like, 0.5) == pytest.approx(0.5 * 0.1 + 0.5 * 1.25)
    with pytest.raises(ContractError, match="cache_hit_fraction"):
        fork_break_even(ninety_off, 1.5)
    with pytest.raises(ContractError, match="cached_input_per_mtok"):
        RateCard(3.0, -1.0)
    with pytest.raises(ContractError, match="input_per_mtok"):
        RateCard(0.0, 0.0)


def test_auto_uses_a_rate_card_and_a_cold_cache_never_forks(caplog: pytest.LogCaptureFixture) -> None:
    measured = measured_ratio(first_words=300)
    assert 0.1 < measured < DEFAULT_FORK_MIN_SPAN_RATIO
    assert Fixture("auto", first_words=300).summarize()["forked"] is False  # the default declines
    warm = Fixture("auto", first_words=300)
    warm.cm.rate_card = RateCard(3.0, 0.3)  # break-even 0.1 with every fork hitting
    stats = warm.summarize()
    assert stats["span_measure"]["min_span_ratio"] == pytest.approx(0.1) and stats["forked"] is True
    cold = Fixture("auto", first_words=900)
    cold.cm.rate_card = RateCard(3.0, 0.3)
    cold.cm.cache_hit_fraction = 0.0
    with caplog.at_level(logging.INFO, logger=LOGGER):
        stats = cold.summarize()
    assert stats["forked"] is False and stats["decline_reason"] == "cold-cache"
    assert stats["span_measure"]["min_span_ratio"] == math.inf
    # An explicit ratio wins over the card.
    explicit = Fixture("auto", 0.9)
    explicit.cm.rate_card = RateCard(3.0, 0.3)
    assert explicit.summarize()["span_measure"]["min_span_ratio"] == 0.9


# --------------------------------------------------------------------------- tokens


def test_default_counter_is_offline_and_deterministic() -> None:
    counter = ctx.default_token_counter()
    assert isinstance(counter, TokenCounter)
    message = {"role": "user", "content": "The quick brown fox, twice."}
    assert counter.count_message(message) == counter.count_message(dict(message)) > 0
    assert HeuristicTokenCounter().count_text("abcdefgh ij, k") == 4 == estimate_tokens("abcdefgh ij, k")
    assert HeuristicTokenCounter(2.5).count_text("abcdefgh") == 4


def test_a_plain_callable_is_a_token_counter() -> None:
    cm = ContextManager(CachingProviderSim(MEASURED_RATE_CARD, clock=ManualClock()), max_tokens=1000,
                        token_counter=len)
    cm.add_message({"role": "user", "content": "12345"})
    assert cm.current_tokens == 4 + 5
    with pytest.raises(TypeError, match="token_counter"):
        ContextManager(CachingProviderSim(MEASURED_RATE_CARD), max_tokens=1000, token_counter=3)  # type: ignore[arg-type]


def _fake_tiktoken(monkeypatch: pytest.MonkeyPatch, cached: bool) -> dict[str, bool]:
    seen = {"downloaded": False}
    tiktoken = types.ModuleType("tiktoken")
    load = types.ModuleType("tiktoken.load")

    def read_file(blobpath: str) -> bytes:
        seen["downloaded"] = True
        return b""

    class Encoding:
        name = "fake_base"

        def encode(self, text: str, disallowed_special: Any = ()) -> list[int]:
            return list(range(len(text.split())))

    def get_encoding(name: str) -> Encoding:
        if not cached:
            load.read_file("https://example.invalid/" + name)  # what a cache miss does
        return Encoding()

    load.read_file = read_file  # type: ignore[attr-defined]
    tiktoken.load = load  # type: ignore[attr-defined]
    tiktoken.get_encoding = get_encoding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", tiktoken)
    monkeypatch.setitem(sys.modules, "tiktoken.load", load)
    return seen


def test_tiktoken_is_never_asked_to_download(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _fake_tiktoken(monkeypatch, cached=False)
    assert tokens._cached_tiktoken_encoding() is None
    assert seen["downloaded"] is False
    assert sys.modules["tiktoken.load"].read_file.__name__ == "read_file"  # restored


def test_a_locally_cached_tiktoken_encoding_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tiktoken(monkeypatch, cached=True)
    encoding = tokens._cached_tiktoken_encoding()
    assert encoding is not None
    counter = tokens._TiktokenCounter(encoding)
    assert counter.count_text("three word text") == 3


# --------------------------------------------------------------------------- the simulator


def test_sim_charges_cached_rate_on_the_common_prefix_within_ttl() -> None:
    clock = ManualClock()
    card = RateCard(input_per_mtok=10.0, cached_input_per_mtok=1.0, output_per_mtok=20.0)
    sim = CachingProviderSim(card, ttl=60, clock=clock, token_counter=COUNTER, reply_words=5)
    a = [{"role": "system", "content": words("s", 100)}, {"role": "user", "content": words("u", 50)}]
    tok = [COUNTER.count_message(m) for m in a]
    first = sim.complete(a, model=MODEL)
    assert first.usage.cached_tokens == 0 and first.usage.prompt_tokens == sum(tok)
    assert first.usage.completion_tokens == 5
    b = [*a, {"role": "assistant", "content": first.text}, {"role": "user", "content": words("v", 10)}]
    clock.advance(59)
    second = sim.complete(b, model=MODEL)
    assert second.usage.cached_tokens == sum(tok)
    uncached = second.usage.prompt_tokens - sum(tok)
    assert sim.calls[-1].cost == pytest.approx((uncached * 10 + sum(tok) * 1 + 5 * 20) / 1e6)
    assert sim.total_cost == pytest.approx(sum(c.cost for c in sim.calls))
    assert sim.usage.cached_tokens == sum(tok) and sim.usage.calls == 2
    # The hit refreshed the entry; past the TTL it is gone.
    clock.advance(61)
    assert sim.complete(b, model=MODEL).usage.cached_tokens == 0
    # A different model, or different tools, share nothing.
    assert sim.complete(b, model="other").usage.cached_tokens == 0
    assert sim.complete(b, model=MODEL, tools=TOOLS).usage.cached_tokens == 0
    # A changed first message breaks the prefix at once.
    changed = [{"role": "system", "content": words("s", 99)}, *b[1:]]
    assert sim.complete(changed, model=MODEL).usage.cached_tokens == 0


def test_sim_replies_deterministically_and_marks_summaries() -> None:
    def make() -> CachingProviderSim:
        return CachingProviderSim(MEASURED_RATE_CARD, clock=ManualClock(), token_counter=COUNTER)

    one, two = make(), make()
    request = [{"role": "user", "content": "hello"}]
    assert one.complete(request).text == two.complete(request).text
    summary = [{"role": "user", "content": SUMMARY_REQUEST_TAG + " Summarize this."}]
    reply = one.complete(summary, max_tokens=10)
    assert one.calls[-1].kind == "summary" and COUNTER.count_text(reply.text) == 10
    assert one.cost_by_kind()["summary"] == one.calls[-1].cost
    with pytest.raises(TypeError, match="top_p"):
        one.complete(request, top_p=0.5)


def test_sim_best_effort_cache_misses_deterministically() -> None:
    def run(rate: float) -> list[int]:
        sim = CachingProviderSim(MEASURED_RATE_CARD, clock=ManualClock(), token_counter=COUNTER,
                                 cache_hit_rate=rate, seed=7)
        request = [{"role": "user", "content": words("u", 50)}]
        return [sim.complete(request).usage.cached_tokens for _ in range(40)]

    assert run(0.0) == [0] * 40
    assert all(c > 0 for c in run(1.0)[1:])
    half = run(0.5)
    assert half == run(0.5) and 5 < sum(1 for c in half if c) < 35


def test_manual_clock_only_moves_forward() -> None:
    clock = ManualClock(5)
    assert clock() == 5 and clock.advance(2.5) == 7.5
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)
