"""The random number generators of a run: seeded at its start, and their states saved in each step
checkpoint, so that a resumed run draws the very same numbers."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed python's random, numpy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def capture_rng() -> dict[str, Any]:
    """Every RNG the loop draws from, in a form torch.load(weights_only=True) accepts."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    numpy = {"kind": kind, "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
             "has_gauss": int(has_gauss), "cached": float(cached)}
    return {"python": random.getstate(), "numpy": numpy, "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def restore_rng(state: dict[str, Any]) -> None:
    """Put back the RNG states saved by `capture_rng` (CUDA ones only when this machine has the same GPUs)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    saved = state["numpy"]
    np.random.set_state(
        (saved["kind"], saved["keys"].cpu().numpy().astype(np.uint32), saved["pos"], saved["has_gauss"], saved["cached"])
    )
    torch.set_rng_state(state["torch"].cpu())
    cuda_states = state["cuda"]
    if cuda_states and torch.cuda.is_available() and len(cuda_states) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda_states])
