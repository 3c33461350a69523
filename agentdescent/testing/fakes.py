"""Test doubles behind the package's seams: `FakeProvider` (a handler-backed provider) and `ManualClock` (virtual time).

A user's test runs the real engines offline and deterministically on these: every reply
comes from one handler function (like httpx's ``MockTransport``), and time moves only
when the test says so, or, with ``autojump=True``, to the next deadline as soon as
everything waits. Nothing here opens a network connection or sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..clock import Clock
from ..errors import InvalidArgument, InvalidArgumentType
from ..messages import messages_to_prompt
from ..model import Completion, Provider, check_options
from ..usage import Usage

__all__ = ["FakeProvider", "ManualClock"]


class FakeProvider(Provider):
    """A handler-backed `Provider`, like httpx's ``MockTransport``.

    Tests decide every reply in one function instead of standing up a server or
    scripting an SDK: ``handler(messages, **options)`` returns the reply text (or a full
    `Completion`), and raising from it simulates a provider
    failure. Options are validated exactly like the real adapters do, so a test cannot
    pass an option a real provider would reject.

    Thread-safe: requests are recorded under a lock, so it can stand behind several
    engine workers at once (the handler itself must be thread-safe if it keeps state).

    Args:
        handler: ``handler(messages, **options) -> str | Completion``; it receives only
            the options that carry a value. A returned `Completion`'s ``finish_reason``
            and ``tool_calls`` are passed through (return ``finish_reason="length"`` to
            simulate a reply cut off by the per-call limit).
        usage: the meter every call records into; a new one if ``None``.

    Attributes:
        requests: one ``{"messages": [...], "options": {...}}`` dict per call, in order
            (messages copied, so later mutation by the caller does not rewrite history).
        usage: the run meter. A ``str`` reply is counted with the offline estimate
            (``ceil(chars / 4)`` for the joined prompt and for the reply); a
            ``Completion`` with usage is counted as given.

    Examples:
        >>> fake = FakeProvider(lambda messages, **options: "42")
        >>> fake.complete([{"role": "user", "content": "6 * 7?"}]).text
        '42'
        >>> fake.requests[0]["messages"][0]["content"]
        '6 * 7?'
    """

    def __init__(self, handler: Callable[..., str | Completion], *, usage: Usage | None = None) -> None:
        if not callable(handler):
            raise InvalidArgumentType(
                f"FakeProvider(handler={handler!r}): handler must be callable as "
                "handler(messages, **options) -> str | Completion"
            )
        self.handler = handler
        self.usage = usage if usage is not None else Usage()
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FakeProvider({getattr(self.handler, '__qualname__', self.handler)!r})"

    @property
    def calls(self) -> int:
        """How many requests were made."""
        with self._lock:
            return len(self.requests)

    def complete(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> Completion:
        """Record the request, ask the handler, meter and return the reply.

        Raises:
            TypeError: an unknown option, or the handler returned neither ``str`` nor
                ``Completion``.
            Exception: whatever the handler raises, unchanged.
        """
        opts = check_options(options, "FakeProvider")
        copied = [dict(m) for m in messages]
        with self._lock:
            self.requests.append({"messages": copied, "options": dict(opts)})
        result = self.handler([dict(m) for m in copied], **opts)
        finish_reason, tool_calls = None, ()
        if isinstance(result, str):
            text, call = result, None
        elif isinstance(result, Completion):
            text, call = result.text, result.usage
            finish_reason, tool_calls = result.finish_reason, tuple(result.tool_calls)
        else:
            raise InvalidArgumentType(
                f"FakeProvider: the handler returned a {type(result).__name__}; return "
                "the reply as a str or a Completion"
            )
        if call is None:
            call = Usage.estimate(messages_to_prompt(copied), text)
        self.usage.add(call)
        return Completion(text, call, finish_reason, tool_calls)



class ManualClock(Clock):
    """Virtual time: a clock that moves only when told to, or, with ``autojump``, to the next deadline.

    Timing-heavy code is tested on virtual time, never with ``sleep``: pass an instance as
    ``clock=`` (to an engine, a provider, a dataloader call or the simulator) and call
    `advance`. Every wait that goes through the clock (`Clock.wait`, `Clock.sleep`) is a
    registered waiter; `advance` wakes the waiters whose deadline it reaches, so a
    deadline passes the moment the test says so, in no real time.

    With ``autojump=True`` the clock moves by itself, as trio's ``MockClock`` does: once
    every waiter has been waiting for ``autojump_threshold`` real seconds with nothing
    else happening on the clock (no wait starting or ending, no `advance`), it jumps to
    the earliest deadline among them. So a test of a hung backend needs no cooperating
    backend: the engine's wait for the hung call has a deadline, the clock jumps to it,
    and the run times out at once. "Everything waits" means every wait that goes through
    this clock; a thread busy in a backend that does not wait on it is not seen, so keep
    real work in an autojump test short next to the threshold.

    Args:
        start: the initial reading, in seconds.
        autojump: jump to the next deadline whenever every waiter is idle.
        autojump_threshold: real seconds of idleness before a jump (the only real time
            this clock ever waits, and only with ``autojump``).

    Raises:
        InvalidArgument: a negative threshold.
    """

    def __init__(self, start: float = 0.0, *, autojump: bool = False, autojump_threshold: float = 0.02) -> None:
        if isinstance(autojump_threshold, bool) or not isinstance(autojump_threshold, (int, float)) or not (
            autojump_threshold >= 0
        ):
            raise InvalidArgument(
                f"ManualClock(autojump_threshold={autojump_threshold!r}): use real seconds >= 0"
            )
        self._now = float(start)
        self.autojump = bool(autojump)
        self.autojump_threshold = float(autojump_threshold)
        self._lock = threading.Lock()
        self._activity = threading.Condition(self._lock)
        self._waiters: dict[object, tuple[threading.Condition, float | None]] = {}
        self._events = 0
        self._jumper: threading.Thread | None = None
        #: Jumps ``autojump`` made (each to the earliest deadline then waited for).
        self.jumps = 0

    def now(self) -> float:
        """The current virtual time, in seconds."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward, wake every waiter whose deadline it reached, return the new reading.

        Raises:
            InvalidArgument: ``seconds`` is negative (time does not run backwards).
        """
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise InvalidArgument(f"ManualClock.advance({seconds!r}): time only moves forward; use seconds >= 0")
        with self._lock:
            self._now += float(seconds)
            now = self._now
            self._events += 1
            due = [cond for cond, deadline in self._waiters.values() if deadline is not None and deadline <= now]
            self._activity.notify_all()
        for cond in due:
            with cond:
                cond.notify_all()
        return now

    def wait(self, condition: threading.Condition, deadline: float | None) -> None:
        """Wait on ``condition`` (held by the caller) until notified, or until the clock reaches ``deadline``."""
        token = object()
        with self._lock:
            if deadline is not None and self._now >= deadline:
                return
            self._waiters[token] = (condition, deadline)
            self._events += 1
            self._activity.notify_all()
            if self.autojump and self._jumper is None:
                self._jumper = threading.Thread(target=self._jump_loop, name="ManualClock-autojump", daemon=True)
                self._jumper.start()
        try:
            condition.wait()
        finally:
            with self._lock:
                del self._waiters[token]
                self._events += 1
                self._activity.notify_all()

    def sleep(self, seconds: float) -> None:
        """Block until the clock has moved ``seconds`` forward (by `advance`, or by a jump)."""
        condition = threading.Condition()
        with condition:
            end = self.now() + max(0.0, float(seconds))
            while self.now() < end:
                self.wait(condition, end)

    def waiting(self) -> int:
        """How many waits are registered now (a test can wait for a thread to block on the clock)."""
        with self._lock:
            return len(self._waiters)

    def _jump_loop(self) -> None:
        with self._lock:
            while True:
                seen = self._events
                self._activity.wait(self.autojump_threshold if self._waiters else None)
                if self._events != seen or not self._waiters:
                    continue
                deadlines = [d for _, d in self._waiters.values() if d is not None]
                if not deadlines:
                    continue
                target = min(deadlines)
                if target > self._now:
                    self._now = target
                self.jumps += 1
                self._events += 1
                due = [cond for cond, d in self._waiters.values() if d is not None and d <= self._now]
                self._lock.release()
                try:
                    for cond in due:
                        with cond:
                            cond.notify_all()
                finally:
                    self._lock.acquire()

    def __repr__(self) -> str:
        return f"ManualClock(now={self.now()!r}, autojump={self.autojump})"
