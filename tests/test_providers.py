"""The provider adapters against a real loopback server speaking the vendors' APIs.

Real sockets, real SDKs (openai 3.x, anthropic 2.x on httpx2), scripted replies. Waits
between retries run on a virtual clock (the adapters' injectable ``sleep``/``clock``),
so the retry tests assert the waits without spending them.
"""

from __future__ import annotations

import logging
import random
import socket
import sys
import threading

import pytest

from agentdescent import ProviderError
from agentdescent._http import parse_retry_after
from agentdescent.agents.llm import Completion, Usage
from agentdescent.clock import Clock
from agentdescent.providers import (
    AnthropicProvider,
    OpenAICompatibleProvider,
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
from agentdescent.providers.redaction import _Redactor
from agentdescent.testing.llmserver import LLMServer, anthropic_body, openai_body

KEY = "sk-TESTKEY-q7Zx9Lp2Wm4Rv8Ty6Nb3Hc5J"
USER = [{"role": "user", "content": "What is 6 * 7?"}]


class VirtualClock(Clock):
    """Virtual time through the clock seam: sleeping advances the clock instantly and is recorded."""

    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


@pytest.fixture
def server():
    with LLMServer() as s:
        yield s


@pytest.fixture
def clock():
    return VirtualClock()


def make_openai(server, clock, **kwargs):
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("seed", 0)
    return openai_compatible(
        "test-model", base_url=server.openai_base_url, clock=clock, **kwargs
    )


def make_anthropic(server, clock, **kwargs):
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("seed", 0)
    return anthropic(
        "claude-test", base_url=server.base_url, clock=clock, **kwargs
    )


def leaked_fragments(text: str, secret: str = KEY) -> list[str]:
    """Every 8-character piece of ``secret`` that appears in ``text``."""
    return sorted({secret[i : i + 8] for i in range(len(secret) - 7) if secret[i : i + 8] in text})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- OpenAI-compatible


def test_openai_text_and_usage_with_cached_tokens(server, clock):
    provider = make_openai(server, clock)
    server.push(openai_body("42", prompt_tokens=120, completion_tokens=3, cached_tokens=100))
    server.push(openai_body("43", prompt_tokens=20, completion_tokens=4))

    first = provider.complete(USER, temperature=0.0, max_tokens=16)
    second = provider.complete(USER)

    assert isinstance(first, Completion)
    assert first.text == "42"
    assert first.usage.snapshot()["prompt_tokens"] == 120
    assert first.usage.completion_tokens == 3
    assert first.usage.cached_tokens == 100
    assert first.usage.calls == 1
    assert second.text == "43" and second.usage.cached_tokens == 0
    run = provider.usage.snapshot()
    assert run["prompt_tokens"] == 140
    assert run["completion_tokens"] == 7
    assert run["cached_tokens"] == 100
    assert run["calls"] == 2

    sent = server.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.body["model"] == "test-model"
    assert sent.body["messages"] == USER
    assert sent.body["temperature"] == 0.0 and sent.body["max_tokens"] == 16
    assert "temperature" not in server.requests[1].body  # None/absent options are not sent
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert provider.retries == 0


def test_openai_model_option_overrides_and_tools_pass_through(server, clock):
    provider = make_openai(server, clock)
    server.push(openai_body())
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]
    provider.complete(USER, model="other-model", tools=tools)
    assert server.requests[0].body["model"] == "other-model"
    assert server.requests[0].body["tools"] == tools


def test_given_usage_meter_is_the_run_meter(server, clock):
    meter = Usage()
    provider = make_openai(server, clock, usage=meter)
    server.push(openai_body(prompt_tokens=7, completion_tokens=1))
    provider.complete(USER)
    assert provider.usage is meter
    assert meter.total_tokens == 8


def test_unknown_option_is_a_type_error_naming_it(server, clock):
    provider = make_openai(server, clock)
    with pytest.raises(TypeError, match="'top_k'"):
        provider.complete(USER, top_k=3)
    assert server.requests == []


