"""Corpus scores (BLEU, chrF: nmt/evaluation/metrics.py's METRICS) per length bucket, with bootstrap
intervals and paired tests.

Each sentence's sufficient statistics for each metric are extracted once, and a corpus score, exactly
sacrebleu's, is a function of their column sums: a bootstrap resample is a count matrix times a stats
matrix, so 1000 resamples of thousands of sentences take milliseconds, and every metric is scored on the
same resamples.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from nmt.config_sections import EvaluationConfig, Tokenize
from nmt.evaluation.buckets import bucket_members, length_matched_pairing, sentence_lengths
from nmt.evaluation.metrics import METRICS, BucketStatistic, Metric, bleu_from_stats
from nmt.lengths import Bucket, make_buckets

CONFIDENCE = 0.95  # of every bootstrap interval
# Resample in chunks so that the count matrix stays small for large test sets.
_CHUNK_CELLS = 4_000_000

def warn_if_tokenized(hypotheses: Mapping[str, Sequence[str]], tokenize: Tokenize) -> None:
    """One warning on stderr naming the systems whose output looks tokenized (sacrebleu's test: 100+ lines
    ending in " ."); none with tokenize "none", which says the data is tokenized on purpose."""
    tokenized = [name for name, lines in hypotheses.items() if sum(line.endswith(" .") for line in lines) >= 100]
    if tokenized and tokenize != "none":
        print(
            f"warning: {', '.join(tokenized)}: 100 or more lines end in ' .', as tokenized text does; "
            "BLEU expects detokenized text (or evaluation.tokenize none for pre-tokenized data).",
            file=sys.stderr,
        )


def bootstrap_sums(stats_per_system: Sequence[np.ndarray], n_samples: int, seed: int | Sequence[int]) -> np.ndarray:
    """Summed statistics of each system on the same bootstrap resamples of the sentences (the same sentence
    indices for every system, as a paired test needs).  # n_systems x (n x k) -> n_samples x n_systems x k"""
    stacked = np.concatenate(stats_per_system, axis=1)  # n x (n_systems * k)
    n = stacked.shape[0]
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_CELLS // max(n, 1))
    sums = []
    for start in range(0, n_samples, chunk):
        rows = min(chunk, n_samples - start)
        draws = rng.integers(0, n, size=(rows, n))
        # how often each sentence was drawn in each resample: bincount over offset indices
        offsets = draws + (np.arange(rows) * n)[:, None]
        counts = np.bincount(offsets.ravel(), minlength=rows * n).reshape(rows, n)
        sums.append(counts.astype(np.float64) @ stacked)  # exact: integral statistics
    return np.concatenate(sums, axis=0).reshape(n_samples, len(stats_per_system), -1)


def bootstrap_bleu(stats_per_system: Sequence[np.ndarray], n_samples: int, seed: int | Sequence[int]) -> np.ndarray:
    """BLEU of each system on the same bootstrap resamples (bootstrap_sums).
    # n_systems x (n x N_STATS) -> n_systems x n_samples"""
    return bleu_from_stats(bootstrap_sums(stats_per_system, n_samples, seed)).T


def percentile_interval(samples: np.ndarray) -> tuple[float, float]:
    """Percentile bootstrap interval (CONFIDENCE) of the resampled scores."""
    tail = 100.0 * (1.0 - CONFIDENCE) / 2.0
    low, high = np.percentile(samples, [tail, 100.0 - tail])
    return float(low), float(high)


def paired_p_value(samples_a: np.ndarray, samples_b: np.ndarray) -> float:
    """Two-sided paired bootstrap p-value (Koehn 2004) for b - a: twice the smaller share of resamples in
    which b is not better or not worse, with add-one smoothing (a system against itself gets p = 1)."""
    delta = np.asarray(samples_b) - np.asarray(samples_a)
    n = delta.size
    tail = min(np.count_nonzero(delta <= 0), np.count_nonzero(delta >= 0))
    return float(min(1.0, 2.0 * (tail + 1) / (n + 1)))


