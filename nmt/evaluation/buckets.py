"""Sentence-length buckets in the compare-mt style: `<10`, `[10,20)`, ..., `[50,60)`, `>=60`.

A sentence's length is its number of whitespace-separated words, of the source by default
(what most reproductions of Bahdanau et al. plot) or of the reference (what compare-mt uses).
The buckets themselves and word counts (Bucket, make_buckets, assign_buckets, word_count) are in
nmt/lengths.py, which the data layer shares without importing evaluation/.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nmt.config_sections import BucketBy
from nmt.lengths import Bucket, assign_buckets, make_buckets, word_count

# `nmt score --buckets auto`: the width of the buckets it starts from, those of the default cutoffs
DATA_BUCKET_STEP = 10


def data_cutoffs(lengths: Sequence[int], min_sentences: int, step: int = DATA_BUCKET_STEP) -> tuple[list[int], bool]:
    """Cutoffs of buckets sized from the data, each holding at least `min_sentences` of the `lengths`:
    `step`-word buckets up to the longest length, then, while one holds fewer, the smallest (the shorter
    on a tie) merged with its smaller neighbour (the shorter on a tie). Where that leaves a single bucket
    (too few sentences for two, or all shorter than `step`), two as even as the lengths allow. Returns the
    cutoffs and whether they are that even split."""
    cutoffs = list(range(step, max(lengths, default=0) + 1, step))
    counts = [len(rows) for rows in bucket_members(lengths, make_buckets(cutoffs)).values()] if cutoffs else []
    while len(counts) > 1 and min(counts) < min_sentences:
        i = counts.index(min(counts))
        # merge bucket i with bucket j = i - 1 or i + 1: the cutoff between them goes
        j = i + 1 if i == 0 or (i + 1 < len(counts) and counts[i + 1] < counts[i - 1]) else i - 1
        low = min(i, j)
        counts[low : low + 2] = [counts[i] + counts[j]]
        del cutoffs[low]
    if cutoffs:
        return cutoffs, False
    candidates = sorted({length for length in lengths if length > 0}) or [step]
    even = min(candidates, key=lambda cutoff: abs(2 * sum(length < cutoff for length in lengths) - len(lengths)))
    return [even], True


def sentence_lengths(sources: Sequence[str], references: Sequence[str], by: BucketBy) -> list[int]:
    """The length each sentence is bucketed by: words of its source or of its reference."""
    return [word_count(t) for t in (sources if by == "source" else references)]


def bucket_members(lengths: Sequence[int], buckets: Sequence[Bucket]) -> dict[Bucket, list[int]]:
    """Each bucket, in order, with the indices (increasing) of the sentences whose length falls in it."""
    members: dict[Bucket, list[int]] = {bucket: [] for bucket in buckets}
    for i, index in enumerate(assign_buckets(lengths, buckets)):
        members[buckets[index]].append(i)
    return members


def non_empty(counts: Mapping[str, int]) -> list[str]:
    """The labels, in order, of the buckets that hold a sentence, from a report's {label: sentences}."""
    return [label for label, n in counts.items() if n > 0]


def length_matched_pairing(lengths: Sequence[int], seed: int) -> list[int]:
    """For each sentence, the index of another sentence of the same length (a fixed, seeded pairing):
    within each length, the sentences in a seeded random order each take the next one's index, the
    last the first's. A length held by one sentence alone takes the next sentence in length order (the next
    longer; the longest, the one before it), which need not be the nearest length. It concerns a handful of
    sentences (one verse of the Bible test split), and is kept so that floors stay comparable with the
    reports written so far. One sentence in all pairs with itself."""
    import numpy as np  # here: importing buckets (every command does) stays light

    groups: dict[int, list[int]] = {}
    for i in np.random.default_rng(seed).permutation(len(lengths)).tolist():
        groups.setdefault(lengths[i], []).append(i)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    position = {i: k for k, i in enumerate(order)}
    pairing = list(range(len(lengths)))
    for members in groups.values():
        for k, i in enumerate(members):
            pairing[i] = members[(k + 1) % len(members)]
        if len(members) == 1 and len(order) > 1:
            k = position[members[0]]
            pairing[members[0]] = order[k + 1] if k + 1 < len(order) else order[k - 1]
    return pairing
