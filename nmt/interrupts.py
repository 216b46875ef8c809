"""Ctrl-C and SIGTERM, for `nmt` and the child processes it starts.

SIGTERM (`timeout`, Slurm at a job's time limit, a container's stop) is handled as Ctrl-C is: `main` makes
`as_ctrl_c` its handler. Both may reach a whole process group at once (a terminal's Ctrl-C, `kill -TERM
-PGID`), so a child must not act on them by itself: a Python child still importing dies of it with a
traceback, and a parent still writing the child's start-up data then waits forever (multiprocessing keeps
the pipe's read end open in the parent until it is written). Children are started inside
`starting_children()`, so they inherit SIGINT, SIGTERM and SIGUSR1 blocked and their parent stops them:
prepare kills sentencepiece's process, an experiment asks each run's process once, by SIGUSR1, to stop
as on Ctrl-C (nmt/training/parallel.py).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from multiprocessing import resource_tracker
from types import FrameType

from nmt.fileio import interrupts_deferred

HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGUSR1}


def as_ctrl_c(signum: int, frame: FrameType | None) -> None:
    """SIGTERM's handler: do what Ctrl-C would do now (interrupt, wait for a block, or save and stop), or
    interrupt where SIGINT is ignored (a job started in the background)."""
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        raise KeyboardInterrupt
    handler(signum, frame)


@contextlib.contextmanager
def starting_children() -> Iterator[None]:
    """A block that starts child processes: they inherit HELD blocked, and a Ctrl-C or SIGTERM to this
    process waits until the block is done, so that no child is left half-started."""
    with interrupts_deferred():
        resource_tracker.ensure_running()  # now: starting it would unblock SIGINT and SIGTERM below
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
