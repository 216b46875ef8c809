"""nmt.transfer: host-to-device copies that do not wait for the device."""

from __future__ import annotations

import pytest
import torch

from nmt.transfer import to_device
from tests.helpers import needs_cuda


def test_on_the_cpu_the_tensor_itself_comes_back() -> None:
    lengths = torch.tensor([3, 1, 2])
    assert to_device(lengths, torch.device("cpu")) is lengths


@needs_cuda
def test_to_cuda_the_copy_is_queued_without_a_wait_and_holds_the_values(monkeypatch: pytest.MonkeyPatch) -> None:
    pin_memory, pinned = torch.Tensor.pin_memory, []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t, *a: pinned.append(t.numel()) or pin_memory(t, *a))
    host = torch.arange(1000, dtype=torch.long)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        copied = to_device(host, torch.device("cuda"))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    host.zero_()  # the pinned staging copy, not `host`, is what the device reads
    assert copied.device.type == "cuda" and torch.equal(copied.cpu(), torch.arange(1000))
    assert pinned == [1000]  # through pinned memory: from pageable memory the driver may wait, unseen by the mode
