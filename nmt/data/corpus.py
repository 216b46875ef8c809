"""Reading a corpus: the interface of a source (data.source; one module each in nmt/data/sources/, named
in its registry, its own keys declared by its `Settings`), the helpers the sources share, then the
training filters (which `nmt.data.prepare.load_corpus` applies).
"""

from __future__ import annotations

import codecs
import dataclasses
import fnmatch
import glob
import hashlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from nmt.config_sections import DataConfig
from nmt.data.pairs import (
    MAX_LINE_CHARS,
    TRAIN_WORDS_CEILING,
    Corpus,
    Pair,
    normalise_space,
    split_of,
    within_words,
)
from nmt.errors import UNREADABLE, NMTError, counted
from nmt.fileio import same_file
from nmt.text_encoding import refuse_foreign_encoding

# a carriage return that is not the CR of a CRLF line end, nor the file's last character
_LONE_CR = re.compile(r"\r(?!\n|\Z)")


@dataclass
class SourceSettings:
    """The keys a source reads from its own sub-section data.NAME (a dataclass of defaults, typed by
    nmt/typed_yaml.py's build_section: unknown keys refused naming data.NAME.KEY); PATHS names its keys
    that hold paths, made absolute in a run's config.yaml and in the prepared data's fingerprint."""

    PATHS: ClassVar[tuple[str, ...]] = ()

    def validate(self) -> None:
        """Raise NMTError naming the first of its keys (data.NAME.KEY) whose value it cannot read."""

    def absolute(self) -> Self:
        """A copy with every path of PATHS made absolute (against the working directory); a URL (a builder's
        data file on the web, https://...) is no path and stays as it is."""
        paths = {key: os.path.abspath(getattr(self, key)) for key in self.PATHS
                 if getattr(self, key) and "://" not in getattr(self, key)}
        return dataclasses.replace(self, **paths)


@dataclass
class Source:
    """A corpus source: what it reads, from its own settings (sub-section data.NAME, declared by its
    `Settings`) and the keys every source shares (`config`), and how it names and checks them."""

    config: DataConfig
    settings: Any
    # the dataclass of its own keys; a source without keys of its own keeps this empty one
    Settings: ClassVar[type[SourceSettings]] = SourceSettings
    # whether an input folder is read whole (a dataset folder), so that data.dir may not lie inside one
    reads_folders: ClassVar[bool] = False

    def read(self) -> Corpus:
        """The cleaned pairs of each split, before the training filters."""
        raise NotImplementedError

    def clean_input(self, text: str) -> str:
        """A user's sentence (nmt translate, evaluate --src) cleaned as this source cleans its sentences where
        that changes characters the model would not know otherwise; a cleaned sentence stays as it is. The
        text as it is by default."""
        return text

    def name(self) -> str:
        """The corpus in prepared_dir's folder name (bible-k-l, files-<train file>, hf-<dataset>)."""
        raise NotImplementedError

    def describe(self) -> str:
        """Which corpus files or dataset it reads, in words (for reports)."""
        raise NotImplementedError

    def label(self) -> str:
        """The corpus in a few words, what it is and not where (a test set's origin): data.source."""
        return self.config.source

    def languages(self) -> str:
        """Its source and target side, as the corpus names them."""
        return f"{self.config.src_lang} -> {self.config.tgt_lang}"

    def inputs(self) -> list[Path]:
        """The files and folders it reads, and the glob patterns that name its files, which the prepared data's
        fingerprint covers (`input_files`)."""
        return []

    def kept_apart(self) -> list[Path]:
        """What data.dir may neither be nor hold, since preparing replaces data.dir whole: its inputs, and the
        files a glob of them matches."""
        return [file for path in self.inputs() for file in [path, *(input_files(path) if _is_glob(path) else [])]]


def input_files(path: Path) -> list[Path]:
    """The files an input of `Source.inputs` stands for now, sorted: itself, a folder's files at any depth, a
    glob's matches (`**` at any depth, as datasets reads it); none where nothing is there."""
    if _is_glob(path):
        return [Path(p) for p in sorted(glob.glob(str(path), recursive=True)) if os.path.isfile(p)]
    if path.is_dir():
        return [file for file in sorted(path.rglob("*")) if file.is_file()]
    return [path] if path.is_file() else []


def covers(path: Path, file: str) -> bool:
    """Whether the input `path` (as `input_files` reads it) would stand for the absolute path `file` were it there."""
    pattern = os.path.abspath(path)
    if _is_glob(path):
        return fnmatch.fnmatchcase(file, pattern)  # its * crosses folders: a shade wider than the glob
    return file == pattern or file.startswith(pattern.rstrip(os.sep) + os.sep)


def _is_glob(path: Path) -> bool:
    """Whether `path` is a glob pattern: a wildcard in it, and no file or folder of that very name."""
    return any(c in str(path) for c in "*?[") and not path.exists()


