"""Building an SDK adapter: the vendor SDK loaded, the key found, the client made; `build`, the one factory body.

This module owns the way from a factory's arguments to a live adapter: importing the
vendor SDK inside the factory (a missing one is a `ProviderDependencyError` naming the
extra to install), finding the API key (``api_key=`` or the vendor's environment variable),
building the SDK client with its own retries off, naming the endpoint as errors may show it,
and `build` (the body both factories share). The adapter it builds is
`agentdescent.providers.sdk_provider.SDKProvider` (the retry loop, error translation, usage
reading; re-exported here with `Reply`), and what of the wire may be shown is
`agentdescent.providers.redaction`'s.

It must not import a vendor SDK at module import time, must not let an ImportError ride
along on the error it raises (it is raised outside the ``except``), and must never put an
API key into an exception, a log record or a ``repr``.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any

from ..clock import Clock
from ..errors import ProviderAuthError, ProviderDependencyError
from ..usage import Usage
from ..validation import check_seconds, check_text
from .redaction import _PUNCTUATION as _PUNCTUATION
from .redaction import _SERVER_MESSAGE_LIMIT as _SERVER_MESSAGE_LIMIT
from .redaction import _display_endpoint
from .redaction import _Redactor as _Redactor
from .redaction import _server_message as _server_message
from .sdk_provider import _CONNECT_BACKOFF as _CONNECT_BACKOFF
from .sdk_provider import _CONNECT_RETRIES as _CONNECT_RETRIES
from .sdk_provider import _MAX_REPORTED_TOKENS as _MAX_REPORTED_TOKENS
from .sdk_provider import Reply, SDKProvider
from .sdk_provider import _Failure as _Failure
from .sdk_provider import _token_count as _token_count
from .sdk_provider import log as log

__all__ = ["Reply", "SDKProvider", "build", "takes_keyword"]


def _load_sdk(name: str, extra: str, endpoint: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        pass
    # Raised outside the ``except`` so the ImportError is not chained as __context__.
    raise ProviderDependencyError(
        f"the {name!r} package is needed for agentdescent.providers.{extra}() but is "
        f'not installed; install the extra from a checkout of this project: pip install -e ".[{extra}]" '
        f'(not "agentdescent[{extra}]" from the package index, which is another project)',
        endpoint=endpoint,
    )


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


def takes_keyword(fn: Any, name: str) -> bool:
    """Does ``fn`` take ``name`` as a keyword (by name, or through ``**kwargs``)?"""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


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


def build(
    cls: type[SDKProvider],
    *,
    sdk_name: str,
    factory: str,
    key_env: str,
    base_env: str,
    default_endpoint: str,
    client_class: str,
    model: str,
    base_url: str | None,
    api_key: str | None,
    timeout: float,
    max_retries: int,
    max_retry_seconds: float,
    initial_backoff: float,
    max_backoff: float,
    usage: Usage | None,
    default_headers: Mapping[str, str] | None,
    http_client: Any,
    seed: int | None,
    clock: Clock | None,
    **particular: Any,
) -> Any:
    """Build an SDK adapter: the body both factories share (SDK, key, client, provider).

    Args:
        cls: the adapter class.
        sdk_name: the SDK's import name (also the extra that installs it).
        factory: the public factory's name, for messages.
        key_env: the environment variable the key is read from when ``api_key`` is None.
        base_env: the environment variable the SDK reads a base URL from.
        default_endpoint: the vendor's endpoint, named in errors.
        client_class: the SDK's client class name.
        model: see the factories.
        base_url: see the factories.
        api_key: see the factories.
        timeout: see the factories.
        max_retries: see the factories.
        max_retry_seconds: see the factories.
        initial_backoff: see the factories.
        max_backoff: see the factories.
        usage: see the factories.
        default_headers: see the factories.
        http_client: see the factories.
        seed: see the factories.
        clock: see the factories.
        **particular: the adapter's own keyword arguments.

    Raises:
        InvalidArgument: a knob out of range (named).
        ProviderDependencyError: the SDK is not installed.
        ProviderAuthError: no key.
    """
    check_text(model, "model", owner=factory)
    check_seconds(timeout, "timeout", positive=True, owner=factory)
    check_text(base_url, "base_url", optional=True, owner=factory)
    intended = _intended_endpoint(base_url, base_env, default_endpoint)
    sdk = _load_sdk(sdk_name, sdk_name, intended)
    connect_errors = _connect_errors(sdk_name, intended)
    key = _resolve_key(api_key, key_env, factory, model, intended)
    client, endpoint = _sdk_client(
        getattr(sdk, client_class), key=key, timeout=timeout, base_url=base_url,
        default_headers=default_headers, http_client=http_client, default_endpoint=default_endpoint,
    )
    return cls(
        sdk=sdk, client=client, model=model, endpoint=endpoint, key=key, max_retries=max_retries,
        max_retry_seconds=max_retry_seconds, initial_backoff=initial_backoff, max_backoff=max_backoff,
        usage=usage, seed=seed, clock=clock, connect_errors=connect_errors, **particular,
    )
