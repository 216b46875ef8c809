"""Corpus BLEU and chrF (sacrebleu), per length bucket, with bootstrap intervals and paired tests.

Each sentence's BLEU sufficient statistics (lengths, n-gram matches and totals) are extracted once, and
a corpus score, exactly sacrebleu's, is a function of their column sums: a bootstrap resample is a count
matrix times a stats matrix, so 1000 resamples of thousands of sentences take milliseconds.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

from nmt.config_sections import EvaluationConfig, Tokenize
from nmt.errors import NMTError
from nmt.evaluation.buckets import bucket_members, length_matched_pairing, sentence_lengths
from nmt.lengths import Bucket, make_buckets

MAX_ORDER = 4
# Columns of a stats row, in sacrebleu's order: hyp length, ref length, matches 1..4, totals 1..4.
N_STATS = 2 + 2 * MAX_ORDER
CONFIDENCE = 0.95  # of every bootstrap interval
# Resample in chunks so that the count matrix stays small for large test sets.
_CHUNK_CELLS = 4_000_000


class CorpusScorer:
    """sacrebleu BLEU (exp smoothing) and chrF against one set of references, read once for all systems.

    sacrebleu's own "forgot to detokenize" warning is off (it would come once per call): `warn_if_tokenized`.
    """

    def __init__(self, references: Sequence[str], tokenize: Tokenize, lowercase: bool) -> None:
        if not references:
            raise NMTError("the evaluation set is empty: no sentences to score.", "Check the split or --src/--ref.")
        self.n = len(references)
        streams = [list(references)]  # sacrebleu's reference streams: this one
        try:
            self._bleu = BLEU(references=streams, tokenize=tokenize, lowercase=lowercase, force=True)
        except (ImportError, RuntimeError) as exc:  # ja-mecab without its packages
            raise NMTError(
                f"evaluation.tokenize {tokenize} cannot be used here: {' '.join(str(exc).split())}",
                "Install its extra (pip install 'sacrebleu[ja]' for ja-mecab), or choose another tokenizer.",
            ) from None
        self._chrf = CHRF(references=streams, lowercase=lowercase)
        # e.g. nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0
        self.bleu_signature, self.chrf_signature = str(self._bleu.get_signature()), str(self._chrf.get_signature())

    def sentence_stats(self, hypotheses: Sequence[str]) -> np.ndarray:
        """BLEU sufficient statistics of each sentence, the rows sacrebleu's corpus_score sums, so BLEU of
        any subset is exact.  # n_sentences x N_STATS (float64, integral)"""
        self._check(hypotheses)
        rows = self._bleu._extract_corpus_statistics(list(hypotheses), None)
        return np.asarray(rows, dtype=np.float64).reshape(self.n, N_STATS)

    def chrf(self, hypotheses: Sequence[str]) -> float:
        """Corpus chrF (0-100)."""
        self._check(hypotheses)
        return float(self._chrf.corpus_score(list(hypotheses), None).score)

    def _check(self, hypotheses: Sequence[str]) -> None:
        if len(hypotheses) != self.n:
            raise NMTError(
                f"{len(hypotheses)} translations for {self.n} references: they must be parallel.",
                "Give one line per reference sentence (delete stale cached hypotheses in RUN_DIR/hyps/).",
            )


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


def bleu_from_stats(stats: np.ndarray) -> np.ndarray:
    """Corpus BLEU (0-100) from summed statistics, as sacrebleu computes it.  # ... x N_STATS -> ..."""
    sys_len, ref_len = stats[..., 0], stats[..., 1]
    correct, total = stats[..., 2 : 2 + MAX_ORDER], stats[..., 2 + MAX_ORDER :]
    with np.errstate(divide="ignore", invalid="ignore"):
        brevity = np.where(sys_len >= ref_len, 1.0, np.exp(1.0 - ref_len / sys_len))
        # exp smoothing (mteval-v13a): the k-th order without matches gets precision 1 / (2^k total).
        zero = correct == 0
        halvings = np.cumsum(zero, axis=-1)
        precision = np.where(zero, 100.0 / (2.0**halvings * total), 100.0 * correct / total)
        log_mean = np.sum(np.log(np.where(total > 0, precision, 1.0)), axis=-1) / MAX_ORDER
        score = brevity * np.exp(log_mean)
    # sacrebleu returns 0 when nothing matches or some order has no n-grams at all (an empty output too: its
    # unigram total is its length).
    defined = np.all(total > 0, axis=-1) & np.any(correct > 0, axis=-1)
    return np.where(defined, score, 0.0)


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
class BucketStatistic:
    """A number (or a few) reported beside BLEU for each bucket and the whole set. `compute(stats, floor)`
    maps a subset's summed sentence statistics, the system's and its floor's (its translations of
    length-matched wrong sources, `length_matched_pairing`), to one value per column; it takes stacked sums
    too, so that a statistic that `bootstraps` gets a percentile interval from BLEU's own resamples.
    # (... x N_STATS, ... x N_STATS) -> ... x len(columns)"""

    name: str  # its key in results.json: a number, or a list where it has several columns
    columns: tuple[str, ...]  # its headers in report.md's "What each score is made of"
    compute: Callable[[np.ndarray, np.ndarray], np.ndarray]
    description: str  # for the report's reader
    digits: int = 2
    bootstraps: bool = False


