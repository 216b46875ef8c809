"""What a trained run's attention weights look like over a test split: their entropy, and one heatmap."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from nmt.config import Config


def attention_entropy(weights: torch.Tensor) -> tuple[float, float]:
    """Mean entropy in nats of the rows of `weights` (tgt_len x src_len), and its mean ratio to the
    entropy of uniform weights, log(src_len): near 0 means one-hot (saturated), 1 means uniform."""
    rows = weights.double().clamp_min(1e-12)
    entropy = -(rows * rows.log()).sum(dim=-1)  # tgt_len
    uniform = math.log(weights.size(-1)) if weights.size(-1) > 1 else 1.0
    return float(entropy.mean()), float(entropy.mean() / uniform)


def attention_diagnostics(
    run_dir: Path, config: Config, plot_path: Path | None, sentences: int = 200
) -> dict[str, float]:
    """Mean attention entropy over the first test sentences (greedy), and, if `plot_path` is given,
    the heatmap of the first test sentence of 50+ words (or the longest one)."""
    from nmt.data.prepare import load_prepared
    from nmt.decoding.plots import plot_attention
    from nmt.decoding.translator import Translator

    sources = [src for src, _ in load_prepared(config.data).pairs(config.evaluation.split)]
    translator = Translator.from_run(run_dir, beam_size=1)
    entropies = [
        attention_entropy(t.attention)
        for t in translator.translate(sources[:sentences], return_attention=True)
        if t.attention is not None
    ]
    if plot_path is not None and sources:
        long_sources = [src for src in sources if len(src.split()) >= 50]
        source = long_sources[0] if long_sources else max(sources, key=lambda s: len(s.split()))
        (translation,) = translator.translate([source], return_attention=True)
        plot_attention(translation.attention, translation.src_pieces, translation.tgt_pieces, plot_path, source)
    return {
        "sentences": len(entropies),
        "mean_entropy_nats": sum(e for e, _ in entropies) / max(len(entropies), 1),
        "mean_entropy_vs_uniform": sum(r for _, r in entropies) / max(len(entropies), 1),
    }


