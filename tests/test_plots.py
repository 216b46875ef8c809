"""Attention heatmaps: a title with the source, a colour bar, tick labels that do not overlap at 60 words."""

from __future__ import annotations

import random
from pathlib import Path

import torch

from nmt.decoding.plots import attention_figure, plot_attention

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _sentence(words: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    vocabulary = ["▁And", "▁Jacob", "▁said", "▁unto", "▁Pharaoh", ",", "▁The", "▁days", "▁of", "▁years",
                  "▁pilgrimage", "▁hundred", "▁thirty", "▁evil", "▁fathers", "s", "."]
    return [rng.choice(vocabulary) for _ in range(words)]


def _overlaps(extents: list) -> int:
    return sum(a.overlaps(b) for a, b in zip(extents, extents[1:], strict=False))


def test_sixty_words_have_readable_labels_a_title_and_a_colour_bar(tmp_path: Path) -> None:
    src, tgt = _sentence(70), _sentence(80, seed=1)
    source = " ".join(p.lstrip("▁") for p in src)
    attention = torch.softmax(torch.randn(81, 71), dim=-1)
    figure = attention_figure(attention, src, tgt, title=source)
    figure.canvas.draw()
    heatmap, colour_bar = figure.axes
    assert colour_bar.get_ylabel() == "attention weight"
    assert heatmap.get_title(loc="left").replace("\n", " ") == source
    renderer = figure.canvas.get_renderer()
    for labels in (heatmap.get_xticklabels(), heatmap.get_yticklabels()):
        assert len(labels) in (71, 81) and all(label.get_fontsize() >= 9 for label in labels)
        assert _overlaps([label.get_window_extent(renderer) for label in labels]) == 0
    # the title stays inside the figure
    title = heatmap.title if heatmap.get_title() else heatmap._left_title
    assert figure.bbox.contains(*title.get_window_extent(renderer).p1)
    plot_attention(attention, src, tgt, tmp_path / "a.png", title=source)
    assert (tmp_path / "a.png").read_bytes()[:8] == PNG_MAGIC
