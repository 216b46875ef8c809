"""Sentencepiece tokenizer: round trips, special ids, deterministic training, joint and separate models."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from nmt.config import Config, config_from_dict
from nmt.data.subwords import Tokenizer
from nmt.errors import NMTError
from nmt.rundir.writing import set_up
from nmt.special import BOS_ID, EOS_ID, PAD_ID, UNK_ID

SRC = [f"the cat number {i} sat on the mat near house {i * 7 % 13}" for i in range(300)]
TGT = [f"le chat numéro {i} était assis sur le tapis près de la maison {i * 7 % 13}" for i in range(300)]


def train(directory: Path, **values: object) -> Tokenizer:
    config = config_from_dict({"data": {"vocab_size": 120, **values}}).data
    return Tokenizer.train(SRC, TGT, directory, config)


def test_round_trip_and_special_ids(tmp_path: Path) -> None:
    tokenizer = train(tmp_path)
    for src, tgt in zip(SRC[:20], TGT[:20], strict=True):
        ids = tokenizer.encode_tgt(tgt)
        assert tokenizer.decode_tgt(ids) == tgt
        assert tokenizer.decode_tgt([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == tgt
        assert not {PAD_ID, BOS_ID, EOS_ID} & set(ids + tokenizer.encode_src(src))
        assert "".join(tokenizer.src_pieces(src)).replace("▁", " ").strip() == src
        assert len(tokenizer.src_pieces(src)) == len(tokenizer.encode_src(src))
    assert tokenizer.tgt_id_to_piece([PAD_ID, UNK_ID, BOS_ID, EOS_ID]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert UNK_ID in tokenizer.encode_src("日本")
    assert tokenizer.src_vocab_size == tokenizer.tgt_vocab_size <= 120


def test_training_is_deterministic_and_load_matches(tmp_path: Path) -> None:
    first, second = train(tmp_path / "a"), train(tmp_path / "b")
    assert (tmp_path / "a/spm.model").read_bytes() == (tmp_path / "b/spm.model").read_bytes()
    loaded = Tokenizer.load(tmp_path / "a")
    assert loaded.encode_src(SRC[5]) == first.encode_src(SRC[5]) == second.encode_src(SRC[5])
    manifest = json.loads((tmp_path / "a/tokenizer.json").read_text())
    assert manifest["config"] == {"subword_type": "unigram", "vocab_size": 120, "character_coverage": 1.0,
                                  "joint_vocab": True}
    assert manifest["src_vocab_size"] == first.src_vocab_size
    assert sorted(first.contents()) == ["spm.model", "tokenizer.json"]
    assert first.contents() == {name: (tmp_path / "a" / name).read_bytes() for name in ("spm.model", "tokenizer.json")}


def test_sentences_longer_than_sentencepiece_s_default_limit_count_and_shorter_ones_train_as_before(
    tmp_path: Path,
) -> None:
    """sentencepiece would drop lines over 4,192 bytes without a word (all of them here: it refused to train);
    shorter lines give the model bytes they gave before (prepared data and its runs' tokenizers unchanged)."""
    long_src = [" ".join(f"{word}{i % 7}" * 3 for word in line.split()) * 30 for i, line in enumerate(SRC)]
    assert min(len(line.encode("utf-8")) for line in long_src) > 4192
    config = config_from_dict({"data": {"vocab_size": 120, "joint_vocab": False}}).data
    tokenizer = Tokenizer.train(long_src, TGT, tmp_path / "long", config)
    assert UNK_ID not in tokenizer.encode_src(long_src[0])
    train(tmp_path / "short")
    config = config_from_dict({"data": {"vocab_size": 120}}).data
    by_default = io.BytesIO()  # sentencepiece's max_sentence_length not given, as before it could be raised
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([*SRC, *TGT]), model_writer=by_default, model_type=config.subword_type,
        vocab_size=120, character_coverage=config.character_coverage, pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID,
        eos_id=EOS_ID, hard_vocab_limit=False, input_sentence_size=0, shuffle_input_sentence=False, num_threads=1,
        minloglevel=2,
    )
    assert (tmp_path / "short" / "spm.model").read_bytes() == by_default.getvalue()


