"""Paths a user gives: runs usable from any working directory, prepared folders derived from the corpus,
local Hugging Face folders whose edits are noticed."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from nmt.compare.evaluate import evaluate_runs
from nmt.config import config_from_dict, load_config
from nmt.data.prepare import prepare
from nmt.data.sources import absolute, prepared_dir
from nmt.errors import NMTError
from nmt.training.trainer import train
from tests.synthetic import reverse_pairs, write_parallel


def relative_config(root: Path) -> Path:
    """root/exp.yaml: a tiny files corpus under root/data, every path relative to root, no data.dir."""
    for name, n, seed in (("train", 120, 0), ("valid", 10, 1), ("test", 12, 2)):
        write_parallel(root / "data" / name, reverse_pairs(n, 3, 6, seed=seed))
    raw = {
        "data": {"source": "files", "src_lang": "src", "tgt_lang": "tgt", "vocab_size": 25, "subword_type": "bpe",
                 "files": {"train": "data/train", "valid": "data/valid", "test": "data/test"}},
        "model": {"embedding_size": 8, "hidden_size": 16, "attention_size": 16, "maxout_size": 8},
        "training": {"max_steps": 2, "validate_every": 2, "checkpoint_every": 2, "valid_max_sentences": 4,
                     "batch_tokens": 200, "threads": 1, "device": "cpu"},
        "decoding": {"beam_size": 1},
        "evaluation": {"bootstrap_samples": 40},
    }
    path = root / "exp.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def test_a_run_evaluates_from_any_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    config_path = relative_config(project)
    monkeypatch.chdir(project)
    config = load_config("exp.yaml")
    train(config, Path("runs/a"), resume=False)
    saved = load_config(project / "runs/a/config.yaml").data
    assert saved.sources["files"]["train"] == str(project / "data/train") and Path(saved.dir).is_absolute()
    assert Path(saved.dir).parent == project / "data/prepared"
    stamp = (Path(saved.dir) / "prepared.json").stat().st_mtime_ns

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    results = evaluate_runs([Path("../project/runs/a")], out_dir=Path("eval"), overrides=["evaluation.split=test"])
    assert results["runs"]["a"]["n"] == 12
    # the run's prepared data was found as it is, not rebuilt from paths relative to here
    assert (Path(saved.dir) / "prepared.json").stat().st_mtime_ns == stamp
    assert not (elsewhere / "data").exists()
    test_set = json.loads((elsewhere / "eval/results.json").read_text())["settings"]["test_set"]
    # what it is, not where: the prepared folder (outside here: its name), corpus, size and content hash
    assert re.fullmatch(rf"test split of {Path(saved.dir).name} \(files, src -> tgt\), 12 sentences, sha256 \w{{12}}", test_set)
    # the same run, trained again from its config.yaml elsewhere: the config is the same one
    monkeypatch.chdir(project)
    assert absolute(load_config(config_path).data) == saved


def test_a_run_config_holds_absolute_paths_for_source_and_target_files_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    pairs = {f"{split}_{side}": f"corpus/{split}.{side}" for split in ("train", "valid", "test") for side in ("src", "tgt")}
    data = config_from_dict({"data": {"source": "files", "files": pairs}}).data
    for key, relative in pairs.items():
        assert absolute(data).sources["files"][key] == str(tmp_path / relative), key
    # one corpus however its paths are spelled: the same derived folder
    spelled = {key: str(tmp_path / value) for key, value in pairs.items()}
    assert prepared_dir(config_from_dict({"data": {"source": "files", "files": spelled}}).data) == prepared_dir(data)


def test_a_builder_s_data_file_on_the_web_stays_a_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """datasets' builders read data files from URLs: a run's config.yaml keeps the URL (made "absolute" it named a
    local folder https:/..., and the run could not prepare its data again); a local file next to it is made absolute."""
    monkeypatch.chdir(tmp_path)
    url = "https://example.org/corpus/train.jsonl"
    data = config_from_dict({"data": {"source": "huggingface", "huggingface": {
        "name": "json", "train": url, "valid_split": "", "test": "local/test.jsonl"}}}).data
    recorded = absolute(data).sources["huggingface"]
    assert recorded["train"] == url and recorded["test"] == str(tmp_path / "local/test.jsonl")


def test_the_default_data_dir_is_derived_from_the_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    def data(train: str = "", **values: object) -> str:
        files = {"source": "files", "files": {"train": train}} if train else {}
        return prepared_dir(config_from_dict({"data": {**files, **values}}).data)

    bible = data()
    assert bible.startswith("data/prepared/bible-k-l-")
    a, b = data("corpus/a.tsv"), data("corpus/b.tsv")
    assert a.startswith("data/prepared/files-a-") and b.startswith("data/prepared/files-b-")
    assert len({bible, a, b}) == 3
    # one corpus however it is spelled; the same corpus prepared another way gets its own folder
    assert data(str(tmp_path / "corpus/a.tsv")) == a
    assert data("corpus/a.tsv", vocab_size=100) != a
    assert data("corpus/a.tsv", dir="mine") == "mine"
    # keys of a source that is not data.source change nothing
    assert data("corpus/a.tsv", bible={"src": "4"}) == a
    # a `runs:` entry with its own data derives its own folder, unless the config names one
    config = config_from_dict({"data": {"source": "files", "files": {"train": "corpus/a.tsv"}},
                               "runs": {"short": {"data": {"max_train_words": 30}}, "same": {}}})
    assert prepared_dir(config.for_run("same").data) == a
    assert prepared_dir(config.for_run("short").data) not in (a, "")
    named = config_from_dict({"data": {"source": "files", "files": {"train": "corpus/a.tsv"}, "dir": "mine"},
                              "runs": {"short": {"data": {"max_train_words": 30}}}})
    assert prepared_dir(named.for_run("short").data) == "mine"


def test_editing_a_file_inside_a_local_dataset_folder_re_prepares(tmp_path: Path, offline: None) -> None:
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    pairs = reverse_pairs(120, 3, 6, seed=8)

    def write(path: Path, rows: list[tuple[str, str]]) -> None:
        path.write_text("".join(json.dumps({"en": s, "fr": t}) + "\n" for s, t in rows), encoding="utf-8")

    write(folder / "sub" / "train.jsonl", pairs)
    config = config_from_dict({"data": {
        "source": "huggingface", "huggingface": {"name": str(folder), "valid_split": "", "test_split": ""},
        "src_field": "en", "tgt_field": "fr", "test_fraction": 0.2, "vocab_size": 25,
        "subword_type": "bpe", "dir": str(tmp_path / "prepared"),
    }}).data
    before = prepare(config)["pairs"]
    assert sum(before.values()) == 120
    built = (tmp_path / "prepared" / "prepared.json").stat().st_mtime_ns
    prepare(config)
    assert (tmp_path / "prepared" / "prepared.json").stat().st_mtime_ns == built  # unchanged: re-used
    write(folder / "sub" / "train.jsonl", pairs[:80])
    stamp = (folder / "sub" / "train.jsonl").stat().st_mtime_ns
    os.utime(folder / "sub" / "train.jsonl", ns=(stamp + 10**9, stamp + 10**9))
    assert sum(prepare(config)["pairs"].values()) == 80


def test_evaluate_never_writes_over_its_src_or_ref(trained_reverse_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval"
    out.mkdir()
    (out / "src.txt").write_text("1 2 3\n", encoding="utf-8")
    (out / "ref.txt").write_bytes(b"\xef\xbb\xbf3 2 1\r\n")  # the report's ref.txt would rewrite it
    (tmp_path / "other.txt").write_text("1 2 3\n", encoding="utf-8")
    with pytest.raises(NMTError, match=r"--src .*src\.txt is the file .* that the report writes"):
        evaluate_runs([trained_reverse_run], src_path=out / "src.txt", ref_path=out / "ref.txt", out_dir=out)
    with pytest.raises(NMTError, match=r"--ref .*ref\.txt is the file"):
        evaluate_runs([trained_reverse_run], src_path=tmp_path / "other.txt", ref_path=out / "ref.txt", out_dir=out)
    assert sorted(p.name for p in out.iterdir()) == ["ref.txt", "src.txt"]
    assert (out / "ref.txt").read_bytes() == b"\xef\xbb\xbf3 2 1\r\n"


def test_a_new_run_refuses_a_folder_holding_any_file_a_run_writes(tmp_path: Path) -> None:
    from nmt.rundir.checks import check_run_dir
    from nmt.rundir.folders import RUN_MARKERS

    config = config_from_dict({})
    for name in RUN_MARKERS:
        folder = tmp_path / name.replace(".", "_")
        folder.mkdir()
        (folder / name).write_text("mine\n")  # a file or folder of the user's with that name
        with pytest.raises(NMTError, match=rf"(already holds a (partial|finished) run \({name}\)|holds a config.yaml that is no run's)"):
            check_run_dir(folder, config, resume=False)
        assert (folder / name).read_text() == "mine\n"


def test_an_experiment_never_replaces_its_own_config_file(tmp_path: Path) -> None:
    from nmt.compare.experiment import run_experiment

    out = tmp_path / "exp"
    out.mkdir()
    config_path = out / "config.yaml"
    config_path.write_text("runs:\n  a: {}\n  b: {model: {attention: none}}\n", encoding="utf-8")
    kept = config_path.read_bytes()
    with pytest.raises(NMTError, match="your config would be replaced"):
        run_experiment(config_path, ["training.max_steps=2"], out)
    (out / "timings.json").write_text("{}")  # an experiment folder, which --force deletes whole
    mine = out / "mine.yaml"
    mine.write_bytes(kept)
    with pytest.raises(NMTError, match="after --force deletes the folder"):
        run_experiment(mine, [], out, force=True)
    assert config_path.read_bytes() == kept and mine.read_bytes() == kept
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "mine.yaml", "timings.json"]


def test_a_run_inside_the_prepared_data_folder_is_refused(tmp_path: Path) -> None:
    from nmt.rundir.checks import check_run_dir

    config = config_from_dict({"data": {"dir": str(tmp_path / "prepared")}})
    for run_dir in (tmp_path / "prepared", tmp_path / "prepared" / "run"):
        with pytest.raises(NMTError, match="which nmt prepare replaces whole"):
            check_run_dir(run_dir, config, resume=False)
    assert check_run_dir(tmp_path / "run", config, resume=False) is None
