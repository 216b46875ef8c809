"""What a trained run's attention weights look like over a test split: their entropy, and one heatmap.
`row_entropy` and `uniform_entropy` are the one entropy rule of a decoder step, which `nmt attention-scaling` uses
too; the means differ: here per sentence of greedy output, there per decoder step of teacher forcing."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from nmt.config import Config
from nmt.data.prepared import load_prepared
from nmt.decoding.plots import plot_attention
from nmt.decoding.translator import Translator

ENTROPY_FLOOR = 1e-12  # weights are raised to this before their log: no log(0)


def row_entropy(weights: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Entropy in nats (float64) of each row of `weights` (... x src_len), over the row's real positions:
    `mask` (the same shape, bool; default: every position)."""
    rows = weights.double().clamp_min(ENTROPY_FLOOR)
    terms = rows * rows.log()
    if mask is not None:  # padding's floored weights would add to the entropy
        terms = terms.masked_fill(~mask, 0.0)
    return -terms.sum(dim=-1)


def uniform_entropy(positions: int) -> float:
    """The entropy of uniform weights over `positions` source positions, log(positions): the denominator
    of the ratio to uniform. 1 for one position, whose entropy is 0, so that its ratio is 0, not 0/0."""
    return math.log(positions) if positions > 1 else 1.0


def attention_entropy(weights: torch.Tensor) -> tuple[float, float]:
    """Mean entropy in nats of the rows of `weights` (tgt_len x src_len), and its mean ratio to the
    entropy of uniform weights, log(src_len): near 0 means one-hot (saturated), 1 means uniform."""
    entropy = row_entropy(weights)  # tgt_len
    return float(entropy.mean()), float(entropy.mean() / uniform_entropy(weights.size(-1)))


ENTROPY_SENTENCES = 200  # the first test sentences whose greedy translations' attention entropy is averaged
PLOTTED_WORDS = 50  # the heatmap's sentence: the first test sentence of at least this many words


def attention_diagnostics(run_dir: Path, config: Config, plot_path: Path | None) -> dict[str, float]:
    """Mean attention entropy over the first ENTROPY_SENTENCES test sentences (greedy), and, if `plot_path` is
    given, the heatmap of the first test sentence of PLOTTED_WORDS+ words (or the longest one)."""
    sources = [src for src, _ in load_prepared(config.data).pairs(config.evaluation.split)]
    translator = Translator.from_run(run_dir, beam_size=1)
    entropies = [
        attention_entropy(t.attention)
        for t in translator.translate(sources[:ENTROPY_SENTENCES], return_attention=True)
        if t.attention is not None
    ]
    if plot_path is not None and sources:
        long_sources = [src for src in sources if len(src.split()) >= PLOTTED_WORDS]
        source = long_sources[0] if long_sources else max(sources, key=lambda s: len(s.split()))
        (translation,) = translator.translate([source], return_attention=True)
        plot_attention(translation.attention, translation.src_pieces, translation.tgt_pieces, plot_path, source)
    return {
        "sentences": len(entropies),
        "mean_entropy_nats": sum(e for e, _ in entropies) / max(len(entropies), 1),
        "mean_entropy_vs_uniform": sum(r for _, r in entropies) / max(len(entropies), 1),
    }