def blank_surplus(a: Sequence[str], b: Sequence[str]) -> str:
    """Where two files' lines differ in number only by blank lines at the end of the longer (an editor's extra
    empty line: the usual cause), " (the longer ends in N blank lines)"; else ""."""
    longer, shorter = (a, b) if len(a) > len(b) else (b, a)
    surplus = longer[len(shorter) :]
    if surplus and not any(line.strip() for line in surplus):
        return f" (the longer ends in {counted(len(surplus), 'blank line')}: remove {'it' if len(surplus) == 1 else 'them'})"
    return ""


def read_lines(
    path: str | Path,
    label: str = "corpus file",
    hint: str = "Check the path in the config.",
    bom_files: list[str] | None = None,
) -> list[str]:
    """Lines of a UTF-8 text file (without line ends; a byte-order mark that opens the file, or one of its lines
    where files were concatenated, stripped and its file appended to `bom_files`); NMTError naming `label`, the file and line on bad input (naming the encoding
    and its iconv command for a UTF-16 or UTF-32 file, with a byte-order mark or without), with `hint`
    (what to check) when the file is missing or a folder."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        where = "" if Path(path).is_absolute() else f" (looked for it from the current folder, {Path.cwd()})"
        raise NMTError(f"{label} not found: {path}{where}", hint) from None
    except IsADirectoryError:
        raise NMTError(f"{label} {path} is a folder, expected a text file.", hint) from None
    except PermissionError:
        raise NMTError(f"{label} {path} cannot be read: permission denied.", UNREADABLE) from None
    refuse_foreign_encoding(data, f"{label} {path}", str(path))
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
    if "\x00" in text:  # no sentence holds one: UTF-16 without a mark whose text is not mostly ASCII, or no text
        number = text.count("\n", 0, text.index("\x00")) + 1
        raise NMTError(
            f"{label} {path}, line {number}: a NUL character (a zero byte), which no text of sentences holds: the "
            "file is likely UTF-16 without a byte-order mark, or not text.",
            f"Convert it to UTF-8, e.g. `iconv -f UTF-16LE -t UTF-8 {path} > {path}.utf8` (UTF-16BE if it was saved "
            "big-endian), and give that file.",
        )
    lone = _LONE_CR.search(text)
    if lone:  # classic Mac OS line ends: the whole file one line, which no later check would name
        number, count = text.count("\n", 0, lone.start()) + 1, len(_LONE_CR.findall(text))
        raise NMTError(
            f"{label} {path}, line {number}: a carriage return (CR) that ends no line ({counted(count, 'such CR')} in "
            "the file, which is read a line per LF): a file saved with CR line ends would be read as one line.",
            f"Convert its line ends: `tr '\\r' '\\n' < {path} > {path}.unix`, or, where the CRs lie inside sentences, "
            "remove them (`tr -d '\\r'`); then give that file.",
        )
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    # a mark that opens a line within the file: files concatenated (`cat a.en b.en`), each saved with its own
    if bom_files is not None and str(path) not in bom_files and any(line.startswith("\ufeff") for line in lines):
        bom_files.append(str(path))
    return [line.removesuffix("\r").removeprefix("\ufeff") for line in lines]


def _fields_held(value: Any, at: str) -> str:
    """What `value` (`at`: where in the record) holds where a field path breaks: the fields to choose from."""
    if not isinstance(value, dict):
        return f"{at} is {type(value).__name__}, no fields"
    if not value:
        return f"{at} has no fields"
    names = ", ".join(map(str, list(value)[:10]))
    return f"{at} has the fields {names}{', ...' if len(value) > 10 else ''}"


def record_pair(record: Any, config: DataConfig, where: str | Callable[[], str]) -> Pair:
    """The texts at the dotted paths data.src_field / data.tgt_field of a record (default translation.LANG);
    an NMTError names the record by `where` (a callable: asked only then, when finding the place costs)."""
    fields = [field or f"translation.{lang}" for field, lang in ((config.src_field, config.src_lang),
                                                                 (config.tgt_field, config.tgt_lang))]
    if fields[0] == fields[1]:
        raise NMTError(
            f"{_place(where)}: the source and the target would both be the record's field '{fields[0]}': every pair "
            "would be a sentence and itself.",
            "Name the target's field: data.tgt_lang (translation.<tgt_lang>) or data.tgt_field.",
        )
    pair = []
    for dotted in fields:
        parts, value = dotted.split("."), record
        for depth, part in enumerate(parts):
            if not isinstance(value, dict) or part not in value:
                at = f"'{'.'.join(parts[:depth])}'" if depth else "the record"
                raise NMTError(
                    f"{_place(where)}: no field '{dotted}' in the record ({_fields_held(value, at)}).",
                    "Set data.src_field / data.tgt_field to the dotted path of the text (e.g. translation.en).",
                )
            value = value[part]
            if value is None:  # a JSON null, or what Hugging Face datasets gives a record lacking the field
                held, place = ".".join(parts[: depth + 1]), _place(where)
                # pandas, under the csv builder, reads a cell of NA, null, None or nan as missing
                csv = " A CSV cell of NA, N/A, null, None or nan is read as missing." if ".csv" in place.lower() else ""
                raise NMTError(
                    f"{place}: the record has no value for field '{held}' (missing or null)"
                    f"{'' if held == dotted else f', so none for {dotted!r}'}.",
                    f"Give every record a text there, or remove the records without one.{csv}",
                )
        if not isinstance(value, str):
            raise NMTError(
                f"{_place(where)}: field '{dotted}' is {type(value).__name__}, expected a string.",
                "Set data.src_field / data.tgt_field to the dotted path of a field holding the text itself.",
            )
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:  # JSON's "\ud83d" escape of half a character: no text can hold it
            raise NMTError(
                f"{_place(where)}: field '{dotted}' holds a lone surrogate {value[error.start]!r} (at character "
                f"{error.start + 1}), half of a character that UTF-8 cannot write.",
                "Write the whole character (both halves of its \\uXXXX pair, or the character itself), or remove it.",
            ) from None
        if "\x00" in value:  # as a text file's line (read_lines): sentencepiece would read it as a letter
            raise NMTError(
                f"{_place(where)}: field '{dotted}' holds a NUL character (at character {value.index(chr(0)) + 1}), "
                "which no sentence holds.", "Remove it from the record, or fix what wrote the file.")
        pair.append(value)
    return pair[0], pair[1]


def _place(where: str | Callable[[], str]) -> str:
    """record_pair's `where`, asked if it is a callable."""
    return where() if callable(where) else where


