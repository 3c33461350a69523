"""One dataloader request: its arguments checked, its endpoint resolved, one GET with retries.

This module owns what both loaders do before a source's own format matters: the checks of
their arguments (names, limits, timeouts; each error names the call and the knob), the
endpoint (``endpoint=``, else the environment variable, else the default, read on every
call), the ``httpx`` client (imported lazily, so the package imports without it) and one
GET retried on 429 / 5xx / connection errors with backoff and ``Retry-After``, every wait
through the call's `Clock`, every error naming the URL and the status.

It must not know a source's URLs or answers, must not touch the cache, and must not read
the environment at import time.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

from .._http import parse_retry_after
from .._version import VERSION
from ..clock import Clock
from ..errors import DataLoadError, InvalidArgument
from ..failures import backoff_delay

__all__: list[str] = []

logger = logging.getLogger("agentdescent.dataloader")

_MAX_ATTEMPTS = 4  # one try plus three retries on 429 / 5xx / connection errors
_BACKOFF_BASE = 0.5  # seconds; doubles per retry
_BACKOFF_CAP = 8.0
_RETRY_AFTER_CAP = 60.0  # a server asking for longer than this is treated as down
_INSTALL_HINT = 'pip install -e ".[hf]" from a checkout of this project'


# --------------------------------------------------------------------------- arguments


def _check_name(name: str, value: object, func: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{func}({name}={value!r}): {name} must be a non-empty string")


def _check_limit(limit: object, func: str, *, allow_none: bool) -> None:
    if limit is None and allow_none:
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        also = " or None for every row" if allow_none else ""
        raise InvalidArgument(f"{func}(limit={limit!r}): limit must be an integer >= 1{also}")


def _check_timeout(timeout: object, func: str) -> None:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise InvalidArgument(
            f"{func}(timeout={timeout!r}): timeout must be a finite number of seconds > 0"
        )


def _resolve_endpoint(endpoint: str | None, env: str, default: str, func: str) -> str:
    source = "endpoint"
    if endpoint is None:
        endpoint = os.environ.get(env) or default
        source = env if os.environ.get(env) else "the default endpoint"
    if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
        raise InvalidArgument(
            f"{func}: {source}={endpoint!r} is not an http(s) URL; pass endpoint="
            f"'https://host' or set {env}"
        )
    return endpoint.rstrip("/")


# --------------------------------------------------------------------------- HTTP


def _client(timeout: float) -> Any:
    try:
        import httpx
    except ImportError as exc:
        raise ImportError(
            f"agentdescent.data.loader needs httpx to download datasets; run "
            f"{_INSTALL_HINT} (rows already in the cache are served without it)"
        ) from exc
    return httpx.Client(
        timeout=httpx.Timeout(timeout),
        follow_redirects=True,  # ModelScope redirects file downloads to object storage
        headers={"User-Agent": f"agentdescent/{VERSION} (+dataloader)"},
    )


def _get(client: Any, url: str, hint: str, clock: Clock) -> Any:
    """GET ``url``, retrying 429 / 5xx / connection errors with backoff; errors name URL + status."""
    import httpx

    retryable_exc = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
    for attempt in range(1, _MAX_ATTEMPTS + 1):
        last = attempt == _MAX_ATTEMPTS
        tries = f"{attempt} attempt{'s' if attempt > 1 else ''}"
        try:
            logger.debug("GET %s (attempt %d)", url, attempt)
            response = client.get(url)
        except retryable_exc as exc:
            if last:
                raise DataLoadError(
                    f"GET {url} failed with no HTTP status after {tries}: "
                    f"{type(exc).__name__}: {exc}; check the network and the endpoint, "
                    f"raise timeout= if the server is slow, or {hint}",
                    url=url,
                ) from exc
            delay = _backoff(attempt)
            logger.warning(
                "GET %s: %s; retry %d/%d in %.1fs",
                url,
                type(exc).__name__,
                attempt,
                _MAX_ATTEMPTS - 1,
                delay,
            )
            clock.sleep(delay)
            continue
        except httpx.HTTPError as exc:  # not transient: bad URL, unsupported protocol, ...
            raise DataLoadError(
                f"GET {url} failed with no HTTP status: {type(exc).__name__}: {exc}; {hint}",
                url=url,
            ) from exc

        status = response.status_code
        if (status == 429 or status >= 500) and not last:
            delay = _retry_after(response)
            if delay is None:
                delay = _backoff(attempt)
            logger.warning(
                "GET %s: HTTP %d; retry %d/%d in %.1fs",
                url,
                status,
                attempt,
                _MAX_ATTEMPTS - 1,
                delay,
            )
            clock.sleep(delay)
            continue
        if status >= 400:
            advice = (
                "the server is rate limiting or down; retry later (cached rows need no request)"
                if status == 429 or status >= 500
                else hint
            )
            raise DataLoadError(
                f"GET {url} failed with HTTP {status} {response.reason_phrase} after {tries}: "
                f"{_snippet(response.text)}; {advice}",
                url=url,
                status=status,
            )
        return response
    raise AssertionError("unreachable")  # the loop returns or raises


def _backoff(attempt: int) -> float:
    return backoff_delay(attempt, initial=_BACKOFF_BASE, cap=_BACKOFF_CAP)


def _retry_after(response: Any) -> float | None:
    seconds = parse_retry_after(response.headers)
    return None if seconds is None else min(_RETRY_AFTER_CAP, seconds)


def _snippet(text: str, size: int = 200) -> str:
    text = " ".join(text.split())
    if not text:
        return "(empty body)"
    return repr(text if len(text) <= size else text[:size] + "...")