def test_bad_messages_are_rejected_before_any_request(server, clock):
    provider = make_openai(server, clock)
    with pytest.raises(TypeError, match="list of message dicts"):
        provider.complete("just a string")
    with pytest.raises(ValueError, match="empty message list"):
        provider.complete([])
    assert server.requests == []


def test_429_with_retry_after_then_success(server, clock):
    provider = make_openai(server, clock)
    server.push({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "0.25"})
    server.push(openai_body("after the wait"))

    reply = provider.complete(USER)

    assert reply.text == "after the wait"
    assert clock.sleeps == [0.25]  # the server's wait, honoured exactly
    assert len(server.requests) == 2
    assert provider.retries == 1
    assert provider.usage.calls == 1  # the failed attempt used no tokens


def test_retry_after_beyond_the_time_bound_gives_up_at_once(server, clock):
    provider = make_openai(server, clock, max_retry_seconds=2.0)
    server.push({"error": {"message": "quota"}}, status=429, headers={"Retry-After": "30"})

    with pytest.raises(ProviderRateLimitError) as info:
        provider.complete(USER)

    err = info.value
    assert err.retry_after == 30.0 and err.status_code == 429 and err.attempts == 1
    assert "max_retry_seconds=2" in str(err)
    assert clock.sleeps == []
    assert len(server.requests) == 1


def test_5xx_burst_beyond_the_retry_bound_is_unavailable(server, clock):
    provider = make_openai(server, clock, max_retries=3, initial_backoff=0.5, max_backoff=8.0)
    for _ in range(4):
        server.push({"error": {"message": "upstream down"}}, status=503)

    with pytest.raises(ProviderUnavailableError) as info:
        provider.complete(USER)

    err = info.value
    assert not isinstance(err, ProviderTimeoutError)
    assert isinstance(err, ProviderError)
    assert err.status_code == 503 and err.attempts == 4
    assert err.model == "test-model" and err.endpoint == server.openai_base_url
    text = str(err)
    assert "test-model" in text and server.openai_base_url in text and "max_retries=3" in text
    assert len(server.requests) == 4
    # Exponential backoff with equal jitter: each wait in [base/2, base], base doubling.
    assert len(clock.sleeps) == 3
    for wait, base in zip(clock.sleeps, (0.5, 1.0, 2.0)):
        assert base / 2 <= wait <= base
    assert provider.failures == 1


def test_total_time_bound_stops_retries(server, clock):
    provider = make_openai(
        server, clock, max_retries=50, initial_backoff=1.0, max_backoff=1.0, max_retry_seconds=3.0
    )
    for _ in range(10):
        server.push({"error": {"message": "busy"}}, status=500)
    with pytest.raises(ProviderUnavailableError, match="max_retry_seconds=3"):
        provider.complete(USER)
    assert sum(clock.sleeps) <= 3.0
    assert len(server.requests) < 10


def test_jitter_is_seeded_and_never_touches_the_global_rng(server):
    def waits(seed):
        clock = VirtualClock()
        provider = make_openai(server, clock, seed=seed, max_retries=3)
        for _ in range(4):
            server.push({}, status=502)
        with pytest.raises(ProviderUnavailableError):
            provider.complete(USER)
        return clock.sleeps

    random.seed(1234)
    state = random.getstate()
    assert waits(7) == waits(7)
    assert waits(7) != waits(8)
    assert random.getstate() == state


def test_timeout_is_retried_then_typed(server, clock):
    provider = make_openai(server, clock, timeout=0.2, max_retries=1)
    server.push(openai_body(), delay=2.0)
    server.push(openai_body("in time"))
    assert provider.complete(USER).text == "in time"  # a timeout is retried

    server.push(openai_body(), delay=2.0)
    server.push(openai_body(), delay=2.0)
    with pytest.raises(ProviderTimeoutError) as info:
        provider.complete(USER)
    assert isinstance(info.value, ProviderUnavailableError)
    assert "timeout" in str(info.value) and "timeout=" in str(info.value)
    assert info.value.attempts == 2


