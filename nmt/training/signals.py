"""SIGINT/SIGTERM during training: finish the current step, save a checkpoint, then stop."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any


class StopRequest:
    """While active, the first SIGINT/SIGTERM only sets `requested`; a second one interrupts at once."""

    def __init__(self, announce: Any = None) -> None:
        self.requested = False
        self._announce = announce
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self._announce is not None:
            self._announce(f"\nsignal {signal.Signals(signum).name}: saving a checkpoint, then stopping "
                           "(send it again to stop without one).")

    def __enter__(self) -> StopRequest:
        # Python only lets the main thread install handlers; elsewhere (a thread pool) signals stay default.
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
