"""StopSignal: a signal marks the stop instead of raising, a second one raises, the old handlers come back."""

from __future__ import annotations

import signal
import threading

import pytest

from search.core.stops import StopSignal


def test_the_first_signal_marks_a_stop_and_the_second_raises():
    before = signal.getsignal(signal.SIGINT)
    with StopSignal() as stop:
        stop.check()   # nothing asked yet
        signal.raise_signal(signal.SIGINT)
        assert stop.asked
        with pytest.raises(KeyboardInterrupt):
            stop.check()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)   # a second Ctrl-C stops at once ...
        assert signal.getsignal(signal.SIGINT) is before   # ... and gives the signal back
    assert signal.getsignal(signal.SIGINT) is before


def test_sigterm_also_asks_and_leaving_the_block_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with StopSignal() as stop:
        assert signal.getsignal(signal.SIGTERM) is not before
        signal.raise_signal(signal.SIGTERM)
        assert stop.asked
    assert signal.getsignal(signal.SIGTERM) is before


def test_off_the_main_thread_no_handler_is_installed():
    seen: list[object] = []

    def run() -> None:
        stop = StopSignal()
        seen.append(stop.asked)
        seen.append(stop._saved)
        stop.restore()

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [False, {}]