def test_connection_refused_is_a_connection_error(clock):
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    provider = openai_compatible(
        "test-model", base_url=base_url, api_key=KEY, max_retries=2, clock=clock
    )
    with pytest.raises(ProviderUnavailableError, match="Is the server running") as info:
        provider.complete(USER)
    assert isinstance(info.value, ProviderConnectionError)
    assert base_url in str(info.value) and "base_url" in str(info.value)
    assert len(clock.sleeps) == 2


def test_malformed_json_is_a_clear_response_error(server, clock):
    provider = make_openai(server, clock)
    server.push("this is not json {")
    with pytest.raises(ProviderResponseError) as info:
        provider.complete(USER)
    text = str(info.value)
    assert "not a valid response" in text and "base_url" in text and "test-model" in text
    assert "JSONDecodeError" in text and "Expecting value" in text
    assert len(server.requests) == 1  # not retried

    server.push({"unexpected": "shape"})
    with pytest.raises(ProviderResponseError, match="no choices"):
        provider.complete(USER)


def test_401_is_an_auth_error_and_not_retried(server, clock):
    provider = make_openai(server, clock)
    server.push({"error": {"message": "Incorrect API key provided"}}, status=401)
    with pytest.raises(ProviderAuthError) as info:
        provider.complete(USER)
    assert info.value.status_code == 401
    assert "OPENAI_API_KEY" in str(info.value)
    assert len(server.requests) == 1 and clock.sleeps == []


def test_400_is_a_bad_request_with_the_server_message(server, clock):
    provider = make_openai(server, clock)
    server.push({"error": {"message": "model 'nope' does not exist"}}, status=400)
    with pytest.raises(ProviderBadRequestError, match="does not exist") as info:
        provider.complete(USER)
    assert info.value.status_code == 400
    assert len(server.requests) == 1


def test_the_key_never_leaks_into_errors_logs_or_repr(server, clock, caplog):
    caplog.set_level(logging.DEBUG)  # every logger: ours, the SDK's, httpx2, httpcore2
    provider = make_openai(server, clock, max_retries=1)
    failures: list[BaseException] = []
    scripts = [
        # Servers echo keys back: masked, partial, and whole.
        (401, {"error": {"message": f"Incorrect API key provided: {KEY[:10]}***{KEY[-4:]}"}}),
        (403, {"error": {"message": f"key {KEY} is not allowed"}}),
        (400, {"error": {"message": f"bad request from {KEY}"}}),
        (400, {"error": {"message": f"bad request from key ending {KEY[-12:]}"}}),
        (429, {"error": {"message": f"rate limited for {KEY}"}}),
        (503, {"error": {"message": f"down for {KEY[:-3]}"}}),
    ]
    for status, body in scripts:
        server.push(body, status=status, headers={"Retry-After": "0"})
        if status in (429, 503):
            server.push(body, status=status, headers={"Retry-After": "0"})
        with pytest.raises(ProviderError) as info:
            provider.complete(USER)
        failures.append(info.value)
    server.push("not json")
    with pytest.raises(ProviderResponseError) as info:
        provider.complete(USER)
    failures.append(info.value)
    server.push(openai_body())
    provider.complete(USER)

    texts = [repr(provider), str(provider)]
    for err in failures:
        texts += [str(err), repr(err), repr(err.args), repr(vars(err))]
        assert err.__cause__ is None and err.__context__ is None
    for record in caplog.records:
        texts.append(record.getMessage())
        texts.append(repr(record.args))
        if record.exc_info:
            texts.append(logging.Formatter().formatException(record.exc_info))
    texts.append(caplog.text)
    assert any(r.name == "agentdescent.providers" for r in caplog.records)
    for text in texts:
        assert KEY not in text
        assert leaked_fragments(text) == [], text
        assert KEY[-4:] + "." not in text  # the masked echo's tail is gone too


def test_key_from_the_environment(server, clock, monkeypatch):
    env_key = "sk-from-the-environment-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", env_key)
    provider = openai_compatible("test-model", base_url=server.openai_base_url)
    server.push(openai_body())
    provider.complete(USER)
    assert server.requests[0].headers["authorization"] == f"Bearer {env_key}"
    assert env_key not in repr(provider)


