"""Shared test helpers (conftest.py holds only fixtures): a config on the reverse-digits task, a fake run
folder, and a shipped config shortened onto local files."""

from __future__ import annotations

import errno
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch

from nmt.config import Config, EvaluationConfig, config_from_dict, save_config
from tests.synthetic import reverse_pairs, write_parallel

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
# the CUDA paths (cuDNN RNNs, autocast, NCCL): tested where a GPU is, skipped elsewhere (CI has none)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class FillingDisk(io.FileIO):
    """A file on a disk with 5,000 bytes left: the write that goes past them fails as a full disk's."""

    def write(self, data: Any) -> int:
        if self.tell() + len(data) > 5000:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def unwritable(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Make `folder` refuse new files and folders, as a read-only one does (chmod stops no one running as root):
    tempfile's mkstemp and mkdtemp fail there with EACCES, naming the temporary name they tried, and os.access
    says it cannot be written."""

    def refusing(make: Any) -> Any:
        def made(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("dir") is not None and Path(kwargs["dir"]).resolve() == folder.resolve():
                tried = os.path.join(folder, f"{kwargs.get('prefix', '')}x1y2z3{kwargs.get('suffix', '')}")
                raise PermissionError(errno.EACCES, "Permission denied", tried)
            return make(*args, **kwargs)

        return made

    monkeypatch.setattr(tempfile, "mkstemp", refusing(tempfile.mkstemp))
    monkeypatch.setattr(tempfile, "mkdtemp", refusing(tempfile.mkdtemp))
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kwargs: (
        not (mode & os.W_OK and Path(path).resolve() == folder.resolve()) and access(path, mode, **kwargs)))


def scoring_settings(**values: Any) -> EvaluationConfig:
    """Evaluation settings that resample every non-empty subset (min_bucket_sentences 1) unless `values` say
    otherwise."""
    return EvaluationConfig(**{"min_bucket_sentences": 1, **values})


def reverse_task_config(
    root: Path,
    *,
    n_train: int = 600,
    min_len: int = 5,
    max_len: int = 12,
    model: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
) -> Config:
    """A Config on the reverse-digits task with files under `root` (data prepared into root/prepared).

    One sentencepiece piece per digit: bpe with 4 specials + 11 characters + 10 '▁d' merges = 25.
    """
    # Written once: rewriting would change the files' mtime and make `prepare` rebuild the data dir.
    for name, n, seed in (("train", n_train, 0), ("valid", 40, 1), ("test", 40, 2)):
        if not (root / f"{name}.tgt").is_file():
            write_parallel(root / name, reverse_pairs(n, min_len, max_len, seed=seed))
    raw = {
        "data": {
            "source": "files", "dir": str(root / "prepared"), "src_lang": "src", "tgt_lang": "tgt",
            "files": {"train": str(root / "train"), "valid": str(root / "valid"), "test": str(root / "test")},
            "vocab_size": 25, "subword_type": "bpe",
        },
        # another architecture's `model` replaces these RNN sizes (it refuses RNN keys away from their defaults)
        "model": model if (model or {}).get("architecture", "rnn") != "rnn" else {
            "attention": "additive", "embedding_size": 32, "hidden_size": 64, "attention_size": 64,
            "maxout_size": 32, **(model or {}),
        },
        "training": {
            "max_steps": 60, "batch_tokens": 600, "seed": 1, "threads": 1, "device": "cpu",
            "learning_rate": 0.005, "validate_every": 30, "valid_max_sentences": 20, "checkpoint_every": 30,
            "log_every": 10, **(training or {}),
        },
        "decoding": {"beam_size": 2, "batch_size": 16},
    }
    return config_from_dict(raw, "reverse_task_config")


def fake_run(
    path: Path, beam_size: int = 5, attention: str = "additive", positions: str = "", max_words: int = 0
) -> Path:
    """A run folder as far as evaluate's bookkeeping looks: config.yaml and a checkpoint file. With
    `positions`, a Transformer's."""
    config = Config()
    config.decoding.beam_size = beam_size
    config.model.attention = attention
    if positions:
        config.model.architecture, config.model.positions = "transformer", positions  # type: ignore[assignment]
    config.training.max_words = max_words
    save_config(config, path / "config.yaml")
    (path / "checkpoints").mkdir(parents=True)
    (path / "checkpoints" / "best.pt").write_bytes(b"weights")
    return path


def shortened(root: Path) -> list[str]:
    """Overrides that point any shipped config's data at local reverse-digit files in `root` and cut training
    to 2 steps (a config's runs share its top-level data: the -30 / -50 runs differ in training.max_words)."""
    for name, n, seed in (("train", 200, 0), ("valid", 20, 1), ("test", 30, 2)):
        write_parallel(root / name, reverse_pairs(n, 3, 12, seed=seed))
    return [
        "data.source=files",
        f"data.dir={root / 'prepared'}",
        "data.src_lang=src",
        "data.tgt_lang=tgt",
        f"data.files.train={root / 'train'}",
        f"data.files.valid={root / 'valid'}",
        f"data.files.test={root / 'test'}",
        "data.vocab_size=25",
        "data.subword_type=bpe",
        "data.joint_vocab=true",
        "training.max_steps=2",
        "training.validate_every=2",
        "training.checkpoint_every=2",
        "training.valid_max_sentences=5",
        "training.batch_tokens=400",
        "training.device=cpu",
        "decoding.batch_size=16",
    ]


TIMING_KEYS = ("tgt_tokens_per_s", "elapsed_s")


TINY_TRANSFORMER = {
    "architecture": "transformer", "embedding_size": 16, "hidden_size": 16, "heads": 2, "feedforward_size": 32,
    "layers": 2, "dropout": 0.2,
}


def resume_config(data_root: Path, model: dict[str, Any] | None = None, **training: Any) -> Config:
    """A small reverse-task config whose resume must restore dropout, warm-up and plateau state."""
    # Dropout, warm-up and plateau decay all carry state that a resume must restore. A constant schedule:
    # the half run is the same config with a smaller max_steps, which would move the default cosine.
    settings = {
        "max_steps": 40, "validate_every": 10, "checkpoint_every": 7, "log_every": 3, "warmup_steps": 5,
        "learning_rate": 0.001, "lr_schedule": "constant",
        "lr_patience": 1, "batch_tokens": 300, "valid_max_sentences": 10, **training,
    }
    model = model or {"embedding_size": 16, "hidden_size": 32, "attention_size": 32, "maxout_size": 16, "dropout": 0.2}
    return reverse_task_config(data_root, n_train=200, min_len=4, max_len=8, model=model, training=settings)


def with_max_steps(config: Config, max_steps: int) -> Config:
    """`config` with another training.max_steps."""
    raw = config.to_dict()
    raw["training"]["max_steps"] = max_steps
    return config_from_dict(raw)


def log_without_timing(run_dir: Path) -> list[dict[str, Any]]:
    """log.jsonl's events without their timings (which differ between runs)."""
    lines = (run_dir / "log.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS} for line in lines]


def final_state(run_dir: Path, step: int) -> dict[str, Any]:
    """The raw content of checkpoints/step_{step}.pt."""
    return torch.load(run_dir / "checkpoints" / f"step_{step:08d}.pt", weights_only=True)


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    """Both state dicts hold exactly the same tensors."""
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    """The flat positions b * tgt_len + t of a batch x tgt_len mask's true entries, row-major: a model's
    target_positions, as make_batch builds them."""
    return mask.flatten().nonzero().squeeze(1)


class NanGradient(torch.autograd.Function):
    """Zero in value, NaN in gradient: a loss it is added to stays finite, and every gradient becomes NaN."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return torch.zeros_like(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return grad * torch.nan
