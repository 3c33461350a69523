"""Time, as one seam: what every deadline, timeout, backoff and wait in the package goes through.

This module owns the `Clock` seam (``now()``, ``sleep()``, and ``wait()`` on a
condition until it is notified or a deadline passes), the default `MonotonicClock`, and
the two waits built on it: `wait_futures` (the first of some futures to finish, or a
deadline) and `Clock.wait_for` (a predicate over shared state, or a deadline). Code that
waits never polls real time: it waits on a condition that the event it waits for
notifies, with the deadline read from its clock, so a virtual clock
(`agentdescent.testing.ManualClock`) can move time for every waiter at once.

It also owns `StopSignal`, the one way a retry loop learns that the run it works for is
over: the run's call runner gives every call a signal and puts it in the thread's scope
(`stop_scope`); a retry loop (the runner's own, the providers') reads it with
`current_stop`, checks it before each attempt and sleeps its backoff with
`StopSignal.sleep`, which wakes the moment the signal is set.

It must not import anything of the package but `agentdescent.errors`,
`agentdescent.seams` and `agentdescent.validation`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import threading
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any, ClassVar

from .errors import InvalidArgumentType
from .seams import Seam, adopt
from .validation import is_real

__all__ = ["Clock", "MonotonicClock", "StopSignal", "as_clock", "current_stop", "notify_when_done", "stop_scope",
           "wait_futures"]


class Clock(Seam):
    """A source of seconds that never go back, and the waits that follow it.

    Who calls it: the engines (``max_seconds``, ``grace_seconds``, every wait for a call,
    a worker or a queue), the providers (backoff and ``Retry-After``) and the dataloader
    (backoff), from any thread. ``now`` is required; ``sleep`` and ``wait`` have defaults
    that assume the clock's seconds pass like real ones (right for any clock that follows
    real time, at any offset). A virtual clock overrides both, so that its waiters wake
    when it moves (see `agentdescent.testing.ManualClock`).
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("now",)
    OPTIONAL: ClassVar[tuple[str, ...]] = ("sleep", "wait", "wait_for")

    def now(self) -> float:
        """The current reading, in seconds from an arbitrary start."""
        raise NotImplementedError

    def __call__(self) -> float:
        """The current reading (a clock is also a plain ``() -> float`` callable)."""
        return self.now()

    def wait(self, condition: threading.Condition, deadline: float | None) -> None:
        """Wait on ``condition`` (held by the caller) until it is notified or ``deadline`` passes.

        May return early (a notification, or a spurious wake-up): callers re-check what
        they wait for, which `wait_for` does. ``deadline`` is a reading of this clock;
        None waits for a notification only.
        """
        if deadline is None:
            condition.wait()
        else:
            condition.wait(max(0.0, deadline - self.now()))

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for ``seconds`` of this clock's time."""
        end = self.now() + max(0.0, float(seconds))
        condition = threading.Condition()
        with condition:
            while self.now() < end:
                self.wait(condition, end)

    def wait_for(self, condition: threading.Condition, predicate: Callable[[], bool],
                 deadline: float | None) -> bool:
        """Wait on ``condition`` (held by the caller) until ``predicate()`` or ``deadline``.

        Returns:
            True once ``predicate()`` holds, False when the deadline passed first.
        """
        while not predicate():
            if deadline is not None and self.now() >= deadline:
                return False
            self.wait(condition, deadline)
        return True


