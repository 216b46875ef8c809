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


def capture_rng(device: torch.device) -> dict[str, Any]:
    """Every RNG the loop draws from, on the CPU and on `device` (the GPU this process trains on, if one),
    in a form torch.load(weights_only=True) accepts."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    numpy = {"kind": kind, "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
             "has_gauss": int(has_gauss), "cached": float(cached)}
    return {"python": random.getstate(), "numpy": numpy, "torch": torch.get_rng_state(),
            "cuda": [torch.cuda.get_rng_state(device)] if device.type == "cuda" else []}


def restore_rng(state: dict[str, Any], device: torch.device) -> str:
    """Put back the RNG states saved by `capture_rng`, the GPU's onto `device`. Returns "" or, where a
    checkpoint that saved every visible GPU's state meets another number of them, why the GPU's is not
    restored (the run goes on, but draws other dropout than an uninterrupted one would)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    saved = state["numpy"]
    np.random.set_state(
        (saved["kind"], saved["keys"].cpu().numpy().astype(np.uint32), saved["pos"], saved["has_gauss"], saved["cached"])
    )
    torch.set_rng_state(state["torch"].cpu())
    cuda_states = [s.cpu() for s in state["cuda"]]
    if device.type != "cuda" or not cuda_states:
        return ""
    if len(cuda_states) == 1:
        torch.cuda.set_rng_state(cuda_states[0], device)
    elif len(cuda_states) == torch.cuda.device_count():  # a checkpoint that saved every visible GPU's
        torch.cuda.set_rng_state_all(cuda_states)
    else:
        return (f"the checkpoint holds the random states of {len(cuda_states)} GPUs and {torch.cuda.device_count()} "
                "are visible: the GPU's is not restored, so dropout differs from an uninterrupted run's")
    return ""
