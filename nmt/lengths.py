"""Sentence lengths in words and the buckets they fall in (`<10`, `[10,20)`, ..., `>=60`): the pure pieces
that both the data layer (nmt/data: the training length filter, prepare's length histogram) and the
evaluation (nmt/evaluation/buckets.py: bucketed scores) use, so that data/ never imports evaluation/.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Bucket:
    """Lengths in [low, high); `high` is None for the last, open-ended bucket."""

    label: str
    low: int
    high: int | None

    def contains(self, length: int) -> bool:
        """Whether a sentence of `length` words falls in this bucket."""
        return length >= self.low and (self.high is None or length < self.high)


def make_buckets(cutoffs: Sequence[int]) -> list[Bucket]:
    """Buckets from increasing positive cutoffs (evaluation.buckets, which the config checks): [10, 20] ->
    `<10`, `[10,20)`, `>=20`."""
    buckets = [Bucket(f"<{cutoffs[0]}", 0, cutoffs[0])]
    buckets += [Bucket(f"[{lo},{hi})", lo, hi) for lo, hi in itertools.pairwise(cutoffs)]
    buckets.append(Bucket(f">={cutoffs[-1]}", cutoffs[-1], None))
    return buckets


# Chinese and Japanese are written without spaces between words: each of their characters (CJK ideographs,
# kana) counts as a word, as sacrebleu's zh and ja tokenizers split them, so that a length says something there
_UNSPACED = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORD = re.compile(f"[{_UNSPACED}]|[^\\s{_UNSPACED}]+")
_UNSPACED_CHARACTER = re.compile(f"[{_UNSPACED}]")


def word_count(text: str) -> int:
    """Number of words in `text`: whitespace-separated (as str.split), each Chinese or Japanese character one."""
    if text.isascii() or not _UNSPACED_CHARACTER.search(text):  # str.split's count, sooner than the regex's
        return len(text.split())
    # composed first: a decomposed kana's voicing mark (U+3099, U+309A) is part of its character, no word
    return len(_WORD.findall(unicodedata.normalize("NFC", text)))


def assign_buckets(lengths: Sequence[int], buckets: Sequence[Bucket]) -> list[int]:
    """Index into `buckets` (`make_buckets`: they cover [0, inf) without overlap) of each length."""
    return [next(i for i, bucket in enumerate(buckets) if bucket.contains(length)) for length in lengths]