def _floor(stats: np.ndarray, floor: np.ndarray) -> np.ndarray:
    return bleu_from_stats(floor)[..., None]


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, 0 where the denominator is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, numerator / denominator, 0.0)


def _length_ratio(stats: np.ndarray, floor: np.ndarray) -> np.ndarray:
    return _ratio(stats[..., 0], stats[..., 1])[..., None]


def _precisions(stats: np.ndarray, floor: np.ndarray) -> np.ndarray:
    return _ratio(100.0 * stats[..., 2 : 2 + MAX_ORDER], stats[..., 2 + MAX_ORDER :])


# What a BLEU score is made of, in report order.
STATISTICS = (
    BucketStatistic("floor", ("floor",), _floor, "the BLEU of the same system's translations of wrong sources of "
                    "the same length (a fixed, seeded pairing), against these references: what it scores without "
                    "reading its source."),
    BucketStatistic("length_ratio", ("length ratio",), _length_ratio, "output / reference length in sacrebleu's "
                    "tokens; under 1, the brevity penalty cuts BLEU, and a fall with a falling length ratio is "
                    "outputs getting short."),
    BucketStatistic("precisions", ("p1", "p2", "p3", "p4"), _precisions, "n-gram precisions; a fall in p4 is "
                    "words going wrong.", digits=1),
)


@dataclass(frozen=True)
class StatisticValue:
    """One BucketStatistic on one subset: a value per column, and with `bootstraps` a percentile interval
    per column (None when the subset is too small to resample)."""

    values: tuple[float, ...]
    intervals: tuple[tuple[float, float], ...] | None = None


@dataclass(frozen=True)
class BucketScore:
    """One system on one bucket; `bleu` and `ci` are None, `statistics` empty, if it is empty, `ci` also
    when it holds too few sentences to resample. `statistics` maps each of STATISTICS by name."""

    bucket: Bucket
    n: int
    bleu: float | None
    ci: tuple[float, float] | None
    statistics: Mapping[str, StatisticValue] = field(default_factory=dict)


@dataclass(frozen=True)
class SystemScore:
    """One system: overall scores, its bootstrap interval (None, as a bucket's, when the test set is too
    small to resample), and one entry per bucket."""

    name: str
    bleu: float
    chrf: float
    signature: str
    chrf_signature: str
    n: int
    ci: tuple[float, float] | None
    buckets: list[BucketScore]
    statistics: Mapping[str, StatisticValue] = field(default_factory=dict)


@dataclass(frozen=True)
class BucketComparison:
    """b - a on one bucket; None when the bucket is empty (`p` also when it is too small to resample)."""

    bucket: Bucket
    bleu_diff: float | None
    p: float | None


@dataclass(frozen=True)
class Comparison:
    """Paired bootstrap of system b against system a: differences are BLEU(b) - BLEU(a); `p` is None when
    the test set is too small to resample."""

    a: str
    b: str
    bleu_diff: float
    p: float | None
    buckets: list[BucketComparison]


@dataclass(frozen=True)
class Evaluation:
    """Everything a report shows, plus the settings that produced it."""

    systems: list[SystemScore]
    comparisons: list[Comparison]
    settings: EvaluationConfig


