"""Attention heatmaps like Bahdanau et al.'s Figure 3: source words on x, translated words on y.

The model attends over sentencepiece pieces, but Figure 3 has one column per source word and one row
per generated word, and a piece axis splits words into fragments ("▁pi l g r image"). So the weights
are drawn per word: a column holds the summed weights of the word's pieces (the share of attention the
word received), and a row is the mean of the rows of the word's pieces (still a distribution that sums
to 1, so a grey level means what it means in Figure 3). Words are the whitespace words of the sentence,
those that `evaluation.buckets` count.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

from nmt.figures import text_as_written
from nmt.fileio import atomic_open

# Inches per source/target piece (a 9 pt label is about 0.13 inch high), the bounds that keep a
# 400-piece sentence drawable (at most 3200 px a side), and the room a label needs: past the bound, every
# k-th word is labelled.
_INCH_PER_PIECE = 0.3
_MIN_INCHES, _MAX_INCHES = 4.0, 32.0
_LABEL_INCHES = 0.18
_TICK_POINTS = 9
_TITLE_POINTS = 11
# Extra inches: the tick labels on two sides, the title above, the colour bar on the right.
_MARGIN_INCHES = 2.5
# sentencepiece's mark of a piece that begins a word (U+2581), and the label of the end-of-sentence token
WORD_START = "\u2581"
EOS_LABEL = "</s>"


@text_as_written()
def attention_figure(
    attention: Tensor, src_pieces: list[str], tgt_pieces: list[str], title: str | None = None
) -> Figure:
    """A grey-scale heatmap of one sentence's attention weights per word (white 0, black 1; see the
    module's docstring), with a colour bar and `title` (the source sentence) wrapped to the figure's width.

    attention: tgt_len x src_len, over pieces. The pieces are one per row / column; pieces without the
    EOS (as in `Translation`, whose attention has an EOS row and column) get an "</s>" appended.
    """
    weights = attention.detach().float().cpu().numpy()
    src_pieces, tgt_pieces = _with_eos(src_pieces, weights.shape[1]), _with_eos(tgt_pieces, weights.shape[0])
    if weights.shape != (len(tgt_pieces), len(src_pieces)):
        raise ValueError(
            f"attention is {tuple(weights.shape)} but there are {len(tgt_pieces)} target and "
            f"{len(src_pieces)} source labels"
        )
    weights, src_words, tgt_words = word_attention(weights, src_pieces, tgt_pieces)
    # labels are as long as their longest word: leave room for it below and left of the grid
    label_inches = 0.08 * max(len(w) for w in [*src_words, *tgt_words])
    width = min(max(_INCH_PER_PIECE * len(src_words) + _MARGIN_INCHES + label_inches, _MIN_INCHES), _MAX_INCHES)
    # the title starts above the grid, right of the target labels and the axis label (about an inch)
    title_inches = width - label_inches - 1.0
    title_lines = textwrap.wrap(title, width=max(20, int(title_inches * 72 / (0.55 * _TITLE_POINTS)))) if title else []
    height = _INCH_PER_PIECE * len(tgt_words) + _MARGIN_INCHES + label_inches + 0.2 * len(title_lines)
    height = min(max(height, _MIN_INCHES), _MAX_INCHES)
    grid = (width - _MARGIN_INCHES - label_inches, height - _MARGIN_INCHES - label_inches - 0.2 * len(title_lines))
    # A bare Figure with its own Agg canvas: no pyplot global state, no display backend needed.
    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    image = axes.imshow(weights, cmap="gray_r", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    for axis, words, inches, rotation in ((axes.xaxis, src_words, grid[0], 90), (axes.yaxis, tgt_words, grid[1], 0)):
        step = max(1, math.ceil(_LABEL_INCHES * len(words) / max(inches, 1.0)))
        axis.set_ticks(range(0, len(words), step), words[::step], rotation=rotation, fontsize=_TICK_POINTS)
    axes.set_xlabel("source word (its pieces' weights added)")
    axes.set_ylabel("translation word (its pieces' rows averaged)")
    if title_lines:
        axes.set_title("\n".join(title_lines), fontsize=_TITLE_POINTS, loc="left")
    figure.colorbar(image, ax=axes, fraction=0.03, pad=0.02, label="attention weight")
    figure.tight_layout()
    return figure


def plot_attention(
    attention: Tensor, src_pieces: list[str], tgt_pieces: list[str], path: str | Path, title: str | None = None
) -> None:
    """Write `attention_figure` as a PNG to `path`."""
    figure = attention_figure(attention, src_pieces, tgt_pieces, title)
    with atomic_open(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=100)


def word_spans(pieces: list[str]) -> list[tuple[str, int, int]]:
    """(word, first piece, one past its last piece) of each word of a piece sequence: a piece with the
    leading '▁' begins a word (shown without it), the pieces after it continue it; "</s>" stands alone."""
    spans: list[tuple[str, int, int]] = []
    for index, piece in enumerate(pieces):
        if not spans or piece.startswith(WORD_START) or EOS_LABEL in (piece, spans[-1][0]):
            spans.append((piece, index, index + 1))
        else:
            word, start, _ = spans[-1]
            spans[-1] = (word + piece, start, index + 1)
    # shown without the mark; a word that is only the mark (a lone '▁' piece at the end) keeps it
    return [(word.removeprefix(WORD_START) or word, start, end) for word, start, end in spans]


def word_attention(
    weights: np.ndarray, src_pieces: list[str], tgt_pieces: list[str]
) -> tuple[np.ndarray, list[str], list[str]]:
    """Piece attention (tgt pieces x src pieces) -> (word attention, source words, target words): a source
    word's weight is the sum over its pieces, a target word's row the mean of its pieces' rows."""
    src, tgt = word_spans(src_pieces), word_spans(tgt_pieces)
    columns = np.add.reduceat(weights, [start for _, start, _ in src], axis=1)
    sizes = np.array([[end - start] for _, start, end in tgt])
    rows = np.add.reduceat(columns, [start for _, start, _ in tgt], axis=0) / sizes
    return rows, [word for word, _, _ in src], [word for word, _, _ in tgt]


def _with_eos(pieces: list[str], size: int) -> list[str]:
    return [*pieces, EOS_LABEL] if len(pieces) == size - 1 else list(pieces)