def file_of_two_splits(files: dict[str, list[Path]]) -> tuple[Path, str, str] | None:
    """The first file that two splits' `files` (by split, in split order) both take in, through links and other
    spellings too, with the earlier split and the later one; None where each split has files of its own."""
    seen: list[tuple[str, Path]] = []
    for split, paths in files.items():
        for path in paths:
            other = next((earlier for earlier, known in seen if same_file(known, path)), None)
            if other is not None and other != split:
                return path, other, split
            seen.append((split, path))
    return None


def shared_sentences(first: str, second: str) -> str:
    """What two splits reading one file would do with its sentences, for the refusal's message."""
    return "trained on and scored" if "train" in (first, second) else "both validated and scored"


def assemble(read: dict[str, list[Pair] | None], config: DataConfig) -> Corpus:
    """Clean whitespace, drop empty pairs, carve missing (None) valid/test from train by a hash of the pair."""
    carve = [s for s in ("valid", "test") if read[s] is None]
    corpus = Corpus(carved=carve)
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


# ---------------------------------------------------------------- filters


def filter_train(corpus: Corpus, config: DataConfig) -> None:
    """Apply data.max_train_words (0: TRAIN_WORDS_CEILING) and data.max_train_pairs to the training split only."""
    train = within_words(corpus.splits["train"], config.max_train_words or TRAIN_WORDS_CEILING)
    corpus.filtered_long = len(corpus.splits["train"]) - len(train)
    if config.max_train_pairs and len(train) > config.max_train_pairs:
        # The n pairs with the smallest hash of their text: the same subset every run, nested as n grows, and the
        # same pairs kept where others come or go (a line added to the corpus, another max_train_words)
        rank = sorted(range(len(train)), key=lambda i: (hashlib.sha256("\t".join(train[i]).encode()).digest(), i))
        chosen = sorted(rank[: config.max_train_pairs])
        corpus.capped = len(train) - len(chosen)
        train = [train[i] for i in chosen]
    corpus.splits["train"] = train


def drop_train_overlap(corpus: Corpus) -> None:
    """Drop valid and test pairs whose source sentence is also the source of a training pair; and where a split
    is given as a file, valid pairs whose source is a test pair's (test stays whole).

    On the Bible 14 of the 80 test verses under 10 words are formulas such as "And the LORD spake
    unto Moses, saying," that training holds verbatim: scoring them measures recall, not translation. A valid
    file drawn from the training corpus, with test carved from it, kept only the pairs the carve had moved to
    test: the checkpoint was chosen on the test sentences. Two carved splits are left as carved.
    """
    seen = {src for src, _ in corpus.splits["train"]}
    for split in ("valid", "test"):
        kept = [pair for pair in corpus.splits[split] if pair[0] not in seen]
        corpus.overlap_dropped[split] = len(corpus.splits[split]) - len(kept)
        corpus.splits[split] = kept
    if set(corpus.carved) != {"valid", "test"}:
        tested = {src for src, _ in corpus.splits["test"]}
        kept = [pair for pair in corpus.splits["valid"] if pair[0] not in tested]
        corpus.valid_in_test = len(corpus.splits["valid"]) - len(kept)
        corpus.splits["valid"] = kept
