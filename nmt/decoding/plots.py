"""Attention heatmaps like Bahdanau et al.'s Figure 3: source pieces on x, target pieces on y."""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

from nmt.fileio import atomic_open

# Inches per source/target piece, and the bounds that keep a 400-piece sentence drawable.
_INCH_PER_PIECE = 0.28
_MIN_INCHES, _MAX_INCHES = 3.0, 60.0


def plot_attention(attention: Tensor, src_pieces: list[str], tgt_pieces: list[str], path: str | Path) -> None:
    """Write a grey-scale heatmap PNG of one sentence's attention weights (white 0, black 1).

    attention: tgt_len x src_len. The labels are one per row / column; pieces without the EOS (as in
    `Translation`, whose attention has an EOS row and column) get an "</s>" label appended.
    """
    weights = attention.detach().float().cpu().numpy()
    src_pieces, tgt_pieces = _with_eos(src_pieces, weights.shape[1]), _with_eos(tgt_pieces, weights.shape[0])
    if weights.shape != (len(tgt_pieces), len(src_pieces)):
        raise ValueError(
            f"attention is {tuple(weights.shape)} but there are {len(tgt_pieces)} target and "
            f"{len(src_pieces)} source labels"
        )
    width = min(max(_INCH_PER_PIECE * len(src_pieces) + 1.5, _MIN_INCHES), _MAX_INCHES)
    height = min(max(_INCH_PER_PIECE * len(tgt_pieces) + 1.5, _MIN_INCHES), _MAX_INCHES)
    # A bare Figure with its own Agg canvas: no pyplot global state, no display backend needed.
    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    axes.imshow(weights, cmap="gray_r", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    axes.set_xticks(range(len(src_pieces)))
    axes.set_xticklabels(src_pieces, rotation=90, fontsize=8)
    axes.set_yticks(range(len(tgt_pieces)))
    axes.set_yticklabels(tgt_pieces, fontsize=8)
    axes.xaxis.tick_top()
    axes.set_xlabel("source")
    axes.set_ylabel("translation")
    figure.tight_layout()
    with atomic_open(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=100)


def _with_eos(pieces: list[str], size: int) -> list[str]:
    return [*pieces, "</s>"] if len(pieces) == size - 1 else list(pieces)
