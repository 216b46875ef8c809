"""Reports of an Evaluation: results.json, report.md, bleu_by_length.png and a terminal table.

Each file is written atomically, so none is ever half written; an interrupted run can leave some files
new and the others from the previous evaluation in the same folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from nmt.evaluation.effect import Check, checks_dict, format_checks
from nmt.evaluation.scoring import Comparison, Evaluation, SystemScore
from nmt.fileio import atomic_open, atomic_write_text

RESULTS_JSON = "results.json"
REPORT_MD = "report.md"
PLOT_PNG = "bleu_by_length.png"


def results_dict(evaluation: Evaluation, extra_settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The content of results.json: runs, pairwise comparisons (b - a) and the settings used."""
    runs = {system.name: _system_dict(system) for system in evaluation.systems}
    comparisons = [
        {
            "a": c.a,
            "b": c.b,
            "bleu_diff": c.bleu_diff,
            "p": c.p,
            "buckets": [{"label": b.bucket.label, "bleu_diff": b.bleu_diff, "p": b.p} for b in c.buckets],
        }
        for c in evaluation.comparisons
    ]
    settings: dict[str, Any] = {
        "buckets": list(evaluation.cutoffs),
        "by": evaluation.by,
        "bootstrap_samples": evaluation.bootstrap_samples,
        "bootstrap_seed": evaluation.bootstrap_seed,
        "confidence": evaluation.confidence,
        "bleu_diff": "b - a",
        "p": "two-sided paired bootstrap resampling (Koehn 2004)",
    }
    settings.update(extra_settings or {})
    return {"runs": runs, "comparisons": comparisons, "settings": settings}


def _system_dict(system: SystemScore) -> dict[str, Any]:
    return {
        "bleu": system.bleu,
        "chrf": system.chrf,
        "signature": system.signature,
        "chrf_signature": system.chrf_signature,
        "n": system.n,
        "ci": list(system.ci),
        "buckets": [
            {
                "label": b.bucket.label,
                "low": b.bucket.low,
                "high": b.bucket.high,
                "n": b.n,
                "bleu": b.bleu,
                "ci": list(b.ci) if b.ci is not None else None,
            }
            for b in system.buckets
        ],
    }


def _score_cell(bleu: float | None, ci: tuple[float, float] | None) -> str:
    if bleu is None or ci is None:
        return "-"
    return f"{bleu:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def _diff_cell(diff: float | None, p: float | None) -> str:
    if diff is None or p is None:
        return "-"
    return f"{diff:+.2f} (p={p:.3f})"


def table_rows(evaluation: Evaluation) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one per bucket, then `all`; BLEU [95% CI] per run, then b - a (p) per pair."""
    header = ["bucket", "n"] + [f"{s.name} BLEU [CI]" for s in evaluation.systems]
    header += [_comparison_title(c) for c in evaluation.comparisons]
    first = evaluation.systems[0]
    rows = []
    for i, bucket_score in enumerate(first.buckets):
        row = [bucket_score.bucket.label, str(bucket_score.n)]
        row += [_score_cell(s.buckets[i].bleu, s.buckets[i].ci) for s in evaluation.systems]
        row += [_diff_cell(c.buckets[i].bleu_diff, c.buckets[i].p) for c in evaluation.comparisons]
        rows.append(row)
    overall = ["all", str(first.n)] + [_score_cell(s.bleu, s.ci) for s in evaluation.systems]
    overall += [_diff_cell(c.bleu_diff, c.p) for c in evaluation.comparisons]
    rows.append(overall)
    return header, rows


def _comparison_title(comparison: Comparison) -> str:
    return f"{comparison.b} - {comparison.a} (p)"


def format_table(evaluation: Evaluation) -> str:
    """The bucket table as aligned plain text for the terminal, with chrF underneath."""
    header, rows = table_rows(evaluation)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines += [f"chrF {s.name}: {s.chrf:.2f}" for s in evaluation.systems]
    return "\n".join(lines)


def format_markdown(evaluation: Evaluation) -> str:
    """report.md: the bucket table, chrF and the sacrebleu signatures."""
    header, rows = table_rows(evaluation)
    by = "source" if evaluation.by == "source" else "reference"
    lines = [
        "# BLEU by sentence length",
        "",
        f"Sentences bucketed by {by} length in words. BLEU is sacrebleu corpus BLEU on each bucket, "
        f"with a {evaluation.confidence:.0%} bootstrap interval ({evaluation.bootstrap_samples} resamples, "
        f"seed {evaluation.bootstrap_seed}). Differences are b - a with two-sided paired bootstrap p-values.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", "| run | chrF |", "|---|---:|"]
    lines += [f"| {s.name} | {s.chrf:.2f} |" for s in evaluation.systems]
    first = evaluation.systems[0]
    lines += ["", f"BLEU signature: `{first.signature}`", "", f"chrF signature: `{first.chrf_signature}`", ""]
    return "\n".join(lines)


def plot_bleu_by_length(evaluation: Evaluation, path: str | Path) -> None:
    """Line plot of BLEU per length bucket, one line per run with its CI band; n under each tick."""
    first = evaluation.systems[0]
    x = np.arange(len(first.buckets))
    figure = Figure(figsize=(8, 4.5))
    axes = figure.add_subplot()
    for system in evaluation.systems:
        # empty buckets become NaN: gaps in the line rather than fake zeros
        bleu = np.array([np.nan if b.bleu is None else b.bleu for b in system.buckets])
        low = np.array([np.nan if b.ci is None else b.ci[0] for b in system.buckets])
        high = np.array([np.nan if b.ci is None else b.ci[1] for b in system.buckets])
        (line,) = axes.plot(x, bleu, marker="o", label=f"{system.name} (all: {system.bleu:.2f})")
        axes.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    axes.set_xticks(x, [f"{b.bucket.label}\nn={b.n}" for b in first.buckets])
    axes.set_xlabel(f"{evaluation.by} length (words)")
    axes.set_ylabel("BLEU")
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    with atomic_open(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=120)


def write_report(
    evaluation: Evaluation,
    out_dir: str | Path,
    extra_settings: dict[str, Any] | None = None,
    effect: Mapping[tuple[str, str], Sequence[Check]] | None = None,
) -> dict[str, Any]:
    """Write results.json, report.md and bleu_by_length.png into `out_dir`; return results.json's content.

    `effect` maps (fixed-vector run, attention run) to the checks of nmt/evaluation/effect.py.
    """
    out_dir = Path(out_dir)
    results = results_dict(evaluation, extra_settings)
    markdown = format_markdown(evaluation)
    if effect:
        results["effect"] = [
            {"baseline": baseline, "attention": attention, "checks": checks_dict(checks)}
            for (baseline, attention), checks in effect.items()
        ]
        markdown += "".join("\n" + format_checks(checks, *pair) for pair, checks in effect.items())
    atomic_write_text(out_dir / RESULTS_JSON, json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(out_dir / REPORT_MD, markdown)
    plot_bleu_by_length(evaluation, out_dir / PLOT_PNG)
    return results
