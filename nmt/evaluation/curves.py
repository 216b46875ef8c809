"""The learning curve by length, apart from translating (nmt/compare/curve.py does that): which sentences
a checkpoint translates, per-bucket BLEU, the table and the plot.

Each checkpoint translates the same sample of the evaluation split: in each bucket, the
`evaluation.curve_sentences_per_bucket` sentences whose sha256 of "source TAB reference" is smallest, a
rule that needs no seed nor the file's order. Scores are corpus BLEU per bucket without bootstrap: the
curve is read for its trend.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from matplotlib import colormaps
from matplotlib.figure import Figure

from nmt.config_sections import BucketBy
from nmt.errors import counted
from nmt.evaluation.buckets import bucket_members, non_empty, sentence_lengths
from nmt.evaluation.metrics import Bleu, bleu_from_stats
from nmt.evaluation.tables import markdown_table
from nmt.evaluation.testset import TestSet
from nmt.figures import text_as_written
from nmt.lengths import make_buckets

CURVE = "learning_curve"  # the stem of the .json, .md and .png written
SELECTION = "those with the smallest sha256 of 'source TAB reference'; all of a smaller bucket"


def curve_sample(
    sources: Sequence[str],
    references: Sequence[str],
    cutoffs: Sequence[int],
    by: BucketBy,
    per_bucket: int,
) -> list[int]:
    """Indices (increasing) of the curve's sample: up to `per_bucket` sentences of each bucket (0 = all),
    those whose sha256 of "source TAB reference" is smallest, the index breaking ties of duplicates."""
    chosen: list[int] = []
    for rows in bucket_members(sentence_lengths(sources, references, by), make_buckets(cutoffs)).values():
        if per_bucket and len(rows) > per_bucket:
            rows = sorted(rows, key=lambda i: (_digest(sources[i], references[i]), i))[:per_bucket]
        chosen += rows
    return sorted(chosen)


def sample_test_set(full: TestSet, cutoffs: Sequence[int], by: BucketBy, per_bucket: int) -> TestSet:
    """The curve's sample of `full` (`curve_sample`), in the order of `full`."""
    assert full.sources is not None, "the curve translates sources"
    rows = curve_sample(full.sources, full.references, cutoffs, by, per_bucket)
    return TestSet([full.sources[i] for i in rows], [full.references[i] for i in rows], f"sample of the {full.origin}")


def bucket_counts(sample: TestSet, cutoffs: Sequence[int], by: BucketBy) -> dict[str, int]:
    """Sentences of `sample` (a sample the curve translates: it has sources) in each bucket, by label."""
    assert sample.sources is not None, "the curve translates sources"
    members = bucket_members(sentence_lengths(sample.sources, sample.references, by), make_buckets(cutoffs))
    return {bucket.label: len(rows) for bucket, rows in members.items()}


def _digest(source: str, reference: str) -> str:
    return hashlib.sha256(f"{source}\t{reference}".encode()).hexdigest()


def bucket_bleu(
    scorer: Bleu,
    hypotheses: Sequence[str],
    sources: Sequence[str],
    references: Sequence[str],
    cutoffs: Sequence[int],
    by: BucketBy,
) -> tuple[dict[str, float | None], float]:
    """Corpus BLEU of each bucket (None when it is empty), and of all the sentences given. `scorer` holds
    `references` with the run's evaluation.tokenize and evaluation.lowercase, as `nmt evaluate` scores
    them; the caller builds it once for every hypothesis set of those references."""
    stats = scorer.sentence_stats(hypotheses)  # n x N_STATS
    members = bucket_members(sentence_lengths(sources, references, by), make_buckets(cutoffs))
    scores: dict[str, float | None] = {
        bucket.label: float(bleu_from_stats(stats[rows].sum(axis=0))) if rows else None
        for bucket, rows in members.items()
    }
    return scores, float(bleu_from_stats(stats.sum(axis=0)))


def format_curve_markdown(results: dict[str, Any]) -> str:
    """learning_curve.md: one table per run, a row per checkpoint, a column per non-empty bucket (with its n)."""
    each = (f"up to {counted(results['sentences_per_bucket'], 'sentence')}" if results["sentences_per_bucket"]
            else "all sentences")
    lines = [
        "# Learning curve by sentence length",
        "",
        f"Greedy BLEU of each kept checkpoint on a fixed sample of the {results['split']} split, bucketed by "
        f"{results['by']} length in words: {each} per bucket ({results['selection']}). "
        "'sample' is BLEU over the whole sample, which over-weights the rarer lengths.",
        *(["", f"BLEU: sacrebleu `{results['bleu_signature']}`."] if "bleu_signature" in results else []),
    ]
    # runs on different data translate different samples: each table then names its own
    samples_differ = len({curve["sentences"] for curve in results["runs"].values()}) > 1
    for name, curve in results["runs"].items():
        labels = non_empty(curve["n"])
        header = ["step", *(f"{label} (n={curve['n'][label]})" for label in labels), f"sample (n={curve['n_sample']})"]
        rows = [
            [str(point["step"]), *(f"{point['bleu'][label]:.2f}" for label in labels), f"{point['sample_bleu']:.2f}"]
            for point in curve["checkpoints"]
        ]
        lines += ["", f"## {name} (attention: {curve['attention']})", ""]
        lines += [f"Sample: {curve['sentences']}.", ""] if samples_differ else []
        lines += markdown_table(header, rows, left=0)
    return "\n".join(lines) + "\n"


@text_as_written()
def learning_curve_figure(results: dict[str, Any]) -> Figure:
    """One panel per run, sharing both axes (steps from 0 to the longest run's last checkpoint, BLEU from
    0), so that runs of different lengths compare at the same step: BLEU against step, one line per
    bucket, short to long from light to dark."""
    curves = results["runs"]
    figure = Figure(figsize=(5.5 * len(curves) + 1.5, 4.5))
    panels = figure.subplots(1, len(curves), sharex=True, sharey=True, squeeze=False)[0]
    for axes, (name, curve) in zip(panels, curves.items(), strict=True):
        steps = [point["step"] for point in curve["checkpoints"]]
        buckets = list(curve["n"])  # every bucket, so that a bucket has one colour in every panel
        for label in non_empty(curve["n"]):
            bleu = [point["bleu"][label] for point in curve["checkpoints"]]
            # viridis from yellow (shortest) to dark blue (longest), skipping its palest end
            colour = colormaps["viridis_r"](0.1 + 0.9 * buckets.index(label) / max(len(buckets) - 1, 1))
            axes.plot(steps, bleu, marker="o", color=colour, label=f"{label} (n={curve['n'][label]})")
        axes.set_title(f"{name}\nattention: {curve['attention']}", fontsize=10)  # a Transformer's kind is long
        axes.set_xlabel("training step")
        axes.grid(alpha=0.3)
    panels[0].set_ylabel(f"greedy BLEU, by {results['by']} length")
    panels[0].set_ylim(bottom=0)
    panels[0].set_xlim(left=0)
    # one legend for all panels: every bucket drawn in any of them, short to long (a run without one has no line)
    buckets = list(next(iter(curves.values()))["n"])
    lines = {line.get_label(): line for axes in reversed(panels) for line in axes.get_lines()}
    shown = sorted(lines, key=lambda label: buckets.index(label.split(" (n=")[0]))
    panels[-1].legend([lines[label] for label in shown], shown, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                      fontsize=8, title="bucket (words)")
    figure.tight_layout()
    return figure
