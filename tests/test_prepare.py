"""`nmt prepare`: written files, stats values, idempotence, rebuild on a changed config or input."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import nmt.data.prepare as prepare_module
import nmt.data.replacing as replacing
from nmt.cli import main
from nmt.config import DataConfig, config_from_dict, save_config
from nmt.data.pairs import Corpus
from nmt.data.prepare import (
    FORMAT_VERSION,
    STATS_KEYS,
    format_stats,
    is_prepared,
    load_corpus,
    prepare,
    prepare_summary,
)
from nmt.data.prepared import load_prepared
from nmt.data.sources import corpus_source
from nmt.errors import NMTError
from nmt.typed_yaml import section_dict
from tests.helpers import unwritable
from tests.synthetic import reverse_pairs, write_parallel


def with_files(config: DataConfig, **values: object) -> DataConfig:
    """`config` with keys of its data.files sub-section (files) or of the section itself replaced."""
    own = {key: values.pop(key) for key in list(values) if key in ("train", "valid", "test")}
    return dataclasses.replace(config, sources={"files": {**config.sources["files"], **own}}, **values)

def setup(tmp_path: Path, **values: object) -> tuple[DataConfig, list[tuple[str, str]]]:
    pairs = reverse_pairs(300, min_len=3, max_len=65, seed=11)
    prefix = write_parallel(tmp_path / "corpus" / "all", pairs + [("", "0 1")], "en", "fr")
    config = config_from_dict({"data": {
        "source": "files", "files": {"train": str(prefix)}, "dir": str(tmp_path / "prepared"), "vocab_size": 40,
        "valid_fraction": 0.1, "test_fraction": 0.2, **values,
    }}).data
    return config, pairs


def test_prepare_writes_splits_tokenizer_and_correct_stats(tmp_path: Path) -> None:
    config, pairs = setup(tmp_path, max_train_words=50)
    stats = prepare(config)
    data = load_prepared(config)
    splits = {s: data.pairs(s) for s in ("train", "valid", "test")}
    assert stats["pairs"] == {s: len(p) for s, p in splits.items()}
    assert sum(stats["dropped_empty"].values()) == 1
    long_train = stats["filtered_long_train"]
    assert long_train > 0 and sum(stats["pairs"].values()) + long_train == len(pairs)
    assert all(len(s.split()) <= 50 for s, _ in splits["train"])
    assert any(len(s.split()) > 50 for s, _ in splits["test"])  # evaluation data is not filtered
    for split, pairs_ in splits.items():
        histogram = stats["source_words_histogram"][split]
        assert list(histogram) == ["<10", "[10,20)", "[20,30)", "[30,40)", "[40,50)", "[50,60)", ">=60"]
        assert histogram["<10"] == sum(1 for s, _ in pairs_ if len(s.split()) < 10)
        assert histogram["[20,30)"] == sum(1 for s, _ in pairs_ if 20 <= len(s.split()) < 30)
        assert histogram[">=60"] == sum(1 for s, _ in pairs_ if len(s.split()) >= 60)
    assert json.loads((tmp_path / "prepared/stats.json").read_text()) == stats
    assert stats.keys() >= STATS_KEYS  # what a prepared folder's stats.json is checked for
    assert data.tokenizer.decode_tgt(data.tokenizer.encode_tgt(splits["test"][0][1])) == splits["test"][0][1]
    table = format_stats(stats)
    assert f"all{'':11}" in table and str(stats["pairs"]["train"]) in table and "[50,60)" in table
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".prepared")]  # no leftovers
    assert stats["bom_stripped"] == [] and "byte-order" not in table
    assert stats["dropped_overlong"] == {"train": 0, "valid": 0, "test": 0} and "characters" not in table
    dropped = format_stats({**stats, "dropped_overlong": {"train": 2, "valid": 0, "test": 1}})
    assert "pairs dropped with a side over 65,536 characters: train 2, valid 0, test 1" in dropped


def test_a_given_test_file_that_loses_pairs_to_the_overlap_drop_is_noted(tmp_path: Path) -> None:
    """A test set of one's own scores comparably with others' only whole: the summary says where the default
    overlap drop shrank a split given as a file (never for a carved one: it is drawn from training's pairs)."""
    config, pairs = setup(tmp_path)
    stats = prepare(config)
    assert stats["carved_splits"] == ["valid", "test"] and "note:" not in format_stats(stats)
    given = write_parallel(tmp_path / "corpus" / "given", [pairs[0], ("a new verse", "un verset nouveau")], "en", "fr")
    own = config_from_dict({"data": {**section_dict(config), "dir": str(tmp_path / "own"),
                                     "files": {"train": str(tmp_path / "corpus" / "all"), "test": str(given)}}}).data
    stats = prepare(own)
    assert stats["carved_splits"] == ["valid"] and stats["overlap_dropped"]["test"] == 1
    assert ("note: the test split given as files lost pairs whose source is also in training (data.drop_train_overlap:"
            " true): scores on it are not comparable with others' on the whole file; data.drop_train_overlap: false "
            "keeps given splits whole.") in format_stats(stats).splitlines()
    assert "note:" not in format_stats({key: value for key, value in stats.items() if key != "carved_splits"})


def test_a_given_valid_file_never_holds_test_sentences(tmp_path: Path) -> None:
    """A valid file drawn from the training corpus, test carved from it: the train-overlap drop left only the valid
    pairs the carve had moved to test, so the checkpoint was chosen on test sentences. Those are dropped from valid
    (test stays whole), said in the summary; two carved splits stay as carved."""
    config, pairs = setup(tmp_path)
    carved = prepare(config)
    assert carved["valid_in_test"] == 0
    given = write_parallel(tmp_path / "corpus" / "valid", pairs[:100] + [("a new verse", "un verset nouveau")], "en", "fr")
    own = config_from_dict({"data": {**section_dict(config), "dir": str(tmp_path / "own"),
                                     "files": {"train": str(tmp_path / "corpus" / "all"), "valid": str(given)}}}).data
    stats = prepare(own)
    data = load_prepared(own)
    valid, test = ({src for src, _ in data.pairs(split)} for split in ("valid", "test"))
    assert not valid & test and "a new verse" in valid
    assert stats["valid_in_test"] > 0 and stats["pairs"]["valid"] == 1  # the rest were in train, or in test
    assert f"valid pairs dropped as their source is in the test split: {stats['valid_in_test']}" in format_stats(stats)


def test_prepare_summary_counts_stripped_byte_order_marks(tmp_path: Path) -> None:
    config, pairs = setup(tmp_path)
    source = tmp_path / "corpus/all.en"
    source.write_bytes(b"\xef\xbb\xbf" + source.read_bytes())
    stats = prepare(config)
    assert stats["bom_stripped"] == [str(source)]
    assert f"byte-order marks stripped (opening a file, or a line where files were joined) in 1 file(s): {source}" in (
        format_stats(stats))
    everything = [p for split in ("train", "valid", "test") for p in load_prepared(config).pairs(split)]
    assert pairs[0] in everything and not any(s.startswith("\ufeff") for s, _ in everything)


def test_prepare_is_idempotent_and_rebuilds_on_change(tmp_path: Path) -> None:
    config, _ = setup(tmp_path)
    prepare(config)
    model = tmp_path / "prepared/spm.model"
    stamp = model.stat().st_mtime_ns
    assert prepare(config) == prepare(config)
    assert model.stat().st_mtime_ns == stamp  # re-used, not rebuilt
    moved = config_from_dict({"data": {**section_dict(config), "cache_dir": str(tmp_path / "elsewhere")}}).data
    prepare(moved)
    assert model.stat().st_mtime_ns == stamp  # where the cache lives does not change the data
    bigger = config_from_dict({"data": {**section_dict(config), "vocab_size": 45}}).data
    assert prepare(bigger)["pairs"] == prepare(config)["pairs"]
    manifest = json.loads((tmp_path / "prepared/tokenizer.json").read_text())
    assert manifest["config"]["vocab_size"] == 40
    prepare(bigger)
    assert json.loads((tmp_path / "prepared/tokenizer.json").read_text())["config"]["vocab_size"] == 45
    # An edited input file is noticed too.
    source = tmp_path / "corpus/all.en"
    before = prepare(bigger)["pairs"]["train"]
    lines = source.read_text().splitlines()
    target = tmp_path / "corpus/all.fr"
    source.write_text("\n".join(lines[:200]) + "\n")
    target.write_text("\n".join(target.read_text().splitlines()[:200]) + "\n")
    os.utime(source, ns=(stamp + 10**9, stamp + 10**9))
    assert prepare(bigger)["pairs"]["train"] < before


def test_a_folder_whose_corpus_files_were_removed_stays_prepared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The raw corpus deleted once prepared (or not copied to another machine): the folder is used as it is,
    not rebuilt from files that are not there; a file put back changed rebuilds it."""
    config, _ = setup(tmp_path)
    prepare(config)
    stamp = (tmp_path / "prepared" / "spm.model").stat().st_mtime_ns
    source, target = tmp_path / "corpus" / "all.en", tmp_path / "corpus" / "all.fr"
    lines = source.read_text(encoding="utf-8"), target.read_text(encoding="utf-8")
    source.unlink()
    target.unlink()
    capsys.readouterr()
    prepare(config)
    assert load_prepared(config).pairs("test")
    assert (tmp_path / "prepared" / "spm.model").stat().st_mtime_ns == stamp and capsys.readouterr().err == ""
    source.write_text(lines[0][: len(lines[0]) // 2].rsplit("\n", 1)[0] + "\n", encoding="utf-8")
    target.write_text("\n".join(lines[1].splitlines()[: source.read_text().count("\n")]) + "\n", encoding="utf-8")
    prepare(config)
    assert f"was prepared from input files that changed since ({source} " in capsys.readouterr().err


def _jsonl(path: Path, pairs: list[tuple[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"translation": {"en": s, "fr": t}}) + "\n" for s, t in pairs), encoding="utf-8")


def test_a_glob_s_files_at_any_depth_are_its_inputs_and_one_removed_of_several_rebuilds(
    tmp_path: Path, offline: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """`**` reaches every depth, as datasets reads it: a file two folders down is read and fingerprinted (it was
    read, not fingerprinted, and editing it changed nothing). A file gone from a glob that matches others changes
    the data (its pairs were kept); the glob's files all gone, the folder stays prepared as it was."""
    shallow, deep = tmp_path / "hf" / "a" / "part1.jsonl", tmp_path / "hf" / "a" / "b" / "part2.jsonl"
    _jsonl(shallow, reverse_pairs(120, seed=21))
    _jsonl(deep, reverse_pairs(60, seed=22))
    config = config_from_dict({"data": {
        "source": "huggingface", "huggingface": {"name": "json", "train": str(tmp_path / "hf" / "**" / "*.jsonl"),
                                                 "valid_split": "", "test_split": ""},
        "dir": str(tmp_path / "prepared"), "vocab_size": 40, "valid_fraction": 0.1, "test_fraction": 0.1}}).data
    before = sum(prepare(config)["pairs"].values())
    recorded = json.loads((tmp_path / "prepared" / "prepared.json").read_text(encoding="utf-8"))["inputs"]
    assert set(recorded) == {str(shallow), str(deep)}
    deep.unlink()
    capsys.readouterr()
    assert sum(prepare(config)["pairs"].values()) < before
    assert f"was prepared from input files that changed since ({deep} (removed))" in capsys.readouterr().err
    stamp = (tmp_path / "prepared" / "spm.model").stat().st_mtime_ns
    shallow.unlink()
    prepare(config)
    assert (tmp_path / "prepared" / "spm.model").stat().st_mtime_ns == stamp and capsys.readouterr().err == ""


def test_a_relative_dataset_folder_removed_once_prepared_stays_the_setting_it_was(
    tmp_path: Path, offline: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """data.huggingface.name ./hfdir, gone: still the absolute path it was prepared as (it became the relative
    text, a setting changed, and the rebuild failed on the missing folder)."""
    monkeypatch.chdir(tmp_path)
    _jsonl(tmp_path / "hfdir" / "train.jsonl", reverse_pairs(150, seed=23))
    config = config_from_dict({"data": {
        "source": "huggingface", "huggingface": {"name": "./hfdir", "valid_split": "", "test_split": ""},
        "dir": str(tmp_path / "prepared"), "vocab_size": 40, "valid_fraction": 0.1, "test_fraction": 0.1}}).data
    stats = prepare(config)
    (tmp_path / "hfdir").rename(tmp_path / "elsewhere")
    capsys.readouterr()
    assert prepare(config) == stats and capsys.readouterr().err == ""


def test_a_data_dir_that_is_a_link_is_rebuilt_where_it_points(tmp_path: Path) -> None:
    """data.dir a link to a folder on another disk: a rebuild replaces the folder it points to, and the link
    stays (the swap renamed the link itself, leaving the new data on the link's disk and the target stale)."""
    config, _ = setup(tmp_path, dir=str(tmp_path / "link"))
    (tmp_path / "bigdisk").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "bigdisk")
    prepare(config)
    bigger = dataclasses.replace(config, vocab_size=45)
    prepare(bigger)
    assert (tmp_path / "link").is_symlink()
    assert json.loads((tmp_path / "bigdisk" / "tokenizer.json").read_text())["config"]["vocab_size"] == 45
    assert load_prepared(bigger).directory == tmp_path / "link"


def test_replacing_data_prepared_with_other_settings_names_each_changed_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, pairs = setup(tmp_path)
    prepare(config)  # a first build into an empty data.dir: nothing to announce
    assert "warning" not in capsys.readouterr().err
    other = write_parallel(tmp_path / "corpus" / "other", pairs, "en", "fr")
    changed = with_files(config, train=str(other), vocab_size=45, max_train_words=50)
    prepare(changed)
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith(f"warning: data.dir {tmp_path / 'prepared'} was prepared with other data settings (")
    # the shared keys and the source's own key (data.files.train), each with its old and new value
    assert "data.vocab_size 40 -> 45" in line and "data.max_train_words 0 -> 50" in line
    assert f'data.files.train "{tmp_path / "corpus" / "all"}" -> "{other}"' in line
    assert "Runs trained on the old data prepare it again for themselves when evaluated" in line
    assert json.loads((tmp_path / "prepared/tokenizer.json").read_text())["config"]["vocab_size"] == 45
    prepare(changed)  # already current: no rebuild, no line
    assert "warning" not in capsys.readouterr().err
    # what evaluating a run trained on the old data does: its own config prepares the folder back
    load_prepared(config)
    assert "data.vocab_size 45 -> 40" in capsys.readouterr().err
    assert json.loads((tmp_path / "prepared/tokenizer.json").read_text())["config"]["vocab_size"] == 40


def test_replacing_data_prepared_from_changed_input_files_names_each_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rebuild for changed input files under the same settings says so on stderr, naming each changed file
    with what changed (its size, or only its modification time), as a rebuild for changed settings names keys."""
    config, _ = setup(tmp_path)
    prepare(config)
    capsys.readouterr()
    source, target = tmp_path / "corpus" / "all.en", tmp_path / "corpus" / "all.fr"
    sizes = [path.stat().st_size for path in (source, target)]
    source.write_text("\n".join(source.read_text().splitlines()[:200]) + "\n")
    target.write_text("\n".join(target.read_text().splitlines()[:200]) + "\n")
    later = target.stat().st_mtime_ns + 10**9  # a coarse clock: a later time whatever the file system keeps
    os.utime(target, ns=(later, later))
    os.utime(source, ns=(later, later))
    prepare(config)
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert lines == [
        f"warning: data.dir {tmp_path / 'prepared'} was prepared from input files that changed since ({source} "
        f"{sizes[0]} -> {source.stat().st_size} bytes, {target} {sizes[1]} -> {target.stat().st_size} bytes): it is "
        "prepared again from them, replacing it. Runs trained on the old files are evaluated on the new splits "
        "from now on."
    ]
    os.utime(source, ns=(later + 10**9, later + 10**9))  # touched only
    prepare(config)
    assert f"changed since ({source} modified (same size)):" in capsys.readouterr().err
    prepare(config)  # already current: no rebuild, no line
    assert "warning" not in capsys.readouterr().err


def _edit_json(path: Path, **values: Any) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))


# How a prepared folder is damaged, and the reason its rebuild gives (after "warning: data.dir DIR ").
AGAIN = "it is prepared again, replacing it."
DAMAGES: dict[str, tuple[Callable[[Path], object], str]] = {
    "older format": (lambda folder: _edit_json(folder / "prepared.json", format_version=FORMAT_VERSION - 1),
                     f"was prepared by another version of nmt (format {FORMAT_VERSION - 1} in prepared.json, "
                     f"{FORMAT_VERSION} now): {AGAIN}"),
    "no format": (lambda folder: (folder / "prepared.json").write_text("{}"),
                  f"was prepared by another version of nmt (format (absent) in prepared.json, {FORMAT_VERSION} now): {AGAIN}"),
    "prepared.json not JSON": (lambda folder: (folder / "prepared.json").write_text("{"),
                               "has a prepared.json that cannot be read (Expecting property name enclosed in double "
                               f"quotes: line 1 column 2 (char 1)): {AGAIN}"),
    "prepared.json a list": (lambda folder: (folder / "prepared.json").write_text("[]"),
                             f"has a prepared.json that is not a JSON object: {AGAIN}"),
    "prepared.json edited": (lambda folder: _edit_json(folder / "prepared.json", inputs=[]),
                             f"has a prepared.json that does not match this config (in inputs): {AGAIN}"),
    "tokenizer of other settings": (
        lambda folder: _edit_json(folder / "tokenizer.json", config={
            **json.loads((folder / "tokenizer.json").read_text())["config"], "vocab_size": 39}),
        f"has a tokenizer trained with other settings than prepared.json records (data.vocab_size 39 -> 40): {AGAIN}"),
    "tokenizer.json not JSON": (lambda folder: (folder / "tokenizer.json").write_text("x"),
                                "has a tokenizer that cannot be read ({folder}/tokenizer.json: not valid JSON "
                                f"(Expecting value, line 1)): {AGAIN}"),
    "tokenizer.json sha256 a number": (lambda folder: _edit_json(folder / "tokenizer.json", sha256=5),
                                       "has a tokenizer that cannot be read ({folder}/tokenizer.json: sha256 must be "
                                       f"an object of file names and their sha256, not 5): {AGAIN}"),
    "tokenizer.json config a text": (lambda folder: _edit_json(folder / "tokenizer.json", config="x"),
                                     "has a tokenizer that cannot be read ({folder}/tokenizer.json: config must be "
                                     f'an object of the subword settings, not "x"): {AGAIN}'),
    "no tokenizer.json": (lambda folder: (folder / "tokenizer.json").unlink(),
                          f"lacks files that nmt prepare wrote there (tokenizer.json): {AGAIN}"),
    "files deleted": (lambda folder: [(folder / name).unlink() for name in ("valid.tgt", "stats.json", "spm.model")],
                      f"lacks files that nmt prepare wrote there (valid.tgt, stats.json, spm.model): {AGAIN}"),
    # Tokenizer.load refuses it and tells the user to re-run prepare, which must then rebuild it
    "model damaged": (lambda folder: (folder / "spm.model").write_bytes((folder / "spm.model").read_bytes()[:-1] + b"?"),
                      f"has a sentencepiece model whose sha256 differs from tokenizer.json's (spm.model): {AGAIN}"),
    # `nmt prepare` prints the counts of stats.json: a cut one, or one without them, would be a traceback
    "stats cut": (lambda folder: (folder / "stats.json").write_text('{"trunc', encoding="utf-8"),
                  "has a stats.json that cannot be read (Unterminated string starting at: line 1 column 2 (char 1)): "
                  + AGAIN),
    "stats emptied": (lambda folder: (folder / "stats.json").write_text("{}", encoding="utf-8"),
                      f"has a stats.json without the counts nmt prepare writes there: {AGAIN}"),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_rebuild_for_another_reason_than_settings_or_inputs_says_which(
    damage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prepared folder rebuilt because another nmt version wrote it, or because its prepared.json, tokenizer.json
    or other files are unreadable, inconsistent or missing, says why in one warning on stderr, as a rebuild for
    changed settings or inputs does; the rebuilt folder is current again (no second rebuild, no warning)."""
    config, _ = setup(tmp_path)
    folder = tmp_path / "prepared"
    prepare(config)
    capsys.readouterr()
    change, reason = DAMAGES[damage]
    change(folder)
    prepare(config)
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert lines == [f"warning: data.dir {folder} {reason.format(folder=folder)}"]
    stamp = (folder / "spm.model").stat().st_mtime_ns
    prepare(config)
    assert "warning" not in capsys.readouterr().err and (folder / "spm.model").stat().st_mtime_ns == stamp


def test_a_rebuild_for_changed_settings_and_a_missing_file_warns_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where several reasons hold (changed settings and a deleted file), the rebuild prints one warning: the
    settings'."""
    config, _ = setup(tmp_path)
    prepare(config)
    capsys.readouterr()
    (tmp_path / "prepared" / "train.src").unlink()
    prepare(dataclasses.replace(config, vocab_size=45))
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(lines) == 1 and "was prepared with other data settings (data.vocab_size 40 -> 45)" in lines[0]


def test_prepare_never_replaces_a_folder_holding_user_files_or_the_corpus(tmp_path: Path) -> None:
    config, _ = setup(tmp_path)
    corpus = tmp_path / "corpus"
    before = {p.name: p.read_bytes() for p in corpus.iterdir()}
    # data.dir naming the corpus folder itself, or a folder of other files: refused, nothing touched
    for folder in (corpus, tmp_path):
        with pytest.raises(NMTError, match="did not write"):
            prepare(dataclasses.replace(config, dir=str(folder)))
        assert {p.name: p.read_bytes() for p in corpus.iterdir()} == before
    # a prepared folder (it has prepared.json) that the corpus was later moved into
    prepare(config)
    inside = tmp_path / "prepared" / "mine"
    inside.mkdir()
    for name in before:
        (inside / name).write_bytes(before[name])
    moved = with_files(config, train=str(inside / "all"), vocab_size=45)
    with pytest.raises(NMTError, match="lie one inside the other"):
        prepare(moved)
    assert (inside / "all.en").read_bytes() == before["all.en"]
    with pytest.raises(NMTError, match="is not a folder"):
        prepare(dataclasses.replace(config, dir=str(corpus / "all.en")))


def test_ctrl_c_during_the_swap_waits_until_the_new_folder_is_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    config, _ = setup(tmp_path)
    prepare(config)
    bigger = dataclasses.replace(config, vocab_size=45)
    renames: list[str] = []
    real_replace = os.replace

    def interrupted_replace(src: str | Path, dst: str | Path) -> None:
        if Path(dst).name == "prev":  # Ctrl-C as the old folder is moved aside, before the new one is in
            os.kill(os.getpid(), signal.SIGINT)
        renames.append(Path(dst).name)
        real_replace(src, dst)

    monkeypatch.setattr(replacing.os, "replace", interrupted_replace)
    with pytest.raises(KeyboardInterrupt):
        prepare(bigger)
    monkeypatch.undo()
    assert renames[-2:] == ["prev", "prepared"]
    assert json.loads((tmp_path / "prepared/tokenizer.json").read_text())["config"]["vocab_size"] == 45
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".prepared")]  # nothing left aside


