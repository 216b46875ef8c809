"""Attention heatmaps like Bahdanau et al.'s Figure 3: source pieces on x, target pieces on y."""

from __future__ import annotations

import textwrap
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

from nmt.fileio import atomic_open

# Inches per source/target piece (a 9 pt label is about 0.13 inch high), and the bounds that keep a
# 400-piece sentence drawable.
_INCH_PER_PIECE = 0.3
_MIN_INCHES, _MAX_INCHES = 4.0, 60.0
_TICK_POINTS = 9
_TITLE_POINTS = 11
# Extra inches: the tick labels on two sides, the title above, the colour bar on the right.
_MARGIN_INCHES = 2.5


def attention_figure(
    attention: Tensor, src_pieces: list[str], tgt_pieces: list[str], title: str | None = None
) -> Figure:
    """A grey-scale heatmap of one sentence's attention weights (white 0, black 1), with a colour bar
    and `title` (the source sentence) wrapped to the figure's width.

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
    # labels are as long as their longest piece: leave room for it below and left of the grid
    label_inches = 0.08 * max(len(p) for p in [*src_pieces, *tgt_pieces])
    width = min(max(_INCH_PER_PIECE * len(src_pieces) + _MARGIN_INCHES + label_inches, _MIN_INCHES), _MAX_INCHES)
    title_lines = textwrap.wrap(title, width=max(20, int(width * 72 / (0.55 * _TITLE_POINTS)))) if title else []
    height = _INCH_PER_PIECE * len(tgt_pieces) + _MARGIN_INCHES + label_inches + 0.2 * len(title_lines)
    height = min(max(height, _MIN_INCHES), _MAX_INCHES)
    # A bare Figure with its own Agg canvas: no pyplot global state, no display backend needed.
    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    image = axes.imshow(weights, cmap="gray_r", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    axes.set_xticks(range(len(src_pieces)))
    axes.set_xticklabels(src_pieces, rotation=90, fontsize=_TICK_POINTS)
    axes.set_yticks(range(len(tgt_pieces)))
    axes.set_yticklabels(tgt_pieces, fontsize=_TICK_POINTS)
    axes.set_xlabel("source")
    axes.set_ylabel("translation")
    if title_lines:
        axes.set_title("\n".join(title_lines), fontsize=_TITLE_POINTS, loc="left")
    colour_bar = figure.colorbar(image, ax=axes, fraction=0.03, pad=0.02)
    colour_bar.set_label("attention weight")
    figure.tight_layout()
    return figure


def plot_attention(
    attention: Tensor, src_pieces: list[str], tgt_pieces: list[str], path: str | Path, title: str | None = None
) -> None:
    """Write `attention_figure` as a PNG to `path`."""
    figure = attention_figure(attention, src_pieces, tgt_pieces, title)
    with atomic_open(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=100)


def _with_eos(pieces: list[str], size: int) -> list[str]:
    return [*pieces, "</s>"] if len(pieces) == size - 1 else list(pieces)
