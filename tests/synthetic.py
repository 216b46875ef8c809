"""Synthetic parallel data for tests: reverse a random digit sequence.

A model that learns it must look at the right source position at every step, which an
attention model does easily and a fixed-vector model finds harder as sequences grow.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path


def reverse_pairs(n: int, min_len: int = 5, max_len: int = 40, seed: int = 0) -> list[tuple[str, str]]:
    """`n` pairs (source, target): space-separated digits and the same digits reversed."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        digits = [str(rng.randrange(10)) for _ in range(rng.randint(min_len, max_len))]
        pairs.append((" ".join(digits), " ".join(reversed(digits))))
    return pairs


def reversal_links(sources: Sequence[str]) -> list[set[tuple[int, int]]]:
    """The exact word alignment of the reverse task, as (source word, target word) links: target word j of
    n is source word n-1-j."""
    return [{(len(s.split()) - 1 - j, j) for j in range(len(s.split()))} for s in sources]


def write_parallel(
    prefix: Path, pairs: list[tuple[str, str]], src_lang: str = "src", tgt_lang: str = "tgt"
) -> Path:
    """Write PREFIX.src_lang and PREFIX.tgt_lang, one sentence per line; return PREFIX."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.{src_lang}").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    Path(f"{prefix}.{tgt_lang}").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return prefix