@dataclass(frozen=True)
class StatisticValue:
    """One BucketStatistic on one subset: a value per column, and with `bootstraps` a percentile interval
    per column (None when the subset is too small to resample)."""

    values: tuple[float, ...]
    intervals: tuple[tuple[float, float], ...] | None = None


@dataclass(frozen=True)
class MetricScore:
    """One metric of one system on one subset: its score and bootstrap interval (`value` None, `statistics`
    empty, on an empty bucket; `ci` None also on one too small to resample), and its `Metric.statistics()`
    by name."""

    value: float | None
    ci: tuple[float, float] | None
    statistics: Mapping[str, StatisticValue] = field(default_factory=dict)
    # the score on each bootstrap resample (n_samples), None where `ci` is: for checks of a ratio of subsets
    samples: np.ndarray | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class MetricDiff:
    """One metric's b - a on one subset, with its paired bootstrap p; None as a MetricScore's are."""

    diff: float | None
    p: float | None


class _BleuView:
    """BLEU's interval and statistics of a score holding every metric's (`metrics`), for the BLEU-only code."""

    metrics: Mapping[str, MetricScore]

    @property
    def ci(self) -> tuple[float, float] | None:
        return self.metrics["bleu"].ci

    @property
    def statistics(self) -> Mapping[str, StatisticValue]:
        return self.metrics["bleu"].statistics

    @property
    def samples(self) -> np.ndarray | None:
        return self.metrics["bleu"].samples


@dataclass(frozen=True)
class BucketScore(_BleuView):
    """One system on one bucket: `metrics` each metric of METRICS by name; `bleu`, `ci` and `statistics` are
    BLEU's (what the BLEU-only code reads: the effect checks, the plot). Their values are None, the
    statistics empty, if the bucket is empty; `ci` None also when it holds too few sentences to resample."""

    bucket: Bucket
    n: int
    metrics: Mapping[str, MetricScore]

    @property
    def bleu(self) -> float | None:
        return self.metrics["bleu"].value


@dataclass(frozen=True)
class SystemScore(_BleuView):
    """One system: its scores on the whole test set (`metrics`, as a BucketScore's; the interval None when
    the test set is too small to resample), one BucketScore per bucket, and each metric's sacrebleu
    signature; `bleu`, `ci`, `statistics` and `signature` are BLEU's, `chrf` and `chrf_signature` chrF's."""

    name: str
    n: int
    buckets: list[BucketScore]
    metrics: Mapping[str, MetricScore]
    signatures: Mapping[str, str]

    @property
    def bleu(self) -> float:
        return _whole(self.metrics["bleu"].value)

    @property
    def chrf(self) -> float:
        return _whole(self.metrics["chrf"].value)

    @property
    def signature(self) -> str:
        return self.signatures["bleu"]

    @property
    def chrf_signature(self) -> str:
        return self.signatures["chrf"]


def _whole(value: float | None) -> float:
    """A score of the whole test set, which is never empty."""
    assert value is not None
    return value


@dataclass(frozen=True)
class BucketComparison:
    """b - a on one bucket: `metrics` each metric's by name, `bleu_diff` and `p` BLEU's; None when the
    bucket is empty (`p` also when it is too small to resample)."""

    bucket: Bucket
    metrics: Mapping[str, MetricDiff]

    @property
    def bleu_diff(self) -> float | None:
        return self.metrics["bleu"].diff

    @property
    def p(self) -> float | None:
        return self.metrics["bleu"].p


@dataclass(frozen=True)
class Comparison:
    """Paired bootstrap of system b against system a on the whole test set: `metrics` each metric's b - a
    by name, `bleu_diff` and `p` BLEU's (`p` None when the test set is too small to resample); one
    BucketComparison per bucket."""

    a: str
    b: str
    buckets: list[BucketComparison]
    metrics: Mapping[str, MetricDiff]

    @property
    def bleu_diff(self) -> float:
        return _whole(self.metrics["bleu"].diff)

    @property
    def p(self) -> float | None:
        return self.metrics["bleu"].p


