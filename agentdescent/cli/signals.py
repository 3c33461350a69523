"""The signals that end a command, each raised as `Stopped`: a ``KeyboardInterrupt`` that names it.

Left to their defaults, SIGTERM (``kill``, a supervisor), SIGHUP (a closed terminal) and
SIGQUIT (Ctrl-\\) end the process at once: no ``finally`` runs, so ``status.json`` stays
``running`` and a tree run leaves its sandboxes and its running suite behind. Inside
`catching_signals` each of them, and SIGINT (Ctrl-C), raises `Stopped` in the main thread
instead: the engines' interrupt path (the progress saved, the calls stopped) and every
``finally`` run as for Ctrl-C, and the command ends with one line and exit code
128 + the signal's number (130 SIGINT, 143 SIGTERM, 129 SIGHUP, 131 SIGQUIT).

It owns the handlers: installed by the command line around one command, only in the main
thread, never over a signal the process was started ignoring (``nohup`` ignores SIGHUP),
and restored afterwards. The library never installs one (`evolve` does not). It must not
print or write a file.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["SIGNALS", "Stopped", "catching_signals", "stopped"]

#: The catchable signals that end a command (those this platform has).
SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name))


class Stopped(KeyboardInterrupt):
    """A command stopped by the signal ``signum``.

    A ``KeyboardInterrupt``, so whatever handles Ctrl-C handles it. SIGINT leaves a run
    ``interrupted``; the others (someone or something ended the process) ``terminated``.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(int(signum))  # the number alone: it pickles and compares as it was
        self.signum = int(signum)

    def __str__(self) -> str:
        return self.name

    @property
    def name(self) -> str:
        """The signal's name, ``"SIGTERM"``."""
        return signal.Signals(self.signum).name

    @property
    def state(self) -> str:
        """The run's state after it: ``"interrupted"`` (SIGINT) or ``"terminated"``."""
        return "interrupted" if self.signum == signal.SIGINT else "terminated"

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended."""
        return 128 + self.signum


def stopped(exc: KeyboardInterrupt) -> Stopped:
    """``exc`` as a `Stopped`: a plain ``KeyboardInterrupt`` (Python's own Ctrl-C handler) is SIGINT's."""
    return exc if isinstance(exc, Stopped) else Stopped(signal.SIGINT)


@contextlib.contextmanager
def catching_signals() -> Iterator[None]:
    """Within the block, each of `SIGNALS` raises `Stopped` in the main thread; the handlers before it come back after.

    Only the first signal raises: one that follows while the command winds down (the
    status written, the suite's processes killed, the temporary folders removed) is
    ignored, so the winding down is not cut short; SIGKILL still ends the process at once.
    Off the main thread (where no handler can be set) and for a signal the process was
    started ignoring, nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if fired:
            return
        fired.append(signum)
        raise Stopped(signum)

    before = {}
    for sig in SIGNALS:
        current = signal.getsignal(sig)
        if current is signal.SIG_IGN or current is None:  # ignored on purpose, or a handler not set from Python
            continue
        before[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)
