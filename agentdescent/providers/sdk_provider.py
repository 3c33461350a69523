"""`SDKProvider`: the adapter base every SDK adapter shares: the retry loop, error translation, reading a reply.

This module owns the call across the boundary between the package and a vendor SDK:
retrying transient failures (429, 5xx, timeouts, dropped connections) with jittered
exponential backoff bounded in count and in total time (the delays are
`agentdescent.failures.backoff_delay`, the waits the provider's
`agentdescent.clock.Clock`), giving up quickly on an endpoint that cannot be reached at
all, translating every SDK exception into the `agentdescent.errors.ProviderError` family,
metering usage (a report checked, or the offline estimate), and returning the reply
sanitised and scrubbed of the key (`agentdescent.providers.redaction`). Loading the SDK and
building an adapter are `agentdescent.providers.sdk`'s.

It must not import a vendor SDK (the adapter is handed the loaded module), must not let an
SDK exception escape ``complete`` or ride along on a raised error (``__cause__`` and
``__context__`` are both None: an SDK exception holds the request and the response body,
where a key can sit), and must never put an API key into an exception, a log record, a
reply or a ``repr``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .._http import parse_retry_after
from ..clock import Clock, as_clock, current_stop
from ..errors import (
    InvalidArgument,
    InvalidArgumentType,
    ProviderAuthError,
    ProviderBadRequestError,
    ProviderConnectionError,
    ProviderError,
    ProviderRateLimitError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from ..failures import backoff_delay
from ..messages import check_messages, messages_to_prompt
from ..model import Completion, Provider, check_options
from ..types import sanitize_text
from ..usage import Usage
from ..validation import check_int, check_seconds, check_text
from .redaction import _Redactor, _server_message

__all__ = ["Reply", "SDKProvider"]

log = logging.getLogger("agentdescent.providers")

#: Retries after a failure to open a connection at all (refused, unknown host, unreachable
#: network): enough to ride out a server restart, few enough that a wrong ``base_url``
#: fails in well under a second instead of after the full retry budget.
_CONNECT_RETRIES = 2
#: The first wait after such a failure (it doubles, and is jittered like every backoff).
_CONNECT_BACKOFF = 0.25
#: More tokens than any one call can use; a reported count above it is a server bug.
_MAX_REPORTED_TOKENS = 1_000_000_000


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
class Reply:
    """What an adapter read from a successful response, before the boundary cleans it.

    ``usage`` is None when the server reported none (``usage_missing``) or reported
    counts that are not plausible (already warned about).
    """

    text: str
    usage: Usage | None
    usage_missing: bool
    finish_reason: str | None
    tool_calls: tuple[Any, ...]


class SDKProvider(Provider):
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
        clock: Clock | None = None,
        connect_errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.model = check_text(model, "model", owner=self._kind)
        self.endpoint = endpoint
        self.max_retries = check_int(max_retries, "max_retries", low=0, owner=self._kind,
                                     hint="0: no retries")
        self.max_retry_seconds = check_seconds(max_retry_seconds, "max_retry_seconds", owner=self._kind)
        self.initial_backoff = check_seconds(initial_backoff, "initial_backoff", owner=self._kind)
        self.max_backoff = check_seconds(max_backoff, "max_backoff", owner=self._kind)
        if self.max_backoff < self.initial_backoff:
            raise InvalidArgument(
                f"{self._kind}(initial_backoff={initial_backoff!r}, max_backoff={max_backoff!r}): "
                "use 0 <= initial_backoff <= max_backoff"
            )
        if usage is not None and not isinstance(usage, Usage):
            raise InvalidArgumentType(f"{self._kind}(usage={usage!r}): pass an agentdescent.Usage meter or None")
        self.usage = usage if usage is not None else Usage()
        self._sdk = sdk
        self._client = client
        self._connect_errors = connect_errors
        self._redact = _Redactor(key)
        self._rng = random.Random(seed)
        self.clock = as_clock(clock)
        self._lock = threading.Lock()
        self._warned_no_usage = False
        self.retries = 0
        self.failures = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, endpoint={self.endpoint!r})"

    def __getstate__(self) -> Any:
        raise InvalidArgumentType(
            f"{type(self).__name__} cannot be pickled (it holds a live client and a "
            "credential); build the provider inside the worker process instead"
        )

    # -- hooks -------------------------------------------------------------------------

    def _send(self, messages: list[dict[str, Any]], model: str, opts: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _read(self, response: Any, model: str) -> Reply:
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
        msgs = check_messages(messages, owner)
        model = opts.pop("model", self.model)
        response, attempts = self._with_retries(lambda: self._send(msgs, model, opts), model)
        try:
            reply = self._read(response, model)
        except ProviderResponseError:
            self._count_failure()
            raise  # the same error re-raised: nothing new is chained to it
        call_usage = reply.usage
        if call_usage is None:
            call_usage = Usage.estimate(messages_to_prompt(msgs), reply.text)
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
        """``send()`` with the retries; a run's stop (`current_stop`) ends them before the next attempt."""
        start = self.clock.now()
        attempt = 0
        connect_failures = 0
        stop = current_stop()
        failure: _Failure | None = None
        while True:
            if stop is not None and stop.is_set():
                self._count_failure()
                raise self._stopped_error(failure, model, attempt, stop.reason)
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
            elapsed = self.clock.now() - start
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
            if stop is None:
                self.clock.sleep(delay)
            elif not stop.sleep(self.clock, delay):
                self._count_failure()
                raise self._stopped_error(failure, model, attempt, stop.reason)

    def _stopped_error(self, failure: _Failure | None, model: str, attempts: int, why: str) -> ProviderError:
        """The error of a call whose run stopped it before its next attempt (nothing more was sent)."""
        note = f"not retried: {why}" if failure is not None else f"not sent: {why}"
        if failure is None:
            return ProviderUnavailableError(
                f"{self._kind} endpoint {self.endpoint} (model {model!r}): {note}",
                model=model, endpoint=self.endpoint, attempts=attempts,
            )
        error = self._final_error(failure, model, attempts)
        error.args = (f"{error} ({note})",)
        return error

    def _count_failure(self) -> None:
        with self._lock:
            self.failures += 1

    def _delay(self, attempt: int, retry_after: float | None, initial: float) -> float:
        if retry_after is not None:
            return backoff_delay(attempt, initial=initial, cap=self.max_backoff, retry_after=retry_after)
        with self._lock:
            jitter = self._rng.random()
        return backoff_delay(attempt, initial=initial, cap=self.max_backoff, jitter=jitter)

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
            return ProviderError(f"{where}: the {self._kind} SDK failed with {failure.exc_name}{said}",
                                 model=model, endpoint=self.endpoint, attempts=attempts)
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