def test_missing_key_names_the_environment_variable(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ProviderAuthError, match="OPENAI_API_KEY") as info:
        openai_compatible("test-model", base_url="http://127.0.0.1:9/v1")
    assert "api_key='EMPTY'" in str(info.value)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ProviderAuthError, match="ANTHROPIC_API_KEY"):
        anthropic("claude-test", base_url="http://127.0.0.1:9")


@pytest.mark.parametrize(("factory", "module"), [(openai_compatible, "openai"), (anthropic, "anthropic")])
def test_missing_sdk_names_the_extra(monkeypatch, factory, module):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(ProviderDependencyError) as info:
        factory("some-model", api_key=KEY)
    assert isinstance(info.value, ImportError) and isinstance(info.value, ProviderError)
    assert f'pip install -e ".[{module}]"' in str(info.value)


def test_bad_knobs_are_value_errors():
    with pytest.raises(ValueError, match="max_retries"):
        openai_compatible("m", api_key=KEY, max_retries=-1)
    with pytest.raises(ValueError, match="max_retry_seconds"):
        openai_compatible("m", api_key=KEY, max_retry_seconds=-1)
    with pytest.raises(ValueError, match="max_tokens"):
        anthropic("m", api_key=KEY, max_tokens=0)


def test_concurrent_calls_are_all_metered(server, clock):
    provider = make_openai(server, clock)
    n = 24
    for _ in range(n):
        server.push(openai_body(prompt_tokens=5, completion_tokens=1, cached_tokens=2))
    errors: list[BaseException] = []

    def work():
        try:
            for _ in range(n // 6):
                provider.complete(USER)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert provider.usage.snapshot() == {
        "prompt_tokens": 5 * n,
        "completion_tokens": n,
        "cached_tokens": 2 * n,
        "cache_write_tokens": 0,
        "calls": n,
        "total_tokens": 6 * n,
    }


# --------------------------------------------------------------------------- Anthropic


def test_anthropic_text_usage_and_system_parameter(server, clock):
    provider = make_anthropic(server, clock)
    assert isinstance(provider, AnthropicProvider)
    server.push(
        anthropic_body(
            "Forty-two.",
            input_tokens=10,
            output_tokens=3,
            cache_read_input_tokens=500,
            cache_creation_input_tokens=40,
        )
    )
    messages = [
        {"role": "system", "content": "Be terse."},
        {"role": "system", "content": "Answer in English."},
        *USER,
    ]
    reply = provider.complete(messages, temperature=0.5)

    assert reply.text == "Forty-two."
    snap = reply.usage.snapshot()
    assert snap["prompt_tokens"] == 10 + 500 + 40
    assert snap["cached_tokens"] == 500
    assert snap["cache_write_tokens"] == 40
    assert snap["completion_tokens"] == 3
    assert provider.usage.snapshot()["cache_write_tokens"] == 40

    sent = server.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.body["system"] == "Be terse.\n\nAnswer in English."
    assert sent.body["messages"] == USER  # no system role left in the list
    assert sent.body["max_tokens"] == 1024  # the factory default (the API requires one)
    assert sent.body["temperature"] == 0.5
    assert sent.body["model"] == "claude-test"


def test_anthropic_options_and_tool_conversion(server, clock):
    provider = make_anthropic(server, clock, max_tokens=64)
    server.push(anthropic_body())
    server.push(anthropic_body())
    tools = [
        {
            "type": "function",
            "function": {
                "name": "calc",
                "description": "Evaluate arithmetic.",
                "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
            },
        }
    ]
    provider.complete(USER, tools=tools, model="claude-other")
    provider.complete(USER, max_tokens=8)
    first, second = (r.body for r in server.requests)
    assert first["max_tokens"] == 64 and first["model"] == "claude-other"
    assert first["tools"] == [
        {
            "name": "calc",
            "description": "Evaluate arithmetic.",
            "input_schema": {"type": "object", "properties": {"expr": {"type": "string"}}},
        }
    ]
    assert second["max_tokens"] == 8 and "system" not in second


def test_anthropic_overloaded_and_rate_limited_are_retried(server, clock):
    provider = make_anthropic(server, clock)
    server.push({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, status=529)
    server.push(
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}},
        status=429,
        headers={"retry-after": "1.5"},
    )
    server.push(anthropic_body("finally"))
    assert provider.complete(USER).text == "finally"
    assert len(clock.sleeps) == 2 and clock.sleeps[1] == 1.5
    assert provider.retries == 2


