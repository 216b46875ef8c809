"""nmt/compare/experiment.py without training: the step timings it keeps, and what --force may delete
(whole experiments: tests/system/test_experiment.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nmt.compare.experiment import Timings, _setup_lines, _tables, run_experiment
from nmt.config import config_from_dict, load_config, save_config
from nmt.errors import NMTError
from nmt.rundir.writing import write_config, write_summary
from tests.helpers import CONFIGS, shortened


def test_force_only_deletes_experiment_folders(tmp_path: Path) -> None:
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "thesis.tex").write_text("keep me", encoding="utf-8")
    with pytest.raises(NMTError, match=r"--force would delete .*notes, which is not an experiment folder"):
        run_experiment(CONFIGS / "quick.yaml", [], precious, force=True)
    assert (precious / "thesis.tex").read_text(encoding="utf-8") == "keep me"


@pytest.mark.parametrize("text", ['{"prepare": 1', '[1, 2]', '{"prepare": null}', '{"prepare": "soon"}'])
def test_unreadable_timings_is_a_user_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "timings.json").write_text(text, encoding="utf-8")
    with pytest.raises(NMTError, match=r"timings.json is not the step timings") as error:
        Timings(tmp_path / "timings.json")
    assert "Delete it" in error.value.hint


def test_timings_read_back_what_they_recorded(tmp_path: Path) -> None:
    Timings(tmp_path / "timings.json").record("prepare", 12.345)
    assert Timings(tmp_path / "timings.json").seconds == {"prepare": 12.3}
    timings = Timings(tmp_path / "timings.json")
    timings.record("evaluate", 2.0)
    timings.forget("prepare")
    assert Timings(tmp_path / "timings.json").seconds == {"evaluate": 2.0}


def test_a_refused_experiment_writes_nothing(tmp_path: Path) -> None:
    config_path, out = tmp_path / "a.yaml", tmp_path / "out"
    config_path.write_text("model: {hidden_size: 16}\nruns: {a: {}}\n", encoding="utf-8")
    overrides = shortened(tmp_path / "data")
    config = load_config(config_path, overrides)
    save_config(config, out / "config.yaml")
    Timings(out / "timings.json").record("prepare", 5.0)
    write_config(config.for_run("a"), out / "runs" / "a")
    write_summary(out / "runs" / "a", {"stopped_by": "max_steps", "wall_time_s": 60.0})
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    with pytest.raises(NMTError, match=r"run 'a' in .* was trained with a different config \(model.hidden_size\)"):
        run_experiment(config_path, [*overrides, "model.hidden_size=32"], out)
    with pytest.raises(NMTError, match=r"finished at training.max_steps 2; continuing it to 4 would stretch its "
                                       r"cosine schedule") as longer:
        run_experiment(config_path, [*overrides, "training.max_steps=4"], out)
    assert "--force" in longer.value.hint
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before


def test_the_report_gives_the_torch_threads_the_runs_trained_with(tmp_path: Path) -> None:
    config = config_from_dict({"runs": {"a": {}, "b": {}}})
    for name in config.runs:
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "environment.json").write_text('{"torch_threads": 1}', encoding="utf-8")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert ", torch threads 1 per training run and 2 in evaluation" in _setup_lines(config, tmp_path)[0]
    finally:
        torch.set_num_threads(threads)


def test_the_parameter_table_names_each_run_s_attention() -> None:
    config = load_config(CONFIGS / "transformer.yaml")
    counts = dict.fromkeys(config.runs, 1000)
    rows = _tables(config, Timings(Path("/nonexistent/timings.json")), counts, {})[2:7]
    assert rows == [
        "| rnnsearch-30 | additive | 1,000 |",
        "| rnnsearch-50 | additive | 1,000 |",
        "| transformer-30 | 4 x scaled dot-product, sinusoidal positions | 1,000 |",
        "| transformer-50 | 4 x scaled dot-product, sinusoidal positions | 1,000 |",
        "| transformer-30-relative | 4 x scaled dot-product, relative positions | 1,000 |",
    ]
