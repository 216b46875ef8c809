"""Sentencepiece subword models: trained deterministically on the training split, loaded by run dirs.

`tokenizer.json` names the model files with their sha256, so a run never silently uses a
model other than the one it was trained with.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any

import sentencepiece as spm

from nmt.config_sections import DataConfig
from nmt.errors import NMTError
from nmt.fileio import atomic_write_bytes, atomic_write_json, sha256_file
from nmt.special import BOS_ID, EOS_ID, PAD_ID, UNK_ID

MANIFEST = "tokenizer.json"
SUBWORD_KEYS = ("subword_type", "vocab_size", "character_coverage", "joint_vocab")
_SPECIAL = {PAD_ID, BOS_ID, EOS_ID}
SENTENCEPIECE_MAX_SENTENCE_BYTES = 4192  # sentencepiece's default max_sentence_length
# sentencepiece's refusal of a vocab_size under the characters it must keep: "... required_chars. 17 vs 79."
_REQUIRED_CHARS = re.compile(r"smaller than required_chars\. \d+ vs (\d+)")


def _train_model(lines: list[str], path: Path, config: DataConfig) -> None:
    # Fed from memory, not a file: the model then records no input path or prefix, so two
    # trainings on the same lines give byte-identical files wherever they run.
    model = io.BytesIO()
    # sentencepiece leaves out, without a word, each sentence longer than max_sentence_length bytes: raised to the
    # longest line, so that every training sentence counts; not given where its default suffices, for a value given
    # is written into the model even where it is the default (other bytes)
    longest = max((len(line.encode("utf-8")) for line in lines), default=0)
    limit = {"max_sentence_length": longest} if longest > SENTENCEPIECE_MAX_SENTENCE_BYTES else {}
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            **limit,
            model_writer=model,
            model_type=config.subword_type,
            vocab_size=config.vocab_size,
            character_coverage=config.character_coverage,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            hard_vocab_limit=False,
            # Every sentence, in order, on one thread: deterministic.
            input_sentence_size=0,
            shuffle_input_sentence=False,
            num_threads=1,
            minloglevel=2,
        )
    except RuntimeError as exc:
        needed = _REQUIRED_CHARS.search(str(exc))
        if needed:  # sentencepiece says "Increase vocab_size" in its own option names; say it in the config's
            raise NMTError(
                f"sentencepiece could not train {path.name}: data.vocab_size {config.vocab_size} is smaller than the "
                f"{needed.group(1)} pieces it needs for the training text's characters and the special pieces.",
                f"Raise data.vocab_size to {needed.group(1)} or more, or lower data.character_coverage "
                f"({config.character_coverage}) to leave the rarest characters out.",
            ) from None
        raise NMTError(
            f"sentencepiece could not train {path.name}: {exc}",
            "Check the training split and data.vocab_size and data.character_coverage against it.",
        ) from None
    atomic_write_bytes(path, model.getvalue())


class Tokenizer:
    """Source and target sentencepiece models (one shared model when the vocabulary is joint), built from the
    bytes of tokenizer.json and the model files as `load` read them once: `contents` gives those bytes back, so a
    run's copy (RUN_DIR/tokenizer/) is the model it encodes with, even where its folder is prepared again meanwhile."""

    def __init__(self, directory: Path, contents: dict[str, bytes]) -> None:
        self.directory = directory
        self._contents = contents
        manifest = parse_manifest(directory / MANIFEST, contents[MANIFEST])
        self.model_sha256: dict[str, str] = manifest["sha256"]  # model file name -> its sha256
        self.subword_settings: dict[str, Any] = manifest.get("config", {})  # the data.* keys it was trained with
        src_file, tgt_file = manifest["src_model"], manifest["tgt_model"]
        self._src = spm.SentencePieceProcessor(model_proto=contents[src_file])
        self._tgt = self._src if tgt_file == src_file else spm.SentencePieceProcessor(model_proto=contents[tgt_file])
        self.src_vocab_size: int = self._src.get_piece_size()
        self.tgt_vocab_size: int = self._tgt.get_piece_size()

    @classmethod
    def train(cls, src_lines: list[str], tgt_lines: list[str], out_dir: Path, config: DataConfig) -> Tokenizer:
        """Train on the given (training-split) lines, write the models and tokenizer.json to `out_dir`."""
        if config.joint_vocab:
            _train_model([*src_lines, *tgt_lines], out_dir / "spm.model", config)
            src_file = tgt_file = "spm.model"
        else:
            _train_model(src_lines, out_dir / "spm.src.model", config)
            _train_model(tgt_lines, out_dir / "spm.tgt.model", config)
            src_file, tgt_file = "spm.src.model", "spm.tgt.model"
        sizes = {name: spm.SentencePieceProcessor(model_file=str(out_dir / name)).get_piece_size()
                 for name in (src_file, tgt_file)}
        manifest = {
            "src_model": src_file,
            "tgt_model": tgt_file,
            "sha256": {name: sha256_file(out_dir / name) for name in sorted({src_file, tgt_file})},
            "src_vocab_size": sizes[src_file],
            "tgt_vocab_size": sizes[tgt_file],
            "special_ids": {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
            "config": {key: getattr(config, key) for key in SUBWORD_KEYS},
        }
        atomic_write_json(out_dir / MANIFEST, manifest)
        return cls.load(out_dir)

    @classmethod
    def load(cls, directory: Path) -> Tokenizer:
        """Load the models named by `directory/tokenizer.json`, checking their sha256."""
        manifest_bytes = _read_manifest_bytes(directory)
        contents = {MANIFEST: manifest_bytes}
        for name, digest in parse_manifest(directory / MANIFEST, manifest_bytes)["sha256"].items():
            path = directory / name
            try:
                contents[name] = path.read_bytes()
            except FileNotFoundError:
                raise NMTError(f"{path}: sentencepiece model missing.", f"Re-run `nmt prepare` or copy it beside {MANIFEST}.") from None
            if hashlib.sha256(contents[name]).hexdigest() != digest:
                raise NMTError(
                    f"{path}: sha256 differs from the one recorded in {directory / MANIFEST}.",
                    "The model was replaced after training: re-run `nmt prepare` (and retrain).",
                )
        return cls(directory, contents)

    def contents(self) -> dict[str, bytes]:
        """Every file `load` needs, by name (the manifest and the model files), as it was read."""
        return dict(self._contents)

    def encode_src(self, text: str) -> list[int]:
        """Source piece ids, without BOS/EOS."""
        return self._src.encode(text, out_type=int)

    def encode_tgt(self, text: str) -> list[int]:
        """Target piece ids, without BOS/EOS."""
        return self._tgt.encode(text, out_type=int)

    def decode_tgt(self, ids: list[int]) -> str:
        """Detokenised target text; PAD/BOS/EOS ids are skipped."""
        return self._tgt.decode([int(i) for i in ids if int(i) not in _SPECIAL])

    def src_pieces(self, text: str) -> list[str]:
        """Source pieces as strings, aligned with `encode_src(text)` (for attention plots)."""
        return self._src.encode(text, out_type=str)

    def tgt_id_to_piece(self, ids: list[int]) -> list[str]:
        """The target piece string of each id."""
        return [self._tgt.id_to_piece(int(i)) for i in ids]


def read_manifest(directory: Path) -> dict[str, Any]:
    """The parsed tokenizer.json of `directory`; NMTError if missing, unreadable, or a key it needs is missing or
    of another type."""
    return parse_manifest(directory / MANIFEST, _read_manifest_bytes(directory))


def _read_manifest_bytes(directory: Path) -> bytes:
    path = directory / MANIFEST
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise NMTError(f"{path} not found: no tokenizer in {directory}.", "Run `nmt prepare CONFIG` first.") from None


def parse_manifest(path: Path, content: bytes) -> dict[str, Any]:
    """tokenizer.json's `content` (read from `path`, which errors name), parsed and checked as `read_manifest` says."""
    try:
        manifest = json.loads(content.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise NMTError(f"{path}: not UTF-8 text ({exc.reason}).", "Re-run `nmt prepare`.") from None
    except json.JSONDecodeError as exc:
        raise NMTError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno}).", "Re-run `nmt prepare`.") from None
    if not isinstance(manifest, dict) or not {"src_model", "tgt_model", "sha256"} <= manifest.keys():
        raise NMTError(f"{path}: missing src_model / tgt_model / sha256.", "Re-run `nmt prepare`.")
    digests, settings = manifest["sha256"], manifest.get("config", {})
    for key, fits, should in (  # a hand-edited value of another type would fail where it is used, as a TypeError
        ("src_model", isinstance(manifest["src_model"], str), "a file name"),
        ("tgt_model", isinstance(manifest["tgt_model"], str), "a file name"),
        ("sha256", isinstance(digests, dict) and all(isinstance(v, str) for v in digests.values()),
         "an object of file names and their sha256"),
        ("config", isinstance(settings, dict), "an object of the subword settings"),
    ):
        if not fits:
            raise NMTError(f"{path}: {key} must be {should}, not {json.dumps(manifest[key])}.", "Re-run `nmt prepare`.")
    if unlisted := sorted({manifest["src_model"], manifest["tgt_model"]} - digests.keys()):
        raise NMTError(f"{path}: sha256 has no entry for {', '.join(unlisted)}.", "Re-run `nmt prepare`.")
    return manifest