@dataclass(frozen=True)
class Evaluation:
    """Everything a report shows, plus the settings that produced it; `signatures` maps each metric scored
    (METRICS' names, in their order) to its sacrebleu signature."""

    systems: list[SystemScore]
    comparisons: list[Comparison]
    settings: EvaluationConfig
    signatures: Mapping[str, str] = field(default_factory=dict)


def score_systems(
    hypotheses: Mapping[str, Sequence[str]],
    sources: Sequence[str],
    references: Sequence[str],
    settings: EvaluationConfig,
) -> Evaluation:
    """Score every system overall and per length bucket with every metric of METRICS; compare every pair (a
    before b).

    `hypotheses` maps a system name to one line per source sentence; `settings` gives the buckets, what
    they go by, and the rest. Bootstrap resamples are drawn per subset (overall, each bucket) from
    `bootstrap_seed`, shared by all systems and all metrics; a subset of fewer than `min_bucket_sentences`
    sentences, the whole set included, gets its scores but no interval and no p-value (None). `tokenize`
    and `lowercase` are sacrebleu's. Each score carries its metric's statistics, the floor's wrong sources
    paired by `length_matched_pairing` with `bootstrap_seed`.
    """
    metrics = {name: metric(references, settings.tokenize, settings.lowercase) for name, metric in METRICS.items()}
    lengths = sentence_lengths(sources, references, settings.by)
    names = list(hypotheses)
    pairs = list(itertools.combinations(range(len(names)), 2))
    (whole, whole_diffs), *parts = _score_subsets(metrics, hypotheses, lengths, settings, pairs)
    signatures = {name: metric.signature for name, metric in metrics.items()}
    systems = [SystemScore(name, len(references), [scores[k] for scores, _ in parts], score.metrics, signatures)
               for k, (name, score) in enumerate(zip(names, whole, strict=True))]
    comparisons = [Comparison(names[a], names[b], [diffs[j] for _, diffs in parts], diff.metrics)
                   for j, ((a, b), diff) in enumerate(zip(pairs, whole_diffs, strict=True))]
    return Evaluation(systems, comparisons, settings, signatures)


def _score_subsets(
    metrics: Mapping[str, Metric], hypotheses: Mapping[str, Sequence[str]], lengths: Sequence[int],
    settings: EvaluationConfig, pairs: Sequence[tuple[int, int]],
) -> list[tuple[list[BucketScore], list[BucketComparison]]]:
    """Every system (a BucketScore each, with every metric and its statistics) and every pair (a, b) of
    system indices (a BucketComparison each) on the whole set (first, as a bucket of every length) and on
    each bucket; each subset resamples from [seed, index], and one of fewer than min_bucket_sentences
    sentences not at all. All metrics are scored on the same resamples."""
    # a system's translation of the wrong source paired with sentence i is its line pairing[i]
    pairing = length_matched_pairing(lengths, settings.bootstrap_seed)
    stats = [_sentence_stats(metrics, lines, pairing) for lines in hypotheses.values()]
    members = {Bucket("all", 0, None): list(range(len(lengths))),
               **bucket_members(lengths, make_buckets(settings.buckets))}
    return [_score_subset(metrics, stats, bucket, rows, [settings.bootstrap_seed, index], settings, pairs)
            for index, (bucket, rows) in enumerate(members.items())]


def _sentence_stats(metrics: Mapping[str, Metric], lines: Sequence[str], pairing: Sequence[int]) -> np.ndarray:
    """One system's statistics, a row per sentence: per metric, its own statistics, then its floor's
    (its translation of the wrong source `pairing` gives), `width` columns each."""
    own = [m.sentence_stats(lines) for m in metrics.values()]  # the count of lines checked first
    floor = [m.sentence_stats([lines[j] for j in pairing]) for m in metrics.values()]
    return np.concatenate([block for pair in zip(own, floor, strict=True) for block in pair], axis=1)


