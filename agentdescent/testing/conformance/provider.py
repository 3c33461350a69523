"""`ProviderConformance`: the behaviour every `agentdescent.model.Provider` must have.

Subclass it under a ``Test`` name and define ``make_provider()`` (a real adapter pointed
at a loopback server, a fake, a simulator). Plain Python (no pytest import).
"""

from __future__ import annotations

import threading

from ...errors import InvalidArgument
from ...model import Completion, Provider
from ...seams import adopt, missing_members
from ...usage import Usage
from ._checks import check, expect_raises

__all__ = ["ProviderConformance"]

_MESSAGES = [{"role": "user", "content": "Say hello."}]


class ProviderConformance:
    """What the agents, the compactor and the judge reward rely on of a provider.

    The checks: ``complete`` exists; it returns a `agentdescent.model.Completion` whose text
    is a ``str`` that encodes as UTF-8; an option outside ``model``, ``tools``,
    ``max_tokens``, ``temperature`` is refused (an `agentdescent.errors.InvalidArgumentType`,
    a ``TypeError``) rather than silently dropped, and so is ``max_tokens=0``; ``usage``
    is None or a `agentdescent.usage.Usage` that counts each call once; and calls from
    several threads at once all come back.
    """

    def make_provider(self) -> Provider:
        """Return a new provider; every check calls this once.

        Raises:
            NotImplementedError: always, here; a subclass must override it.
        """
        raise NotImplementedError(f"{type(self).__name__}.make_provider(self) is not defined; return it")

    def close_provider(self, provider: Provider) -> None:
        """Release what `make_provider` opened, after each check; nothing by default."""

    def _with(self, check_fn: object) -> None:
        raw = self.make_provider()
        try:
            check_fn(adopt(raw, Provider, "make_provider()"))  # type: ignore[operator]
        finally:
            self.close_provider(raw)

    def test_has_the_required_members(self) -> None:
        """``complete`` exists (``usage`` has a default)."""
        raw = self.make_provider()
        try:
            missing = missing_members(raw, Provider)
            check(not missing, f"a Provider needs complete(); it lacks {', '.join(missing)}")
        finally:
            self.close_provider(raw)

    def test_complete_returns_a_completion_with_utf8_text(self) -> None:
        """A `Completion` whose text is a ``str`` that encodes as UTF-8."""
        def run(provider: Provider) -> None:
            reply = provider.complete(_MESSAGES, max_tokens=16)
            check(isinstance(reply, Completion), f"complete must return a Completion, got {type(reply).__name__}")
            check(isinstance(reply.text, str), f"Completion.text must be a str, got {type(reply.text).__name__}")
            try:
                reply.text.encode("utf-8")
            except UnicodeEncodeError:
                raise AssertionError("the reply holds a lone surrogate: sanitise replies at the boundary") from None
        self._with(run)

    def test_unknown_and_bad_options_are_refused(self) -> None:
        """An unknown option is a ``TypeError``; ``max_tokens=0`` an `InvalidArgument`."""
        def run(provider: Provider) -> None:
            expect_raises(TypeError, lambda: provider.complete(_MESSAGES, top_k=3), "complete(top_k=3)")
            expect_raises(InvalidArgument, lambda: provider.complete(_MESSAGES, max_tokens=0),
                          "complete(max_tokens=0)")
        self._with(run)

    def test_usage_counts_each_call_once(self) -> None:
        """``usage`` is None, or a `Usage` whose ``calls`` grows by one per call."""
        def run(provider: Provider) -> None:
            meter = provider.usage
            check(meter is None or isinstance(meter, Usage), f"usage must be None or a Usage, got {meter!r:.60}")
            if meter is None:
                return
            before = meter.calls
            provider.complete(_MESSAGES, max_tokens=16)
            check(meter.calls == before + 1, f"one call must count once in usage: calls went {before} -> {meter.calls}")
        self._with(run)

    def test_concurrent_calls_all_come_back(self) -> None:
        """Four threads calling at once each get a `Completion`."""
        def run(provider: Provider) -> None:
            replies: list[object] = []
            errors: list[BaseException] = []
            lock = threading.Lock()

            def work() -> None:
                try:
                    reply = provider.complete(_MESSAGES, max_tokens=16)
                    with lock:
                        replies.append(reply)
                except BaseException as exc:  # reported below
                    errors.append(exc)

            threads = [threading.Thread(target=work) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            check(not errors and len(replies) == 4 and all(isinstance(r, Completion) for r in replies),
                  f"concurrent calls: {len(replies)} of 4 came back; errors {errors[:1]!r}")
        self._with(run)
