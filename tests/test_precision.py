"""nmt.training.precision: the autocast dtype training.precision asks for, and its context."""

from __future__ import annotations

import contextlib

import pytest
import torch

from nmt.errors import NMTError
from nmt.training.precision import autocast, precision_fallback, precision_name, resolve_precision


@pytest.mark.parametrize("name", ["auto", "fp32", "fp16", "bf16"])
def test_the_cpu_always_trains_in_fp32(name: str) -> None:
    assert resolve_precision(name, torch.device("cpu")) is None


def test_only_an_explicit_half_precision_off_cuda_is_warned_about() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert [precision_fallback(n, cpu) is None for n in ("auto", "fp32", "fp16", "bf16")] == [True, True, False, False]
    assert "training.precision bf16 applies on CUDA only" in (precision_fallback("bf16", cpu) or "")
    assert all(precision_fallback(n, cuda) is None for n in ("auto", "fp32", "fp16", "bf16"))
    assert [precision_name(d) for d in (None, torch.bfloat16, torch.float16)] == ["fp32", "bf16", "fp16"]


def test_cuda_precisions(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert [resolve_precision(n, cuda) for n in ("auto", "fp32", "fp16", "bf16")] == [
        torch.bfloat16, None, torch.float16, torch.bfloat16
    ]
    # a GPU before Ampere: torch emulates bf16 there; auto takes fp16, an explicit bf16 gets what it asks for
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert [resolve_precision(n, cuda) for n in ("auto", "bf16")] == [torch.float16, torch.bfloat16]
    # a torch before 2.4, whose is_bf16_supported takes no keyword: the compute capability decides
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    for capability, dtype in (((7, 0), torch.float16), ((8, 0), torch.bfloat16)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        assert resolve_precision("auto", cuda) == dtype
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    assert resolve_precision("auto", cuda) == torch.float16
    with pytest.raises(NMTError, match="does not support bfloat16"):
        resolve_precision("bf16", cuda)


def test_fp32_needs_no_autocast() -> None:
    assert isinstance(autocast(None), contextlib.nullcontext)


# Built without a GPU, torch.autocast warns that it disables itself; it still records what it was asked for.
@pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")
def test_a_dtype_asks_for_cuda_autocast_to_it() -> None:
    # (torch.is_autocast_enabled() inside it would be False on a machine without a GPU: no test there)
    context = autocast(torch.bfloat16)
    assert isinstance(context, torch.autocast)
    assert (context.fast_dtype, context.device) == (torch.bfloat16, "cuda")
