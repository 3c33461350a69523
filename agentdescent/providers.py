"""Provider adapters: OpenAI-compatible and Anthropic chat APIs, and plain callables.

This module owns the boundary between the package and a model vendor: building the
request from OpenAI-style messages, retrying transient failures (429, 5xx, timeouts,
dropped connections) with jittered exponential backoff bounded in count and in total
time, giving up quickly on an endpoint that cannot be reached at all, translating every
SDK exception into the `ProviderError` family (each error says through ``retryable``
whether a later call can help; the engines do not retry on top of these retries), and
mapping the vendor's reply into a `Completion`: the text (sanitised and scrubbed of the
key), why generation stopped, the tool calls, and the token accounting (cached prompt
tokens included) as `Usage`.

It must not import a vendor SDK at module import time (the SDKs are optional extras,
loaded inside the factories), must not let an SDK exception escape ``complete`` or ride
along on a raised error (``__cause__`` and ``__context__`` are both None: an SDK
exception holds the request and the response body, where a key can sit), and must never
put an API key into an exception, a log record, a reply or a ``repr``: a key lives only
inside the SDK client and the redactor, never in a public attribute.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import logging
import os
import random
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ._http import parse_retry_after
from .model import Completion, Usage, estimate_tokens
from .types import ProviderError, sanitize_text

__all__ = [
    "PROVIDER_OPTIONS",
    "TOKEN_LIMIT_PARAMS",
    "AnthropicProvider",
    "CallableProvider",
    "OpenAICompatibleProvider",
    "ProviderAuthError",
    "ProviderBadRequestError",
    "ProviderConnectionError",
    "ProviderDependencyError",
    "ProviderRateLimitError",
    "ProviderResponseError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "anthropic",
    "check_options",
    "estimate_tokens",
    "from_callable",
    "messages_to_prompt",
    "openai_compatible",
]

log = logging.getLogger("agentdescent.providers")

#: The options every provider's ``complete`` accepts (SPEC §8). Anything else is a
#: ``TypeError`` naming it: an option silently dropped would be a knob that does nothing.
PROVIDER_OPTIONS = frozenset({"model", "tools", "max_tokens", "temperature"})

DEFAULT_ANTHROPIC_MAX_TOKENS = 1024
_OPENAI_DEFAULT_ENDPOINT = "https://api.openai.com/v1"
_ANTHROPIC_DEFAULT_ENDPOINT = "https://api.anthropic.com"
_SERVER_MESSAGE_LIMIT = 300

#: Retries after a failure to open a connection at all (refused, unknown host, unreachable
#: network): enough to ride out a server restart, few enough that a wrong ``base_url``
#: fails in well under a second instead of after the full retry budget.
_CONNECT_RETRIES = 2
#: The first wait after such a failure (it doubles, and is jittered like every backoff).
_CONNECT_BACKOFF = 0.25
#: More tokens than any one call can use; a reported count above it is a server bug.
_MAX_REPORTED_TOKENS = 1_000_000_000

#: The request fields an OpenAI-compatible per-call limit can be sent as.
TOKEN_LIMIT_PARAMS = ("max_tokens", "max_completion_tokens")
#: OpenAI reasoning models (o1, o3-mini, o4-mini, gpt-5...) reject ``max_tokens`` and
#: want ``max_completion_tokens``; other servers (llama-cpp-python, for one) ignore
#: ``max_completion_tokens`` silently, so it is sent only for these names by default.
_REASONING_MODEL = re.compile(r"^(?:[\w.-]+/)?(?:o\d|gpt-5)", re.IGNORECASE)
#: A version segment in an API root: /v1, /v4, /v1beta...
_VERSION_SEGMENT = re.compile(r"/v\d+[a-z0-9]*(?:/|$)", re.IGNORECASE)


# --------------------------------------------------------------------------- errors


class _ProviderFailure(ProviderError):
    """Shared fields of the provider error family (private: catch the public classes).

    Attributes:
        retryable: whether a later call can succeed (set per class; see `ProviderError`).
        model: the model the failed call asked for.
        endpoint: the base URL the call went to (credentials and query stripped).
        status_code: the HTTP status of the last response, when there was one.
        attempts: how many requests were sent before giving up.
        retry_after: seconds the server asked to wait (429/503), when it said.
    """

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        endpoint: str | None = None,
        status_code: int | None = None,
        attempts: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.model = model
        self.endpoint: str | None = endpoint
        self.status_code = status_code
        self.attempts = attempts
        self.retry_after = retry_after


class ProviderAuthError(_ProviderFailure):
    """The endpoint rejected the credentials (HTTP 401/403), or no key was configured.

    Never retried (``retryable`` is False): a wrong key does not become right by waiting.
    """

    retryable = False


class ProviderRateLimitError(_ProviderFailure):
    """HTTP 429 persisted through every retry (or asked for a wait beyond the time bound).

    ``retryable`` is True: the limit lifts with time.
    """

    retryable = True


class ProviderBadRequestError(_ProviderFailure):
    """The endpoint rejected the request itself (HTTP 400/404/413/422...): not retried.

    ``retryable`` is False: resending the same request gets the same answer.
    """

    retryable = False


class ProviderUnavailableError(_ProviderFailure):
    """5xx/408 responses, timeouts or dropped connections persisted through every retry.

    ``retryable`` is True: the endpoint answered (or was reached) and may recover. See
    `ProviderConnectionError` for an endpoint that could not be reached at all.
    """

    retryable = True


class ProviderTimeoutError(ProviderUnavailableError):
    """The last attempt timed out (a `ProviderUnavailableError`, so catch either).

    ``retryable`` is True.
    """

    retryable = True


class ProviderConnectionError(ProviderUnavailableError):
    """No connection could be opened: refused, unknown host or unreachable network.

    The adapter tries at most two more times with short waits (a server that is
    restarting gets a moment), then raises this. ``retryable`` is False: a server that is
    not running, or a wrong ``base_url``, does not fix itself, so the engines stop at once
    instead of spending the run on it. Still a `ProviderUnavailableError` for code that
    catches that.
    """

    retryable = False


class ProviderResponseError(_ProviderFailure):
    """The endpoint answered 2xx with a body that is not a valid reply (bad JSON, no choices).

    ``retryable`` is False: the endpoint is not speaking the expected API.
    """

    retryable = False


class ProviderDependencyError(ProviderError, ImportError):
    """A provider's SDK (an optional extra) is not installed.

    Also an `ImportError`, so code that guards optional imports the usual way
    catches it. ``retryable`` is False.
    """

    retryable = False


# --------------------------------------------------------------------------- helpers


def check_options(options: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """Validate ``complete`` options and drop the ones set to ``None``.

    A ``None`` value means "not given" (so callers can pass their own defaults through
    unconditionally); any name outside `PROVIDER_OPTIONS` is a mistake worth an
    error rather than a silently ignored knob.

    Args:
        options: the keyword arguments ``complete`` received.
        owner: the provider's class name, for the error text.

    Returns:
        The options that carry a value.

    Raises:
        TypeError: an option name is not one of ``model``, ``tools``, ``max_tokens``,
            ``temperature``; ``max_tokens`` is not an int or ``temperature`` not a number.
        ValueError: ``max_tokens`` < 1 (a server may read 0 as "no limit") or
            ``temperature`` < 0.
    """
    unknown = sorted(set(options) - PROVIDER_OPTIONS)
    if unknown:
        raise TypeError(
            f"{owner}.complete() got unknown option(s) {', '.join(map(repr, unknown))}; "
            f"the options are {', '.join(sorted(PROVIDER_OPTIONS))}"
        )
    given = {k: v for k, v in options.items() if v is not None}
    limit = given.get("max_tokens")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(
                f"{owner}.complete(max_tokens={limit!r}): max_tokens is the per-call limit on "
                "the reply's length in tokens; use an int > 0"
            )
        if limit < 1:
            # llama.cpp servers read 0 (and negatives) as "no limit": never send one
            raise ValueError(
                f"{owner}.complete(max_tokens={limit!r}): max_tokens is the per-call limit on "
                "the reply's length in tokens; use an int > 0 (or None for the default)"
            )
    temperature = given.get("temperature")
    if temperature is not None:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise TypeError(f"{owner}.complete(temperature={temperature!r}): use a number >= 0")
        if not 0 <= temperature < float("inf"):
            raise ValueError(f"{owner}.complete(temperature={temperature!r}): use a number >= 0")
    return given


def _content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a block list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Iterable) and not isinstance(content, (bytes, Mapping)):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "\n".join(parts)
    return str(content)


def messages_to_prompt(messages: Sequence[Mapping[str, Any]]) -> str:
    """Join the messages' contents into one prompt string (blank line between messages).

    Used by `from_callable` and by the offline token estimate.
    """
    return "\n\n".join(t for t in (_content_text(m.get("content")) for m in messages) if t)


def _check_messages(messages: Any, owner: str) -> list[dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(
            f"{owner}.complete() takes a list of message dicts like "
            f"[{{'role': 'user', 'content': '...'}}], got {type(messages).__name__}"
        )
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or "role" not in message:
            raise TypeError(
                f"{owner}.complete(): message {i} must be a mapping with 'role' and "
                f"'content', got {message!r:.80}"
            )
        out.append(dict(message))
    if not out:
        raise ValueError(f"{owner}.complete() got an empty message list; send at least one message")
    return out


def _display_endpoint(url: str) -> str:
    """The endpoint as it may appear in errors and logs: no userinfo, query or fragment."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable endpoint>"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


