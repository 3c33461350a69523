"""A plain function as a provider: `from_callable` and `CallableProvider`.

For local models behind a function, deterministic stand-ins, and offline docs and tests:
``fn(prompt, **options) -> str`` (or a `agentdescent.model.Completion`), metered with the
reply's own usage or the offline estimate (`agentdescent.usage.Usage.estimate`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import InvalidArgumentType
from ..messages import check_messages, messages_to_prompt
from ..model import PROVIDER_OPTIONS, Completion, Provider, check_options
from ..types import sanitize_text
from ..usage import Usage

__all__ = ["CallableProvider", "from_callable"]


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


class CallableProvider(Provider):
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
            raise InvalidArgumentType(f"from_callable(fn={fn!r}): fn must be callable (prompt: str -> str)")
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
        msgs = check_messages(messages, owner)
        if self._accepts is not None:
            refused = sorted(set(opts) - self._accepts)
            if refused:
                raise InvalidArgumentType(
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
            raise InvalidArgumentType(
                f"{owner}: the function returned a {type(result).__name__}; it must "
                "return the reply as a str (or a Completion)"
            )
        if not isinstance(reply.text, str):
            raise InvalidArgumentType(
                f"{owner}: the function returned a Completion whose text is a "
                f"{type(reply.text).__name__}; the reply text must be a str"
            )
        call = reply.usage
        if call is None:
            call = Usage.estimate(prompt, reply.text)
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

