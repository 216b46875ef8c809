"""Reports of an Evaluation: results.json, report.md, bleu_by_length.png (drawn by length_plot.py) and a
terminal table.

Each file is written atomically (never half written), though an interrupted run can leave some new.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from nmt.errors import counted
from nmt.evaluation.buckets import bucket_members, sentence_lengths
from nmt.evaluation.effect import Check
from nmt.evaluation.leaders import Leader, format_leaders
from nmt.evaluation.length_plot import bleu_by_length_figure
from nmt.evaluation.metrics import METRICS, BucketStatistic
from nmt.evaluation.scoring import (
    CONFIDENCE,
    BucketComparison,
    Comparison,
    Evaluation,
    MetricScore,
    StatisticValue,
    SystemScore,
)
from nmt.evaluation.tables import diff_cell, markdown_table
from nmt.figures import png_bytes
from nmt.fileio import json_text
from nmt.lengths import make_buckets

RESULTS_JSON = "results.json"
REPORT_MD = "report.md"
PLOT_PNG = "bleu_by_length.png"
EXAMPLES_PER_BUCKET = 2


def results_dict(evaluation: Evaluation, extra_settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The content of results.json: runs, pairwise comparisons (b - a) and the settings used."""
    runs = {system.name: _system_dict(system, evaluation) for system in evaluation.systems}
    comparisons = [  # a, b, bleu_diff, p, the other metrics' NAME_diff, NAME_p, then the buckets by label
        {"a": c.a, "b": c.b, **_diff_dict(c, evaluation),
         "buckets": [{"label": b.bucket.label, **_diff_dict(b, evaluation)} for b in c.buckets]}
        for c in evaluation.comparisons
    ]
    config = evaluation.settings
    settings: dict[str, Any] = {
        "buckets": list(config.buckets),
        "by": config.by,
        "bootstrap_samples": config.bootstrap_samples,
        "bootstrap_seed": config.bootstrap_seed,
        "confidence": CONFIDENCE,
        "tokenize": config.tokenize,
        "lowercase": config.lowercase,
        "bleu_diff": "b - a",
        "p": "two-sided paired bootstrap resampling (Koehn 2004)",
        # what the paper's checks and the leaders held the scores to
        "min_bucket_sentences": config.min_bucket_sentences,
        "significance": config.significance,
        "ahead_from_words": config.ahead_from_words,
        "long_words": config.long_words,
        "fixed_vector_max_ratio": config.fixed_vector_max_ratio,
        "attention_min_ratio": config.attention_min_ratio,
        "flat_from_ceiling": config.flat_from_ceiling,
    }
    settings.update(extra_settings or {})
    return {"runs": runs, "comparisons": comparisons, "settings": settings}


def _statistics_dict(statistics: Mapping[str, StatisticValue], declared: Sequence[BucketStatistic], prefix: str = "",
                     ) -> dict[str, Any]:
    """Each of a metric's statistics by PREFIX + name (a number, or a list for several columns; None on an
    empty bucket), and PREFIX + NAME_ci for one that bootstraps."""
    fields: dict[str, Any] = {}
    for statistic in declared:
        value, several = statistics.get(statistic.name), len(statistic.columns) > 1
        fields[prefix + statistic.name] = None if value is None else list(value.values) if several else value.values[0]
        if statistic.bootstraps:
            intervals = None if value is None or value.intervals is None else [list(i) for i in value.intervals]
            fields[f"{prefix}{statistic.name}_ci"] = intervals if several or intervals is None else intervals[0]
    return fields


def _other_metrics(evaluation: Evaluation) -> list[str]:
    """The metrics scored besides BLEU (whose keys and tables are unprefixed and first), in METRICS' order."""
    return [name for name in evaluation.signatures if name != "bleu"]


def _metric_dict(name: str, score: MetricScore | None) -> dict[str, Any]:
    """A metric other than BLEU on one subset, for results.json: NAME, NAME_ci and its statistics NAME_*."""
    score = score or MetricScore(None, None)
    return {name: score.value, f"{name}_ci": list(score.ci) if score.ci else None,
            **_statistics_dict(score.statistics, METRICS[name].statistics(), f"{name}_")}


def _diff_dict(comparison: Comparison | BucketComparison, evaluation: Evaluation) -> dict[str, Any]:
    """bleu_diff and p, then NAME_diff and NAME_p for each other metric."""
    fields: dict[str, Any] = {"bleu_diff": comparison.bleu_diff, "p": comparison.p}
    for name in _other_metrics(evaluation):
        diff = comparison.metrics.get(name)
        fields |= {f"{name}_diff": None if diff is None else diff.diff, f"{name}_p": None if diff is None else diff.p}
    return fields


