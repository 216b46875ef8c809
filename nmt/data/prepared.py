"""A prepared data folder as it is read: its splits and tokenizer, all of one preparation (`nmt prepare` builds
it: nmt/data/prepare.py).

Another process may prepare the same `data.dir` again while this one reads it (a config with other data settings,
started beside it): each preparation swaps a whole new folder in, so what was read is checked to come from the
one preparation of this config that the tokenizer came from (`build_stamp`), and refused otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nmt.config_sections import DataConfig
from nmt.data.corpus import read_lines
from nmt.data.pairs import Pair
from nmt.data.prepare import is_prepared, prepare
from nmt.data.sources import prepared_dir
from nmt.data.subwords import Tokenizer
from nmt.errors import NMTError, counted


@dataclass
class PreparedData:
    """A prepared data folder: its split text files and its tokenizer, all of one build (`build`, its
    prepared.json's `build_stamp` when the tokenizer was loaded)."""

    directory: Path
    tokenizer: Tokenizer
    build: tuple[int, ...] | None

    def pairs(self, split: str) -> list[Pair]:
        """Raw (source, target) text pairs of 'train', 'valid' or 'test', of the tokenizer's build."""
        try:
            src = read_lines(self.directory / f"{split}.src")
            tgt = read_lines(self.directory / f"{split}.tgt")
        finally:  # a file gone in the swap fails as this too
            check_same_build(self.directory, self.build)
        if len(src) != len(tgt):
            raise NMTError(
                f"{self.directory}/{split}.src has {counted(len(src), 'line')} but {split}.tgt has {len(tgt)}.",
                "The prepared folder was edited by hand: delete it and re-run `nmt prepare`.",
            )
        return list(zip(src, tgt, strict=True))


def check_same_build(directory: Path, build: tuple[int, ...] | None) -> None:
    """Refuse files read after another process prepared `directory` again (for other settings on the same
    data.dir) than the `build` (`build_stamp`) first read: a split of one preparation encoded with another's
    tokenizer would be trained on silently."""
    if build_stamp(directory) != build:
        raise _prepared_again(directory)


def _prepared_again(directory: Path) -> NMTError:
    return NMTError(
        f"{directory} changed while this process read it (prepared again by another process, for other data "
        "settings on the same data.dir, or its input files edited): what it read would not be one preparation "
        "of this config.",
        "Run the command again; to keep both preparations, give each setting its own data.dir, or leave "
        "data.dir out (each setting then gets its own folder under data/prepared/).",
    )


def build_stamp(directory: Path) -> tuple[int, ...] | None:
    """What tells one preparation of `directory` from the next: its prepared.json's inode, size and mtime
    (each build writes its own, and swaps the whole folder in); None where there is none."""
    try:
        stat = (directory / "prepared.json").stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def load_prepared(config: DataConfig) -> PreparedData:
    """The prepared data of `config`, preparing it first if needed; an NMTError where the folder changes while
    it is read (`check_same_build`)."""
    prepare(config)
    directory = Path(prepared_dir(config))
    build = build_stamp(directory)
    try:
        tokenizer = Tokenizer.load(directory)
        current = is_prepared(config)  # still this config's: none swapped in since `prepare`
    finally:  # the tokenizer is of the build stamped (a model gone or replaced in the swap fails as this too)
        check_same_build(directory, build)
    if not current:
        raise _prepared_again(directory)
    return PreparedData(directory, tokenizer, build)
