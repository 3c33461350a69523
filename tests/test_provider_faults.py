"""Provider failures, one classification: what is retried, what is raised, what it says.

Each test points a real SDK at a loopback server (or a closed port) that fails on
purpose, and checks the contract the engines rely on: the provider's own retries are the
only retries, so every raised error says through ``retryable`` whether a later call can
help; no SDK exception rides along on it; and what comes back from a successful call is
clean (sanitised text, no key, plausible usage, the finish reason and tool calls).
Waits between retries run on a virtual clock, never on the wall clock.
"""

from __future__ import annotations

import json
import logging
import traceback

import httpx2
import pytest

from agentdescent.errors import ProviderError
from agentdescent.providers import (
    ProviderAuthError,
    ProviderBadRequestError,
    ProviderConnectionError,
    ProviderDependencyError,
    ProviderRateLimitError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    anthropic,
    from_callable,
    openai_compatible,
)
from agentdescent.testing.llmserver import LLMServer, anthropic_body, openai_body
from tests.test_providers import KEY, USER, VirtualClock, free_port, leaked_fragments

VENDORS = ("openai", "anthropic")


@pytest.fixture
def server():
    with LLMServer() as s:
        yield s


@pytest.fixture
def clock():
    return VirtualClock()


def make(vendor, base, clock, **kwargs):
    """An adapter for ``vendor`` at ``base`` (a server, or a URL) on the virtual clock."""
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("seed", 0)
    if vendor == "openai":
        url = base if isinstance(base, str) else base.openai_base_url
        return openai_compatible("test-model", base_url=url, clock=clock, **kwargs)
    url = base if isinstance(base, str) else base.base_url
    return anthropic("claude-test", base_url=url, clock=clock, **kwargs)


def error_body(vendor, message):
    if vendor == "openai":
        return {"error": {"message": message}}
    return {"type": "error", "error": {"type": "error", "message": message}}


def ok_body(vendor, text="ok", **kwargs):
    return openai_body(text, **kwargs) if vendor == "openai" else anthropic_body(text, **kwargs)


def endpoint_of(vendor, server):
    return server.openai_base_url if vendor == "openai" else server.base_url


