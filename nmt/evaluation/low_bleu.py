"""A BLEU too low to tell anything: one threshold and one wording for every report that meets one (the
checkpoint best.pt holds, the paper's checks, attention-checks' tables). Under 1 BLEU a few matched n-grams
decide which checkpoint scores best, which bucket or system is ahead, and a paired test's p."""

from __future__ import annotations

from collections.abc import Mapping

MIN_BLEU = 1.0
CHOOSES_BY_NOISE = "a BLEU this low chooses by noise"


def too_weak(bleu: Mapping[str, float]) -> str:
    """Why the systems of `bleu` (name -> BLEU on all sentences) that score under MIN_BLEU show nothing;
    "" if none does."""
    weak = [f"{name} scores {score:.2f} BLEU on all sentences" for name, score in bleu.items() if score < MIN_BLEU]
    if not weak:
        return ""
    return ", ".join(weak) + f" (under {MIN_BLEU:g}: too weak for its buckets to show anything)"
