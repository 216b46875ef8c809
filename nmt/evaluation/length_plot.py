"""bleu_by_length.png: BLEU per length bucket of each system, with its bootstrap band and its source-blind
floor (the paper's Figure 2 when runs are grouped by model and variant)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from nmt.evaluation.scoring import Evaluation
from nmt.figures import text_as_written

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plotted_buckets(evaluation: Evaluation) -> list[int]:
    """Indices of the buckets the plot shows: those holding at least one sentence."""
    return [i for i, b in enumerate(evaluation.systems[0].buckets) if b.n > 0]


LINE_STYLES = ("-", "--", "-.", ":")


def line_styles(names: Sequence[str], groups: Mapping[str, tuple[str, str]] | None) -> dict[str, tuple[str, str]]:
    """(colour, line style) of each run: a colour per model and a style per variant of `groups` (see
    bleu_by_length_figure), or, where that does not tell every run apart (no groups, more than 10 models or 4
    variants), one of 10 colours per run, its style changing every 10 runs."""
    if groups and len({groups[name] for name in names}) == len(names):
        models = list(dict.fromkeys(groups[name][0] for name in names))
        variants = list(dict.fromkeys(groups[name][1] for name in names))
        styles = {name: (f"C{models.index(groups[name][0]) % 10}",
                         LINE_STYLES[variants.index(groups[name][1]) % len(LINE_STYLES)]) for name in names}
        if len(set(styles.values())) == len(names):
            return styles
    return {name: (f"C{index % 10}", LINE_STYLES[index // 10 % len(LINE_STYLES)]) for index, name in enumerate(names)}


@text_as_written()
def bleu_by_length_figure(
    evaluation: Evaluation,
    groups: Mapping[str, tuple[str, str]] | None = None,
    title: str = "",
) -> Figure:
    """Line plot of BLEU per non-empty length bucket, one line per run with its CI band (a bucket too small
    to resample: a hollow marker) and its source-blind floor (thin, dotted); n under each tick. `groups`
    maps a run to (model, variant), e.g. ("RNNsearch", "-30"): one colour per model, one line style per
    variant (the paper's Figure 2); without it, a colour per run."""
    from matplotlib.figure import Figure  # here: a command that fails before its plot (or scores) loads none

    first = evaluation.systems[0]
    kept = plotted_buckets(evaluation)
    x = np.arange(len(kept))
    styles = line_styles([s.name for s in evaluation.systems], groups)
    figure = Figure(figsize=(9, 5))
    axes = figure.add_subplot()
    legend = []  # (line, label), given to the legend as they are: matplotlib leaves out labels starting with "_"
    for system in evaluation.systems:
        colour, style = styles[system.name]
        buckets = [system.buckets[i] for i in kept]
        bleu = np.array([b.bleu for b in buckets])
        low, high = np.array([b.ci or (np.nan, np.nan) for b in buckets]).T
        legend.append((axes.plot(x, bleu, color=colour, linestyle=style)[0], f"{system.name} (all: {system.bleu:.2f})"))
        resampled = ~np.isnan(low)  # a bucket too small to resample: a hollow marker, no band
        axes.plot(x[resampled], bleu[resampled], "o", color=colour)
        axes.plot(x[~resampled], bleu[~resampled], "o", color=colour, markerfacecolor="none")
        axes.fill_between(x, low, high, color=colour, alpha=0.12, linewidth=0)
        floor = [b.statistics["floor"].values[0] for b in buckets]
        axes.plot(x, floor, color=colour, linestyle=":", linewidth=0.8, alpha=0.7)
    legend.append((axes.plot([], [], color="grey", linestyle=":", linewidth=0.8)[0], "source-blind floor (wrong source)"))
    axes.set_xticks(x, [f"{first.buckets[i].bucket.label}\nn={first.buckets[i].n}" for i in kept])
    axes.set_xlabel(f"{evaluation.settings.by} length (words)")
    axes.set_ylabel("BLEU (95% bootstrap band)")
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(*zip(*legend, strict=True), fontsize="small")
    if title:  # wrapped to the figure's width
        axes.set_title("\n".join(textwrap.fill(line, 130) for line in title.splitlines()), fontsize="small")
    figure.tight_layout()
    return figure
