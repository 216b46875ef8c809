"""Parallel text as the toolkit holds it: (source, target) pairs in train/valid/test splits.

Splits are decided by a stable hash of a key (the verse id for the Bible, the text of the pair
otherwise), so they never change between runs and a verse never lands in two splits.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from nmt.lengths import word_count

Pair = tuple[str, str]
SPLITS = ("train", "valid", "test")
# Bounds on memory whatever a corpus holds: a pair with a side longer than MAX_LINE_CHARS characters is
# dropped as it is read (any split), and training keeps pairs of at most TRAIN_WORDS_CEILING words per side
# unless data.max_train_words says otherwise (one long pair is a batch of its own, and attention over it
# takes memory in the square of its length).
MAX_LINE_CHARS = 1 << 16
TRAIN_WORDS_CEILING = 250


@dataclass
class Corpus:
    """The three splits as text pairs, plus counts of what was dropped on the way."""

    splits: dict[str, list[Pair]] = field(default_factory=lambda: {s: [] for s in SPLITS})
    dropped_empty: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SPLITS, 0))
    filtered_long: int = 0
    capped: int = 0
    overlap_dropped: dict[str, int] = field(default_factory=lambda: {"valid": 0, "test": 0})
    valid_in_test: int = 0  # valid pairs dropped as their source is a test pair's (a split given as a file)
    extra_train_pairs: int = 0
    bom_files: list[str] = field(default_factory=list)  # input files whose byte-order mark was stripped
    dropped_overlong: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SPLITS, 0))
    carved: list[str] = field(default_factory=list)  # the valid / test splits carved from train (not given)


def split_of(key: str, valid_fraction: float, test_fraction: float) -> str:
    """'train', 'valid' or 'test' for `key`, from the first 8 bytes of its sha256 (stable everywhere)."""
    u = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") / 2**64
    if u < test_fraction:
        return "test"
    return "valid" if u < test_fraction + valid_fraction else "train"


def normalise_space(text: str) -> str:
    """Collapse every run of (Unicode) whitespace, line separators included, to one space."""
    return " ".join(text.split())


def within_words(pairs: list[Pair], max_words: int) -> list[Pair]:
    """The pairs whose source and target both have at most `max_words` words (0: all pairs)."""
    if not max_words:
        return pairs
    return [pair for pair in pairs if word_count(pair[0]) <= max_words and word_count(pair[1]) <= max_words]
