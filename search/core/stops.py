"""Ctrl-C and SIGTERM for long jobs (indexing, training): the signal asks the job to stop at its next safe point
(after a record, after an optimizer step) instead of raising wherever Python happens to be.

Why not Python's own ``KeyboardInterrupt``: it is raised at an arbitrary bytecode, and where that is a finaliser
(``__del__``, a weakref callback, a generator closed by the garbage collector) Python prints "Exception ignored" and
carries on, so an interrupted run could finish and exit 0 as if nothing had been asked (seen once in CI, see
tests/indexer/test_pipeline_pool.py). A mark set by the handler cannot be lost: the job looks at it at every safe
point. A second signal stops at once (``KeyboardInterrupt`` from the handler), for a job stuck between safe points.

Only the main thread can hold signal handlers; elsewhere (an API server's worker thread) signals keep their meaning
and ``asked`` stays false.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

#: the signals a long job stops on by default
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignal:
    """``with StopSignal() as stop:`` ... ``stop.check()`` at each safe point (raises ``KeyboardInterrupt`` once a
    signal came), or read ``stop.asked`` to stop in a way of the job's own. Leaving the block restores the
    handlers that were there before."""

    def __init__(self, signals: tuple[int, ...] = STOP_SIGNALS) -> None:
        self.asked = False
        self._saved: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in signals:
                self._saved[sig] = signal.signal(sig, self._handle)

    def __enter__(self) -> StopSignal:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.restore()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.asked:
            self.restore()
            raise KeyboardInterrupt
        self.asked = True

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if a stop was asked: the caller's interrupted-run path (keep what was
        committed) then runs as for a Ctrl-C."""
        if self.asked:
            raise KeyboardInterrupt

    def restore(self) -> None:
        """Put back the handlers found at the start (idempotent)."""
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved.clear()
