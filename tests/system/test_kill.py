"""Training killed mid-run (SIGKILL) resumes to a straight run's weights; Ctrl-C (SIGINT) saves a
checkpoint and exits 130, in training and in a validation. All run `nmt train` in a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from nmt.config import Config, config_from_dict, save_config
from nmt.rundir.checkpoints import load_checkpoint
from nmt.training.trainer import train
from tests.helpers import assert_same_weights, final_state, log_without_timing, resume_config
from tests.synthetic import reverse_pairs, write_parallel

REPO = Path(__file__).resolve().parents[2]


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
    config = resume_config(tmp_path / "data", threads=1, **training)
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
    assert "the same command with --resume continues it" in output
    checkpoints = sorted((run_dir / "checkpoints").glob("*_*.pt"))
    assert [p.name.split("_")[0] for p in checkpoints] == ["interrupted"]  # no periodic checkpoint: for resume only
    step = torch.load(checkpoints[0], weights_only=True)["step"]
    assert 3 <= step < 400
    assert not (run_dir / "summary.json").exists()


@pytest.mark.slow
def test_sigint_stops_a_long_validation_within_seconds_and_records_none_of_it(tmp_path: Path) -> None:
    # 20,000 validation sentences, each decoded by the barely trained model to its limit of about 1,000
    # tokens: a validation of about 4 minutes (667 batches of about 0.36 s on the busy 2-core AMD EPYC)
    write_parallel(tmp_path / "data" / "valid", reverse_pairs(20_000, 4, 8, seed=1))
    raw = resume_config(tmp_path / "data", threads=1, max_steps=2, log_every=2, validate_every=2,
                        valid_max_sentences=0).to_dict()
    raw["decoding"].update(max_length_ratio=10.0, max_length_offset=1000)
    config_path, run_dir = tmp_path / "config.yaml", tmp_path / "run"
    save_config(config_from_dict(raw), config_path)
    process = start_training(config_path, run_dir)
    wait_for(run_dir / "log.jsonl", process)  # step 2's log line, written just before its validation
    time.sleep(1.0)  # well into the validation's decoding
    process.send_signal(signal.SIGINT)
    asked = time.monotonic()
    try:
        output, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired as timeout:
        process.kill()
        pytest.fail(f"still validating 30 s after SIGINT; its output:\n{timeout.output!r}")
    took = time.monotonic() - asked
    assert took < 10, f"{took:.1f} s after SIGINT; its output:\n{output}"
    assert process.returncode == 130 and "signal SIGINT: saving a checkpoint, then stopping" in output, output
    assert "validation at step" not in output and "the same command with --resume continues it" in output
    # the partial validation is no score: not logged, not in the checkpoint, no best.pt
    assert [json.loads(line)["event"] for line in (run_dir / "log.jsonl").read_text().splitlines()] == ["train"]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["interrupted_00000002.pt"]
    checkpoint = load_checkpoint(run_dir / "checkpoints" / "interrupted_00000002.pt")
    assert checkpoint.training is not None and checkpoint.training.last_validation is None
