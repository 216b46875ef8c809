"""What a result was produced on: library versions and hardware, for run directories and reports."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch


def cpu_name() -> str:
    """The processor's model name (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def describe_environment(device: torch.device | None = None) -> dict[str, Any]:
    """Versions of Python and the libraries that decide results, the CPU, and the GPU in use if any."""
    import sacrebleu
    import sentencepiece

    import nmt

    on_gpu = device is not None and device.type == "cuda"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "sentencepiece": sentencepiece.__version__,
        "sacrebleu": sacrebleu.__version__,
        "nmt": nmt.__version__,
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": available_cores(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(device) if on_gpu else None,
    }
