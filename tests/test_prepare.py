"""`nmt prepare`: written files, stats values, idempotence, rebuild on a changed config or input."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from nmt.config import DataConfig, config_from_dict
from nmt.data.prepare import format_stats, load_prepared, prepare
from nmt.errors import NMTError
from tests.synthetic import reverse_pairs, write_parallel


def setup(tmp_path: Path, **values: object) -> tuple[DataConfig, list[tuple[str, str]]]:
    pairs = reverse_pairs(300, min_len=3, max_len=65, seed=11)
    prefix = write_parallel(tmp_path / "corpus" / "all", pairs + [("", "0 1")], "en", "fr")
    config = config_from_dict({"data": {
        "source": "files", "train": str(prefix), "dir": str(tmp_path / "prepared"), "vocab_size": 40,
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
    assert data.tokenizer.decode_tgt(data.tokenizer.encode_tgt(splits["test"][0][1])) == splits["test"][0][1]
    table = format_stats(stats)
    assert f"all{'':11}" in table and str(stats["pairs"]["train"]) in table and "[50,60)" in table
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".prepared")]  # no leftovers
    assert stats["bom_stripped"] == [] and "byte-order" not in table
    assert stats["dropped_overlong"] == {"train": 0, "valid": 0, "test": 0} and "characters" not in table
    dropped = format_stats({**stats, "dropped_overlong": {"train": 2, "valid": 0, "test": 1}})
    assert "pairs dropped with a side over 65,536 characters: train 2, valid 0, test 1" in dropped


def test_prepare_summary_counts_stripped_byte_order_marks(tmp_path: Path) -> None:
    config, pairs = setup(tmp_path)
    source = tmp_path / "corpus/all.en"
    source.write_bytes(b"\xef\xbb\xbf" + source.read_bytes())
    stats = prepare(config)
    assert stats["bom_stripped"] == [str(source)]
    assert f"byte-order marks stripped from the start of 1 file(s): {source}" in format_stats(stats)
    everything = [p for split in ("train", "valid", "test") for p in load_prepared(config).pairs(split)]
    assert pairs[0] in everything and not any(s.startswith("\ufeff") for s, _ in everything)


def test_prepare_is_idempotent_and_rebuilds_on_change(tmp_path: Path) -> None:
    config, _ = setup(tmp_path)
    prepare(config)
    model = tmp_path / "prepared/spm.model"
    stamp = model.stat().st_mtime_ns
    assert prepare(config) == prepare(config)
    assert model.stat().st_mtime_ns == stamp  # re-used, not rebuilt
    moved = config_from_dict({"data": {**dataclasses.asdict(config), "cache_dir": str(tmp_path / "elsewhere")}}).data
    prepare(moved)
    assert model.stat().st_mtime_ns == stamp  # where the cache lives does not change the data
    bigger = config_from_dict({"data": {**dataclasses.asdict(config), "vocab_size": 45}}).data
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
    moved = dataclasses.replace(config, train=str(inside / "all"), vocab_size=45)
    with pytest.raises(NMTError, match="lie one inside the other"):
        prepare(moved)
    assert (inside / "all.en").read_bytes() == before["all.en"]
    with pytest.raises(NMTError, match="is not a folder"):
        prepare(dataclasses.replace(config, dir=str(corpus / "all.en")))


def test_ctrl_c_during_the_swap_waits_until_the_new_folder_is_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    import nmt.data.prepare as prepare_module

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

    monkeypatch.setattr(prepare_module.os, "replace", interrupted_replace)
    with pytest.raises(KeyboardInterrupt):
        prepare(bigger)
    monkeypatch.undo()
    assert renames[-2:] == ["prev", "prepared"]
    assert json.loads((tmp_path / "prepared/tokenizer.json").read_text())["config"]["vocab_size"] == 45
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".prepared")]  # nothing left aside
