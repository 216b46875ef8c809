"""nmt/training/parallel.py: how many runs train at once, a worker's error in the parent (runs trained in
parallel, end to end: tests/system/test_experiment.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import nmt.training.parallel as parallel
from nmt.config import config_from_dict
from nmt.errors import NMTError
from nmt.rundir.writing import write_config


def test_training_jobs_default_to_one_per_core_on_cpu_and_one_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {name: {} for name in "abcd"}
    config = config_from_dict({"training": {"device": "cpu"}, "runs": runs})
    monkeypatch.setattr(parallel, "available_cores", lambda: 2)
    assert parallel.training_jobs(config, 0) == 2 and parallel.training_jobs(config, 3) == 3
    monkeypatch.setattr(parallel, "available_cores", lambda: 16)
    assert parallel.training_jobs(config, 0) == 4  # never more than the runs
    on_gpu = config_from_dict({"training": {"device": "cuda"}, "runs": runs})
    assert parallel.training_jobs(on_gpu, 0) == 1


@pytest.mark.slow  # a spawned worker process imports torch and the package: 2.6-3.7 s on 2 cores
def test_a_run_failing_in_a_worker_reaches_the_parent_with_its_hint_and_log(tmp_path: Path) -> None:
    config = config_from_dict({"training": {"device": "cpu"}, "runs": {"a": {}}})
    run_dir = tmp_path / "runs" / "a"
    earlier = config_from_dict({"training": {"device": "cpu", "learning_rate": 0.5}, "runs": {"a": {}}})
    write_config(earlier.for_run("a"), run_dir)  # a run trained with another config: refused, nothing trained
    with pytest.raises(NMTError) as caught:
        parallel._train_in_parallel({"a": config.for_run("a")}, {"a": run_dir}, jobs=1)
    assert caught.value.message.startswith("run a: run 'a' in ") and "training.learning_rate" in caught.value.message
    assert caught.value.hint == f"Re-run with --force to redo it, or choose another --out folder. (its output: {run_dir}.log)"
