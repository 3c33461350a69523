"""Provider adapters: OpenAI-compatible and Anthropic chat APIs through their official SDKs, and plain callables.

`openai_compatible` (`agentdescent.providers.openai_api`) and `anthropic`
(`agentdescent.providers.anthropic_api`) build adapters (`agentdescent.providers.sdk`) on
the shared retry loop and error translation of `agentdescent.providers.sdk_provider`, with
the redaction of `agentdescent.providers.redaction`; `from_callable`
(`agentdescent.providers.callable`) turns a ``prompt -> str`` function into a provider.
Every failure is one of the `agentdescent.errors.ProviderError` family (re-exported here).
The SDKs are optional extras, loaded inside the factories, never at import time.

It imports only the ground floor (the `Provider` seam in `agentdescent.model`, the meter, the
clock, the failure rule); it must not import the agents, the engine or the command line.
"""

from __future__ import annotations

from ..errors import (
    ProviderAuthError,
    ProviderBadRequestError,
    ProviderConnectionError,
    ProviderDependencyError,
    ProviderRateLimitError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from ..messages import messages_to_prompt
from ..model import PROVIDER_OPTIONS, check_options
from .anthropic_api import DEFAULT_ANTHROPIC_MAX_TOKENS, AnthropicProvider, anthropic
from .callable import CallableProvider, from_callable
from .openai_api import TOKEN_LIMIT_PARAMS, OpenAICompatibleProvider, openai_compatible

__all__ = [
    "DEFAULT_ANTHROPIC_MAX_TOKENS",
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
    "from_callable",
    "messages_to_prompt",
    "openai_compatible",
]
