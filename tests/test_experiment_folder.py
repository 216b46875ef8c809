"""nmt/compare/experiment_folder.py: what `nmt experiment` may write into, and what its --force may delete (more of
--force: tests/test_experiment.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from nmt.compare import experiment
from nmt.compare.experiment import run_experiment
from nmt.compare.experiment_folder import check_out_folder
from nmt.config import Config, config_from_dict, save_config
from nmt.errors import NMTError
from tests.helpers import reverse_task_config


def _config(tmp_path: Path, data: Path | None = None) -> tuple[Config, Path]:
    """A two-run config on the reverse task's files (under `data`, default tmp_path/data), saved as tmp_path/c.yaml."""
    raw = reverse_task_config(data or tmp_path / "data").to_dict()
    raw["runs"] = {"a": {"model": {"attention": "none"}}, "b": {}}
    config = config_from_dict(raw)
    save_config(config, tmp_path / "c.yaml")
    return config, tmp_path / "c.yaml"


def test_a_folder_of_the_user_s_own_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    _, path = _config(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.yaml").write_text("my notes", encoding="utf-8")
    (mine / "report.md").write_text("my report", encoding="utf-8")
    with pytest.raises(NMTError, match=r"--out \S+mine holds config.yaml, report.md, and no nmt experiment wrote it"):
        run_experiment(path, [], mine)
    assert sorted(p.name for p in mine.iterdir()) == ["config.yaml", "report.md"]
    assert (mine / "config.yaml").read_text(encoding="utf-8") == "my notes"
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(NMTError, match="is a file, not a folder"):
        run_experiment(path, [], tmp_path / "file")


def test_a_new_an_empty_or_an_experiment_s_folder_is_taken(tmp_path: Path) -> None:
    config, path = _config(tmp_path)
    check_out_folder(config, path, tmp_path / "new", force=False, runs=None)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".DS_Store").write_bytes(b"")
    check_out_folder(config, path, empty, force=False, runs=None)
    (empty / "report.md").write_text("an experiment's", encoding="utf-8")
    (empty / "timings.json").write_text('{"sessions": []}', encoding="utf-8")
    check_out_folder(config, path, empty, force=False, runs=None)


def test_an_experiment_that_failed_before_its_first_step_ended_is_taken_up_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """timings.json is written first: a folder whose experiment failed while it prepared its data (a corpus file
    missing, the mistake mended since) is the experiment's, not a folder of the user's."""
    config, path = _config(tmp_path)

    def failing(config: Config) -> float:
        raise NMTError("corpus file not found: train.src")

    monkeypatch.setattr(experiment, "_prepare_data", failing)
    with pytest.raises(NMTError, match="corpus file not found"):
        run_experiment(path, [], tmp_path / "out")
    assert {"timings.json", "config.yaml"} <= {p.name for p in (tmp_path / "out").iterdir()}
    check_out_folder(config, path, tmp_path / "out", force=False, runs=None)


@pytest.mark.parametrize("inside", ["corpus", "prepared data"])
def test_force_never_deletes_what_the_runs_read(tmp_path: Path, inside: str) -> None:
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    (out / "timings.json").write_text('{"sessions": []}', encoding="utf-8")
    config, path = _config(tmp_path, out / "corpus" if inside == "corpus" else None)
    raw = config.to_dict()
    raw["data"]["dir"] = str(out / "prepared" if inside == "prepared data" else tmp_path / "prepared")
    config = config_from_dict(raw)
    save_config(config, path)
    held = sorted(p.relative_to(out) for p in out.rglob("*"))
    said = r"data.files's file \S+/out/corpus/train.src" if inside == "corpus" else r"data.dir \S+/out/prepared"
    with pytest.raises(NMTError, match=rf"--force would delete \S+out, and run 'a' reads {said} there"):
        run_experiment(path, [], out, force=True)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == held
    check_out_folder(config, path, out, force=True, runs=["a"])  # only runs/a goes


def test_a_glob_s_folder_counts_as_what_the_runs_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "jsonl").mkdir(parents=True)
    (out / "timings.json").write_text('{"sessions": []}', encoding="utf-8")
    config, path = _config(tmp_path)
    raw = config.to_dict()
    raw["data"] |= {"source": "huggingface", "huggingface": {"name": "json", "train": str(out / "jsonl" / "*.jsonl")}}
    config = config_from_dict(raw)
    with pytest.raises(NMTError, match=r"reads data.huggingface's file \S+/out/jsonl/\*\.jsonl there"):
        check_out_folder(config, path, out, force=True, runs=None)
    raw["data"]["huggingface"] = {"name": "wmt14", "config": "de-en"}  # a hub name: no file here
    check_out_folder(config_from_dict(raw), path, out, force=True, runs=None)


@pytest.mark.skipif(importlib.util.find_spec("MeCab") is not None, reason="sacrebleu's ja-mecab can run here")
def test_a_bleu_tokenizer_that_cannot_run_here_is_refused_before_the_folder_is_made(tmp_path: Path) -> None:
    _, path = _config(tmp_path)
    with pytest.raises(NMTError, match="evaluation.tokenize ja-mecab cannot be used here"):
        run_experiment(path, ["evaluation.tokenize=ja-mecab"], tmp_path / "out")
    assert not (tmp_path / "out").exists()