def score_systems(
    hypotheses: Mapping[str, Sequence[str]],
    sources: Sequence[str],
    references: Sequence[str],
    settings: EvaluationConfig,
) -> Evaluation:
    """Score every system overall and per length bucket; compare every pair (a before b).

    `hypotheses` maps a system name to one line per source sentence; `settings` gives the buckets, what
    they go by, and the rest. Bootstrap resamples are drawn per subset (overall, each bucket) from
    `bootstrap_seed`, shared by all systems; a subset of fewer than `min_bucket_sentences` sentences, the
    whole set included, gets its BLEU but no interval and no p-value (None). `tokenize` and `lowercase`
    are sacrebleu's. Each score carries its STATISTICS, the floor's wrong sources paired by
    `length_matched_pairing` with `bootstrap_seed`.
    """
    scorer = CorpusScorer(references, settings.tokenize, settings.lowercase)
    lengths = sentence_lengths(sources, references, settings.by)
    names = list(hypotheses)
    pairs = list(itertools.combinations(range(len(names)), 2))
    (whole, whole_diffs), *parts = _score_subsets(scorer, hypotheses, lengths, settings, pairs)
    systems = []
    for k, (name, score) in enumerate(zip(names, whole, strict=True)):
        assert score.bleu is not None  # the whole set is never empty
        per_bucket = [scores[k] for scores, _ in parts]
        systems.append(SystemScore(name, score.bleu, scorer.chrf(hypotheses[name]), scorer.bleu_signature,
                                   scorer.chrf_signature, scorer.n, score.ci, per_bucket, score.statistics))
    comparisons = []
    for j, ((a, b), diff) in enumerate(zip(pairs, whole_diffs, strict=True)):
        assert diff.bleu_diff is not None
        comparisons.append(Comparison(names[a], names[b], diff.bleu_diff, diff.p, [diffs[j] for _, diffs in parts]))
    return Evaluation(systems, comparisons, settings)


def _score_subsets(
    scorer: CorpusScorer, hypotheses: Mapping[str, Sequence[str]], lengths: Sequence[int],
    settings: EvaluationConfig, pairs: Sequence[tuple[int, int]],
) -> list[tuple[list[BucketScore], list[BucketComparison]]]:
    """Every system (a BucketScore each, with its STATISTICS) and every pair (a, b) of system indices (a
    BucketComparison each) on the whole set (first, as a bucket of every length) and on each bucket; each
    subset resamples from [seed, index], and one of fewer than min_bucket_sentences sentences not at all."""
    seed = settings.bootstrap_seed
    # a system's translation of the wrong source paired with sentence i is its line pairing[i]
    pairing = length_matched_pairing(lengths, seed)
    stats = [  # each sentence's statistics, then its floor's: n x 2 N_STATS per system
        np.concatenate([scorer.sentence_stats(lines), scorer.sentence_stats([lines[j] for j in pairing])], axis=1)
        for lines in hypotheses.values()
    ]
    subsets = []
    members = {Bucket("all", 0, None): list(range(scorer.n)), **bucket_members(lengths, make_buckets(settings.buckets))}
    for i, (bucket, rows) in enumerate(members.items()):
        if not rows:
            empty = [BucketScore(bucket, 0, None, None) for _ in stats]
            subsets.append((empty, [BucketComparison(bucket, None, None) for _ in pairs]))
            continue
        sub = [s[rows] for s in stats]
        resampled = len(rows) >= settings.min_bucket_sentences
        resamples = bootstrap_sums(sub, settings.bootstrap_samples, [seed, i]) if resampled else None
        samples = None if resamples is None else bleu_from_stats(resamples[..., :N_STATS]).T
        sums = [s.sum(axis=0) for s in sub]
        points = [float(bleu_from_stats(total[:N_STATS])) for total in sums]
        scores = [
            BucketScore(
                bucket, len(rows), points[k], None if samples is None else percentile_interval(samples[k]),
                {st.name: _statistic(st, total, None if resamples is None else resamples[:, k]) for st in STATISTICS},
            )
            for k, total in enumerate(sums)
        ]
        diffs = [
            BucketComparison(
                bucket, points[b] - points[a], None if samples is None else paired_p_value(samples[a], samples[b])
            )
            for a, b in pairs
        ]
        subsets.append((scores, diffs))
    return subsets


def _statistic(statistic: BucketStatistic, sums: np.ndarray, resamples: np.ndarray | None) -> StatisticValue:
    """One statistic of a system's summed statistics and its floor's (2 N_STATS), with its intervals from
    the resampled sums (n_samples x 2 N_STATS) where it bootstraps."""
    values = tuple(float(v) for v in statistic.compute(sums[:N_STATS], sums[N_STATS:]))
    if not statistic.bootstraps or resamples is None:
        return StatisticValue(values)
    drawn = statistic.compute(resamples[:, :N_STATS], resamples[:, N_STATS:])  # n_samples x columns
    return StatisticValue(values, tuple(percentile_interval(column) for column in drawn.T))