def test_separate_bpe_models_and_copied_files_load(tmp_path: Path) -> None:
    tokenizer = train(tmp_path / "t", joint_vocab=False, subword_type="bpe", vocab_size=80)
    assert sorted(tokenizer.contents()) == ["spm.src.model", "spm.tgt.model", "tokenizer.json"]
    assert "é" in "".join(tokenizer.tgt_id_to_piece(list(range(tokenizer.tgt_vocab_size))))
    source = spm.SentencePieceProcessor(model_proto=tokenizer.contents()["spm.src.model"])
    assert "é" not in "".join(source.id_to_piece(i) for i in range(source.get_piece_size()))  # English's own model
    # BPE's pieces are scored by merge rank, 0, -1, -2, ... (a unigram model's by log-probability)
    ranks = [source.get_score(i) for i in range(source.get_piece_size()) if not source.is_control(i)
             and not source.is_unknown(i)][:20]
    assert ranks == [-float(rank) for rank in range(20)], ranks
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name, content in tokenizer.contents().items():
        (run_dir / name).write_bytes(content)
    copy = Tokenizer.load(run_dir)
    assert copy.encode_tgt(TGT[3]) == tokenizer.encode_tgt(TGT[3])
    assert copy.decode_tgt(copy.encode_tgt(TGT[3])) == TGT[3]


def test_load_refuses_missing_or_replaced_models(tmp_path: Path) -> None:
    with pytest.raises(NMTError, match="tokenizer.json not found"):
        Tokenizer.load(tmp_path)
    train(tmp_path / "a", vocab_size=100)
    train(tmp_path / "b", vocab_size=60)
    shutil.copy(tmp_path / "b/spm.model", tmp_path / "a/spm.model")
    with pytest.raises(NMTError, match="sha256 differs"):
        Tokenizer.load(tmp_path / "a")


def test_a_tokenizer_keeps_the_files_it_loaded_whatever_replaces_them(tmp_path: Path) -> None:
    """Its folder prepared again after the load (another config on the same data.dir): the tokenizer still
    encodes, and gives as its files, what it loaded; a run's copy of it is the model the run encodes with."""
    tokenizer = train(tmp_path / "a", vocab_size=100)
    loaded = tokenizer.contents()
    train(tmp_path / "a", vocab_size=60)  # written in place over the first
    assert (tmp_path / "a/spm.model").read_bytes() != loaded["spm.model"]
    assert tokenizer.contents() == loaded and tokenizer.src_vocab_size > 60
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    set_up(run_dir, Config(), tokenizer, torch.device("cpu"), world_size=1)
    assert {path.name: path.read_bytes() for path in (run_dir / "tokenizer").iterdir()} == loaded


@pytest.mark.parametrize(("key", "value", "should"), [
    ("sha256", 5, "an object of file names and their sha256"),
    ("sha256", {"spm.model": 5}, "an object of file names and their sha256"),
    ("src_model", ["spm.model"], "a file name"),
    ("config", 5, "an object of the subword settings"),
])
def test_load_refuses_a_manifest_key_of_the_wrong_type_naming_it(
    key: str, value: object, should: str, tmp_path: Path
) -> None:
    """A hand-edited tokenizer.json whose key holds a value of another type is refused naming the file and key
    (not a TypeError where the value is used)."""
    train(tmp_path)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    with pytest.raises(NMTError) as error:
        Tokenizer.load(tmp_path)
    assert error.value.message == f"{path}: {key} must be {should}, not {json.dumps(value)}."


def test_load_refuses_a_manifest_whose_model_has_no_sha256(tmp_path: Path) -> None:
    """Every model a tokenizer.json names is checked by its sha256: one named without any is refused."""
    train(tmp_path)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "sha256": {}}))
    with pytest.raises(NMTError) as error:
        Tokenizer.load(tmp_path)
    assert error.value.message == f"{path}: sha256 has no entry for spm.model."