def _column_starts(metrics: Mapping[str, Metric]) -> dict[str, int]:
    """Where each metric's columns begin in a row of `_sentence_stats`."""
    return dict(zip(metrics, np.cumsum([0, *(2 * m.width for m in metrics.values())]).tolist(), strict=False))


def _score_subset(
    metrics: Mapping[str, Metric], stats: Sequence[np.ndarray], bucket: Bucket, rows: Sequence[int],
    seed: Sequence[int], settings: EvaluationConfig, pairs: Sequence[tuple[int, int]],
) -> tuple[list[BucketScore], list[BucketComparison]]:
    """Every system and every pair on the sentences `rows` of `bucket`, resampled from `seed` where they
    are at least min_bucket_sentences, and more than one; None for every score of an empty bucket."""
    if not rows:
        return ([BucketScore(bucket, 0, {name: MetricScore(None, None) for name in metrics}) for _ in stats],
                [BucketComparison(bucket, {name: MetricDiff(None, None) for name in metrics}) for _ in pairs])
    sub = [s[rows] for s in stats]
    # every resample of one sentence is that sentence: an interval of no width, and any difference "significant"
    resampled = len(rows) >= max(settings.min_bucket_sentences, 2)
    resamples = bootstrap_sums(sub, settings.bootstrap_samples, seed) if resampled else None
    sums = [s.sum(axis=0) for s in sub]
    starts = _column_starts(metrics)
    scored = {name: _score_metric(metric, starts[name], sums, resamples, pairs) for name, metric in metrics.items()}
    scores = [BucketScore(bucket, len(rows), {name: systems[k] for name, (systems, _) in scored.items()})
              for k in range(len(stats))]
    comparisons = [BucketComparison(bucket, {name: diffs[j] for name, (_, diffs) in scored.items()})
                   for j in range(len(pairs))]
    return scores, comparisons


def _score_metric(
    metric: Metric, start: int, sums: Sequence[np.ndarray], resamples: np.ndarray | None,
    pairs: Sequence[tuple[int, int]],
) -> tuple[list[MetricScore], list[MetricDiff]]:
    """One metric, its columns from `start` of the summed statistics (`width` of its own, then as many of
    its floor's): each system's score, interval and statistics, and each pair's b - a and paired p."""
    own, floor = slice(start, start + metric.width), slice(start + metric.width, start + 2 * metric.width)
    samples = None if resamples is None else metric.score(resamples[..., own]).T  # n_systems x n_samples
    points = [float(metric.score(total[own])) for total in sums]
    scores: list[MetricScore] = []
    for k, total in enumerate(sums):
        drawn = None if resamples is None else resamples[:, k]
        statistics = {st.name: _statistic(st, total[own], total[floor], drawn, own, floor)
                      for st in metric.statistics()}
        ci = None if samples is None else percentile_interval(samples[k])
        scores.append(MetricScore(points[k], ci, statistics, None if samples is None else samples[k]))
    diffs = [MetricDiff(points[b] - points[a], None if samples is None else paired_p_value(samples[a], samples[b]))
             for a, b in pairs]
    return scores, diffs


def _statistic(
    statistic: BucketStatistic, sums: np.ndarray, floor: np.ndarray, resamples: np.ndarray | None,
    own: slice, floor_columns: slice,
) -> StatisticValue:
    """One statistic of a metric's summed statistics, a system's and its floor's, with its intervals from
    the resampled sums (n_samples x all columns: the metric's at `own` and `floor_columns`) where it
    bootstraps."""
    values = tuple(float(v) for v in statistic.compute(sums, floor))
    if not statistic.bootstraps or resamples is None:
        return StatisticValue(values)
    drawn = statistic.compute(resamples[:, own], resamples[:, floor_columns])  # n_samples x columns
    return StatisticValue(values, tuple(percentile_interval(column) for column in drawn.T))