class _Redactor:
    """Removes a secret, any 8+ character fragment of it, and masked key echoes from text.

    Servers echo keys back in error bodies (OpenAI: ``"Incorrect API key provided:
    sk-abc***wxyz"``), so text that came from the wire is scrubbed word by word before it
    goes into an exception or a log record. A model's reply can echo the key too (it may
    have been shown a config, a log, an environment); `reply` scrubs that text with the
    rules that cannot corrupt an ordinary reply.
    """

    _MASKED = re.compile(r"\S*(?:\*{3,}|\.{3,}|…)\S*")
    _WORD = re.compile(r"\S+")
    _GRAM = 8

    def __init__(self, secret: str | None) -> None:
        secret = secret or ""
        n = self._GRAM if len(secret) >= self._GRAM else len(secret)
        self._secret = secret
        self._grams = {secret[i : i + n] for i in range(len(secret) - n + 1)} if n else set()
        self._n = n

    def _leaks(self, word: str) -> bool:
        if not self._n or len(word) < self._n:
            return False
        return any(word[i : i + self._n] in self._grams for i in range(len(word) - self._n + 1))

    def _fragments(self, text: str) -> str:
        return self._WORD.sub(lambda m: "[redacted]" if self._leaks(m.group(0)) else m.group(0), text)

    def __call__(self, text: str) -> str:
        """Scrub server text (error bodies): the key, its fragments and masked echoes."""
        if self._secret:
            text = text.replace(self._secret, "[redacted]")
        text = self._MASKED.sub("[redacted]", text)
        return self._fragments(text)

    def reply(self, text: str, *, words: bool = True) -> str:
        """Scrub model output: the key and (with ``words``) any word holding a fragment of it.

        The masked-echo rule is left out: ``...``, ``…`` and ``***`` are ordinary in
        replies. A key shorter than 8 characters is a placeholder (``"EMPTY"`` for a
        local server), not a credential, and scrubbing it would corrupt ordinary words,
        so such a key leaves replies alone. ``words=False`` replaces only the whole key,
        for structured text (tool-call arguments) that a word swap would break.
        """
        if len(self._secret) < self._GRAM:
            return text
        text = text.replace(self._secret, "[redacted]")
        return self._fragments(text) if words else text