def test_anthropic_errors_are_translated(server, clock):
    provider = make_anthropic(server, clock, max_retries=0)
    server.push(
        {"type": "error", "error": {"type": "authentication_error", "message": f"invalid x-api-key {KEY}"}},
        status=401,
    )
    with pytest.raises(ProviderAuthError) as info:
        provider.complete(USER)
    assert "ANTHROPIC_API_KEY" in str(info.value) and leaked_fragments(str(info.value)) == []

    server.push({"type": "error", "error": {"type": "invalid_request_error", "message": "bad role"}}, status=400)
    with pytest.raises(ProviderBadRequestError, match="bad role"):
        provider.complete(USER)

    server.push("{{{ not json")
    with pytest.raises(ProviderResponseError, match="Anthropic messages API"):
        provider.complete(USER)

    server.push({"type": "error", "error": {"type": "api_error", "message": "boom"}}, status=500)
    with pytest.raises(ProviderUnavailableError, match="claude-test"):
        provider.complete(USER)


def test_anthropic_timeout(server, clock):
    provider = make_anthropic(server, clock, timeout=0.2, max_retries=0)
    server.push(anthropic_body(), delay=2.0)
    with pytest.raises(ProviderTimeoutError, match=server.base_url):
        provider.complete(USER)


def test_anthropic_key_from_environment_and_not_in_logs(server, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    env_key = "sk-ant-environment-key-abcdef0123456789"
    monkeypatch.setenv("ANTHROPIC_API_KEY", env_key)
    provider = anthropic("claude-test", base_url=server.base_url, max_retries=0)
    server.push(anthropic_body())
    provider.complete(USER)
    assert server.requests[0].headers.get("authorization") == f"Bearer {env_key}"
    server.push({"type": "error", "error": {"type": "x", "message": f"no: {env_key}"}}, status=400)
    with pytest.raises(ProviderBadRequestError) as info:
        provider.complete(USER)
    for text in (str(info.value), repr(provider), caplog.text):
        assert leaked_fragments(text, env_key) == []


# --------------------------------------------------------------------------- from_callable


def test_from_callable_joins_contents_and_estimates_usage():
    seen = []

    def echo(prompt: str) -> str:
        seen.append(prompt)
        return "abcde"  # 5 chars -> 2 tokens

    provider = from_callable(echo)
    reply = provider.complete([{"role": "system", "content": "12345678"}, {"role": "user", "content": "xy"}])
    assert seen == ["12345678\n\nxy"]
    assert reply.text == "abcde"
    assert reply.usage.snapshot()["prompt_tokens"] == 3  # ceil(12 / 4)
    assert reply.usage.completion_tokens == 2
    assert provider.usage.calls == 1
    assert "echo" in repr(provider)


def test_from_callable_options():
    got = {}

    def with_kwargs(prompt, **options):
        got.update(options)
        return "ok"

    from_callable(with_kwargs).complete(USER, temperature=0.3, max_tokens=None)
    assert got == {"temperature": 0.3}

    plain = from_callable(lambda prompt: "ok")
    plain.complete(USER, temperature=None)  # None means not given
    with pytest.raises(TypeError, match="'temperature'"):
        plain.complete(USER, temperature=0.3)
    with pytest.raises(TypeError, match="'seed'"):
        plain.complete(USER, seed=1)


def test_from_callable_return_types():
    exact = Usage(100, 10, 50, 1)
    provider = from_callable(lambda prompt: Completion("x", exact, "length", ({"id": "t1"},)))
    reply = provider.complete(USER)
    assert reply.usage.cached_tokens == 50
    assert provider.usage.prompt_tokens == 100
    assert reply.finish_reason == "length" and reply.tool_calls == ({"id": "t1"},)
    with pytest.raises(TypeError, match="returned a int"):
        from_callable(lambda prompt: 3).complete(USER)
    with pytest.raises(TypeError, match="callable"):
        from_callable("not a function")


# --------------------------------------------------------------------------- helpers


def test_redactor_scrubs_whole_partial_and_masked_keys():
    redact = _Redactor(KEY)
    assert redact(f"key {KEY} bad") == "key [redacted] bad"
    assert redact(f"provided: {KEY[:10]}***{KEY[-4:]}.") == "provided: [redacted]"
    assert redact(f"ending {KEY[5:20]} bad") == "ending [redacted] bad"
    assert redact("model 'gpt-x' not found") == "model 'gpt-x' not found"
    assert _Redactor(None)("plain text") == "plain text"


def test_a_reply_echoing_the_key_masked_is_scrubbed_and_other_ellipses_stay(server, clock):
    provider = make_openai(server, clock)
    echo = f"Use the key {KEY[:6]}***{KEY[-4:]}, as configured."
    server.push(openai_body(echo))
    text = provider.complete(USER).text
    assert text == "Use the key [redacted], as configured."
    assert KEY[:6] not in text and KEY[-4:] not in text
    redact = _Redactor(KEY)
    assert KEY[:8] not in redact.reply(f"({KEY[:8]}...)")  # a fragment of 8: the whole word goes
    for ordinary in ("Wait... the answer is 42.", "Thinking… done", "*** note ***", "sk-abc***wxyz is another key",
                     f"{KEY[:3]}... is a common prefix"):
        assert redact.reply(ordinary) == ordinary


def test_parse_retry_after_forms():
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "-3"}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after(None) is None
    past = parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert past == 0.0


