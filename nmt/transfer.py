"""Copies from the host to a device that do not make the host wait for the device."""

from __future__ import annotations

import torch
from torch import Tensor


def to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """`tensor` on `device`, queued without waiting: from the host to CUDA through pinned memory. A copy from
    ordinary (pageable) memory may wait for the device's queue while the driver stages it (CUDA's notes on API
    synchronisation); one from pinned memory is queued like a kernel, and torch keeps the pinned block until
    the copy is done. Inside a graph torch.compile traces, the plain copy (the graph's own business)."""
    if device.type == "cuda" and tensor.device.type == "cpu" and not torch.compiler.is_compiling():
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)
