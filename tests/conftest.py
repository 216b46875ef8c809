"""Shared fixtures: a real (tiny) trained run on the reverse-digits task, for translate/evaluate tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nmt.config import Config, config_from_dict, save_config
from tests.synthetic import reverse_pairs, write_parallel


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
            "train": str(root / "train"), "valid": str(root / "valid"), "test": str(root / "test"),
            "vocab_size": 25, "subword_type": "bpe",
        },
        "model": {
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


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No Hugging Face hub: `datasets` works on local files only, with caches inside tmp_path."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


@pytest.fixture(scope="session")
def trained_reverse_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run dir of a tiny RNNsearch trained ~10 s on reversing 5-10 digit sequences (data in its data/prepared).

    With the cosine schedule it reverses 96-100% of tests/test_translate.py's 24 sequences exactly
    (seeds 1-3, 1 and 2 threads, AMD EPYC; 75-88% with the constant lr and 100 steps it had before); the
    session shares it: do not modify it (copy it first).
    """
    from nmt.training.trainer import train

    root = tmp_path_factory.mktemp("reverse_run")
    config = reverse_task_config(
        root / "data",
        max_len=10,
        training={
            "max_steps": 150, "validate_every": 50, "batch_tokens": 1000, "learning_rate": 0.01,
            "warmup_steps": 20, "lr_schedule": "cosine",
        },
    )
    train(config, root / "run", resume=False)
    return root / "run"


def fake_run(path: Path, beam_size: int = 5, attention: str = "additive") -> Path:
    """A run folder as far as evaluate's bookkeeping looks: config.yaml and a checkpoint file."""
    config = Config()
    config.decoding.beam_size = beam_size
    config.model.attention = attention
    save_config(config, path / "config.yaml")
    (path / "checkpoints").mkdir(parents=True)
    (path / "checkpoints" / "best.pt").write_bytes(b"weights")
    return path
