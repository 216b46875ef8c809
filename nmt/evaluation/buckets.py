"""Sentence-length buckets in the compare-mt style: `<10`, `[10,20)`, ..., `[50,60)`, `>=60`.

A sentence's length is its number of whitespace-separated words, of the source by default
(what most reproductions of Bahdanau et al. plot) or of the reference (what compare-mt uses).
The buckets themselves and word counts (Bucket, make_buckets, assign_buckets, word_count) are in
nmt/lengths.py, which the data layer shares without importing evaluation/.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nmt.config_sections import BucketBy
from nmt.lengths import Bucket, assign_buckets, word_count


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
    last the first's. A length held by one sentence alone takes its neighbour in length order (the
    nearest length). One sentence in all pairs with itself."""
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