def _system_dict(system: SystemScore, evaluation: Evaluation) -> dict[str, Any]:
    bleu_statistics = METRICS["bleu"].statistics()
    others = _other_metrics(evaluation)
    buckets = [
        {**asdict(b.bucket), "n": b.n, "bleu": b.bleu, "ci": list(b.ci) if b.ci else None,
         **_statistics_dict(b.statistics, bleu_statistics),
         **{k: v for name in others for k, v in _metric_dict(name, b.metrics.get(name)).items()}}
        for b in system.buckets
    ]
    # chrf and chrf_signature keep their places; the other metrics' keys come after BLEU's statistics
    return {
        "bleu": system.bleu, "chrf": system.chrf, "signature": system.signature,
        "chrf_signature": system.chrf_signature, "n": system.n, "ci": list(system.ci) if system.ci else None,
        **_statistics_dict(system.statistics, bleu_statistics),
        **{k: v for name in others for k, v in _metric_dict(name, system.metrics.get(name)).items()},
        **{f"{name}_signature": evaluation.signatures[name] for name in others},
        "buckets": buckets,
    }


def _score_cell(bleu: float | None, ci: tuple[float, float] | None) -> str:
    if bleu is None:
        return "-"
    return f"{bleu:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci is not None else f"{bleu:.2f} [-]"


def table_rows(evaluation: Evaluation, metric: str = "bleu") -> tuple[list[str], list[list[str]]]:
    """Header and rows: one per bucket, then `all`; the metric's score [95% CI] per run (METRICS' name;
    BLEU by default), then b - a (p) per pair."""
    header = ["bucket", "n"] + [f"{s.name} {METRICS[metric].label} [CI]" for s in evaluation.systems]
    header += [f"{c.b} - {c.a} (p)" for c in evaluation.comparisons]
    first = evaluation.systems[0]
    columns = [_labels(first), [str(x.n) for x in [*first.buckets, first]]]
    columns += [[_score_cell(x.metrics[metric].value, x.metrics[metric].ci) for x in [*s.buckets, s]]
                for s in evaluation.systems]
    columns += [[diff_cell(x.metrics[metric].diff, x.metrics[metric].p, evaluation.settings.significance)
                 for x in [*c.buckets, c]]
                for c in evaluation.comparisons]
    return header, [list(row) for row in zip(*columns, strict=True)]


