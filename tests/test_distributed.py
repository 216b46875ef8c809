"""DDP on CPU: `torchrun --nproc_per_node=2 -m nmt train` with gloo, one run dir, a falling loss."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.config import save_config
from tests.conftest import reverse_task_config

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_torchrun_two_cpu_processes(tmp_path: Path) -> None:
    config = reverse_task_config(
        tmp_path / "data", n_train=200, min_len=4, max_len=8,
        model={"embedding_size": 16, "hidden_size": 32, "attention_size": 32, "maxout_size": 16},
        training={"max_steps": 30, "validate_every": 15, "checkpoint_every": 10, "log_every": 5,
                  "batch_tokens": 300, "learning_rate": 0.01, "threads": 1},
    )
    config_path = tmp_path / "config.yaml"
    save_config(config, config_path)
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "nmt", "train", str(config_path), "--run-dir", str(run_dir)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "rank 0/2: training on cpu" in output and "rank 1/2: training on cpu" in output
    # Rank 0 alone writes: one log line per event, one summary, no stray run dirs.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "data", "run"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["final_step"] == 30
    assert json.loads((run_dir / "environment.json").read_text())["world_size"] == 2
    events = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    train_events = [e for e in events if e["event"] == "train"]
    assert [e["step"] for e in train_events] == [5, 10, 15, 20, 25, 30]
    assert [e["step"] for e in events if e["event"] == "valid"] == [15, 30]
    assert train_events[-1]["loss"] < 0.8 * train_events[0]["loss"]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "best.pt", "step_00000020.pt", "step_00000030.pt"
    ]
