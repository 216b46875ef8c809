"""Mixed precision: which autocast dtype training.precision asks for on this device, and the context
the forward passes run in. fp16 also needs the loop's GradScaler; bf16 and fp32 do not."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from nmt.errors import NMTError


def resolve_precision(name: str, device: torch.device) -> torch.dtype | None:
    """Autocast dtype: None (fp32) on CPU or with fp32; auto -> bf16 where supported, else fp16."""
    if device.type != "cuda" or name == "fp32":
        return None
    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if name == "bf16" and not torch.cuda.is_bf16_supported():
        raise NMTError("training.precision is bf16 but this GPU does not support bfloat16.", "Use fp16 or auto.")
    return torch.bfloat16 if name == "bf16" else torch.float16


def autocast(dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
    """CUDA autocast to `dtype`, or nothing for None (fp32)."""
    return contextlib.nullcontext() if dtype is None else torch.autocast(device_type="cuda", dtype=dtype)


def precision_name(dtype: torch.dtype | None) -> str:
    """The training.precision value that names an autocast dtype: bf16, fp16, or fp32 for None."""
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32") if dtype is not None else "fp32"