def test_a_sentencepiece_error_comes_back_from_its_process_whole(tmp_path: Path) -> None:
    config, _ = setup(tmp_path)
    with pytest.raises(NMTError) as error:
        prepare(dataclasses.replace(config, vocab_size=5))
    # the config's words, and the way that helps: the hint was "lower it", which fails the same way
    needed = re.fullmatch(r"sentencepiece could not train spm.model: data.vocab_size 5 is smaller than the (\d+) "
                          r"pieces it needs for the training text's characters and the special pieces\.",
                          error.value.message)
    assert needed, error.value.message
    assert error.value.hint == (f"Raise data.vocab_size to {needed.group(1)} or more, or lower "
                                "data.character_coverage (1.0) to leave the rarest characters out.")
    enough = dataclasses.replace(config, vocab_size=int(needed.group(1)), dir=str(tmp_path / "enough"))
    prepare(enough)  # and that many is enough
    assert (Path(enough.dir) / "spm.model").is_file()
    assert multiprocessing.active_children() == [] and not list(tmp_path.glob(".prepared*"))


def test_a_failed_prepare_leaves_no_folder_it_made(tmp_path: Path) -> None:
    config, _ = setup(tmp_path)
    nested = dataclasses.replace(config, dir=str(tmp_path / "data" / "prepared" / "x"))
    with pytest.raises(NMTError, match="corpus file not found"):
        prepare(with_files(nested, train=str(tmp_path / "missing")))
    assert not (tmp_path / "data").exists()
    (tmp_path / "data" / "prepared" / "mine").mkdir(parents=True)  # a folder holding something stays
    with pytest.raises(NMTError, match="corpus file not found"):
        prepare(with_files(nested, train=str(tmp_path / "missing")))
    assert [p.name for p in (tmp_path / "data" / "prepared").iterdir()] == ["mine"]


