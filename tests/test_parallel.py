"""nmt/training/parallel.py: how many runs train at once (runs trained in parallel, end to end:
tests/system/test_experiment.py)."""

from __future__ import annotations

import pytest

import nmt.training.parallel as parallel
from nmt.config import config_from_dict


def test_training_jobs_default_to_one_per_core_on_cpu_and_one_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {name: {} for name in "abcd"}
    config = config_from_dict({"training": {"device": "cpu"}, "runs": runs})
    monkeypatch.setattr(parallel, "available_cores", lambda: 2)
    assert parallel.training_jobs(config, 0) == 2 and parallel.training_jobs(config, 3) == 3
    monkeypatch.setattr(parallel, "available_cores", lambda: 16)
    assert parallel.training_jobs(config, 0) == 4  # never more than the runs
    on_gpu = config_from_dict({"training": {"device": "cuda"}, "runs": runs})
    assert parallel.training_jobs(on_gpu, 0) == 1
