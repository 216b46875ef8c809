"""Corpus sources -> cleaned (source, target) pairs split into train/valid/test: local files and the
Hugging Face hub here, the Bible in nmt/data/bible.py; then the training filters (`load_corpus`).
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import socket
import urllib.parse
from pathlib import Path
from typing import Any

from nmt.config_sections import DataConfig
from nmt.data.bible import bible_corpus
from nmt.data.pairs import (
    MAX_LINE_CHARS,
    SPLITS,
    TRAIN_WORDS_CEILING,
    Corpus,
    Pair,
    normalise_space,
    split_of,
    within_words,
)
from nmt.errors import NMTError

# How long a connection to the Hugging Face hub may take before the machine counts as offline.
HUB_PROBE_SECONDS = 3.0


# ---------------------------------------------------------------- files


def read_lines(
    path: str | Path,
    label: str = "corpus file",
    hint: str = "Check data.train / data.valid / data.test.",
    bom_files: list[str] | None = None,
) -> list[str]:
    """Lines of a UTF-8 text file (without line ends, a leading byte-order mark stripped and its file
    appended to `bom_files`); NMTError naming `label`, the file and line on bad input, with `hint`
    (what to check) when the file is missing or a folder."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise NMTError(f"{label} not found: {path}", hint) from None
    except IsADirectoryError:
        raise NMTError(f"{label} {path} is a folder, expected a text file.", hint) from None
    if data.startswith(codecs.BOM_UTF8):  # as Windows editors save it: not part of the first sentence
        data = data[len(codecs.BOM_UTF8) :]
        if bom_files is not None:
            bom_files.append(str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        number, line_start = data.count(b"\n", 0, exc.start) + 1, data.rfind(b"\n", 0, exc.start) + 1
        raise NMTError(
            f"{label} {path}, line {number}: not valid UTF-8 (byte {exc.start - line_start + 1} of the line).",
            "Convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8`.",
        ) from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _record_pair(record: Any, config: DataConfig, where: str) -> Pair:
    """The texts at the dotted paths data.src_field / data.tgt_field of a record (default translation.LANG)."""
    pair = []
    for field, lang in ((config.src_field, config.src_lang), (config.tgt_field, config.tgt_lang)):
        dotted = field or f"translation.{lang}"
        value = record
        for part in dotted.split("."):
            if not isinstance(value, dict) or part not in value:
                raise NMTError(
                    f"{where}: no field '{dotted}' in the record.",
                    "Set data.src_field / data.tgt_field to the dotted path of the text (e.g. translation.en).",
                )
            value = value[part]
        if not isinstance(value, str):
            raise NMTError(f"{where}: field '{dotted}' is {type(value).__name__}, expected a string.")
        pair.append(value)
    return pair[0], pair[1]


def _line_pair(line: str, tsv: bool, config: DataConfig, where: str) -> Pair:
    """The pair of a `source<TAB>target` line (`tsv`) or of a JSON-lines record."""
    if tsv:
        parts = line.split("\t")
        if len(parts) != 2:
            raise NMTError(
                f"{where}: expected 'source<TAB>target', found {len(parts)} fields.",
                "Each line needs exactly one tab character.",
            )
        return parts[0], parts[1]
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise NMTError(
            f"{where}: invalid JSON ({exc.msg}, character {exc.colno} of the line).", "One JSON object per line."
        ) from None
    return _record_pair(record, config, where)


def read_parallel(spec: str, config: DataConfig, bom_files: list[str] | None = None) -> list[Pair]:
    """Pairs from a .tsv file, a .jsonl file, or a prefix with PREFIX.src_lang / PREFIX.tgt_lang.

    A blank line of a .tsv / .jsonl gives the pair ("", ""), which assembling drops and counts as empty.
    """
    if spec.endswith((".tsv", ".jsonl")):
        return [
            _line_pair(line, spec.endswith(".tsv"), config, f"{spec}, line {number}") if line.strip() else ("", "")
            for number, line in enumerate(read_lines(Path(spec), bom_files=bom_files), 1)
        ]
    src_path, tgt_path = Path(f"{spec}.{config.src_lang}"), Path(f"{spec}.{config.tgt_lang}")
    hint = (
        f"'{spec}' is read as a path prefix: the files are PREFIX.<data.src_lang> and PREFIX.<data.tgt_lang> "
        f"({src_path.name} and {tgt_path.name}); a .tsv or .jsonl name is read as one file. For files "
        "named otherwise give data.train_src / data.train_tgt (valid_, test_ alike)."
    )
    return read_aligned(src_path, tgt_path, hint, bom_files)


def read_aligned(
    src_path: Path, tgt_path: Path, hint: str = "Check data.*_src / data.*_tgt.", bom_files: list[str] | None = None
) -> list[Pair]:
    """Pairs from a source file and its line-aligned target file (byte-order marks noted in `bom_files`)."""
    src = read_lines(src_path, hint=hint, bom_files=bom_files)
    tgt = read_lines(tgt_path, hint=hint, bom_files=bom_files)
    if len(src) != len(tgt):
        raise NMTError(
            f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}.",
            "The two sides must be line-aligned: one sentence and its translation on the same line number.",
        )
    return list(zip(src, tgt, strict=True))