class MonotonicClock(Clock):
    """Real time: `time.monotonic`, `time.sleep`, and condition waits with real timeouts."""

    def now(self) -> float:
        """`time.monotonic`."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """`time.sleep`."""
        if seconds > 0:
            time.sleep(seconds)

    def __repr__(self) -> str:
        return "MonotonicClock()"


def _reading_error(knob: str, clock: object, what: str) -> InvalidArgumentType:
    return InvalidArgumentType(
        f"{knob}={clock!r:.80}: its now() {what}; a clock's now() must return a finite real "
        "number of seconds that never goes back (time.monotonic, say): pass such a clock, a "
        "() -> float function, or None for real time"
    )


def _check_reading(reading: object, knob: str, clock: object) -> float:
    """``reading`` as a float if it is a finite real number (a bool or a string is not one)."""
    if not is_real(reading) or not math.isfinite(float(reading)):  # type: ignore[arg-type]
        raise _reading_error(knob, clock, f"returned {reading!r:.80} (a {type(reading).__name__})")
    return float(reading)  # type: ignore[arg-type]


class _CallableClock(Clock):
    """A plain ``() -> float`` function as a clock (its seconds are taken to pass like real ones).

    Every reading is checked (a function that returns ``"now"``, NaN or None later in a
    run is refused by name, never turned into a bare ``ValueError`` far from the cause).
    """

    def __init__(self, fn: Callable[[], float], knob: str = "clock") -> None:
        self._fn = fn
        self._knob = knob

    def now(self) -> float:
        return _check_reading(self._fn(), self._knob, self._fn)

    def __repr__(self) -> str:
        return f"Clock({self._fn!r})"


def as_clock(value: Any, knob: str = "clock") -> Clock:
    """The `Clock` a ``clock=`` argument names: None is real time; a ``() -> float`` callable is wrapped.

    The clock is read once, here, so one whose ``now()`` does not return a finite real
    number is refused before a run (or a provider, or a download) starts on it, naming
    the knob and what it returned; a wrapped function is checked at every reading.

    Raises:
        InvalidArgumentType: neither a clock (an object with ``now()``) nor a callable, or
            its ``now()`` returned something else than a finite real number (or raised).
    """
    if value is None:
        return MonotonicClock()
    if isinstance(value, Clock):
        clock = value
    elif callable(getattr(value, "now", None)):
        clock = adopt(value, Clock, knob)
    elif callable(value):
        clock = _CallableClock(value, knob)
    else:
        return adopt(value, Clock, knob)  # raises, naming what a clock needs
    try:
        reading = clock.now()
    except InvalidArgumentType:
        raise
    except Exception as exc:  # the clock cannot be read at all: say so at the boundary
        raise _reading_error(knob, value, f"raised {type(exc).__name__}: {exc}") from exc
    _check_reading(reading, knob, value)
    return clock


def notify_when_done(futures: Collection[concurrent.futures.Future[Any]], condition: threading.Condition) -> None:
    """Make each of ``futures`` notify ``condition`` when it finishes (at once, if it already has)."""

    def finished(_: concurrent.futures.Future[Any]) -> None:
        with condition:
            condition.notify_all()

    for future in futures:
        future.add_done_callback(finished)


def wait_futures(clock: Clock, futures: Collection[concurrent.futures.Future[Any]],
                 deadline: float | None, *, condition: threading.Condition | None = None,
                 stop: Callable[[], bool] | None = None) -> set[concurrent.futures.Future[Any]]:
    """Wait until one of ``futures`` is done, ``stop()`` holds, or ``deadline`` passes.

    Each future notifies the condition when it finishes, so the wait takes no real time
    beyond the work itself and a virtual clock's deadline wakes it as soon as the clock
    moves. ``stop`` lets the caller end the wait on shared state; whoever changes that
    state must notify ``condition`` (pass the condition it notifies).

    Args:
        clock: the clock the deadline is read on.
        futures: what to wait for.
        deadline: a reading of ``clock``; None waits without a time bound.
        condition: the condition to wait on (a fresh one if None).
        stop: an extra wake-up predicate over the caller's state.

    Returns:
        The futures that are done (empty when the deadline passed or ``stop()`` held first).
    """
    cond = condition if condition is not None else threading.Condition()
    notify_when_done(futures, cond)

    def ready() -> bool:
        return any(f.done() for f in futures) or (stop is not None and stop())

    with cond:
        clock.wait_for(cond, ready, deadline)
    return {f for f in futures if f.done()}


# =========================================================================== stopping a call


class StopSignal:
    """A call's stop: set once, when the run it works for no longer wants it; never cleared.

    Who sets it: the run's call runner (`agentdescent.engine.executors.CallRunner`), when the run
    ends (the scheduler returned; the call's result would be dropped) and for every call
    still running when the engine returns. Who reads it: the retry loops, before each
    attempt and through each backoff wait (`sleep`), so a cancelled call makes no new
    attempt: an attempt already on the wire may finish, no other one starts.

    Args:
        check: an extra stop condition read by `is_set` (the run's "the token budget is
            spent"); nobody notifies when it becomes true, so it is seen at the next check,
            not during a backoff.
    """

    def __init__(self, check: Callable[[], bool] | None = None) -> None:
        self._check = check
        self._lock = threading.Lock()
        self._set = False
        self._reason = ""
        self._sleepers: list[threading.Condition] = []
        #: True when `set` found the holder waiting out a backoff (it leaves at once).
        self.woke_from_backoff = False

    def set(self, reason: str = "the run has ended") -> None:
        """Stop the call: wake its backoff wait; `is_set` holds from now on."""
        with self._lock:
            if self._set:
                return
            self._set = True
            self._reason = reason
            self.woke_from_backoff = bool(self._sleepers)
            sleepers = list(self._sleepers)
        for condition in sleepers:
            with condition:
                condition.notify_all()

    def is_set(self) -> bool:
        """True once `set` was called, or while the extra ``check`` holds."""
        return self._set or (self._check is not None and bool(self._check()))

    @property
    def cancelled(self) -> bool:
        """True once `set` was called (the extra ``check`` aside)."""
        return self._set

    @property
    def reason(self) -> str:
        """Why the call stopped, in words (``""`` while it has not)."""
        if self._set:
            return self._reason
        return "the run's token budget is spent" if self.is_set() else ""

    def sleep(self, clock: Clock, seconds: float) -> bool:
        """Wait ``seconds`` of ``clock``'s time, unless the signal is set first.

        Returns:
            True when the whole wait passed with the signal clear (attempt again), False
            when it was (or became) set: make no further attempt.
        """
        condition = threading.Condition()
        with condition:
            with self._lock:
                if self._set:
                    return False
                self._sleepers.append(condition)
            try:
                end = clock.now() + max(0.0, float(seconds))
                clock.wait_for(condition, lambda: self._set, end)
            finally:
                with self._lock:
                    self._sleepers.remove(condition)
        return not self.is_set()

    def __repr__(self) -> str:
        return f"StopSignal(set={self.is_set()})"


_scope = threading.local()


@contextlib.contextmanager
def stop_scope(signal: StopSignal | None) -> Iterator[None]:
    """Make ``signal`` this thread's `current_stop` for the duration (scopes nest)."""
    previous = getattr(_scope, "signal", None)
    _scope.signal = signal
    try:
        yield
    finally:
        _scope.signal = previous


def current_stop() -> StopSignal | None:
    """The stop signal of the call this thread is running for a run, or None outside one."""
    return getattr(_scope, "signal", None)
