"""Mixed precision: which autocast dtype training.precision asks for on this device, and the context
the forward passes run in. fp16 also needs the loop's GradScaler; bf16 and fp32 do not."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from nmt.errors import NMTError


def resolve_precision(name: str, device: torch.device) -> torch.dtype | None:
    """Autocast dtype: None (fp32) on CPU or with fp32; auto -> bf16 where the GPU computes in it (Ampere
    on), else fp16: torch emulates bf16 on older GPUs (a V100, a T4), slowly, which only an explicit bf16 asks for."""
    if device.type != "cuda" or name == "fp32":
        return None
    if name == "auto":
        return torch.bfloat16 if _computes_in_bf16() else torch.float16
    if name == "bf16" and not torch.cuda.is_bf16_supported():
        raise NMTError("training.precision is bf16 but this GPU does not support bfloat16.", "Use fp16 or auto.")
    return torch.bfloat16 if name == "bf16" else torch.float16


def _computes_in_bf16() -> bool:
    """Whether the current GPU computes in bf16 rather than torch emulating it (torch before 2.4 cannot say
    which: there, compute capability 8 and up, as torch's own test)."""
    try:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:
        return torch.cuda.get_device_capability()[0] >= 8


def precision_fallback(name: str, device: torch.device) -> str | None:
    """The warning for a training.precision asked for explicitly (fp16, bf16) that cannot apply on `device`:
    autocast runs on CUDA only. None where it applies, and for auto (which chooses per device) and fp32."""
    if device.type == "cuda" or name in ("auto", "fp32"):
        return None
    return (f"warning: training.precision {name} applies on CUDA only: on {device.type} this run trains in fp32 "
            "(auto chooses per device without a warning).")


def precision_name(dtype: torch.dtype | None) -> str:
    """How a run records the precision it trained in (summary.json): fp32, bf16 or fp16."""
    if dtype is None:
        return "fp32"
    return "bf16" if dtype == torch.bfloat16 else "fp16"


def autocast(dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
    """CUDA autocast to `dtype`, or nothing for None (fp32)."""
    return contextlib.nullcontext() if dtype is None else torch.autocast(device_type="cuda", dtype=dtype)
