"""`agentdescent.cli.signals`: which handlers are set, what a signal raises, what comes back after.

The signals are real (`signal.raise_signal`, delivered to this process); the end-to-end
behaviour, a run stopped by each signal, is tests/system/test_cli_signals.py's.
"""

from __future__ import annotations

import pickle
import signal
import threading

import pytest

from agentdescent.cli.signals import SIGNALS, Stopped, catching_signals, stopped

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")


@pytest.mark.parametrize("name, state, code", [("SIGINT", "interrupted", 130), ("SIGTERM", "terminated", 143),
                                               ("SIGHUP", "terminated", 129), ("SIGQUIT", "terminated", 131)])
def test_each_signal_raises_a_keyboard_interrupt_naming_it(name, state, code):
    sig = getattr(signal, name)
    # start from the default disposition: the suite itself may run under nohup, which ignores
    # SIGHUP (and an ignored signal stays ignored: the test below checks that case)
    inherited = signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    try:
        before = signal.getsignal(sig)
        with pytest.raises(Stopped) as caught, catching_signals():
            signal.raise_signal(sig)
        assert isinstance(caught.value, KeyboardInterrupt)
        assert (caught.value.name, caught.value.state, caught.value.exit_code) == (name, state, code)
        assert signal.getsignal(sig) is before  # restored
    finally:
        signal.signal(sig, inherited)


def test_a_second_signal_while_winding_down_is_ignored():
    wound_down = False
    with catching_signals():
        try:
            signal.raise_signal(signal.SIGTERM)
        except Stopped:
            signal.raise_signal(signal.SIGTERM)  # the cleanup goes on
            signal.raise_signal(signal.SIGINT)
            wound_down = True
    assert wound_down


def test_a_signal_ignored_at_the_start_stays_ignored():
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with catching_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
            signal.raise_signal(signal.SIGHUP)  # nothing happens
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def test_off_the_main_thread_nothing_is_installed():
    seen = []

    def body():
        with catching_signals():
            seen.append({sig: signal.getsignal(sig) for sig in SIGNALS})

    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]


def test_a_plain_keyboard_interrupt_is_sigints():
    assert stopped(KeyboardInterrupt()).name == "SIGINT"
    term = Stopped(signal.SIGTERM)
    assert stopped(term) is term


def test_it_pickles_and_prints_its_name():
    copy = pickle.loads(pickle.dumps(Stopped(signal.SIGHUP)))
    assert (type(copy), copy.signum, str(copy)) == (Stopped, signal.SIGHUP, "SIGHUP")
