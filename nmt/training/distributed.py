"""Where a process trains: its place in a torchrun job and the few collectives the loop needs.

Without torchrun (WORLD_SIZE unset or 1) every collective is a no-op on a single process, so the
loop has one code path.

The values the processes agree on (a stop request, the losses for the log, a validation's result) live on
the host. They go through a gloo group of their own: through NCCL, the GPUs' backend, each would be copied
to the GPU and its result read back, which waits for everything the GPU has queued (the step in flight).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from nmt.errors import NMTError
from nmt.rundir.loading import resolve_device
from nmt.torchrun import torchrun_place

T = TypeVar("T")


# How long the other ranks wait in the host group while rank 0 alone works (`agreed`: preparing the data, which a
# corpus to download and a sentencepiece model to train can make last hours; a validation): torch's 30 minutes
# ended such a job with the others' timeout. A rank that dies closes its connections: the others hear at once.
HOST_WAIT = timedelta(hours=12)


@dataclass
class DistContext:
    """This process's place in the job and the device it trains on."""

    rank: int
    world_size: int
    device: torch.device  # on CUDA, the GPU of the process's LOCAL_RANK
    host_group: Any = None  # the gloo group of every rank, for the values on the host (None: one process)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank (picklable objects)."""
        if not self.enabled:
            return obj
        holder = [obj]
        dist.broadcast_object_list(holder, src=0, group=self.host_group)
        return holder[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.host_group)
        return out

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of `values` over ranks (float64: the losses, the stop requests), on the host."""
        if not self.enabled:
            return values
        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.host_group)
        return tensor.tolist()

    def agreed(self, action: Callable[[], T], on_all_ranks: bool = False) -> T:
        """Run `action` on rank 0 (or on every rank); an error on any rank is raised on all of them, so no
        rank waits forever in a collective: an NMTError as it is, another exception as itself where it
        happened and as an NMTError naming it elsewhere. Returns rank 0's result (every rank's own, if
        on_all_ranks)."""
        result: Any = None
        failure: NMTError | None = None  # it crosses to the other ranks pickled, hint included
        own: Exception | None = None
        if on_all_ranks or self.is_main:
            try:
                result = action()
            except NMTError as error:
                failure = error
            except Exception as error:  # e.g. out of memory: its traceback stays on this rank
                own = error
                failure = NMTError(f"rank {self.rank} failed: {type(error).__name__}: {error}",
                                   f"Rank {self.rank}'s output shows where.")
        if on_all_ranks:
            failure = next((f for f in self.gather(failure) if f is not None), None)
        else:
            result, failure = self.broadcast((result, failure))
        if own is not None:
            raise own
        if failure is not None:
            failure.on_every_rank = self.enabled
            raise failure
        return result

    def barrier(self) -> None:
        """Wait until every rank gets here (no-op in a single process)."""
        if self.enabled:
            dist.barrier(group=self.host_group)

    def close(self) -> None:
        """Leave the process group (if this process joined one)."""
        if self.enabled and dist.is_initialized():
            dist.destroy_process_group()


def setup_distributed(device_name: str) -> DistContext:
    """Join the torchrun job described by RANK / WORLD_SIZE / LOCAL_RANK (nccl on CUDA, gloo on CPU)."""
    place = torchrun_place()
    device = resolve_device(device_name)
    if place.world_size == 1:
        return DistContext(0, 1, device)
    if device.type == "cuda":
        if place.local_rank >= torch.cuda.device_count():
            raise NMTError(
                f"LOCAL_RANK {place.local_rank} but only {torch.cuda.device_count()} GPU(s) are visible.",
                "Use --nproc_per_node no larger than the number of GPUs.",
            )
        torch.cuda.set_device(place.local_rank)
        device = torch.device("cuda", place.local_rank)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return DistContext(place.rank, place.world_size, device, dist.new_group(backend="gloo", timeout=HOST_WAIT))