def test_provider_classes_satisfy_the_protocol(server, clock):
    from agentdescent.agents.llm import Provider

    assert isinstance(make_openai(server, clock), Provider)
    assert isinstance(make_openai(server, clock), OpenAICompatibleProvider)
    assert isinstance(make_anthropic(server, clock), Provider)
    assert isinstance(from_callable(lambda p: p), Provider)


# --------------------------------------------------------------------------- per-call options


@pytest.mark.parametrize("model", ["o3-mini", "o1", "gpt-5", "gpt-5-mini", "openai/o4-mini"])
def test_reasoning_model_names_get_max_completion_tokens(server, clock, model):
    provider = make_openai(server, clock)
    server.push(openai_body("ok"))
    provider.complete(USER, model=model, max_tokens=64)
    body = server.requests[0].body
    assert body["max_completion_tokens"] == 64 and "max_tokens" not in body
    assert provider.limit_param(model) == "max_completion_tokens"


@pytest.mark.parametrize("model", ["gpt-4o-mini", "smollm2-135m", "deepseek-chat", "olmo-2"])
def test_other_model_names_keep_max_tokens(server, clock, model):
    provider = make_openai(server, clock)
    server.push(openai_body("ok"))
    provider.complete(USER, model=model, max_tokens=64)
    body = server.requests[0].body
    assert body["max_tokens"] == 64 and "max_completion_tokens" not in body


def test_token_limit_param_overrides_the_name_rule(server, clock):
    forced = make_openai(server, clock, token_limit_param="max_completion_tokens")
    plain = make_openai(server, clock, token_limit_param="max_tokens")
    server.push(openai_body("ok"))
    server.push(openai_body("ok"))
    forced.complete(USER, max_tokens=10)               # test-model: not a reasoning name
    plain.complete(USER, model="o3-mini", max_tokens=10)
    assert server.requests[0].body["max_completion_tokens"] == 10
    assert "max_tokens" not in server.requests[0].body
    assert server.requests[1].body["max_tokens"] == 10
    with pytest.raises(ValueError, match="token_limit_param"):
        make_openai(server, clock, token_limit_param="max_output_tokens")


