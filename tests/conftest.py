"""Shared fixtures (helpers that are not fixtures live in tests/helpers.py): no Hugging Face hub, and a
real (tiny) trained run on the reverse-digits task, for translate/evaluate tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.helpers import TINY_TRANSFORMER, reverse_task_config

# Two pytest-xdist workers share two cores with the trainings some tests start: a torch op split over two
# threads then waits for whichever thread is descheduled (a tiny Transformer's 800 steps took 52 s on two
# threads beside a busy core, 13 s on one, AMD EPYC). Each worker, and every process it starts, uses one
# thread unless a test or a run's training.threads says otherwise.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


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


@pytest.fixture(scope="session")
def trained_transformer_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run dir of a tiny Transformer (2+2 layers, d_model 32, 2 heads) trained 300 steps on reversing 5-10
    digit sequences: it reverses about a third of them exactly (9 of 24, AMD EPYC). Do not modify it."""
    from nmt.training.trainer import train

    root = tmp_path_factory.mktemp("transformer_run")
    model = {**TINY_TRANSFORMER, "embedding_size": 32, "hidden_size": 32, "feedforward_size": 64, "dropout": 0.0}
    config = reverse_task_config(root / "data", max_len=10, model=model, training={
        "max_steps": 300, "validate_every": 100, "checkpoint_every": 150, "batch_tokens": 1000,
        "learning_rate": 0.002, "warmup_steps": 50,
    })
    train(config, root / "run")
    return root / "run"
