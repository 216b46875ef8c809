"""Each training step's loss and gradient norm, left on the device and read by the host a step later.

Reading a value the device computes makes the host wait until the device has got there. Read in the step
that computes them, the loss (for the log and the divergence check) and the gradient norm (the check) would
make the host wait twice a step, and the device would idle while the host builds the next batch and queues
its kernels: on a GPU, where these models' steps are bound by kernel launches, the launch time would add to
the arithmetic instead of overlapping it. The trainer reads a step's values once the next step's work is
queued, and every step's before anything reads the model or the log's sums (a log line, a validation, a
checkpoint), so a step that went non-finite is still named, and nothing of its state is saved: the one step
trained after it is thrown away with it. On a CPU the values are ready when read.
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
    loss_sum: Tensor  # scalar, detached: this rank's summed loss
    grad_norm: Tensor  # scalar: the gradient's norm before clipping


@dataclass
class QueuedSteps:
    """The steps trained and not yet read. `finite_norm`: a non-finite gradient norm stops the run (not under
    fp16's loss scaler, which skips such a step and lowers its scale)."""

    ctx: DistContext
    run_dir: Path
    finite_norm: bool
    _steps: list[_Step] = field(default_factory=list)

    def append(self, step: int, epoch: int, loss_sum: Tensor, grad_norm: Tensor) -> None:
        self._steps.append(_Step(step, epoch, loss_sum.detach(), grad_norm))

    def read(self, keep: int = 0) -> list[float]:
        """Read every queued step but the newest `keep`, in one copy to the host -> their losses summed over
        ranks, in step order. An NMTError (diverged_error) names the first whose loss, or gradient norm, is
        not finite."""
        ready, self._steps = self._steps[: len(self._steps) - keep], self._steps[len(self._steps) - keep :]
        if not ready:
            return []
        # steps x 2: (loss, norm) each, float64 as Python reads them
        values = torch.stack([torch.stack([s.loss_sum.double(), s.grad_norm.double()]) for s in ready]).tolist()
        losses = self.ctx.sum([loss for loss, _ in values])
        for s, loss, (_, norm) in zip(ready, losses, values, strict=True):
            if not math.isfinite(loss):
                raise diverged_error(self.run_dir, s.step, s.epoch, f"the training loss is {loss}")
            if not math.isfinite(norm) and self.finite_norm:
                raise diverged_error(self.run_dir, s.step, s.epoch, f"the gradient norm is {norm}")
        return losses
