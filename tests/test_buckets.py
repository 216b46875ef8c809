"""Length buckets: compare-mt labels, edges, source vs reference length, custom cutoffs."""

from __future__ import annotations

import unicodedata

import pytest

from nmt.evaluation.buckets import bucket_members, data_cutoffs, sentence_lengths
from nmt.lengths import Bucket, assign_buckets, make_buckets, word_count

DEFAULT = [10, 20, 30, 40, 50, 60]


def _words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def test_default_labels_and_bounds() -> None:
    buckets = make_buckets(DEFAULT)
    assert [b.label for b in buckets] == ["<10", "[10,20)", "[20,30)", "[30,40)", "[40,50)", "[50,60)", ">=60"]
    assert buckets[0] == Bucket("<10", 0, 10)
    assert buckets[-1] == Bucket(">=60", 60, None)


@pytest.mark.parametrize(
    ("length", "label"),
    [(0, "<10"), (9, "<10"), (10, "[10,20)"), (19, "[10,20)"), (59, "[50,60)"), (60, ">=60"), (500, ">=60")],
)
def test_edges(length: int, label: str) -> None:
    buckets = make_buckets(DEFAULT)
    lengths = sentence_lengths([_words(length)], ["ref"], by="source")
    assert lengths == [length]
    assert buckets[assign_buckets(lengths, buckets)[0]].label == label


def test_word_count_splits_on_any_whitespace() -> None:
    assert word_count("  a\tb  c\n") == 3
    assert word_count("") == 0


def test_chinese_and_japanese_count_a_word_per_character() -> None:
    """Written without spaces, a Chinese sentence would be one word, and every one of them in the first
    bucket: each ideograph or kana counts as one, as sacrebleu's zh and ja tokenizers split them."""
    assert word_count("我爱你") == 3 and word_count("カタカナです") == 6
    assert word_count("㐀㐁") == 2  # CJK Extension A: one word a character too
    assert word_count(unicodedata.normalize("NFD", "がぎ")) == word_count("がぎ") == 2  # a voicing mark is no word
    assert word_count("我 love 你们") == 4 and word_count("l’eau, déjà\u00a0là") == 3
    references = ["我" * n for n in (5, 15, 45)]
    assert sentence_lengths(references, references, "reference") == [5, 15, 45]


def test_source_versus_reference_length() -> None:
    buckets = make_buckets(DEFAULT)
    sources, references = [_words(9), _words(25)], [_words(12), _words(61)]
    by_source = assign_buckets(sentence_lengths(sources, references, "source"), buckets)
    by_reference = assign_buckets(sentence_lengths(sources, references, "reference"), buckets)
    assert [buckets[i].label for i in by_source] == ["<10", "[20,30)"]
    assert [buckets[i].label for i in by_reference] == ["[10,20)", ">=60"]


def test_custom_cutoffs() -> None:
    buckets = make_buckets([5, 15])
    assert [b.label for b in buckets] == ["<5", "[5,15)", ">=15"]
    lengths = [4, 5, 14, 15]
    assert assign_buckets(lengths, buckets) == [0, 1, 1, 2]
    assert bucket_members([14, 4, 5, 15, 40], buckets) == dict(zip(buckets, [[1], [0, 2], [3, 4]], strict=True))
    assert list(bucket_members([1, 2], buckets).values()) == [[0, 1], [], []]  # an empty bucket keeps its place
    single = make_buckets([3])
    assert [b.label for b in single] == ["<3", ">=3"]


def test_length_matched_pairing_pairs_other_sentences_of_equal_length() -> None:
    from nmt.evaluation.buckets import length_matched_pairing

    lengths = [3, 5, 3, 3, 9, 5, 1, 5, 3]
    pairing = length_matched_pairing(lengths, seed=1)
    assert sorted(pairing[i] for i in range(len(lengths)) if lengths[i] in (3, 5)) == [0, 1, 2, 3, 5, 7, 8]
    for i, j in enumerate(pairing):
        if lengths.count(lengths[i]) > 1:
            assert j != i and lengths[j] == lengths[i]
    assert lengths[pairing[4]] == 5 and lengths[pairing[6]] == 3  # alone in its length, at an end: its neighbour
    # alone in a middle length: the next longer in length order (6 -> 9), though 5 is nearer
    assert length_matched_pairing([3, 5, 6, 9], seed=1)[2] == 3
    assert pairing == length_matched_pairing(lengths, seed=1)
    assert any(length_matched_pairing(lengths, seed=s) != pairing for s in range(2, 6))
    assert length_matched_pairing([7], seed=1) == [0] and length_matched_pairing([], seed=1) == []


def _counts(lengths: list[int], cutoffs: list[int]) -> list[int]:
    return [len(rows) for rows in bucket_members(lengths, make_buckets(cutoffs)).values()]


@pytest.mark.parametrize(
    ("lengths", "cutoffs", "counts", "even"),
    [
        # WMT22 de-en's shape: 44, 10 and 9 sentences past 40, 50 and 60 words merge into one bucket of 63
        ([5] * 128 + [15] * 120 + [25] * 125 + [35] * 127 + [45] * 44 + [55] * 10 + [65] * 5 + [90] * 4,
         [10, 20, 30, 40], [128, 120, 125, 127, 63], False),
        ([5] * 60 + [45] * 60, [40], [60, 60], False),  # the empty buckets between merge, then join the shorter side
        ([5] * 30 + [15] * 100 + [25] * 100, [20], [130, 100], False),  # short ones too: <10 merges up
        ([5] * 200 + [15] * 10, [15], [200, 10], True),  # no two buckets of 50: two as even as the lengths allow
        ([2] * 40 + [7] * 400, [7], [40, 400], True),  # all under 10 words
        ([3] * 100, [3], [0, 100], True),
        ([2] * 100 + [7] * 100, [7], [100, 100], True),  # all under 10 words, both halves testable
    ],
)
def test_data_cutoffs_merge_until_every_bucket_can_be_tested(
    lengths: list[int], cutoffs: list[int], counts: list[int], even: bool
) -> None:
    assert data_cutoffs(lengths, 50) == (cutoffs, even)
    assert _counts(lengths, cutoffs) == counts
