"""The Anthropic messages adapter: `anthropic` and its provider.

This module owns what is particular to the Anthropic API (the system prompt as a
top-level field, the required per-call limit, temperature's range, prompt-cache reads
and writes in the usage); the retry loop and the error family are
`agentdescent.providers.sdk`'s.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Mapping
from typing import Any

from ..clock import Clock
from ..errors import InvalidArgument
from ..usage import Usage
from .sdk import Reply, SDKProvider, build, takes_keyword

__all__ = ["DEFAULT_ANTHROPIC_MAX_TOKENS", "AnthropicProvider", "anthropic"]

DEFAULT_ANTHROPIC_MAX_TOKENS = 1024
_ANTHROPIC_DEFAULT_ENDPOINT = "https://api.anthropic.com"


class AnthropicProvider(SDKProvider):
    """A `Provider` for the Anthropic messages API.

    Build it with `anthropic`. ``system`` messages in the list are moved to the
    API's ``system`` parameter; OpenAI-style function tools are converted to
    Anthropic's tool shape. Thread-safe.

    Attributes:
        model: the default model (``complete(model=...)`` overrides it per call).
        endpoint: the base URL calls go to (no credentials).
        max_tokens: the reply cap used when a call does not pass ``max_tokens``
            (the messages API requires one).
        usage: the run meter every call records into.
        retries: retries made so far (all calls); failures: calls that raised.
    """

    _kind = "anthropic"
    _api = "the Anthropic messages API"
    _key_env = "ANTHROPIC_API_KEY"

    def __init__(self, *, max_tokens: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidArgument(
                f"anthropic(max_tokens={max_tokens!r}): the default per-call limit on a reply's "
                "length (the API requires one); use a positive int"
            )
        self.max_tokens = max_tokens
        self._typed_temperature = takes_keyword(self._client.messages.create, "temperature")

    def _check(self, opts: Mapping[str, Any]) -> None:
        temperature = opts.get("temperature")
        if temperature is not None and temperature > 1:
            raise InvalidArgument(
                f"AnthropicProvider.complete(temperature={temperature!r}): the messages API "
                "takes a temperature from 0 to 1"
            )

    def _bad_request_hint(self, status: int | None, detail: str) -> str | None:
        if status == 404 and urllib.parse.urlsplit(self.endpoint).path.rstrip("/").endswith("/v1"):
            return (
                f"the base_url ends in /v1 ({self.endpoint}): the Anthropic SDK adds /v1 "
                f"itself, so drop it (base_url='{self.endpoint[:-3]}'); else check the model name"
            )
        return None

    @staticmethod
    def _tool(tool: Any) -> Any:
        if isinstance(tool, Mapping) and tool.get("type") == "function" and "function" in tool:
            fn = tool["function"]
            converted = {
                "name": fn["name"],
                "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
            }
            if fn.get("description"):
                converted["description"] = fn["description"]
            return converted
        return tool

    def _send(self, messages: list[dict[str, Any]], model: str, opts: dict[str, Any]) -> Any:
        system_parts = [m.get("content") for m in messages if m.get("role") == "system"]
        rest = [m for m in messages if m.get("role") != "system"]
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": rest,
            "max_tokens": int(opts.get("max_tokens", self.max_tokens)),
        }
        if system_parts:
            if all(isinstance(p, str) for p in system_parts):
                kwargs["system"] = "\n\n".join(p for p in system_parts if p)
            else:
                blocks: list[Any] = []
                for part in system_parts:
                    if isinstance(part, str):
                        blocks.append({"type": "text", "text": part})
                    else:
                        blocks.extend(part or [])
                kwargs["system"] = blocks
        if "temperature" in opts:
            temperature = opts["temperature"]
            if self._typed_temperature:
                kwargs["temperature"] = temperature
            else:
                # This SDK's ``create`` has no ``temperature`` argument; its extra body is
                # merged into the top level of the JSON request, where the messages API
                # reads ``temperature`` (tests check the wire).
                kwargs["extra_body"] = {"temperature": temperature}
        if "tools" in opts:
            kwargs["tools"] = [self._tool(t) for t in opts["tools"]]
        return self._client.messages.create(**kwargs)

    def _read(self, response: Any, model: str) -> Reply:
        content = getattr(response, "content", None)
        if not isinstance(content, list):
            shape = type(content).__name__ if hasattr(response, "content") else type(response).__name__
            raise self._response_error(model, f"expected a message with a content list, got {shape}")
        text = "".join(
            block.text
            for block in content
            if getattr(block, "type", None) == "text" and isinstance(getattr(block, "text", None), str)
        )
        calls = tuple(
            self._tool_call(model, block) for block in content if getattr(block, "type", None) == "tool_use"
        )
        stop = getattr(response, "stop_reason", None)
        reply = Reply(text, None, True, stop if isinstance(stop, str) else None, calls)
        raw = getattr(response, "usage", None)
        if raw is None or getattr(raw, "input_tokens", None) is None:
            return reply
        counts = self._usage(model, {
            "input_tokens": raw.input_tokens,
            "output_tokens": getattr(raw, "output_tokens", None),
            "cache_read_input_tokens": getattr(raw, "cache_read_input_tokens", None),
            "cache_creation_input_tokens": getattr(raw, "cache_creation_input_tokens", None),
        })
        if counts is None:
            return dataclasses.replace(reply, usage_missing=False)
        read = counts["cache_read_input_tokens"]
        write = counts["cache_creation_input_tokens"]
        # Anthropic's input_tokens excludes both cache parts; Usage.prompt_tokens is
        # everything the prompt cost, so the three are summed.
        usage = Usage(
            counts["input_tokens"] + read + write,
            counts["output_tokens"],
            read,
            1,
            cache_write_tokens=write,
        )
        return dataclasses.replace(reply, usage=usage, usage_missing=False)


def anthropic(
    model: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    max_tokens: int = DEFAULT_ANTHROPIC_MAX_TOKENS,
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
) -> AnthropicProvider:
    """A provider for the Anthropic messages API.

    Built on the official ``anthropic`` SDK with its retries switched off (the retry
    policy is this package's). Prompt-cache reads are counted as cached prompt tokens;
    cache writes are kept apart in ``Usage.cache_write_tokens`` because they are billed
    above the normal input rate, not below it.

    Args:
        model: the model name (``"claude-sonnet-4-5"``...).
        base_url: the API root without ``/v1`` (e.g. ``"http://127.0.0.1:8080"``);
            ``None`` means Anthropic (or ``ANTHROPIC_BASE_URL``).
        api_key: the key; ``None`` reads ``ANTHROPIC_API_KEY``.
        max_tokens: the per-call reply limit when a call does not pass ``max_tokens``
            (the API requires one).
        timeout: seconds per HTTP attempt.
        max_retries: retries after the first attempt (429, 5xx/529, timeouts, dropped
            connections only). An endpoint that cannot be reached at all gets at most 2
            quick retries, then `ProviderConnectionError`.
        max_retry_seconds: bound on the time one call spends retrying (a call lasts
            at most this plus one attempt's ``timeout``).
        initial_backoff: the first backoff in seconds (doubles, capped, jittered).
        max_backoff: the cap on one backoff wait.
        usage: the run meter to record into; a new one if ``None``.
        default_headers: extra headers for every request (beta flags...).
        http_client: an ``httpx2.Client`` for the SDK.
        seed: seed of the provider's own jitter RNG.
        clock: the clock backoff waits and the retry time bound go through (None: real
            time; `agentdescent.testing.ManualClock` in tests).

    Returns:
        An `AnthropicProvider`.

    Raises:
        ProviderDependencyError: the ``anthropic`` SDK is not installed.
        ProviderAuthError: no key given and ``ANTHROPIC_API_KEY`` is unset.
        InvalidArgument: a retry knob or ``max_tokens`` is out of range.
    """
    return build(
        AnthropicProvider, sdk_name="anthropic", factory="anthropic", key_env="ANTHROPIC_API_KEY", base_env="ANTHROPIC_BASE_URL",
        default_endpoint=_ANTHROPIC_DEFAULT_ENDPOINT, client_class="Anthropic", model=model, base_url=base_url,
        api_key=api_key, timeout=timeout, max_retries=max_retries, max_retry_seconds=max_retry_seconds,
        initial_backoff=initial_backoff, max_backoff=max_backoff, usage=usage,
        default_headers=default_headers, http_client=http_client, seed=seed, clock=clock,
        max_tokens=max_tokens,
    )