def test_a_max_completion_tokens_complaint_names_the_knob(server, clock):
    provider = make_openai(server, clock)
    server.push({"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with "
                                      "this model. Use 'max_completion_tokens' instead."}}, status=400)
    with pytest.raises(ProviderBadRequestError, match="token_limit_param='max_completion_tokens'"):
        provider.complete(USER, max_tokens=10)


@pytest.mark.parametrize("bad", [0, -1])
def test_a_per_call_limit_below_one_is_refused_before_sending(server, clock, bad):
    # llama.cpp servers read max_tokens=0 as "no limit"; it must never reach the wire
    provider = make_openai(server, clock)
    with pytest.raises(ValueError, match="per-call limit"):
        provider.complete(USER, max_tokens=bad)
    with pytest.raises(TypeError, match="per-call limit"):
        provider.complete(USER, max_tokens=12.5)
    with pytest.raises(ValueError, match="temperature"):
        provider.complete(USER, temperature=-0.1)
    assert server.requests == []


def test_a_404_from_a_base_url_without_v1_says_to_add_it(server, clock):
    provider = openai_compatible("test-model", base_url=server.base_url, api_key=KEY,
                                 clock=clock)
    server.push({"detail": "Not Found"}, status=404)
    with pytest.raises(ProviderBadRequestError) as info:
        provider.complete(USER)
    message = str(info.value)
    assert "HTTP 404" in message and "has no /v1" in message
    assert f"base_url='{server.base_url}/v1'" in message
    assert server.requests[0].path == "/chat/completions"


def test_a_404_with_v1_points_at_the_model_name(server, clock):
    provider = make_openai(server, clock)
    server.push({"error": {"message": "model 'nope' not found"}}, status=404)
    with pytest.raises(ProviderBadRequestError, match="check the model name") as info:
        provider.complete(USER)
    assert "/v1'" not in str(info.value)


def test_anthropic_404_from_a_base_url_with_v1_says_to_drop_it(server, clock):
    provider = anthropic("claude-test", base_url=server.base_url + "/v1", api_key=KEY,
                         clock=clock)
    server.push({"type": "error", "error": {"type": "not_found_error", "message": "Not found"}}, status=404)
    with pytest.raises(ProviderBadRequestError, match="drop it") as info:
        provider.complete(USER)
    assert f"base_url='{server.base_url}'" in str(info.value)


def test_anthropic_temperature_is_a_top_level_request_field(server, clock):
    provider = make_anthropic(server, clock)
    server.push(anthropic_body("ok"))
    server.push(anthropic_body("ok"))
    provider.complete(USER, temperature=0.3, max_tokens=20)
    provider.complete(USER)
    body = server.requests[0].body
    assert body["temperature"] == 0.3 and body["max_tokens"] == 20
    assert "extra_body" not in body and all(not isinstance(v, dict) or "temperature" not in v
                                            for v in body.values())
    assert "temperature" not in server.requests[1].body
    with pytest.raises(ValueError, match="from 0 to 1"):
        provider.complete(USER, temperature=1.5)
    assert len(server.requests) == 2


def test_anthropic_temperature_uses_the_sdk_argument_when_there_is_one():
    seen: list[dict] = []

    class Messages:
        def create(self, *, model, messages, max_tokens, temperature=None, system=None,
                   tools=None, extra_body=None):
            seen.append({"temperature": temperature, "extra_body": extra_body})
            raise RuntimeError("stop here")  # not an SDK error: surfaces unchanged

    class Client:
        messages = Messages()
        base_url = "http://127.0.0.1:1"

    sdk = type("SDK", (), {})
    provider = AnthropicProvider(max_tokens=16, sdk=sdk, client=Client(), model="m",
                                 endpoint="http://127.0.0.1:1", key="k" * 20, max_retries=0,
                                 max_retry_seconds=1.0, initial_backoff=0.0, max_backoff=0.0,
                                 usage=None, seed=0, clock=VirtualClock())
    with pytest.raises(RuntimeError, match="stop here"):
        provider._send(USER, "m", {"temperature": 0.2})
    assert seen == [{"temperature": 0.2, "extra_body": None}]