def _aligned(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A table as aligned plain text lines, a dashed line under the header."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _labels(system: SystemScore) -> list[str]:
    return [b.bucket.label for b in system.buckets] + ["all"]


def format_table(evaluation: Evaluation) -> str:
    """The bucket table as aligned plain text for the terminal, with chrF underneath, then each other
    metric's bucket table."""
    lines = _aligned(*table_rows(evaluation))
    lines.append("")
    lines += [f"chrF {s.name}: {s.chrf:.2f}" for s in evaluation.systems]
    for name in _other_metrics(evaluation):
        lines += ["", *_aligned(*table_rows(evaluation, name))]
    return "\n".join(lines)


def format_markdown(
    evaluation: Evaluation, scored: Sequence[str] = (), bucketing: str = "", leaders: str = ""
) -> str:
    """report.md: what was scored (one line each, if given), the bucket table (`bucketing`: how its
    buckets were chosen, if not given), chrF and the sacrebleu signatures, `leaders` (a section of
    leaders.py's `format_leaders`), what each score is made of, then each other metric by bucket
    (`format_metric`)."""
    header, rows = table_rows(evaluation)
    settings = evaluation.settings
    lines = ["# BLEU by sentence length", ""]
    if scored:
        lines += ["What was scored:", "", *(f"- {line}" for line in scored), ""]
    lines += [
        f"Sentences bucketed by {settings.by} length in words{f'; {bucketing}' if bucketing else ''}. "
        "BLEU is sacrebleu corpus BLEU on each bucket, "
        f"with a {CONFIDENCE:.0%} bootstrap interval ({settings.bootstrap_samples} resamples, "
        f"seed {settings.bootstrap_seed}). Differences are b - a with two-sided paired bootstrap p-values. "
        "A bucket too small to resample (evaluation.min_bucket_sentences), all included, has a dash for both.",
        "",
        *markdown_table(header, rows),
        "",
        f"![BLEU by {settings.by} length]({PLOT_PNG})",
        "",
        *markdown_table(["run", "chrF"], [[s.name, f"{s.chrf:.2f}"] for s in evaluation.systems]),
    ]
    first = evaluation.systems[0]
    lines += ["", f"BLEU signature: `{first.signature}`", "", f"chrF signature: `{first.chrf_signature}`", ""]
    if leaders:
        lines += [leaders]
    others = "".join("\n" + format_metric(evaluation, name) for name in _other_metrics(evaluation))
    return "\n".join(lines) + "\n" + format_statistics(evaluation) + others


def format_statistics(evaluation: Evaluation) -> str:
    """A Markdown section: per run and bucket, BLEU beside what it is made of (its statistics, `Bleu.statistics()`)."""
    declared = METRICS["bleu"].statistics()
    described = " ".join(f"**{_label(statistic.columns)}**: {statistic.description}" for statistic in declared)
    lines = ["## What each score is made of", "", described]
    header = ["bucket", "n", "BLEU", *(column for statistic in declared for column in statistic.columns)]
    for system in evaluation.systems:
        rows = []
        for label, score in zip(_labels(system), [*system.buckets, system], strict=True):
            cells = (["-"] * (len(header) - 2) if score.bleu is None
                     else [f"{score.bleu:.2f}", *_statistic_cells(score.statistics, declared)])
            rows.append([label, str(score.n), *cells])
        lines += ["", f"### {system.name}", "", *markdown_table(header, rows)]
    return "\n".join(lines) + "\n"


def format_metric(evaluation: Evaluation, name: str) -> str:
    """A Markdown section for a metric other than BLEU (METRICS' `name`): its bucket table, as BLEU's (score
    [95% CI] per run on the same resamples, b - a with paired p per pair), then per run and bucket its
    statistics (the source-blind floor and any of its own)."""
    metric = METRICS[name]
    label, declared = metric.label, metric.statistics()
    settings = evaluation.settings
    lines = [
        f"## {label} by sentence length",
        "",
        f"{label} is {metric.computed_as or f'the corpus {label}'} on each bucket (signature "
        f"`{evaluation.signatures[name]}`), with a "
        f"{CONFIDENCE:.0%} bootstrap interval from the same resamples as BLEU's ({settings.bootstrap_samples}, seed "
        f"{settings.bootstrap_seed}); differences are b - a with two-sided paired bootstrap p-values, and a dash "
        "where BLEU has one.",
        "",
        *markdown_table(*table_rows(evaluation, name)),
        "",
        " ".join(f"**{_label(statistic.columns)}**: {statistic.description}" for statistic in declared),
    ]
    header = ["bucket", "n", *(f"{s.name} {column}" for s in evaluation.systems
                               for statistic in declared for column in statistic.columns)]
    first = evaluation.systems[0]
    rows = []
    for k, label_k in enumerate(_labels(first)):
        scores = [[*s.buckets, s][k].metrics[name] for s in evaluation.systems]
        cells = [cell for score in scores for cell in (
            _statistic_cells(score.statistics, declared) if score.value is not None
            else ["-"] * sum(len(statistic.columns) for statistic in declared))]
        rows.append([label_k, str([*first.buckets, first][k].n), *cells])
    lines += ["", *markdown_table(header, rows)]
    return "\n".join(lines) + "\n"


def _label(columns: Sequence[str]) -> str:
    return columns[0] if len(columns) == 1 else f"{columns[0]}-{columns[-1]}"


def _statistic_cells(statistics: Mapping[str, StatisticValue], declared: Sequence[BucketStatistic]) -> list[str]:
    """A score's statistics, each column as `value` or `value [low, high]` where it bootstraps."""
    cells = []
    for statistic in declared:
        value = statistics[statistic.name]
        for k, number in enumerate(value.values):
            cell = f"{number:.{statistic.digits}f}"
            if value.intervals is not None:
                low, high = value.intervals[k]
                cell += f" [{low:.{statistic.digits}f}, {high:.{statistic.digits}f}]"
            cells.append(cell)
    return cells


def format_checks(checks: Sequence[Check], baseline: str, attention: str) -> str:
    """A Markdown section of nmt/evaluation/effect.py's checks: one row per check with its verdict and
    numbers, then one line naming what the test set lacks for the checks it cannot have."""
    verdicts = {True: "yes", False: "**no**", None: "cannot tell"}
    rows = [[c.claim, verdicts[c.passed], c.evidence] for c in checks]
    lines = [f"## Does the table show the effect? ({baseline} vs {attention})", "", *markdown_table(
        ["check", "holds", "numbers"], rows, left=3)]
    missing: dict[str, list[int]] = {}
    for number, check in enumerate(checks, 1):
        if check.missing:
            missing.setdefault(check.missing, []).append(number)
    if missing:
        parts = [
            f"{what} (check{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))})"
            for what, numbers in missing.items()
        ]
        lines += ["", f"This test set cannot show all of it: {'; '.join(parts)}."]
    return "\n".join(lines) + "\n"


def _cell_text(text: str) -> str:
    """A sentence as a Markdown table cell: pipes and HTML escaped, never empty."""
    escaped = text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    return escaped or "(empty)"


def pick_examples(evaluation: Evaluation, lengths: Sequence[int], per_bucket: int) -> list[tuple[str, list[int]]]:
    """(bucket label, sentence indices) of up to `per_bucket` sentences of each non-empty bucket, bucketed
    by their `lengths` (`sentence_lengths`) and drawn with `evaluation.bootstrap_seed`: the same sentences
    for the same test set and settings."""
    rng = np.random.default_rng([evaluation.settings.bootstrap_seed, len(lengths)])
    picked = []
    for bucket, rows in bucket_members(lengths, make_buckets(evaluation.settings.buckets)).items():
        if rows:
            chosen = rng.choice(rows, size=min(per_bucket, len(rows)), replace=False)
            picked.append((bucket.label, sorted(int(i) for i in chosen)))
    return picked


def format_examples(
    evaluation: Evaluation,
    hypotheses: Mapping[str, Sequence[str]],
    sources: Sequence[str] | None,
    references: Sequence[str],
) -> str:
    """A Markdown section: per length bucket, a few sentences with source, reference and each system's
    output one under the other, so that a reader sees what the scores mean."""
    lines = [
        "## Examples",
        "",
        f"Up to {EXAMPLES_PER_BUCKET} sentences per bucket, picked at random with seed "
        f"{evaluation.settings.bootstrap_seed} (evaluation.bootstrap_seed); sentence numbers count lines from 1.",
    ]
    by = evaluation.settings.by
    lengths = sentence_lengths(sources if sources is not None else references, references, by)
    for label, indices in pick_examples(evaluation, lengths, EXAMPLES_PER_BUCKET):
        for i in indices:
            heading = f"### {label}: sentence {i + 1} ({counted(lengths[i], f'{by} word')})"
            lines += ["", heading, "", "| | |", "|---|---|"]
            if sources is not None:
                lines.append(f"| source | {_cell_text(sources[i])} |")
            lines.append(f"| reference | {_cell_text(references[i])} |")
            lines += [f"| {_cell_text(name)} | {_cell_text(outputs[i])} |" for name, outputs in hypotheses.items()]
    return "\n".join(lines) + "\n"


def report_contents(
    evaluation: Evaluation,
    extra_settings: dict[str, Any] | None = None,
    effect: Mapping[tuple[str, str], Sequence[Check]] | None = None,
    scored: Sequence[str] = (),
    examples: str = "",
    groups: Mapping[str, tuple[str, str]] | None = None,
    title: str = "",
    bucketing: str = "",
    leaders: Sequence[Leader] = (),
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """results.json's content, and the bytes of results.json, report.md and bleu_by_length.png by file name.

    `effect` maps (fixed-vector run, attention run) to the checks of nmt/evaluation/effect.py; `scored`
    says what each system is (one line each), `examples` is a `format_examples` section and `groups`
    styles the plot's lines (bleu_by_length_figure) under `title` (the test set, in a line); `bucketing`
    says how the buckets were chosen where they are not evaluation.buckets as given; `leaders`
    (leaders.py's `bucket_leaders`) adds who is better per bucket (report.md's section, results.json's
    "leaders").
    """
    results = results_dict(evaluation, extra_settings)
    if leaders:
        results["leaders"] = [asdict(leader) for leader in leaders]
    markdown = format_markdown(evaluation, scored, bucketing, format_leaders(leaders, evaluation.settings) if leaders else "")
    if effect:
        results["effect"] = [
            {"baseline": baseline, "attention": attention, "checks": [asdict(check) for check in checks]}
            for (baseline, attention), checks in effect.items()
        ]
        markdown += "".join("\n" + format_checks(checks, *pair) for pair, checks in effect.items())
    if examples:
        markdown += "\n" + examples
    png = png_bytes(bleu_by_length_figure(evaluation, groups, title), dpi=120)
    return results, {RESULTS_JSON: json_text(results).encode("utf-8"), REPORT_MD: markdown.encode("utf-8"), PLOT_PNG: png}