def _server_message(exc: Any) -> str:
    """The human message a server put in an error body, if any (not yet redacted)."""
    body = getattr(exc, "body", None)
    message = None
    if isinstance(body, Mapping):
        err = body.get("error", body)
        if isinstance(err, Mapping):
            message = err.get("message")
        elif isinstance(err, str):
            message = err
        message = message or body.get("message")
    elif isinstance(body, str):
        message = body
    if not isinstance(message, str) or not message.strip():
        message = getattr(exc, "message", None) or getattr(exc, "msg", None) or ""
    message = " ".join(str(message).split())
    if len(message) > _SERVER_MESSAGE_LIMIT:
        message = message[:_SERVER_MESSAGE_LIMIT] + "..."
    return message


def _load_sdk(name: str, extra: str, endpoint: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        pass
    # Raised outside the ``except`` so the ImportError is not chained as __context__.
    err = ProviderDependencyError(
        f"the {name!r} package is needed for agentdescent.providers.{extra}() but is "
        f'not installed; install the extra from a checkout of this project: pip install -e ".[{extra}]" '
        f'(not "agentdescent[{extra}]" from the package index, which is another project)'
    )
    err.endpoint = endpoint
    raise err


def _intended_endpoint(base_url: str | None, env_var: str, default: str) -> str:
    """The endpoint a factory will use, for errors raised before the client exists."""
    return _display_endpoint(base_url or os.environ.get(env_var) or default)


def _resolve_key(api_key: str | None, env_var: str, factory: str, model: str, endpoint: str) -> str:
    if api_key is not None:
        if not isinstance(api_key, str) or not api_key.strip():
            raise ProviderAuthError(
                f"{factory}(model={model!r}): api_key must be a non-empty str "
                f"(got a {type(api_key).__name__}); pass the key, or leave api_key=None "
                f"to read {env_var}",
                model=model,
                endpoint=endpoint,
            )
        return api_key
    key = os.environ.get(env_var)
    if not key:
        hint = (
            "; for a local server that needs no key pass api_key='EMPTY'"
            if env_var == "OPENAI_API_KEY"
            else ""
        )
        raise ProviderAuthError(
            f"{factory}(model={model!r}): no API key; pass api_key=... or set the "
            f"{env_var} environment variable{hint}",
            model=model,
            endpoint=endpoint,
        )
    return key


def _token_count(value: Any) -> int | None:
    """A reported token count as an int, or None when it is not a plausible count.

    Servers have sent negative, fractional, string and astronomically large counts; a
    meter must not run backwards or be blown up by one bad reply.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        count = value
    elif isinstance(value, float) and value.is_integer():
        count = int(value)
    else:
        return None
    return count if 0 <= count <= _MAX_REPORTED_TOKENS else None


def _takes_keyword(fn: Any, name: str) -> bool:
    """Does ``fn`` take ``name`` as a keyword (by name, or through ``**kwargs``)?"""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


class _Failure(NamedTuple):
    """One failed attempt, classified while the SDK exception was live.

    Only plain, already-redacted values: the SDK exception itself (its request, its
    response, its body) is never kept, so nothing raised later can reach it.
    """

    kind: str  # auth | bad | response | sdk | rate | server | timeout | connection | connect
    status: int | None
    retry_after: float | None
    detail: str  # the server's message (or the SDK's), redacted; "" when none
    exc_name: str


@dataclasses.dataclass(frozen=True)
class _Reply:
    """What an adapter read from a successful response, before the boundary cleans it.

    ``usage`` is None when the server reported none (``usage_missing``) or reported
    counts that are not plausible (already warned about).
    """

    text: str
    usage: Usage | None
    usage_missing: bool
    finish_reason: str | None
    tool_calls: tuple[Any, ...]


# --------------------------------------------------------------------------- SDK adapters


class _SDKProvider:
    """Retry loop, error translation and usage metering shared by the SDK adapters.

    Subclasses build the SDK request and read the SDK response; everything that must
    behave the same for every vendor (what is retried, how long to wait, which error a
    failure becomes, what is logged) lives here once.
    """

    _kind = "provider"
    _api = "provider"
    _key_env = ""

    def __init__(
        self,
        *,
        sdk: Any,
        client: Any,
        model: str,
        endpoint: str,
        key: str,
        max_retries: int,
        max_retry_seconds: float,
        initial_backoff: float,
        max_backoff: float,
        usage: Usage | None,
        seed: int | None,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
        connect_errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"{self._kind}(model={model!r}): model must be a non-empty str")
        if int(max_retries) < 0:
            raise ValueError(
                f"{self._kind}(max_retries={max_retries!r}): use 0 (no retries) or more"
            )
        if not (max_retry_seconds >= 0):
            raise ValueError(
                f"{self._kind}(max_retry_seconds={max_retry_seconds!r}): use a number >= 0"
            )
        if not (initial_backoff >= 0 and max_backoff >= initial_backoff):
            raise ValueError(
                f"{self._kind}(initial_backoff={initial_backoff!r}, max_backoff={max_backoff!r}): "
                "use 0 <= initial_backoff <= max_backoff"
            )
        self.model = model
        self.endpoint = endpoint
        self.max_retries = int(max_retries)
        self.max_retry_seconds = float(max_retry_seconds)
        self.initial_backoff = float(initial_backoff)
        self.max_backoff = float(max_backoff)
        self.usage = usage if usage is not None else Usage()
        self._sdk = sdk
        self._client = client
        self._connect_errors = connect_errors
        self._redact = _Redactor(key)
        self._rng = random.Random(seed)
        self._sleep = sleep
        self._clock = clock
        self._lock = threading.Lock()
        self._warned_no_usage = False
        self.retries = 0
        self.failures = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, endpoint={self.endpoint!r})"

    def __getstate__(self) -> Any:
        raise TypeError(
            f"{type(self).__name__} cannot be pickled (it holds a live client and a "
            "credential); build the provider inside the worker process instead"
        )

    # -- hooks -------------------------------------------------------------------------

    def _send(self, messages: list[dict[str, Any]], model: str, opts: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _read(self, response: Any, model: str) -> _Reply:
        raise NotImplementedError

    def _check(self, opts: Mapping[str, Any]) -> None:
        """Refuse, before anything is sent, an option value this API cannot take."""

    # -- the call ----------------------------------------------------------------------

    def complete(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> Completion:
        """Send ``messages`` and return the reply with this call's token usage.

        Transient failures are retried inside this call; what is left is raised as one
        of the `ProviderError` family, with ``retryable`` saying whether a later call
        can help, and with no SDK exception chained to it. The call's usage is also
        added to ``self.usage``, the provider's run meter. The reply text is sanitised
        (`agentdescent.types.sanitize_text`) and scrubbed of the API key before it is
        returned.

        Args:
            messages: OpenAI-style ``{"role", "content"}`` dicts.
            **options: ``model`` (overrides the provider's), ``tools``, ``max_tokens``,
                ``temperature``; ``None`` means not given.

        Returns:
            The reply text, a per-call `Usage`, the finish reason and the tool calls.

        Raises:
            TypeError: an unknown option, an option of the wrong type, or a malformed
                message list.
            ValueError: ``max_tokens`` < 1, or a ``temperature`` outside the API's range.
            ProviderAuthError: the key was rejected.
            ProviderBadRequestError: the request was rejected as invalid.
            ProviderRateLimitError: 429s outlasted the retry bound.
            ProviderConnectionError: the endpoint could not be reached at all.
            ProviderUnavailableError: 5xx/timeouts/dropped connections outlasted it.
            ProviderResponseError: a 2xx reply that is not a valid completion.
        """
        owner = type(self).__name__
        opts = check_options(options, owner)
        self._check(opts)
        msgs = _check_messages(messages, owner)
        model = opts.pop("model", self.model)
        response, attempts = self._with_retries(lambda: self._send(msgs, model, opts), model)
        try:
            reply = self._read(response, model)
        except ProviderResponseError:
            self._count_failure()
            raise  # the same error re-raised: nothing new is chained to it
        call_usage = reply.usage
        if call_usage is None:
            call_usage = Usage(
                estimate_tokens(messages_to_prompt(msgs)), estimate_tokens(reply.text), 0, 1
            )
            if reply.usage_missing and not self._warned_no_usage:
                self._warned_no_usage = True
                log.warning(
                    "%s at %s (model %r) reported no token usage; counting an offline "
                    "estimate (ceil(chars/4)) instead, so token budgets are approximate",
                    self._kind, self.endpoint, model,
                )
        self.usage.add(call_usage)
        snap = call_usage.snapshot()
        log.debug(
            "%s call to %s (model %r) ok after %d attempt(s): prompt=%d completion=%d "
            "cached=%d cache_write=%d finish=%s",
            self._kind, self.endpoint, model, attempts, snap["prompt_tokens"],
            snap["completion_tokens"], snap["cached_tokens"], snap["cache_write_tokens"],
            reply.finish_reason,
        )
        return Completion(
            self._redact.reply(sanitize_text(reply.text)),
            call_usage,
            reply.finish_reason,
            tuple(self._clean_structure(call) for call in reply.tool_calls),
        )

    def _with_retries(self, send: Callable[[], Any], model: str) -> tuple[Any, int]:
        start = self._clock()
        attempt = 0
        connect_failures = 0
        while True:
            attempt += 1
            try:
                return send(), attempt
            except Exception as exc:  # every SDK failure is translated here
                failure = self._classify(exc)
            # Everything below runs outside the ``except``: an error raised here has no
            # SDK exception as its __context__ (its request and body can hold the key).
            if failure.kind in ("auth", "bad", "response", "sdk"):
                self._count_failure()
                raise self._final_error(failure, model, attempt)
            elapsed = self._clock() - start
            if failure.kind == "connect":
                connect_failures += 1
            if attempt > self.max_retries or connect_failures > _CONNECT_RETRIES:
                self._count_failure()
                raise self._final_error(failure, model, attempt, elapsed=elapsed)
            if failure.kind == "connect":
                initial = min(self.initial_backoff, _CONNECT_BACKOFF)
                delay = self._delay(connect_failures, None, initial)
            else:
                delay = self._delay(attempt, failure.retry_after, self.initial_backoff)
            if elapsed + delay > self.max_retry_seconds:
                self._count_failure()
                raise self._final_error(failure, model, attempt, elapsed=elapsed, out_of_time=delay)
            with self._lock:
                self.retries += 1
            last = self.max_retries + 1
            if failure.kind == "connect":
                last = min(last, attempt + _CONNECT_RETRIES - connect_failures + 1)
            # WARNING, not INFO: a run stuck on a failing endpoint must never be silent.
            log.warning(
                "%s call to %s (model %r) failed with %s on attempt %d of %d%s; "
                "retrying in %.2fs",
                self._kind, self.endpoint, model, self._what(failure.kind, failure.status),
                attempt, last, f" ({failure.detail})" if failure.detail else "", delay,
            )
            self._sleep(delay)

    def _count_failure(self) -> None:
        with self._lock:
            self.failures += 1

    def _delay(self, attempt: int, retry_after: float | None, initial: float) -> float:
        if retry_after is not None:
            return retry_after
        base = min(self.max_backoff, initial * (2 ** (attempt - 1)))
        with self._lock:
            jitter = self._rng.random()
        # "Equal jitter": at least half the backoff, so a herd of workers that failed
        # together spreads out without any of them hammering the server immediately.
        return base * (0.5 + 0.5 * jitter)

    def _classify(self, exc: BaseException) -> _Failure:
        sdk = self._sdk
        name = type(exc).__name__
        if isinstance(exc, json.JSONDecodeError):
            return _Failure("response", None, None, self._redact(exc.msg), name)
        if isinstance(exc, sdk.APIResponseValidationError):
            return _Failure("response", exc.status_code, None, self._server_text(exc), name)
        if isinstance(exc, sdk.APITimeoutError):
            return _Failure("timeout", None, None, "", name)
        if isinstance(exc, sdk.APIConnectionError):
            cause = self._connect_cause(exc)
            if cause is not None:
                return _Failure("connect", None, None, self._redact(" ".join(str(cause).split())), name)
            return _Failure("connection", None, None, "", name)
        if isinstance(exc, sdk.APIStatusError):
            status = int(exc.status_code)
            if status in (401, 403):
                # The server's text is dropped on purpose: auth errors are where servers
                # echo (parts of) the key back.
                return _Failure("auth", status, None, "", name)
            detail = self._server_text(exc)
            retry_after = parse_retry_after(getattr(exc.response, "headers", None))
            if status == 429:
                return _Failure("rate", status, retry_after, detail, name)
            if status >= 500 or status == 408:
                return _Failure("server", status, retry_after, detail, name)
            return _Failure("bad", status, None, detail, name)
        if isinstance(exc, sdk.APIError):
            return _Failure("response", None, None, self._server_text(exc), name)
        if isinstance(exc, self._sdk_base_error()):
            return _Failure("sdk", None, None, self._redact(" ".join(str(exc).split())), name)
        raise exc  # not an SDK failure: a bug, let it surface unchanged

    def _server_text(self, exc: BaseException) -> str:
        return self._redact(_server_message(exc))

    def _connect_cause(self, exc: BaseException) -> BaseException | None:
        """The HTTP library's connect error behind ``exc``: no connection was ever opened."""
        seen: BaseException | None = exc.__cause__ or exc.__context__
        for _ in range(4):  # the SDK wraps the transport error once; allow a little more
            if seen is None:
                return None
            if isinstance(seen, self._connect_errors):
                return seen
            seen = seen.__cause__ or seen.__context__
        return None

    def _sdk_base_error(self) -> tuple[type[BaseException], ...]:
        found = (getattr(self._sdk, name, None) for name in ("OpenAIError", "AnthropicError"))
        return tuple(cls for cls in found if isinstance(cls, type))

    @staticmethod
    def _what(kind: str, status: int | None) -> str:
        if kind == "timeout":
            return "a timeout"
        if kind == "connect":
            return "a connection failure (refused or unreachable)"
        if kind == "connection":
            return "a connection error"
        return f"HTTP {status}"

    def _final_error(
        self,
        failure: _Failure,
        model: str,
        attempts: int,
        *,
        elapsed: float = 0.0,
        out_of_time: float | None = None,
    ) -> ProviderError:
        kind, status, retry_after = failure.kind, failure.status, failure.retry_after
        where = f"{self._kind} endpoint {self.endpoint} (model {model!r})"
        said = f": {failure.detail}" if failure.detail else ""
        fields = {
            "model": model,
            "endpoint": self.endpoint,
            "status_code": status,
            "attempts": attempts,
            "retry_after": retry_after,
        }
        if kind == "auth":
            return ProviderAuthError(
                f"{where} rejected the credentials (HTTP {status}); check the key passed "
                f"as api_key= or in {self._key_env} (the key is never shown)",
                **fields,
            )
        if kind == "bad":
            hint = self._bad_request_hint(status, failure.detail)
            return ProviderBadRequestError(
                f"{where} rejected the request (HTTP {status}){said}; "
                f"{hint or 'check the model name, the messages and the options'} (not "
                "retried: resending the same request cannot help)",
                **fields,
            )
        if kind == "sdk":
            err = ProviderError(f"{where}: the {self._kind} SDK failed with {failure.exc_name}{said}")
            err.endpoint = self.endpoint
            return err
        if kind == "response":
            return ProviderResponseError(
                f"{where} returned a reply that is not a valid response "
                f"({failure.exc_name}{said}); check that base_url points at {self._api}",
                **fields,
            )
        if kind == "connect":
            return ProviderConnectionError(
                f"{where} could not be reached: {self._what(kind, status)} on {attempts} "
                f"attempt(s) over {elapsed:.1f}s{said}. Is the server running? Check "
                f"base_url (now {self.endpoint}) and that the host is reachable from here",
                **fields,
            )
        what = self._what(kind, status)
        if out_of_time is not None:
            bound = (
                f"the next wait ({out_of_time:.1f}s"
                f"{', from Retry-After' if retry_after is not None else ''}) would pass "
                f"max_retry_seconds={self.max_retry_seconds:g} after {elapsed:.1f}s"
            )
        else:
            bound = f"max_retries={self.max_retries} is used up after {elapsed:.1f}s"
        text = (
            f"{where} failed with {what} on attempt {attempts}{said}; {bound}. "
            "Retry later, or raise max_retries / max_retry_seconds"
        )
        if kind == "rate":
            return ProviderRateLimitError(
                text + " (or lower the request rate, e.g. fewer workers)", **fields
            )
        if kind == "timeout":
            return ProviderTimeoutError(text + " (or raise timeout=)", **fields)
        return ProviderUnavailableError(text, **fields)

    def _bad_request_hint(self, status: int | None, detail: str) -> str | None:
        """What to change after a 4xx, when the adapter can tell (None: the generic advice)."""
        return None

    def _response_error(self, model: str, problem: str) -> ProviderResponseError:
        return ProviderResponseError(
            f"{self._kind} endpoint {self.endpoint} (model {model!r}) returned a reply "
            f"that is not a valid response: {problem}; check that base_url points at "
            f"{self._api}",
            model=model,
            endpoint=self.endpoint,
            attempts=None,
        )

    # -- reading a reply -----------------------------------------------------------------

    def _usage(self, model: str, counts: Mapping[str, Any]) -> dict[str, int] | None:
        """The reported counts as ints, or None (after one WARNING) if any is implausible.

        An absent field (None) counts 0; a negative, fractional, non-numeric or absurdly
        large one makes the whole report untrustworthy, so the call falls back to the
        offline estimate rather than raise or corrupt the run's meter.
        """
        out: dict[str, int] = {}
        for name, value in counts.items():
            count = 0 if value is None else _token_count(value)
            if count is None:
                log.warning(
                    "%s at %s (model %r) reported an invalid token count %s=%s; ignoring "
                    "the reported usage for this call and counting an offline estimate "
                    "(ceil(chars/4)) instead",
                    self._kind, self.endpoint, model, name, self._redact(repr(value)[:80]),
                )
                return None
            out[name] = count
        return out

    def _tool_call(self, model: str, call: Any) -> dict[str, Any]:
        """A tool call the SDK returned, as the plain dict the server sent."""
        if isinstance(call, self._sdk.BaseModel):
            return call.to_dict()
        if isinstance(call, Mapping):
            return dict(call)
        raise self._response_error(model, f"a tool call is a {type(call).__name__}, not an object")

    def _clean_structure(self, value: Any) -> Any:
        """``value`` with every string sanitised and the whole key replaced.

        Tool-call arguments are JSON text: only the whole key is swapped (a word swap
        could break the JSON), which keeps them parseable.
        """
        if isinstance(value, str):
            return self._redact.reply(sanitize_text(value), words=False)
        if isinstance(value, Mapping):
            return {self._clean_structure(k): self._clean_structure(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self._clean_structure(v) for v in value)
        return value


class OpenAICompatibleProvider(_SDKProvider):
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
            raise ValueError(
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

    def _read(self, response: Any, model: str) -> _Reply:
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
        reply = _Reply(text, None, True, finish if isinstance(finish, str) else None, calls)
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


class AnthropicProvider(_SDKProvider):
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
            raise ValueError(
                f"anthropic(max_tokens={max_tokens!r}): the default per-call limit on a reply's "
                "length (the API requires one); use a positive int"
            )
        self.max_tokens = max_tokens
        self._typed_temperature = _takes_keyword(self._client.messages.create, "temperature")

    def _check(self, opts: Mapping[str, Any]) -> None:
        temperature = opts.get("temperature")
        if temperature is not None and temperature > 1:
            raise ValueError(
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

    def _read(self, response: Any, model: str) -> _Reply:
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
        reply = _Reply(text, None, True, stop if isinstance(stop, str) else None, calls)
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


def _connect_errors(extra: str, endpoint: str) -> tuple[type[BaseException], ...]:
    """The SDKs' HTTP library's "no connection was opened" error (refused, DNS, unreachable).

    Both SDKs run on ``httpx2`` and wrap its errors in one ``APIConnectionError``; the
    wrapped error is what tells a server that is not there from one that dropped a
    connection it had accepted.
    """
    return (_load_sdk("httpx2", extra, endpoint).ConnectError,)


def _sdk_client(
    factory: Callable[..., Any],
    *,
    key: str,
    timeout: float,
    base_url: str | None,
    default_headers: Mapping[str, str] | None,
    http_client: Any,
    default_endpoint: str,
) -> tuple[Any, str]:
    """Build an SDK client with its own retries off, and the endpoint to name in errors."""
    kwargs: dict[str, Any] = {"api_key": key, "timeout": timeout, "max_retries": 0}
    if base_url is not None:
        kwargs["base_url"] = base_url
    if default_headers:
        kwargs["default_headers"] = dict(default_headers)
    if http_client is not None:
        kwargs["http_client"] = http_client
    client = factory(**kwargs)
    endpoint = _display_endpoint(str(getattr(client, "base_url", None) or base_url or default_endpoint))
    return client, endpoint


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
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
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
        sleep: the wait function (injectable so tests run on virtual time).
        clock: the monotonic clock the time bound reads (injectable with ``sleep``).
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
        ValueError: a retry knob is out of range.
    """
    intended = _intended_endpoint(base_url, "OPENAI_BASE_URL", _OPENAI_DEFAULT_ENDPOINT)
    sdk = _load_sdk("openai", "openai", intended)
    connect_errors = _connect_errors("openai", intended)
    key = _resolve_key(api_key, "OPENAI_API_KEY", "openai_compatible", model, intended)
    client, endpoint = _sdk_client(
        sdk.OpenAI, key=key, timeout=timeout, base_url=base_url,
        default_headers=default_headers, http_client=http_client, default_endpoint=_OPENAI_DEFAULT_ENDPOINT,
    )
    return OpenAICompatibleProvider(
        sdk=sdk,
        client=client,
        model=model,
        endpoint=endpoint,
        key=key,
        max_retries=max_retries,
        max_retry_seconds=max_retry_seconds,
        initial_backoff=initial_backoff,
        max_backoff=max_backoff,
        usage=usage,
        seed=seed,
        sleep=sleep,
        clock=clock,
        connect_errors=connect_errors,
        token_limit_param=token_limit_param,
    )


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
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
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
        sleep: the wait function (injectable for tests).
        clock: the monotonic clock the time bound reads.

    Returns:
        An `AnthropicProvider`.

    Raises:
        ProviderDependencyError: the ``anthropic`` SDK is not installed.
        ProviderAuthError: no key given and ``ANTHROPIC_API_KEY`` is unset.
        ValueError: a retry knob or ``max_tokens`` is out of range.
    """
    intended = _intended_endpoint(base_url, "ANTHROPIC_BASE_URL", _ANTHROPIC_DEFAULT_ENDPOINT)
    sdk = _load_sdk("anthropic", "anthropic", intended)
    connect_errors = _connect_errors("anthropic", intended)
    key = _resolve_key(api_key, "ANTHROPIC_API_KEY", "anthropic", model, intended)
    client, endpoint = _sdk_client(
        sdk.Anthropic, key=key, timeout=timeout, base_url=base_url,
        default_headers=default_headers, http_client=http_client, default_endpoint=_ANTHROPIC_DEFAULT_ENDPOINT,
    )
    return AnthropicProvider(
        max_tokens=max_tokens,
        sdk=sdk,
        client=client,
        model=model,
        endpoint=endpoint,
        key=key,
        max_retries=max_retries,
        max_retry_seconds=max_retry_seconds,
        initial_backoff=initial_backoff,
        max_backoff=max_backoff,
        usage=usage,
        seed=seed,
        sleep=sleep,
        clock=clock,
        connect_errors=connect_errors,
    )


# --------------------------------------------------------------------------- callables


def _accepted_keywords(fn: Callable[..., Any]) -> frozenset[str] | None:
    """Option names ``fn`` takes as keywords; ``None`` means any (it has ``**kwargs``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return frozenset()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    names = {
        p.name
        for p in params[1:]
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return frozenset(names & PROVIDER_OPTIONS)


class CallableProvider:
    """A `Provider` around a ``prompt: str -> str`` function.

    Build it with `from_callable`. Useful for local models behind a function, for
    deterministic stand-ins, and for offline docs and tests.

    Attributes:
        fn: the wrapped function.
        usage: the meter every call records into (an offline ``ceil(chars/4)`` estimate
            unless ``fn`` returns a `Completion` with usage).
    """

    def __init__(self, fn: Callable[..., Any], *, usage: Usage | None = None, name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"from_callable(fn={fn!r}): fn must be callable (prompt: str -> str)")
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", None) or type(fn).__name__
        self.usage = usage if usage is not None else Usage()
        self._accepts = _accepted_keywords(fn)

    def __repr__(self) -> str:
        return f"CallableProvider({self.name})"

    def complete(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> Completion:
        """Call the function on the joined message contents.

        Options with a value are passed to the function as keywords when it takes them
        (by name or through ``**kwargs``); an option it cannot take raises rather than
        being dropped. Exceptions from the function propagate unchanged. The reply text
        is sanitised (lone surrogates become U+FFFD); a returned `Completion`'s
        ``finish_reason`` and ``tool_calls`` are kept.

        Raises:
            TypeError: an unknown option, an option ``fn`` does not take, or ``fn``
                returned something that is neither ``str`` nor ``Completion``.
        """
        owner = f"CallableProvider({self.name})"
        opts = check_options(options, owner)
        msgs = _check_messages(messages, owner)
        if self._accepts is not None:
            refused = sorted(set(opts) - self._accepts)
            if refused:
                raise TypeError(
                    f"{owner}.complete() got option(s) {', '.join(map(repr, refused))} but "
                    f"{self.name} does not take them; add them as keyword parameters (or "
                    "**options) to the function, or do not pass them"
                )
        prompt = messages_to_prompt(msgs)
        result = self.fn(prompt, **opts)
        if isinstance(result, Completion):
            reply = result
        elif isinstance(result, str):
            reply = Completion(result)
        else:
            raise TypeError(
                f"{owner}: the function returned a {type(result).__name__}; it must "
                "return the reply as a str (or a Completion)"
            )
        if not isinstance(reply.text, str):
            raise TypeError(
                f"{owner}: the function returned a Completion whose text is a "
                f"{type(reply.text).__name__}; the reply text must be a str"
            )
        call = reply.usage
        if call is None:
            call = Usage(estimate_tokens(prompt), estimate_tokens(reply.text), 0, 1)
        self.usage.add(call)
        return Completion(sanitize_text(reply.text), call, reply.finish_reason, tuple(reply.tool_calls))


def from_callable(
    fn: Callable[..., Any], *, usage: Usage | None = None, name: str | None = None
) -> CallableProvider:
    """Wrap a ``prompt: str -> str`` function as a provider.

    The messages' contents are joined (blank line between them) into one prompt. Token
    usage is an offline, deterministic estimate (``ceil(chars / 4)`` each way) so token
    budgets still work without a tokenizer or a network.

    Args:
        fn: ``fn(prompt) -> str``; it may also take ``model``, ``tools``,
            ``max_tokens``, ``temperature`` as keywords, and may return a
            `Completion` to report exact usage.
        usage: the meter to record into; a new one if ``None``.
        name: a label for errors and ``repr`` (default: the function's name).

    Returns:
        A `CallableProvider`.
    """
    return CallableProvider(fn, usage=usage, name=name)