def _assemble(read: dict[str, list[Pair] | None], config: DataConfig) -> Corpus:
    """Clean whitespace, drop empty pairs, carve missing (None) valid/test from train by a hash of the pair."""
    corpus = Corpus(splits={s: [] for s in SPLITS})
    carve = [s for s in ("valid", "test") if read[s] is None]
    for split, pairs in read.items():
        for src, tgt in pairs or []:
            if len(src) > MAX_LINE_CHARS or len(tgt) > MAX_LINE_CHARS:
                corpus.dropped_overlong[split] += 1
                continue
            src, tgt = normalise_space(src), normalise_space(tgt)
            target = split
            if split == "train" and carve:
                target = split_of(f"{src}\t{tgt}", config.valid_fraction, config.test_fraction)
                target = target if target in carve else "train"
            if src and tgt:
                corpus.splits[target].append((src, tgt))
            else:
                corpus.dropped_empty[target] += 1
    return corpus


def files_corpus(config: DataConfig) -> Corpus:
    """The `files` source: one spec (or a source and a target file) per split; an empty valid/test is
    carved from train."""
    bom_files: list[str] = []
    read: dict[str, list[Pair] | None] = {}
    for split in SPLITS:
        spec, src, tgt = getattr(config, split), getattr(config, f"{split}_src"), getattr(config, f"{split}_tgt")
        if spec:
            read[split] = read_parallel(spec, config, bom_files)
        else:
            read[split] = read_aligned(Path(src), Path(tgt), bom_files=bom_files) if src else None
    corpus = _assemble(read, config)
    corpus.bom_files = list(dict.fromkeys(bom_files))  # a file given for two splits counts once
    return corpus


# ---------------------------------------------------------------- huggingface


_LOCAL_DATA_HINT = (
    "Data on this machine works offline: data.source: files (text, .tsv or .jsonl files), or data.source: "
    "huggingface with data.hf_name a local dataset folder (save_to_disk or data files), or a builder such "
    "as json / parquet / csv with data.train / valid / test naming its files."
)


def _is_builder(name: str) -> bool:
    """Whether `name` is one of datasets' packaged builders (json, parquet, csv, ...)."""
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    return name in _PACKAGED_DATASETS_MODULES


def _check_hub_reachable(config: DataConfig) -> None:
    """Fail in seconds, not after the hub client's retries, when `hf_name` needs the hub and it cannot be
    reached. Local folders, packaged builders (json, parquet, ...) and offline mode need no hub."""
    offline = any(
        os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )
    if offline or os.path.exists(config.hf_name) or _is_builder(config.hf_name):
        return
    endpoint = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_SECONDS).close()
    except OSError as exc:
        raise NMTError(
            f"data.hf_name '{config.hf_name}' is a Hugging Face hub dataset, but the hub ({host}:{port}) "
            f"cannot be reached from this machine ({exc.strerror or type(exc).__name__}).",
            "If the dataset is in the local Hugging Face cache, set HF_HUB_OFFLINE=1 (and HF_DATASETS_OFFLINE=1) "
            f"to use it from there. {_LOCAL_DATA_HINT}",
        ) from None


