"""Exact resume: N steps straight == N/2 steps + --resume + N/2 steps, bit for bit; kills and signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from nmt.config import Config, config_from_dict, save_config
from nmt.training.trainer import train
from tests.helpers import reverse_task_config

REPO = Path(__file__).resolve().parents[1]
TIMING_KEYS = ("tgt_tokens_per_s", "elapsed_s")


def config_for(data_root: Path, **training: Any) -> Config:
    # Dropout, warm-up and plateau decay all carry state that a resume must restore. A constant schedule:
    # the half run is the same config with a smaller max_steps, which would move the default cosine.
    settings = {
        "max_steps": 40, "validate_every": 10, "checkpoint_every": 7, "log_every": 3, "warmup_steps": 5,
        "learning_rate": 0.001, "lr_schedule": "constant",
        "lr_patience": 1, "batch_tokens": 300, "valid_max_sentences": 10, **training,
    }
    model = {"embedding_size": 16, "hidden_size": 32, "attention_size": 32, "maxout_size": 16, "dropout": 0.2}
    return reverse_task_config(data_root, n_train=200, min_len=4, max_len=8, model=model, training=settings)


def with_max_steps(config: Config, max_steps: int) -> Config:
    raw = config.to_dict()
    raw["training"]["max_steps"] = max_steps
    return config_from_dict(raw)


def log_without_timing(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "log.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS} for line in lines]


def final_state(run_dir: Path, step: int) -> dict[str, Any]:
    return torch.load(run_dir / "checkpoints" / f"step_{step:08d}.pt", weights_only=True)


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_half_plus_resume_equals_straight_bitwise(tmp_path: Path) -> None:
    config = config_for(tmp_path / "data")
    straight = train(config, tmp_path / "straight")
    train(with_max_steps(config, 20), tmp_path / "split")
    resumed = train(config, tmp_path / "split", resume=True)

    a, b = final_state(tmp_path / "straight", 40), final_state(tmp_path / "split", 40)
    assert_same_weights(a["model"], b["model"])
    assert a["epoch"] == b["epoch"] > 1 and a["position"] == b["position"]
    for key in ("exp_avg", "exp_avg_sq"):
        for pa, pb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
            assert torch.equal(pa[key], pb[key])
    assert a["schedule"] == b["schedule"] and a["best_score"] == b["best_score"]
    log = log_without_timing(tmp_path / "straight")
    assert log == log_without_timing(tmp_path / "split")
    losses = [e["loss"] for e in log if e["event"] == "train"]
    assert len(losses) == 13 and len(set(losses)) == 13
    for key in ("final_step", "epoch", "best_step", "best_score", "stopped_by", "last_validation"):
        assert straight[key] == resumed[key], key


def test_resuming_a_finished_run_changes_nothing(tmp_path: Path) -> None:
    config = config_for(tmp_path / "data", max_steps=6, validate_every=3)
    first = train(config, tmp_path / "run")
    weights = final_state(tmp_path / "run", 6)["model"]
    again = train(config, tmp_path / "run", resume=True)
    assert_same_weights(weights, final_state(tmp_path / "run", 6)["model"])
    assert {k: v for k, v in again.items() if k != "wall_time_s"} == {
        k: v for k, v in first.items() if k != "wall_time_s"
    }


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_resume_on_cuda_fp16_from_a_run_saved_without_a_grad_scaler(tmp_path: Path) -> None:
    # On CPU fp16 falls back to fp32 and the scaler is disabled, so the checkpoint holds scaler {}.
    config = config_for(tmp_path / "data", max_steps=4, checkpoint_every=2, validate_every=4, precision="fp16")
    cpu_run = with_max_steps(config, 2)
    train(cpu_run, tmp_path / "run")
    assert final_state(tmp_path / "run", 2)["scaler"] == {}
    raw = config.to_dict()
    raw["training"]["device"] = "cuda"
    summary = train(config_from_dict(raw), tmp_path / "run", resume=True)
    assert summary["final_step"] == 4 and summary["device"].startswith("cuda")
    assert final_state(tmp_path / "run", 4)["scaler"]["scale"] > 0


def start_training(config_path: Path, run_dir: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "nmt", "train", str(config_path), "--run-dir", str(run_dir), *extra],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def wait_for(path: Path, process: subprocess.Popen[str], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, f"training ended early:\n{process.stdout.read() if process.stdout else ''}"
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def launch(tmp_path: Path, **training: int) -> tuple[Config, Path, Path, subprocess.Popen[str]]:
    """Write a one-thread reverse-task config and start `nmt train` on it in a subprocess."""
    config = config_for(tmp_path / "data", threads=1, **training)
    config_path = tmp_path / "config.yaml"
    save_config(config, config_path)
    run_dir = tmp_path / "run"
    return config, config_path, run_dir, start_training(config_path, run_dir)


@pytest.mark.slow
def test_sigkill_mid_training_then_resume_finishes_like_a_straight_run(tmp_path: Path) -> None:
    config, config_path, run_dir, process = launch(tmp_path, max_steps=120, checkpoint_every=5, validate_every=40)
    wait_for(run_dir / "checkpoints" / "step_00000010.pt", process)
    process.kill()
    process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not (run_dir / "summary.json").exists()

    finished = start_training(config_path, run_dir, "--resume")
    output, _ = finished.communicate(timeout=120)
    assert finished.returncode == 0, output
    assert "resumed from" in output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_step"] == 120 and summary["stopped_by"] == "max_steps"
    steps = [e["step"] for e in log_without_timing(run_dir) if e["event"] == "train"]
    assert steps == list(range(3, 121, 3))

    train(config, tmp_path / "straight")
    assert_same_weights(final_state(run_dir, 120)["model"], final_state(tmp_path / "straight", 120)["model"])


@pytest.mark.slow
def test_sigint_saves_a_checkpoint_and_exits_130(tmp_path: Path) -> None:
    _, _, run_dir, process = launch(tmp_path, max_steps=400, checkpoint_every=1000, validate_every=1000)
    wait_for(run_dir / "log.jsonl", process)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, output
    assert "interrupted" in output
    checkpoints = sorted((run_dir / "checkpoints").glob("step_*.pt"))
    assert len(checkpoints) == 1
    step = torch.load(checkpoints[0], weights_only=True)["step"]
    assert 3 <= step < 400
    assert not (run_dir / "summary.json").exists()


def test_a_run_ended_off_the_validation_grid_resumes_to_the_straight_runs_weights(tmp_path: Path) -> None:
    # The first part ends at step 15, between validations (every 10): its closing validation chooses
    # best.pt, but the learning-rate plateau schedule (lr_patience 1) follows the periodic ones only.
    config = config_for(tmp_path / "data", max_steps=24)
    train(config, tmp_path / "straight")
    train(with_max_steps(config, 15), tmp_path / "split")
    train(config, tmp_path / "split", resume=True)
    a, b = final_state(tmp_path / "straight", 24), final_state(tmp_path / "split", 24)
    assert_same_weights(a["model"], b["model"])
    assert a["schedule"] == b["schedule"]
    valid = [e["step"] for e in log_without_timing(tmp_path / "split") if e["event"] == "valid"]
    assert valid == [10, 15, 20, 24]
