"""Each training step's loss and gradient norm, left on the device and read by the host a step later.

Reading a value the device computes makes the host wait until the device has got there. Read in the step
that computes them, the loss (for the log and the divergence check) and the gradient norm (the check) would
make the host wait twice a step, and the device would idle while the host builds the next batch and queues
its kernels: on a GPU, where these models' steps are bound by kernel launches, the launch time would add to
the arithmetic instead of overlapping it. The trainer reads a step's values once the next step's work is
queued, from a copy into host memory queued right after the step (so the read waits for that step only, and
the device goes on with the next), and every step's before anything reads the model or the log's sums (a log
line, a validation, a checkpoint), so a step that went non-finite is still named, and nothing of its state is
saved: the steps trained after it are thrown away with it. On a CPU the values are ready when read.

Under DDP a decision to stop must be the same on every process, or the others would wait for it forever.
The gradient norm is (it is computed from the averaged gradient), so it is checked as each step is read; the
losses are each process's own, so they are summed over the processes and checked together, in one collective,
only when the log's sums are needed (`drain`), not every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from nmt.training.checkpointing import diverged_error
from nmt.training.distributed import DistContext


@dataclass
class _Step:
    step: int  # the update's number, as the log counts them
    epoch: int
    values: Tensor  # 2 (float64): this rank's summed loss and the gradient's norm before clipping, on the host
    copied: torch.cuda.Event | None  # on CUDA: recorded once `values` has arrived


@dataclass
class _Loss:
    step: int
    epoch: int
    loss: float  # this process's summed loss of the step


@dataclass
class QueuedSteps:
    """The steps trained and not yet read. `finite_norm`: a non-finite gradient norm stops the run (not under
    fp16's loss scaler, which skips such a step and lowers its scale)."""

    ctx: DistContext
    run_dir: Path
    finite_norm: bool
    _steps: list[_Step] = field(default_factory=list)
    _read: list[_Loss] = field(default_factory=list)  # read, not yet summed over the processes

    def append(self, step: int, epoch: int, loss_sum: Tensor, grad_norm: Tensor) -> None:
        """Queue the step's values; on CUDA also their copy into host memory, after the step's own work, so
        that reading them later waits for this step alone, not for the steps queued after it."""
        values = torch.stack([loss_sum.detach().double(), grad_norm.detach().double()])  # 2
        copied = None
        if values.is_cuda:
            host = torch.empty(2, dtype=torch.float64, pin_memory=True)  # pinned: a copy that does not wait
            device = values.device
            values, copied = host.copy_(values, non_blocking=True), torch.cuda.Event()
            copied.record(torch.cuda.current_stream(device))  # the stream copy_ queued on, that of the values' GPU
        self._steps.append(_Step(step, epoch, values, copied))

    def read(self, keep: int = 0) -> None:
        """Read every queued step but the newest `keep`. An NMTError (diverged_error) names the first step whose
        gradient norm is not finite, or, in a single process, whose loss is not (under DDP: at `drain`, or
        here once a norm is not finite: each step's loss is checked before its norm)."""
        ready, self._steps = self._steps[: len(self._steps) - keep], self._steps[len(self._steps) - keep :]
        if not ready:
            return
        if ready[-1].copied is not None:  # events complete in order: the last one's covers them all
            ready[-1].copied.synchronize()
        for s in ready:
            loss, norm = s.values.tolist()
            self._read.append(_Loss(s.step, s.epoch, loss))
            if not self.ctx.enabled:
                self._check(s.step, s.epoch, loss)
            if not math.isfinite(norm) and self.finite_norm:
                self._sum_read()  # every rank is here (the norm is the same on all): a loss before names its step
                raise diverged_error(self.run_dir, s.step, s.epoch, f"the gradient norm is {norm}")

    def drain(self) -> list[float]:
        """Read every queued step -> the losses of the steps read since the last drain, each summed over the
        processes, in step order; a non-finite one stops the run as in `read`."""
        self.read()
        return self._sum_read()

    def _sum_read(self) -> list[float]:
        """The losses read and not yet summed, summed over the processes (one collective) and checked."""
        read, self._read = self._read, []
        if not read:
            return []
        losses = self.ctx.sum([r.loss for r in read])
        for r, loss in zip(read, losses, strict=True):
            self._check(r.step, r.epoch, loss)
        return losses

    def _check(self, step: int, epoch: int, loss: float) -> None:
        if not math.isfinite(loss):
            raise diverged_error(self.run_dir, step, epoch, f"the training loss is {loss}")
