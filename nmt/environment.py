"""What a result was produced on: library versions and hardware, for run directories and reports."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch


def _cpuinfo(path: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    fields: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError:
        return fields
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_model(info: dict[str, str]) -> str | None:
    """The processor's family and model numbers in `info` (`_cpuinfo`), as lscpu gives them ("family 25
    model 17"): one model name ("AMD EPYC") covers generations whose float kernels differ."""
    if "cpu family" not in info or "model" not in info:
        return None
    return f"family {info['cpu family']} model {info['model']}"


PACKAGE_DIR = Path(__file__).resolve().parent


def source_commit(folder: Path = PACKAGE_DIR) -> str | None:
    """The git commit of the nmt source in `folder` (this package's), "COMMIT with uncommitted changes" where
    its files differ from it; where the package is no tracked folder of a git checkout (an installed copy, a
    copy carried to another machine without .git) or git cannot be run, "COMMIT as NMT_COMMIT gives it" where
    that variable names the commit the copy was made from (scripts/gpu_*.sh pass it on), else None."""
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30)

    try:
        tracked = git("ls-files", "--error-unmatch", "__init__.py")  # else a .venv inside some checkout
        head = git("rev-parse", "HEAD")
        changes = git("status", "--porcelain", "--", ".")  # the package's own files, new ones included
    except (OSError, subprocess.SubprocessError):
        tracked = head = None
    if tracked is None or head is None or tracked.returncode != 0 or head.returncode != 0:
        given = os.environ.get("NMT_COMMIT", "").strip()
        return f"{given} as NMT_COMMIT gives it" if given else None
    return head.stdout.strip() + (" with uncommitted changes" if changes.stdout.strip() else "")


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
    info = _cpuinfo()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "sentencepiece": sentencepiece.__version__,
        "sacrebleu": sacrebleu.__version__,
        "nmt": nmt.__version__,
        "nmt_commit": source_commit(),
        "platform": platform.platform(),
        "cpu": info.get("model name") or platform.processor() or platform.machine(),
        "cpu_model": cpu_model(info),
        # the vector instructions torch's CPU kernels use (AVX2, AVX512): runs reproduce bit for bit where
        # this, the threads and the versions agree, and differ in the last bits where it does not
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_count": available_cores(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(device) if on_gpu else None,
        # which GPUs the process saw (nmt experiment gives each training worker one, on a machine of several)
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES") if on_gpu else None,
    }
