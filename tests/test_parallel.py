"""nmt/training/parallel.py: how many runs train at once, a worker's error in the parent (runs trained in
parallel, end to end: tests/system/test_experiment.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
from pathlib import Path

import pytest

import nmt.training.parallel as parallel
from nmt.config import config_from_dict
from nmt.errors import NMTError
from nmt.rundir.checkpoints import load_checkpoint, save_checkpoint
from nmt.rundir.writing import read_summary
from nmt.training.terminal import StopRequest
from nmt.training.trainer import train
from tests.helpers import reverse_task_config


def test_training_jobs_default_to_one_per_core_on_cpu_and_one_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {name: {} for name in "abcd"}
    config = config_from_dict({"training": {"device": "cpu"}, "runs": runs})
    monkeypatch.setattr(parallel, "available_cores", lambda: 2)
    assert parallel.training_jobs(config, 0) == 2 and parallel.training_jobs(config, 3) == 3
    monkeypatch.setattr(parallel, "available_cores", lambda: 16)
    assert parallel.training_jobs(config, 0) == 4  # never more than the runs
    on_gpu = config_from_dict({"training": {"device": "cuda"}, "runs": runs})
    assert parallel.training_jobs(on_gpu, 0) == 1


def test_a_workers_stop_holds_when_the_interrupt_that_asks_for_it_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGUSR1 reaching a worker whose run is still setting up raises KeyboardInterrupt there; should that be
    lost, the run's StopRequest still starts requested."""
    monkeypatch.setattr(StopRequest, "pending", False)
    with StopRequest(print) as untouched:
        assert not untouched.requested
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as _train_in_child sets it
    try:
        with contextlib.suppress(KeyboardInterrupt):  # the interrupt, lost
            parallel._stop(signal.SIGUSR1, None)
    finally:
        signal.signal(signal.SIGINT, previous)
    with StopRequest(print) as request:
        assert request.requested


@pytest.mark.slow  # a spawned worker process imports torch and the package: 2.6-3.7 s on 2 cores
def test_a_run_failing_in_a_worker_reaches_the_parent_with_its_hint_and_log(tmp_path: Path) -> None:
    config = config_from_dict({"training": {"device": "cpu"}, "runs": {"a": {}}})
    run_dir = tmp_path / "runs" / "a"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("model: {hiden_size: 8}", encoding="utf-8")  # refused, nothing trained
    with pytest.raises(NMTError) as caught:
        parallel._train_in_parallel({"a": config.for_run("a")}, {"a": run_dir}, jobs=1)
    assert caught.value.message.startswith(f"run a: {run_dir / 'config.yaml'}: unknown key 'model.hiden_size'")
    assert caught.value.hint.startswith("Valid keys of model: ") and caught.value.hint.endswith(f"(its output: {run_dir}.log)")


def test_a_resumed_run_records_its_whole_training_time(tmp_path: Path) -> None:
    tiny = {"embedding_size": 8, "hidden_size": 8, "attention_size": 8, "maxout_size": 8}
    config = reverse_task_config(tmp_path / "data", n_train=100, model=tiny,
                                 training={"max_steps": 4, "checkpoint_every": 2, "validate_every": 2,
                                           "lr_schedule": "constant"})  # cosine: at its max_steps, not stretched
    config = dataclasses.replace(config, runs={"a": {}})
    run_dir = tmp_path / "runs" / "a"
    train(config.for_run("a"), run_dir)
    checkpoint = load_checkpoint(run_dir / "checkpoints" / "step_00000004.pt")
    assert checkpoint.training is not None
    checkpoint.training.elapsed_s = 1000.0  # as if the first session had trained for 1000 s
    save_checkpoint(run_dir / "checkpoints" / "step_00000004.pt", checkpoint)
    (run_dir / "summary.json").unlink()  # interrupted after that checkpoint
    longer = dataclasses.replace(config, training=dataclasses.replace(config.training, max_steps=6))
    timings: dict[str, float] = {}
    assert parallel.train_runs(longer, {"a": run_dir}, 1, timings.__setitem__) == 0
    assert timings["train a"] == read_summary(run_dir)["wall_time_s"] > 1000
