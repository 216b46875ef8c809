"""The `files` source: per split a path prefix (PREFIX.src_lang / PREFIX.tgt_lang), a .tsv or .jsonl file,
or a source and a target file of any name (data.files.SPLIT_src / SPLIT_tgt); an empty valid/test is
carved from train."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from nmt.config_sections import DataConfig
from nmt.data.corpus import (
    Source,
    SourceSettings,
    assemble,
    blank_surplus,
    file_of_two_splits,
    read_lines,
    record_pair,
    shared_sentences,
)
from nmt.data.pairs import SPLITS, Corpus, Pair
from nmt.errors import NMTError, counted, require
from nmt.fileio import same_file

SPLIT_HINT = "Check data.files.train / valid / test."


@dataclass
class FilesSettings(SourceSettings):
    """data.files: per split a path prefix (PREFIX.src_lang / PREFIX.tgt_lang) or one .tsv / .jsonl file,
    or a source and a target file named freely (OpenNMT-py style); an empty valid / test is carved from
    train."""

    PATHS = ("train", "valid", "test", *(f"{split}_{side}" for split in SPLITS for side in ("src", "tgt")))

    train: str = ""
    valid: str = ""
    test: str = ""
    train_src: str = ""
    train_tgt: str = ""
    valid_src: str = ""
    valid_tgt: str = ""
    test_src: str = ""
    test_tgt: str = ""

    def validate(self) -> None:
        require(
            bool(self.train or self.train_src),
            "data.files.train",
            "is required when data.source is 'files' (a path prefix, a .tsv / .jsonl file, or "
            "data.files.train_src and data.files.train_tgt)",
        )
        for split in SPLITS:
            src, tgt = getattr(self, f"{split}_src"), getattr(self, f"{split}_tgt")
            if bool(src) != bool(tgt):
                given, missing = (f"data.files.{split}_src", f"data.files.{split}_tgt")[:: 1 if src else -1]
                raise NMTError(
                    f"'{given}' is given without '{missing}': data.files.{split}_src and data.files.{split}_tgt "
                    "go together.",
                    f"Give {missing} (the file line-aligned with {given}), or leave out {given}.",
                )
            both = (f"cannot be given with data.files.{split}_src / data.files.{split}_tgt: give the prefix or "
                    "the two files")
            require(not (src and getattr(self, split)), f"data.files.{split}", both)


class Files(Source):
    """Local text files, named by data.files.train / valid / test or data.files.SPLIT_src / SPLIT_tgt."""

    Settings = FilesSettings
    settings: FilesSettings

    def read(self) -> Corpus:
        config, own = self.config, self.settings
        self._check_splits_apart()
        bom_files: list[str] = []
        read: dict[str, list[Pair] | None] = {}
        for split in SPLITS:
            spec, src, tgt = getattr(own, split), getattr(own, f"{split}_src"), getattr(own, f"{split}_tgt")
            if spec:
                read[split] = read_parallel(spec, config, bom_files)
            else:
                read[split] = read_aligned(Path(src), Path(tgt), bom_files) if src else None
        corpus = assemble(read, config)
        corpus.bom_files = list(dict.fromkeys(bom_files))  # a file given for two splits counts once
        return corpus

    def name(self) -> str:
        return "files-" + Path(self.settings.train).name.removesuffix(".tsv").removesuffix(".jsonl")

    def describe(self) -> str:
        config, own, named = self.config, self.settings, {}
        for split in SPLITS:
            spec, src, tgt = getattr(own, split), getattr(own, f"{split}_src"), getattr(own, f"{split}_tgt")
            if src:  # a source and a target file of any name
                named[split] = f"{src} + {tgt}"
            elif spec:
                tsv_or_jsonl = spec.endswith((".tsv", ".jsonl"))
                named[split] = spec if tsv_or_jsonl else f"{spec}{{.{config.src_lang},.{config.tgt_lang}}}"
            elif split != "train":
                named[split] = "carved from train"
        return "files " + ", ".join(f"{split} {named_as}" for split, named_as in named.items())

    def inputs(self) -> list[Path]:
        return [path for split in SPLITS for path in self._split_files(split)]

    def _split_files(self, split: str) -> list[Path]:
        """The files a split is read from (none where it is carved from train)."""
        spec, own = getattr(self.settings, split), self.settings
        if spec:
            sides = [""] if spec.endswith((".tsv", ".jsonl")) else [f".{self.config.src_lang}", f".{self.config.tgt_lang}"]
            return [Path(spec + side) for side in sides]
        return [Path(getattr(own, f"{split}_{side}")) for side in ("src", "tgt") if getattr(own, f"{split}_{side}")]

    def _check_splits_apart(self) -> None:
        """Refuse a file given for two splits: the same sentences would be trained on and scored, or validate
        the checkpoints that the test then scores."""
        shared = file_of_two_splits({split: self._split_files(split) for split in SPLITS})
        if shared is not None:
            path, other, split = shared
            raise NMTError(
                f"{path} is given for both the {other} and the {split} split: the same sentences would be "
                f"{shared_sentences(other, split)}.",
                f"Give the {split} split its own file, or leave data.files.{split} empty to carve it from train.",
                key=f"data.files.{split}",
            )


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
    return record_pair(record, config, where)


def read_parallel(spec: str, config: DataConfig, bom_files: list[str]) -> list[Pair]:
    """Pairs from a .tsv file, a .jsonl file, or a prefix with PREFIX.src_lang / PREFIX.tgt_lang.

    A blank line of a .tsv / .jsonl gives the pair ("", ""), which assembling drops and counts as empty.
    """
    if spec.endswith((".tsv", ".jsonl")):
        return [
            _line_pair(line, spec.endswith(".tsv"), config, f"{spec}, line {number}") if line.strip() else ("", "")
            for number, line in enumerate(_lines(Path(spec), SPLIT_HINT, bom_files), 1)
        ]
    src_path, tgt_path = Path(f"{spec}.{config.src_lang}"), Path(f"{spec}.{config.tgt_lang}")
    hint = (
        f"'{spec}' is read as a path prefix: the files are PREFIX.<data.src_lang> and PREFIX.<data.tgt_lang> "
        f"({src_path.name} and {tgt_path.name}); a .tsv or .jsonl name is read as one file. For files "
        "named otherwise give data.files.train_src / train_tgt (valid_, test_ alike)."
    )
    return read_aligned(src_path, tgt_path, bom_files, hint)


def read_aligned(
    src_path: Path, tgt_path: Path, bom_files: list[str], hint: str = "Check data.files.*_src / data.files.*_tgt."
) -> list[Pair]:
    """Pairs from a source file and its line-aligned target file (byte-order marks noted in `bom_files`)."""
    if same_file(src_path, tgt_path):  # data.src_lang == data.tgt_lang, or one file given twice
        raise NMTError(
            f"{src_path} would be read as both the source and the target: every pair would be a sentence and "
            "itself.",
            "Give the target side its own file: data.tgt_lang names a prefix's target suffix (PREFIX.<tgt_lang>), "
            "data.files.*_tgt a file of any name.",
        )
    src = _lines(src_path, hint, bom_files)
    tgt = _lines(tgt_path, hint, bom_files)
    if len(src) != len(tgt):
        raise NMTError(
            f"{src_path} has {counted(len(src), 'line')} but {tgt_path} has {len(tgt)}{blank_surplus(src, tgt)}.",
            "The two sides must be line-aligned: one sentence and its translation on the same line number.",
        )
    return list(zip(src, tgt, strict=True))


def _lines(path: Path, hint: str, bom_files: list[str]) -> list[str]:
    """`read_lines` of a corpus file (`hint`: what to check if it is missing), refusing a file without a line:
    else an empty file (a failed download, a wrong copy) makes an empty split, whose error names no file."""
    lines = read_lines(path, hint=hint, bom_files=bom_files)
    if not lines:
        raise NMTError(
            f"corpus file {path} is empty.",
            "Give a file of one sentence a line (or leave data.files.valid / test empty to carve them from train).",
        )
    return lines
