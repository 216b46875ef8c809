"""The person at the terminal: the lines rank 0 prints and the progress bar below them, and the
Ctrl-C they may send (finish the current step, save a checkpoint, then stop).

Only rank 0 talks, so that N processes under torchrun print each line once. While the bar is open,
lines go through tqdm.write, above it: a plain print would break the bar into two.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from tqdm import tqdm

# The terminal size the progress bar assumes where the terminal reports none (0 x 0: a pseudo-terminal
# whose size was never set), where following it would draw nothing at all.
FALLBACK_SIZE = (80, 24)


def format_duration(seconds: float) -> str:
    """'42s', '12m05s' or '3h02m'; '?' when unknown (NaN)."""
    if not math.isfinite(seconds):
        return "?"
    whole = round(max(seconds, 0.0))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def format_score(score: float | None, metric: str) -> str:
    """A validation score as a person reads it: BLEU to 2 decimals, loss to 4."""
    if score is None:
        return "none"
    return f"{score:.2f}" if metric == "bleu" else f"{score:.4f}"


def progress_bar(total: int, initial: int, unit: str = "step", description: str | None = None) -> Any:
    """A bar of `total` units on stdout if it is a terminal, else None. It is cleared when it closes
    (leave=False): the lines printed above it say what it said, and a finished bar drawn again on closing
    would show twice wherever carriage returns are not honoured (logs of a terminal session)."""
    if not sys.stdout.isatty():
        return None
    try:
        known = os.get_terminal_size(sys.stdout.fileno()).columns > 0
    except (OSError, ValueError):
        known = False
    columns, rows = (None, None) if known else FALLBACK_SIZE
    return tqdm(total=total, initial=initial, unit=unit, desc=description, file=sys.stdout, leave=False,
                dynamic_ncols=known, ncols=columns, nrows=rows)


class Terminal:
    """Rank 0's output: `say` a line; `open_bar` ... `close_bar` around the loop (`advance` once a step)."""

    def __init__(self, is_main: bool) -> None:
        self.is_main = is_main
        self.bar: Any = None

    def say(self, text: str) -> None:
        """Print a line (rank 0 only), above the bar while one is open."""
        if self.bar is not None:  # rank 0's (open_bar opens none elsewhere)
            tqdm.write(text)
        elif self.is_main:
            print(text, flush=True)

    def open_bar(self, total: int, initial: int) -> None:
        """Show the progress bar (rank 0, in a terminal) at step `initial` of `total`."""
        self.bar = progress_bar(total, initial) if self.is_main else None

    def advance(self) -> None:
        """One more step done."""
        if self.bar is not None:
            self.bar.update(1)

    @contextlib.contextmanager
    def counting(self, total: int, unit: str, description: str) -> Iterator[Callable[[int], None]]:
        """A second bar, below the steps', of `total` units while the block runs (rank 0, in a terminal), as
        a validation's sentences: a long one shows it is under way. Yields its `advance(n)`."""
        bar = progress_bar(total, 0, unit, description) if self.is_main else None
        try:
            yield bar.update if bar is not None else lambda n: None
        finally:
            if bar is not None:
                bar.close()

    def close_bar(self) -> None:
        """Clear the bar; later lines are plain prints."""
        if self.bar is not None:
            self.bar.close()
        self.bar = None


class StopRequest:
    """While active, the first SIGINT only sets `requested` (and is announced); a second one interrupts at
    once. SIGTERM comes here through `nmt`'s own handler (nmt/interrupts.py), in an experiment's run
    process through that process's (nmt/training/parallel.py)."""

    # A stop asked for while none was active (an experiment's run process still setting its run up,
    # nmt/training/parallel.py): the next one starts requested, so the stop holds even if the KeyboardInterrupt
    # that also asks is lost (seen: a run trained on 30 s after Ctrl-C, nothing in its log; an exception a
    # signal handler raises can be dropped where C code clears errors).
    pending = False

    def __init__(self, announce: Callable[[str], None]) -> None:
        self.requested = StopRequest.pending
        self._announce = announce
        self._previous: Any = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self._announce(f"\nsignal {signal.Signals(signum).name}: saving a checkpoint, then stopping "
                       "(send it again to stop without one).")

    def __enter__(self) -> StopRequest:
        # Python only lets the main thread install handlers; elsewhere (a thread pool) signals stay default.
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        self._previous = None