def test_a_rebuild_that_fails_says_the_folder_was_left_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The warning before a rebuild says the folder will be replaced; when the build then fails, the previous
    folder is kept, and a line after the warning says so."""
    config, _ = setup(tmp_path)
    prepare(config)
    before = {p.name: p.read_bytes() for p in (tmp_path / "prepared").iterdir()}
    capsys.readouterr()
    _edit_json(tmp_path / "prepared" / "prepared.json", format_version=FORMAT_VERSION - 1)
    before["prepared.json"] = (tmp_path / "prepared" / "prepared.json").read_bytes()

    def failing(directory: Path, config: DataConfig) -> None:
        raise NMTError("the corpus cannot be read.")

    monkeypatch.setattr(prepare_module, "_build", failing)
    with pytest.raises(NMTError, match="the corpus cannot be read"):
        prepare(config)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"warning: data.dir {tmp_path / 'prepared'} was prepared by another version")
    assert err[1:] == [f"data.dir {tmp_path / 'prepared'} was left as it was: the new build did not finish."]
    assert {p.name: p.read_bytes() for p in (tmp_path / "prepared").iterdir()} == before


def test_a_data_dir_in_a_folder_that_cannot_be_written_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # data.dir is named, not the temporary build folder beside it (FOLDER/.prepared.build-_8fm6kvp)
    config, _ = setup(tmp_path)
    unwritable(monkeypatch, tmp_path)
    with pytest.raises(PermissionError) as denied:
        prepare(config)
    assert denied.value.filename == config.dir
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


class HangingTokenizer:
    """Stands in for sentencepiece's training: C++ that holds Ctrl-C back until it returns, here 20 s."""

    @classmethod
    def train(cls, src_lines: list[str], tgt_lines: list[str], out_dir: Path, config: DataConfig) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            (Path(out_dir).parent / "tokenizer-started").touch()
            time.sleep(20)
        finally:  # it ran to its end: Ctrl-C waited for it
            (Path(out_dir).parent / "tokenizer-finished").touch()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def interrupting(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, with a Ctrl-C (SIGINT to this process) landing as it starts."""

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)
        return function(*args, **kwargs)

    return interrupted


def interrupt_once_started(marker: Path) -> threading.Thread:
    """Send this process a SIGINT from another thread once `marker` exists (as Ctrl-C from a terminal)."""

    def wait_and_interrupt() -> None:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=wait_and_interrupt, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt while the test runs, as in a terminal: a test run started in the
    background (`cmd &`, nohup, some CI runners) starts with SIGINT ignored, and Python keeps it so."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("ctrl_c_raises")
@pytest.mark.parametrize(
    ("phase", "previous"),
    [("corpus", True), ("splits", True), ("tokenizer", True), ("tokenizer", False), ("stats", True), ("cleanup", True)],
)
def test_ctrl_c_stops_prepare_in_every_phase_leaving_the_previous_folder_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], phase: str, previous: bool
) -> None:
    import nmt.data.prepare as prepare_module

    config, _ = setup(tmp_path)
    prepared = tmp_path / "prepared"
    if previous:
        prepare(config)
    before = {p.name: p.read_bytes() for p in prepared.iterdir()} if previous else None
    config_path = tmp_path / "bigger.yaml"  # another vocabulary size: the folder is rebuilt
    save_config(config_from_dict({"data": {**section_dict(config), "vocab_size": 45}}), config_path)
    if phase == "corpus":
        monkeypatch.setattr(prepare_module, "load_corpus", interrupting(prepare_module.load_corpus))
    elif phase == "splits":
        monkeypatch.setattr(prepare_module, "atomic_write_text", interrupting(prepare_module.atomic_write_text))
    elif phase == "stats":
        monkeypatch.setattr(prepare_module, "_stats", interrupting(prepare_module._stats))
    elif phase == "cleanup":  # after the swap, as the previous folder (set aside) is deleted
        monkeypatch.setattr(replacing.shutil, "rmtree", interrupting(replacing.shutil.rmtree))
    else:
        monkeypatch.setattr(prepare_module, "Tokenizer", HangingTokenizer)
        interrupt_once_started(tmp_path / "tokenizer-started")
    assert main(["prepare", str(config_path)]) == 130
    assert "nmt prepare: interrupted." in capsys.readouterr().err
    if phase == "tokenizer":  # stopped at once, not once the 20 s of "sentencepiece" were over
        assert (tmp_path / "tokenizer-started").exists() and not (tmp_path / "tokenizer-finished").exists()
        assert multiprocessing.active_children() == []
    if phase == "cleanup":
        assert json.loads((prepared / "tokenizer.json").read_text())["config"]["vocab_size"] == 45
    elif previous:
        assert {p.name: p.read_bytes() for p in prepared.iterdir()} == before
    else:
        assert not prepared.exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".prepared")]  # nothing half-written


def test_prepare_says_where_it_wrote_and_which_splits_were_carved_from_train_or_that_it_is_current(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = setup(tmp_path)
    config_path = tmp_path / "c.yaml"
    save_config(config_from_dict({"data": section_dict(config)}), config_path)
    assert main(["prepare", str(config_path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (
        f"prepared {tmp_path / 'prepared'} from files train {tmp_path / 'corpus' / 'all'}{{.en,.fr}}, "
        "valid carved from train, test carved from train"
    )
    # run again on the same data: it is current, and that is what it says (not that it prepared it)
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "prepared").iterdir()}
    assert main(["prepare", str(config_path)]) == 0
    again = capsys.readouterr().out.splitlines()[0]
    assert again == (
        f"{tmp_path / 'prepared'} is already prepared from files train {tmp_path / 'corpus' / 'all'}{{.en,.fr}}, "
        "valid carved from train, test carved from train (current: nothing was rebuilt)"
    )
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "prepared").iterdir()} == before


def test_an_input_file_edited_while_prepare_reads_it_is_read_again_next_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prepared.json records the inputs as they were before the build read them: a file edited during the
    build (sentencepiece trains for half a minute on a large corpus) differs from its record, so the next
    prepare builds from the edited text rather than calling the folder current."""
    config, _ = setup(tmp_path)
    edited = next(path for path in corpus_source(config).inputs() if path.is_file())

    def read_then_edited(config: DataConfig) -> Corpus:
        corpus = load_corpus(config)
        edited.write_text(edited.read_text(encoding="utf-8") + "one more line\n", encoding="utf-8")
        return corpus

    monkeypatch.setattr(prepare_module, "load_corpus", read_then_edited)
    prepare(config)
    monkeypatch.undo()
    assert not is_prepared(config)


def test_two_prepares_of_one_folder_at_once_build_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two trainings started together on data not yet prepared: the second waits for the first's build and
    finds the folder prepared, instead of building it again under the first (whose swap could then fail)."""
    config, _ = setup(tmp_path)
    build, builds = prepare_module._build, []

    def slow_build(directory: Path, config: DataConfig) -> None:
        builds.append(directory)
        time.sleep(1.0)  # long enough for the other to arrive while this one builds
        build(directory, config)

    monkeypatch.setattr(prepare_module, "_build", slow_build)
    summaries: list[str] = []
    threads = [threading.Thread(target=lambda: summaries.append(prepare_summary(config))) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.2)
    for thread in threads:
        thread.join(timeout=120)
    assert len(summaries) == 2 and len(builds) == 1
    # the one that waited says it found the folder prepared, not that it prepared it
    firsts = sorted(summary.split(" from ")[0] for summary in summaries)
    assert firsts == sorted([f"prepared {tmp_path / 'prepared'}", f"{tmp_path / 'prepared'} is already prepared"])
    assert summaries[0].split("\n")[1:] == summaries[1].split("\n")[1:]  # the same stats
    assert "waiting for another nmt prepare in" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "prepared").parent.iterdir() if p.name.startswith(".")) == []


def test_data_read_while_another_process_prepares_the_folder_again_is_refused(tmp_path: Path) -> None:
    """Another config on the same data.dir prepares it again after this process loaded its tokenizer: a split
    read then would be the other preparation's, encoded with this one's tokenizer; refused, naming the folder. A
    folder swapped between `prepare` and the load (the other's build, consistent in itself) is refused too."""
    import nmt.data.prepared as preparing

    config, _ = setup(tmp_path)
    other = dataclasses.replace(config, valid_fraction=config.valid_fraction * 2)
    data = load_prepared(config)
    assert data.pairs("valid")  # one preparation: read as often as asked
    prepare(other)
    with pytest.raises(NMTError, match=r"prepared again by another process") as error:
        data.pairs("train")
    assert str(tmp_path / "prepared") in error.value.message
    real_prepare = preparing.prepare

    def then_the_other(data_config: DataConfig) -> dict:
        stats = real_prepare(data_config)
        real_prepare(other)  # swapped in just after this process found its own current
        return stats

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(preparing, "prepare", then_the_other)
        with pytest.raises(NMTError, match=r"prepared again by another process"):
            load_prepared(config)
    assert load_prepared(config).pairs("test")  # once left alone, this config's own again


def test_what_a_killed_build_left_beside_the_folder_is_removed_by_the_next_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """kill -9 during a build leaves its hidden folders beside data.dir (no `finally` runs): the next build,
    holding the lock no other build of that parent runs without, removes them, and only those of its folder."""
    import nmt.fileio as fileio

    config, _ = setup(tmp_path)
    killed = [tmp_path / ".prepared.build-k1ll3d_0", tmp_path / ".prepared.old-k1ll3d_0" / "prev"]  # mkdtemp's names
    others = [tmp_path / ".prepared2.build-k1ll3d_0",  # another folder's
              tmp_path / "prepared.build-mine", tmp_path / ".prepared.build-mine",  # the user's, named otherwise
              tmp_path / ".prepared.old-mybackup" / "f"]  # the user's: an old one holds nothing but prev
    for folder in killed + others:
        folder.mkdir(parents=True)
        (folder / "train.en").write_text("half written\n")

    def no_locks(fd: int, operation: int) -> None:
        raise OSError("no locks on this file system")

    monkeypatch.setattr(fileio.fcntl, "flock", no_locks)  # unlocked, another build may be running: left
    prepare(config)
    assert all(folder.exists() for folder in killed) and "removing" not in capsys.readouterr().err
    monkeypatch.undo()
    prepare(dataclasses.replace(config, vocab_size=45))
    assert not killed[0].exists() and not killed[1].parent.exists()
    assert all(folder.exists() for folder in others)
    err = capsys.readouterr().err
    for folder in (killed[0], killed[1].parent):
        assert f"removing {folder}: left by a build of {tmp_path / 'prepared'} that was killed" in err


def test_the_summary_names_extra_translation_pairs_only_where_the_source_added_some(tmp_path: Path) -> None:
    """A files source has no extra translations (the Bible's data.bible.extra_translations): its summary does not
    count them; a prepared folder with some names them and the key that added them."""
    config, _ = setup(tmp_path)
    summary = prepare_summary(config)
    assert "extra translation" not in summary
    assert "left out by max_train_pairs: 0; valid/test pairs dropped as their source is in training" in summary
    stats = {**json.loads((tmp_path / "prepared" / "stats.json").read_text()), "extra_train_pairs": 7}
    assert ("left out by max_train_pairs: 0, extra translation pairs (data.bible.extra_translations): 7; valid/test "
            "pairs dropped") in format_stats(stats)
