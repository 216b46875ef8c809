"""configs/files-example.yaml and configs/hf-example.yaml as written: every key commented, and with only
their data paths pointed at small files in tmp_path, `nmt prepare` carves the test split from train and
`nmt train` trains a step of one of their runs. configs/converged.yaml: every key commented, and the recipe
its comments promise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nmt.cli import main
from nmt.config import DataConfig, load_config
from nmt.data.pairs import split_of
from nmt.data.prepare import load_corpus
from nmt.typed_yaml import config_diff
from tests.helpers import CONFIGS
from tests.synthetic import reverse_pairs, write_parallel

Pair = tuple[str, str]


def _sets(overrides: list[str]) -> list[str]:
    return [arg for override in overrides for arg in ("--set", override)]


def _prepared(directory: Path, split: str) -> list[Pair]:
    src = (directory / f"{split}.src").read_text(encoding="utf-8").splitlines()
    tgt = (directory / f"{split}.tgt").read_text(encoding="utf-8").splitlines()
    return list(zip(src, tgt, strict=True))


def _carved(train: list[Pair], data: DataConfig) -> tuple[list[Pair], list[Pair]]:
    """(train, test) as carving the test split out of `train` must give them."""
    test = [p for p in train if split_of(f"{p[0]}\t{p[1]}", data.valid_fraction, data.test_fraction) == "test"]
    return [p for p in train if p not in test], test


def _check_prepare_and_train(
    config_path: Path, overrides: list[str], train: list[Pair], valid: list[Pair], tmp_path: Path, run: str
) -> None:
    """`nmt prepare` with the overrides writes valid as given and test carved from train; one step trains."""
    data = load_config(config_path, overrides).data
    assert main(["prepare", str(config_path), *_sets(overrides)]) == 0
    kept, test = _carved(train, data)
    assert len(test) > 20
    assert _prepared(Path(data.dir), "test") == test  # data.dir: given by the overrides
    assert _prepared(Path(data.dir), "train") == kept
    assert _prepared(Path(data.dir), "valid") == valid
    run_dir = tmp_path / "run"
    one_step = _sets([*overrides, "training.max_steps=1"])
    assert main(["train", str(config_path), *one_step, "--run-name", run, "--run-dir", str(run_dir)]) == 0
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["final_step"] == 1
    assert summary["model"] == {"rnnencdec": "RNNencdec", "rnnsearch": "RNNsearch"}[run]


@pytest.mark.parametrize("name", ["files-example", "hf-example", "converged"])
def test_every_key_of_the_example_is_commented(name: str) -> None:
    sections = (CONFIGS / f"{name}.yaml").read_text(encoding="utf-8").split("\nruns:")[0]
    keys = [line for line in sections.splitlines() if line.startswith("  ") and line.strip()[:1] != "#"]
    assert keys and [line for line in keys if "#" not in line] == []


@pytest.mark.slow
def test_files_example_as_written(tmp_path: Path) -> None:
    config_path = CONFIGS / "files-example.yaml"
    data = load_config(config_path).data
    assert (data.source, data.src_lang, data.tgt_lang) == ("files", "en", "de")
    files = data.sources["files"]
    assert (files["train"], files["valid"], files["test"]) == ("data/my-corpus/train", "data/my-corpus/valid", "")
    train, valid = reverse_pairs(400, seed=11), reverse_pairs(20, seed=12)
    corpus = tmp_path / "my-corpus"
    write_parallel(corpus / "train", train, data.src_lang, data.tgt_lang)
    write_parallel(corpus / "valid", valid, data.src_lang, data.tgt_lang)
    overrides = [f"data.files.train={corpus / 'train'}", f"data.files.valid={corpus / 'valid'}", f"data.dir={tmp_path / 'prepared'}"]
    _check_prepare_and_train(config_path, overrides, train, valid, tmp_path, "rnnsearch")


@pytest.mark.slow
def test_hf_example_as_written_and_with_parquet(tmp_path: Path, offline: None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    config_path = CONFIGS / "hf-example.yaml"
    data = load_config(config_path).data
    own = data.sources["huggingface"]
    assert (data.source, own["name"], own["valid_split"], own["test_split"]) == ("huggingface", "json", "validation", "")
    assert (own["train"], own["valid"], own["test"]) == ("data/my-corpus/train.jsonl", "data/my-corpus/valid.jsonl", "")
    train, valid = reverse_pairs(400, seed=13), reverse_pairs(20, seed=14)
    corpus = tmp_path / "my-corpus"
    corpus.mkdir()
    for split, pairs in (("train", train), ("valid", valid)):
        records = [{"translation": {data.src_lang: s, data.tgt_lang: t}} for s, t in pairs]
        (corpus / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        pq.write_table(pa.Table.from_pylist(records), corpus / f"{split}.parquet")
    overrides = [f"data.huggingface.train={corpus / 'train.jsonl'}", f"data.huggingface.valid={corpus / 'valid.jsonl'}",
                 f"data.dir={tmp_path / 'prepared'}"]
    _check_prepare_and_train(config_path, overrides, train, valid, tmp_path, "rnnencdec")
    # the parquet builder, as the config's comment says: the same pairs in the same splits
    parquet = [f"data.huggingface.train={corpus / 'train.parquet'}", f"data.huggingface.valid={corpus / 'valid.parquet'}", "data.huggingface.name=parquet"]
    from_parquet = load_corpus(load_config(config_path, parquet).data)
    assert from_parquet.splits == load_corpus(load_config(config_path, overrides).data).splits


def test_the_converged_config_trains_seven_runs_to_their_plateau_on_the_main_job_s_data() -> None:
    config, quick = load_config(CONFIGS / "converged.yaml"), load_config(CONFIGS / "quick.yaml")
    assert config.data == quick.data  # the same prepared folder, vocabulary and test split
    assert config.evaluation.split == "test" and config.evaluation.attention_checks
    kinds = {name: (config.for_run(name).model.architecture, config.for_run(name).model.attention,
                    config.for_run(name).model.positions, config.for_run(name).training.max_words)
             for name in config.runs}
    assert kinds == {
        "rnnencdec-30": ("rnn", "none", "sinusoidal", 30), "rnnsearch-30": ("rnn", "additive", "sinusoidal", 30),
        "rnnencdec-50": ("rnn", "none", "sinusoidal", 50), "rnnsearch-50": ("rnn", "additive", "sinusoidal", 50),
        "transformer-30": ("transformer", "additive", "sinusoidal", 30),
        "transformer-30-relative": ("transformer", "additive", "relative", 30),
        "transformer-50": ("transformer", "additive", "sinusoidal", 50),
    }
    for name in config.runs:  # every run, the fixed vectors included, stops on a plateau; max_steps is a cap
        training = config.for_run(name).training
        assert training.patience >= 3 and training.early_stopping_metric == "bleu"
        assert training.lr_patience > 0 and 2 * training.lr_patience < training.patience  # two decays first
        assert training.lr_schedule != "cosine"  # no schedule that needs the run's length
        assert training.max_steps >= 10000 and training.valid_max_sentences == 0 and training.precision == "auto"
    # the RNNs share one recipe with quick.yaml's model; the Transformers depart in the keys their entries name
    rnn = config.for_run("rnnsearch-50").to_dict()
    assert config.for_run("rnnsearch-50").model == quick.for_run("rnnsearch-50").model
    for name in ("rnnencdec-30", "rnnsearch-30", "rnnencdec-50"):
        assert set(config_diff(rnn, config.for_run(name).to_dict())) <= {"model.attention", "training.max_words"}
    departures = {"training.max_steps", "training.learning_rate", "training.warmup_steps", "training.lr_schedule",
                  "training.label_smoothing", "training.max_words", "training.lr_patience"}
    assert config.for_run("rnnsearch-50").training.lr_patience == 1  # measured on the CPU (docs/results.md)
    for name in ("transformer-30", "transformer-30-relative", "transformer-50"):
        differing = {key for key in config_diff(rnn, config.for_run(name).to_dict()) if not key.startswith("model.")}
        assert differing <= departures, (name, differing)
        assert config.for_run(name).training.lr_schedule == "inverse_sqrt"
        assert config.for_run(name).training.lr_patience == 2  # a noisier climb: one bad validation is no plateau
    assert config.for_run("transformer-30").model == load_config(CONFIGS / "transformer.yaml").for_run(
        "transformer-30").model
