"""Attention heatmaps: words on the axes with their pieces' weights, a title with the source, a colour
bar, tick labels that do not overlap at 60 words."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt.decoding.plots import attention_figure, plot_attention, word_spans

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _sentence(words: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    vocabulary = ["▁And", "▁Jacob", "▁said", "▁unto", "▁Pharaoh", ",", "▁The", "▁days", "▁of", "▁years",
                  "▁pilgrimage", "▁hundred", "▁thirty", "▁evil", "▁fathers", "s", "."]
    return ["▁And", *(rng.choice(vocabulary) for _ in range(words - 1))]


def _overlaps(extents: list) -> int:
    return sum(a.overlaps(b) for a, b in zip(extents, extents[1:], strict=False))


def test_pieces_are_drawn_as_the_words_of_figure_3() -> None:
    src = ["▁The", "▁pil", "grim", "age", "▁ended", "."]  # The | pilgrimage | ended. | </s>
    tgt = ["▁Le", "▁", "pè", "lerinage", "▁fin", "it", "."]  # Le | pèlerinage | finit. | </s>
    attention = torch.softmax(torch.randn(8, 7, generator=torch.Generator().manual_seed(3)), dim=-1)
    heatmap = attention_figure(attention, src, tgt).axes[0]
    assert [label.get_text() for label in heatmap.get_xticklabels()] == ["The", "pilgrimage", "ended.", "</s>"]
    assert [label.get_text() for label in heatmap.get_yticklabels()] == ["Le", "pèlerinage", "finit.", "</s>"]
    # a column: the weights of the word's pieces added; a row: the mean of its pieces' rows
    columns = torch.stack([attention[:, cols].sum(dim=1) for cols in ([0], [1, 2, 3], [4, 5], [6])], dim=1)
    rows = torch.stack([columns[r].mean(dim=0) for r in ([0], [1, 2, 3], [4, 5, 6], [7])])
    drawn = np.asarray(heatmap.images[0].get_array())
    np.testing.assert_allclose(drawn, rows.numpy(), rtol=1e-6)
    np.testing.assert_allclose(drawn.sum(axis=1), 1.0, rtol=1e-6)  # each row is still a distribution
    # a sentence that starts inside a word, and a lone mark at the end, keep a label each
    assert word_spans(["ing", "▁go", "▁"]) == [("ing", 0, 1), ("go", 1, 2), ("▁", 2, 3)]


@pytest.mark.slow
def test_sixty_words_have_readable_labels_a_title_and_a_colour_bar(tmp_path: Path) -> None:
    src, tgt = _sentence(90), _sentence(100, seed=1)
    words = [sum(p.startswith("▁") for p in pieces) + 1 for pieces in (src, tgt)]  # with </s>
    assert min(words) > 60
    source = " ".join(p.lstrip("▁") for p in src)
    attention = torch.softmax(torch.randn(101, 91), dim=-1)
    figure = attention_figure(attention, src, tgt, title=source)
    figure.canvas.draw()
    heatmap, colour_bar = figure.axes
    assert colour_bar.get_ylabel() == "attention weight"
    assert heatmap.get_title(loc="left").replace("\n", " ") == source
    renderer = figure.canvas.get_renderer()
    for labels, count in zip((heatmap.get_xticklabels(), heatmap.get_yticklabels()), words, strict=True):
        assert len(labels) == count and all(label.get_fontsize() >= 9 for label in labels)
        assert _overlaps([label.get_window_extent(renderer) for label in labels]) == 0
    # the title stays inside the figure
    title = heatmap.title if heatmap.get_title() else heatmap._left_title
    assert figure.bbox.contains(*title.get_window_extent(renderer).p1)
    plot_attention(attention, src, tgt, tmp_path / "a.png", title=source)
    assert (tmp_path / "a.png").read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("words", [5, 12, 27, 45])
def test_the_title_stays_inside_a_figure_of_few_words(words: int) -> None:
    src = _sentence(words, seed=words)
    source = " ".join(p.lstrip("▁") for p in src) + " and a long word: incomprehensibilities."
    figure = attention_figure(torch.softmax(torch.randn(len(src) + 1, len(src) + 1), dim=-1), src, src, source)
    figure.canvas.draw()
    title = figure.axes[0]._left_title
    assert figure.bbox.contains(*title.get_window_extent(figure.canvas.get_renderer()).p1)


def test_a_runaway_translation_is_capped_in_size_and_labels_every_kth_word_without_overlap() -> None:
    src, tgt = _sentence(60), _sentence(220, seed=2)  # an early model repeating itself
    attention = torch.softmax(torch.randn(len(tgt) + 1, len(src) + 1), dim=-1)
    figure = attention_figure(attention, src, tgt, title="a long verse")
    figure.canvas.draw()
    assert max(figure.get_size_inches()) * 100 <= 3200  # pixels at plot_attention's 100 dpi
    heatmap = figure.axes[0]
    words = sum(p.startswith("▁") for p in tgt) + 1
    labels = heatmap.get_yticklabels()
    assert words // 3 < len(labels) < words and all(label.get_fontsize() >= 9 for label in labels)
    assert _overlaps([label.get_window_extent(figure.canvas.get_renderer()) for label in labels]) == 0
    assert len(heatmap.get_xticklabels()) == sum(p.startswith("▁") for p in src) + 1  # the source fits: every word


def test_words_and_title_are_drawn_as_written(tmp_path: Path) -> None:
    """A verse with two '$' signs was read as mathematics ('$^$' failed to draw, '$5 or $' came out in italics)."""
    src, tgt = ["▁costs", "▁$^$", "▁or", "▁$6"], ["▁coûte", "▁$5", "▁ou", "▁$6"]
    plot_attention(torch.full((5, 5), 0.2), src, tgt, tmp_path / "a.png", title="costs $^$ or $6")
    assert (tmp_path / "a.png").read_bytes()[:8] == PNG_MAGIC
    figure = attention_figure(torch.full((5, 5), 0.2), src, tgt, title="costs $5 or $6")
    heatmap = figure.axes[0]
    assert not any(text._parse_math for text in [*heatmap.get_xticklabels(), heatmap.title, heatmap._left_title])