class CountingTransport(httpx2.HTTPTransport):
    """A real transport (real sockets) that counts the requests it was asked to send."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def handle_request(self, request):
        self.sent += 1
        return super().handle_request(request)


# --------------------------------------------------------------------------- classification


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize(
    ("status", "error", "retryable"),
    [
        (400, ProviderBadRequestError, False),
        (401, ProviderAuthError, False),
        (403, ProviderAuthError, False),
        (404, ProviderBadRequestError, False),
        (422, ProviderBadRequestError, False),
        (408, ProviderUnavailableError, True),
        (429, ProviderRateLimitError, True),
        (500, ProviderUnavailableError, True),
        (503, ProviderUnavailableError, True),
    ],
)
def test_each_status_becomes_one_error_class_that_says_if_retrying_helps(
    server, clock, vendor, status, error, retryable
):
    provider = make(vendor, server, clock, max_retries=0)
    server.push(error_body(vendor, "scripted failure"), status=status)
    with pytest.raises(ProviderError) as info:
        provider.complete(USER)
    assert type(info.value) is error
    assert info.value.retryable is retryable
    assert info.value.status_code == status
    assert info.value.endpoint == endpoint_of(vendor, server)


@pytest.mark.parametrize("vendor", VENDORS)
def test_401_sends_exactly_one_request(server, clock, vendor):
    provider = make(vendor, server, clock, max_retries=4)
    server.push(error_body(vendor, "invalid key"), status=401)
    with pytest.raises(ProviderAuthError) as info:
        provider.complete(USER)
    assert info.value.retryable is False and info.value.attempts == 1
    assert len(server.requests) == 1 and clock.sleeps == []


@pytest.mark.parametrize("vendor", VENDORS)
def test_500_is_sent_max_retries_plus_one_times_then_retryable(server, clock, vendor):
    provider = make(vendor, server, clock, max_retries=3)
    for _ in range(4):
        server.push(error_body(vendor, "upstream down"), status=500)
    with pytest.raises(ProviderUnavailableError) as info:
        provider.complete(USER)
    assert type(info.value) is ProviderUnavailableError
    assert info.value.retryable is True and info.value.attempts == 4
    assert len(server.requests) == 4 and len(clock.sleeps) == 3


def test_a_2xx_that_is_not_a_reply_is_not_retryable(server, clock):
    provider = make("openai", server, clock)
    server.push("{ not json")
    server.push({"choices": []})
    for _ in range(2):
        with pytest.raises(ProviderResponseError) as info:
            provider.complete(USER)
        assert info.value.retryable is False and info.value.endpoint == server.openai_base_url
        assert info.value.__context__ is None
    assert len(server.requests) == 2 and provider.failures == 2


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_closed_port_fails_fast_with_a_connection_error(clock, vendor):
    base = f"http://127.0.0.1:{free_port()}" + ("/v1" if vendor == "openai" else "")
    transport = CountingTransport()
    # Default retry knobs: the quick-fail path must not spend the whole retry budget.
    provider = make(vendor, base, clock, http_client=httpx2.Client(transport=transport))
    with pytest.raises(ProviderConnectionError) as info:
        provider.complete(USER)
    err = info.value
    assert isinstance(err, ProviderUnavailableError)
    assert err.retryable is False
    assert 1 <= transport.sent <= 3 and err.attempts == transport.sent
    assert sum(clock.sleeps) < 2.0  # virtual seconds the default backoff would have waited
    assert err.endpoint == base
    assert base in str(err) and "Is the server running?" in str(err) and "base_url" in str(err)


def test_a_dropped_connection_takes_the_normal_retry_path(server, clock):
    provider = make("openai", server, clock, max_retries=3)
    for _ in range(4):
        server.push(drop=True)
    with pytest.raises(ProviderUnavailableError) as info:
        provider.complete(USER)
    # The server was there and accepted the connection: that is transient, not a wrong URL.
    assert not isinstance(info.value, ProviderConnectionError)
    assert info.value.retryable is True
    assert len(server.requests) == 4


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_slow_server_times_out_and_is_retryable(server, clock, vendor):
    provider = make(vendor, server, clock, timeout=0.2, max_retries=0)
    server.push(ok_body(vendor), delay=2.0)
    with pytest.raises(ProviderTimeoutError) as info:
        provider.complete(USER)
    assert info.value.retryable is True
    assert info.value.endpoint == endpoint_of(vendor, server)


def test_errors_raised_before_any_request_name_the_endpoint(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ProviderAuthError) as info:
        openai_compatible("test-model", base_url="http://127.0.0.1:9/v1")
    assert info.value.endpoint == "http://127.0.0.1:9/v1" and info.value.retryable is False

    monkeypatch.setitem(__import__("sys").modules, "anthropic", None)
    with pytest.raises(ProviderDependencyError) as info:
        anthropic("claude-test", base_url="http://127.0.0.1:9", api_key=KEY)
    assert info.value.endpoint == "http://127.0.0.1:9" and info.value.retryable is False
    assert info.value.__context__ is None


# --------------------------------------------------------------------------- nothing chained


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_401_echoing_the_key_chains_no_sdk_exception(server, clock, vendor):
    provider = make(vendor, server, clock)
    server.push(error_body(vendor, f"Incorrect API key provided: {KEY}"), status=401)
    with pytest.raises(ProviderAuthError) as info:
        provider.complete(USER)
    err = info.value
    assert err.__cause__ is None and err.__context__ is None
    rendered = "".join(traceback.format_exception(err))
    assert KEY not in rendered and leaked_fragments(rendered) == []


@pytest.mark.parametrize(
    "script",
    [
        {"status": 400},
        {"status": 429, "headers": {"Retry-After": "0"}},
        {"status": 503},
        {"status": 200, "raw": "not json"},
        {"status": 200, "delay": 2.0},
    ],
    ids=["bad-request", "rate-limit", "unavailable", "bad-json", "timeout"],
)
def test_no_error_kind_carries_a_chained_exception(server, clock, script):
    provider = make("openai", server, clock, max_retries=0, timeout=0.2)
    body = script.get("raw", error_body("openai", f"echo {KEY}"))
    server.push(body, status=script["status"], headers=script.get("headers"), delay=script.get("delay", 0.0))
    with pytest.raises(ProviderError) as info:
        provider.complete(USER)
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert leaked_fragments("".join(traceback.format_exception(info.value))) == []


def test_a_closed_port_error_chains_nothing(clock):
    provider = make("openai", f"http://127.0.0.1:{free_port()}/v1", clock)
    with pytest.raises(ProviderConnectionError) as info:
        provider.complete(USER)
    assert info.value.__cause__ is None and info.value.__context__ is None


# --------------------------------------------------------------------------- logging


def test_each_retried_failure_logs_a_warning_naming_endpoint_status_and_attempt(server, clock, caplog):
    caplog.set_level(logging.WARNING, logger="agentdescent.providers")
    provider = make("openai", server, clock, max_retries=2)
    server.push(error_body("openai", "busy"), status=503)
    server.push(error_body("openai", "slow down"), status=429, headers={"Retry-After": "0"})
    server.push(openai_body("done"))
    assert provider.complete(USER).text == "done"
    retries = [r for r in caplog.records if r.name == "agentdescent.providers"]
    assert [r.levelno for r in retries] == [logging.WARNING, logging.WARNING]
    first, second = (r.getMessage() for r in retries)
    assert server.openai_base_url in first and "HTTP 503" in first and "attempt 1 of 3" in first
    assert "HTTP 429" in second and "attempt 2 of 3" in second


# --------------------------------------------------------------------------- what comes back


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("bad", [-5, 2.5, "lots", 10**15], ids=["negative", "fraction", "string", "absurd"])
def test_implausible_usage_is_estimated_with_one_warning(server, clock, caplog, vendor, bad):
    caplog.set_level(logging.WARNING, logger="agentdescent.providers")
    provider = make(vendor, server, clock)
    body = ok_body(vendor, "abcdefgh")
    body["usage"]["prompt_tokens" if vendor == "openai" else "input_tokens"] = bad
    server.push(body)

    reply = provider.complete(USER)

    estimate = {"prompt_tokens": 4, "completion_tokens": 2}  # ceil(14/4), ceil(8/4)
    assert {k: reply.usage.snapshot()[k] for k in estimate} == estimate
    assert provider.usage.calls == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert endpoint_of(vendor, server) in warnings[0] and repr(bad) in warnings[0]


@pytest.mark.parametrize("vendor", VENDORS)
def test_reply_text_is_sanitised_and_scrubbed_of_the_key(server, clock, vendor):
    provider = make(vendor, server, clock)
    server.push(ok_body(vendor, f"half a pair \ud83d, your key is {KEY}, and a fragment {KEY[4:16]}"))
    text = provider.complete(USER).text
    assert text == "half a pair \ufffd, your key is [redacted], and a fragment [redacted]"
    text.encode("utf-8")  # would raise on a lone surrogate


def test_reply_scrubbing_leaves_ordinary_text_and_placeholder_keys_alone(server, clock):
    ordinary = "Wait... the answer is ***42*** … EMPTY is not a key"
    server.push(openai_body(ordinary))
    assert make("openai", server, clock).complete(USER).text == ordinary
    server.push(openai_body(ordinary))
    assert make("openai", server, clock, api_key="EMPTY").complete(USER).text == ordinary


def test_from_callable_text_is_sanitised():
    provider = from_callable(lambda prompt: "broken \udc00 tail")
    assert provider.complete(USER).text == "broken \ufffd tail"


def test_openai_finish_reason_and_tool_calls_surface(server, clock):
    call = {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": json.dumps({"k": KEY})}}
    server.push(openai_body("cut off", finish_reason="length"))
    server.push(openai_body("", finish_reason="tool_calls", tool_calls=[call]))
    provider = make("openai", server, clock)

    first = provider.complete(USER)
    second = provider.complete(USER)

    assert first.finish_reason == "length" and first.tool_calls == ()
    assert second.finish_reason == "tool_calls"
    (got,) = second.tool_calls
    assert type(got) is dict and got["id"] == "call_1" and got["function"]["name"] == "calc"
    assert json.loads(got["function"]["arguments"]) == {"k": "[redacted]"}  # still valid JSON


def test_anthropic_stop_reason_and_tool_uses_surface(server, clock):
    server.push(anthropic_body("cut", stop_reason="max_tokens"))
    server.push(
        anthropic_body("", stop_reason="tool_use", tool_uses=[{"id": "tu_1", "name": "calc", "input": {"x": 1}}])
    )
    provider = make("anthropic", server, clock)

    first = provider.complete(USER)
    second = provider.complete(USER)

    assert first.finish_reason == "max_tokens" and first.tool_calls == ()
    assert second.finish_reason == "tool_use"
    assert second.tool_calls == ({"type": "tool_use", "id": "tu_1", "name": "calc", "input": {"x": 1}},)
