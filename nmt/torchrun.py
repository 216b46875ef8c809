"""This process's place in a torchrun job, from the WORLD_SIZE, RANK and LOCAL_RANK that torchrun sets.

Read in one place, without torch: the command line asks it before it loads any library (to refuse a command
that every process would run whole), and training asks it again to join the job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from nmt.errors import NMTError

_WHAT_TO_DO = ("torchrun sets WORLD_SIZE, RANK and LOCAL_RANK: unset them (unset WORLD_SIZE RANK LOCAL_RANK) to run "
               "in one process, or train in N processes with torchrun --nproc_per_node=N -m nmt train CONFIG.")


@dataclass(frozen=True)
class TorchrunPlace:
    """How many processes the job has, which one this is, and which one on its machine (1, 0 and 0 without
    torchrun)."""

    world_size: int
    rank: int
    local_rank: int


def torchrun_place() -> TorchrunPlace:
    """This process's place (one process of one when WORLD_SIZE is unset or 1: RANK and LOCAL_RANK are then
    not read); a value that is not a whole number in its range is an NMTError naming the variable."""
    world_size = _read("WORLD_SIZE", "1", 1)
    if world_size == 1:
        return TorchrunPlace(1, 0, 0)
    rank = _read("RANK", None, 0, world_size - 1)
    return TorchrunPlace(world_size, rank, _read("LOCAL_RANK", str(rank), 0))


def _read(name: str, default: str | None, low: int, high: int | None = None) -> int:
    """The whole number in environment variable `name` (`default` if unset; unset without one is an error),
    between `low` and `high`."""
    value = os.environ.get(name, default)
    if value is None:
        raise NMTError(f"WORLD_SIZE={os.environ['WORLD_SIZE']} is set, but {name} is not.", _WHAT_TO_DO)
    try:
        number = int(value)
    except ValueError:
        pass
    else:
        if number >= low and (high is None or number <= high):
            return number
    within = f"from {low} to {high}" if high is not None else f"{low} or more"
    raise NMTError(f"environment variable {name}={value!r} is not a whole number {within}.", _WHAT_TO_DO)
