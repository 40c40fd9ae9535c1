"""Ctrl-C and SIGTERM (``ray job stop``, ``kill``): the run stops, writes its final checkpoint and summary, and
exits; the same signal again while it does so stops at once, without them.

The handler raises ``KeyboardInterrupt`` where the main thread is, and also keeps a flag that the loop reads after
each update: an interrupt raised inside code that swallows it (an object's ``__del__``, a weakref callback: Python
prints "Exception ignored" and goes on) still ends the run at the next update instead of never.
"""

from __future__ import annotations

import signal
import threading

from distrl.common.log import get_logger

log = get_logger("driver")
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """Installed for the run's life on the main thread only (a library caller's thread, a Tune trial's, leave the
    handlers to their owner; the flag then stays down)."""

    def __init__(self):
        self.received = 0
        self.previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.received > 0

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self.previous = {signum: signal.signal(signum, self._handle) for signum in SIGNALS}

    def reclaim(self) -> None:
        """Again, once Ray has started: its core worker puts a C++ handler on SIGTERM that prints a stack and
        ends the process; the handlers found before the run are still the ones ``restore`` puts back."""
        if self.previous:
            for signum in SIGNALS:
                signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    def _handle(self, signum, frame) -> None:
        self.received += 1
        name = signal.Signals(signum).name
        if self.received == 1:
            log.warning(
                f"{name}: stopping; the final checkpoint and summary are being written ({name} again: stop "
                "at once, without them)"
            )
        else:
            log.warning(f"{name} again: stopping at once; no final checkpoint (the newest one written stands)")
        raise KeyboardInterrupt
