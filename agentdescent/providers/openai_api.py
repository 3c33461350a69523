"""The OpenAI-compatible chat-completions adapter: `openai_compatible` and its provider.

OpenAI itself, DeepSeek, GLM, vLLM, llama.cpp's server and most gateways speak this API,
so one adapter covers them. This module owns what is particular to it (the request, the
per-call limit's field name for reasoning models, a 404's ``/v1`` hint, reading the
reply and its usage); the retry loop and the error family are `agentdescent.providers.sdk`'s.
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from ..clock import Clock
from ..errors import InvalidArgument
from ..usage import Usage
from .sdk import Reply, SDKProvider, build

__all__ = ["TOKEN_LIMIT_PARAMS", "OpenAICompatibleProvider", "openai_compatible"]

_OPENAI_DEFAULT_ENDPOINT = "https://api.openai.com/v1"
#: The request fields an OpenAI-compatible per-call limit can be sent as.
TOKEN_LIMIT_PARAMS = ("max_tokens", "max_completion_tokens")
#: OpenAI reasoning models (o1, o3-mini, o4-mini, gpt-5...) reject ``max_tokens`` and
#: want ``max_completion_tokens``; other servers (llama-cpp-python, for one) ignore
#: ``max_completion_tokens`` silently, so it is sent only for these names by default.
_REASONING_MODEL = re.compile(r"^(?:[\w.-]+/)?(?:o\d|gpt-5)", re.IGNORECASE)
#: A version segment in an API root: /v1, /v4, /v1beta...
_VERSION_SEGMENT = re.compile(r"/v\d+[a-z0-9]*(?:/|$)", re.IGNORECASE)



class OpenAICompatibleProvider(SDKProvider):
    """A `Provider` for any OpenAI-compatible chat endpoint.

    Build it with `openai_compatible`. Thread-safe: one SDK client (a pooled HTTP
    client) serves every worker thread.

    Attributes:
        model: the default model (``complete(model=...)`` overrides it per call).
        endpoint: the base URL calls go to (no credentials).
        usage: the run meter every call records into.
        retries: retries made so far (all calls); failures: calls that raised.
    """

    _kind = "openai-compatible"
    _api = "an OpenAI-compatible chat-completions API"
    _key_env = "OPENAI_API_KEY"

    def __init__(self, *, token_limit_param: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if token_limit_param not in (None, *TOKEN_LIMIT_PARAMS):
            raise InvalidArgument(
                f"openai_compatible(token_limit_param={token_limit_param!r}): use "
                "'max_tokens', 'max_completion_tokens', or None (max_completion_tokens for "
                "OpenAI reasoning model names such as o3-mini or gpt-5, max_tokens otherwise)"
            )
        self.token_limit_param = token_limit_param

    def limit_param(self, model: str) -> str:
        """The request field the per-call ``max_tokens`` option is sent as, for ``model``."""
        if self.token_limit_param is not None:
            return self.token_limit_param
        return "max_completion_tokens" if _REASONING_MODEL.match(model) else "max_tokens"

    def _send(self, messages: list[dict[str, Any]], model: str, opts: dict[str, Any]) -> Any:
        if "max_tokens" in opts:
            opts = dict(opts)
            opts[self.limit_param(model)] = opts.pop("max_tokens")
        return self._client.chat.completions.create(model=model, messages=messages, **opts)

    def _bad_request_hint(self, status: int | None, detail: str) -> str | None:
        if "max_completion_tokens" in detail:
            return (
                "this model wants the per-call limit as max_completion_tokens: build the "
                "provider with openai_compatible(..., token_limit_param='max_completion_tokens')"
            )
        if status == 404:
            path = urllib.parse.urlsplit(self.endpoint).path
            if not _VERSION_SEGMENT.search(path):
                return (
                    f"the base_url has no /v1 ({self.endpoint}): OpenAI-compatible servers "
                    f"serve the API under /v1, so try base_url='{self.endpoint}/v1'; else "
                    "check the model name"
                )
            return f"check the model name and that base_url ({self.endpoint}) is the API root"
        return None

    def _read(self, response: Any, model: str) -> Reply:
        choices = getattr(response, "choices", None)
        if not choices:
            shape = "no choices" if hasattr(response, "choices") else type(response).__name__
            raise self._response_error(model, f"expected a chat completion, got {shape}")
        choice = choices[0]
        message = getattr(choice, "message", None)
        if message is None:
            raise self._response_error(model, "the first choice has no message")
        text = getattr(message, "content", None) or ""
        if not isinstance(text, str):
            raise self._response_error(model, f"message content is a {type(text).__name__}")
        finish = getattr(choice, "finish_reason", None)
        calls = tuple(self._tool_call(model, c) for c in getattr(message, "tool_calls", None) or ())
        reply = Reply(text, None, True, finish if isinstance(finish, str) else None, calls)
        raw = getattr(response, "usage", None)
        if raw is None or getattr(raw, "prompt_tokens", None) is None:
            return reply
        details = getattr(raw, "prompt_tokens_details", None)
        counts = self._usage(model, {
            "prompt_tokens": raw.prompt_tokens,
            "completion_tokens": getattr(raw, "completion_tokens", None),
            "cached_tokens": getattr(details, "cached_tokens", None),
            "cache_write_tokens": getattr(details, "cache_write_tokens", None),
        })
        if counts is None:
            return dataclasses.replace(reply, usage_missing=False)
        usage = Usage(
            counts["prompt_tokens"],
            counts["completion_tokens"],
            counts["cached_tokens"],
            1,
            cache_write_tokens=counts["cache_write_tokens"],
        )
        return dataclasses.replace(reply, usage=usage, usage_missing=False)



def openai_compatible(
    model: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout: float = 60.0,
    max_retries: int = 4,
    max_retry_seconds: float = 60.0,
    initial_backoff: float = 0.5,
    max_backoff: float = 8.0,
    usage: Usage | None = None,
    default_headers: Mapping[str, str] | None = None,
    http_client: Any = None,
    seed: int | None = None,
    clock: Clock | None = None,
    token_limit_param: str | None = None,
) -> OpenAICompatibleProvider:
    """A provider for any OpenAI-compatible chat-completions endpoint.

    OpenAI itself, DeepSeek, GLM, vLLM, llama.cpp's server and most gateways speak this
    API, so one adapter covers them: point ``base_url`` at the server. The official
    ``openai`` SDK does the HTTP; its own retries are switched off so that the retry
    policy (and its bounds) is this package's, the same for every vendor.

    Args:
        model: the model name the endpoint knows (``"gpt-4o-mini"``, ``"deepseek-chat"``...).
        base_url: the API root including ``/v1`` (e.g. ``"http://127.0.0.1:8000/v1"``);
            ``None`` means OpenAI (or ``OPENAI_BASE_URL``). A 404 from a root without a
            version segment says to add ``/v1``.
        api_key: the key; ``None`` reads ``OPENAI_API_KEY``. A local server that needs
            no key still wants a value: pass ``api_key="EMPTY"``.
        timeout: seconds per HTTP attempt.
        max_retries: retries after the first attempt (429, 5xx, timeouts, dropped
            connections only). An endpoint that cannot be reached at all (refused,
            unknown host) gets at most 2 quick retries, then `ProviderConnectionError`.
        max_retry_seconds: bound on the time one call spends retrying: a wait
            (``Retry-After`` included) that would end past it ends the call instead, so
            a call lasts at most this plus one attempt's ``timeout``.
        initial_backoff: the first backoff in seconds; it doubles per retry, is capped
            at ``max_backoff`` and jittered to between 50% and 100%.
        max_backoff: the cap on one backoff wait.
        usage: the run meter to record into; a new `Usage`
            if ``None``.
        default_headers: extra headers for every request (gateway routing...).
        http_client: an ``httpx2.Client`` for the SDK (proxies, ``MockTransport``).
        seed: seed of the provider's own jitter RNG (the global RNG is never used).
        clock: the clock backoff waits and the retry time bound go through (None: real
            time; `agentdescent.testing.ManualClock` in tests).
        token_limit_param: the request field the per-call ``max_tokens`` option is sent
            as: ``"max_tokens"`` or ``"max_completion_tokens"`` (what OpenAI's reasoning
            models require). ``None`` (the default) picks ``max_completion_tokens`` for
            OpenAI reasoning model names (``o1``, ``o3-mini``, ``o4-mini``, ``gpt-5``...,
            with or without a ``vendor/`` prefix) and ``max_tokens`` for every other name,
            because many compatible servers ignore ``max_completion_tokens`` silently.

    Returns:
        An `OpenAICompatibleProvider`.

    Raises:
        ProviderDependencyError: the ``openai`` SDK is not installed.
        ProviderAuthError: no key given and ``OPENAI_API_KEY`` is unset.
        InvalidArgument: a retry knob is out of range.
    """
    return build(
        OpenAICompatibleProvider, sdk_name="openai", factory="openai_compatible", key_env="OPENAI_API_KEY", base_env="OPENAI_BASE_URL",
        default_endpoint=_OPENAI_DEFAULT_ENDPOINT, client_class="OpenAI", model=model, base_url=base_url,
        api_key=api_key, timeout=timeout, max_retries=max_retries, max_retry_seconds=max_retry_seconds,
        initial_backoff=initial_backoff, max_backoff=max_backoff, usage=usage,
        default_headers=default_headers, http_client=http_client, seed=seed, clock=clock,
        token_limit_param=token_limit_param,
    )