def _hf_split(config: DataConfig, split: str, name: str, data_files: dict[str, str]) -> list[Pair]:
    import datasets

    try:
        dataset = datasets.load_dataset(
            config.hf_name, config.hf_config or None, split=name, data_files=data_files or None
        )
    except Exception as exc:  # datasets raises many types (connection, not found, offline, bad split)
        text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        raise NMTError(
            f"could not load the {split} split '{name}' of Hugging Face dataset '{config.hf_name}' ({text}).",
            "Check data.hf_name, data.hf_config and data.hf_*_split. Offline, HF_HUB_OFFLINE=1 uses datasets "
            f"already in the local Hugging Face cache. {_LOCAL_DATA_HINT}",
        ) from None
    return [_record_pair(record, config, f"{config.hf_name}[{name}] row {i}") for i, record in enumerate(dataset)]


def huggingface_corpus(config: DataConfig) -> Corpus:
    """The `huggingface` source: `datasets.load_dataset(hf_name, hf_config, split=...)` per split.

    `hf_name` may be a hub name, a local dataset folder, or a builder such as 'json' / 'parquet'
    with data.train / valid / test as its data files. An empty hf_*_split name is carved from train.
    """
    names = {split: getattr(config, f"hf_{split}_split") for split in SPLITS}
    if not names["train"]:
        raise NMTError("data.hf_train_split is empty.", "Name the training split, e.g. train.")
    # A packaged builder reads only the files it is given: every split it is asked for needs data.<split>.
    for split, name in names.items():
        if name and not getattr(config, split) and _is_builder(config.hf_name):
            carve = "" if split == "train" else (
                f', or set data.hf_{split}_split: "" to carve {split} from train (data.{split}_fraction of its pairs)'
            )
            raise NMTError(
                f"data.hf_{split}_split is '{name}', but data.{split} gives the {config.hf_name} builder no file for it.",
                f"Set data.{split} to the split's file (a path or a glob){carve}.",
            )
    _check_hub_reachable(config)
    # Short timeouts so an offline machine fails in seconds rather than retrying for minutes.
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "5")
    data_files = {name: getattr(config, split) for split, name in names.items() if name and getattr(config, split)}
    read = {split: _hf_split(config, split, name, data_files) if name else None for split, name in names.items()}
    return _assemble(read, config)


# ---------------------------------------------------------------- filters


def filter_train(corpus: Corpus, config: DataConfig) -> Corpus:
    """Apply data.max_train_words (0: TRAIN_WORDS_CEILING) and data.max_train_pairs to the training split only."""
    train = within_words(corpus.splits["train"], config.max_train_words or TRAIN_WORDS_CEILING)
    corpus.filtered_long = len(corpus.splits["train"]) - len(train)
    if config.max_train_pairs and len(train) > config.max_train_pairs:
        # The n pairs with the smallest hash: the same subset every run, and nested as n grows.
        rank = sorted(range(len(train)), key=lambda i: hashlib.sha256(f"{i}\t{train[i][0]}".encode()).digest())
        chosen = sorted(rank[: config.max_train_pairs])
        corpus.capped = len(train) - len(chosen)
        train = [train[i] for i in chosen]
    corpus.splits["train"] = train
    return corpus


def drop_train_overlap(corpus: Corpus) -> Corpus:
    """Drop valid and test pairs whose source sentence is also the source of a training pair.

    On the Bible 14 of the 80 test verses under 10 words are formulas such as "And the LORD spake
    unto Moses, saying," that training holds verbatim: scoring them measures recall, not translation.
    """
    seen = {src for src, _ in corpus.splits["train"]}
    for split in ("valid", "test"):
        kept = [pair for pair in corpus.splits[split] if pair[0] not in seen]
        corpus.overlap_dropped[split] = len(corpus.splits[split]) - len(kept)
        corpus.splits[split] = kept
    return corpus


def load_corpus(config: DataConfig) -> Corpus:
    """Read the configured source, clean and split it, filter training pairs, drop valid/test pairs
    seen in training (data.drop_train_overlap); NMTError if any split is empty."""
    reader = {"bible": bible_corpus, "files": files_corpus, "huggingface": huggingface_corpus}[config.source]
    corpus = filter_train(reader(config), config)
    if config.drop_train_overlap:
        corpus = drop_train_overlap(corpus)
    for split in SPLITS:
        if not corpus.splits[split]:
            raise NMTError(
                f"the {split} split is empty after reading and filtering data.source '{config.source}' "
                f"({corpus.dropped_empty[split]} empty pairs dropped, {corpus.filtered_long} too long, "
                f"{corpus.overlap_dropped.get(split, 0)} also in training).",
                "Check the input files, data.max_train_words, data.drop_train_overlap and "
                "data.valid_fraction / data.test_fraction.",
            )
    return corpus
