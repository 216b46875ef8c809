"""The metrics scored by length bucket, each through one interface (compare-mt's cache_stats and
score_cached_corpus): per-sentence sufficient statistics, read once per system, and a corpus score that is
a function of their column sums, exactly sacrebleu's, vectorised so that it scores a stack of bootstrap
resamples at once.

Bucketing, bootstrap intervals, paired tests, the source-blind floor, results.json and report.md
(nmt/evaluation/scoring.py, nmt/evaluation/report.py) work for every metric of `METRICS` through it: a new
metric is a subclass of `Metric` and one line of `METRICS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric as SacrebleuMetric

from nmt.config_sections import Tokenize
from nmt.errors import NMTError, counted

MAX_ORDER = 4  # BLEU's n-gram orders
# Columns of a BLEU stats row, in sacrebleu's order: hyp length, ref length, matches 1..4, totals 1..4.
N_STATS = 2 + 2 * MAX_ORDER


@dataclass(frozen=True)
class BucketStatistic:
    """A number (or a few) reported beside a metric for each bucket and the whole set. `compute(stats,
    floor)` maps a subset's summed sentence statistics of the metric, the system's and its floor's (its
    translations of length-matched wrong sources, `length_matched_pairing`), to one value per column; it
    takes stacked sums too, so that a statistic that `bootstraps` gets a percentile interval from the
    metric's own resamples.  # (... x k, ... x k) -> ... x len(columns)"""

    name: str  # its key in results.json: a number, or a list where it has several columns
    columns: tuple[str, ...]  # its headers in report.md
    compute: Callable[[np.ndarray, np.ndarray], np.ndarray]
    description: str  # for the report's reader
    digits: int = 2
    bootstraps: bool = False


class Metric(ABC):
    """A corpus metric against one set of references, read once for all systems.

    `sentence_stats` gives each sentence's sufficient statistics (n x `width`); `score` the corpus score
    (0-100, higher better: every difference and verdict reads it so) of any subset from their column sums, over
    any leading axes (a stack of resamples).
    `statistics()` is what the report shows beside it per bucket: the source-blind floor, which every
    metric has, then its `extra_statistics`.
    """

    name: ClassVar[str]  # its key in results.json (the first metric's keys are unprefixed: see report.py)
    label: ClassVar[str]  # its name in report.md and on the terminal
    width: ClassVar[int]  # columns of a stats row
    extra_statistics: ClassVar[tuple[BucketStatistic, ...]] = ()
    computed_as: ClassVar[str] = ""  # what its score is, for report.md: "sacrebleu corpus chrF"; "" : its corpus score

    def __init__(self, references: Sequence[str], tokenize: Tokenize, lowercase: bool) -> None:
        if not references:
            raise NMTError("the evaluation set is empty: no sentences to score.", "Check the split or --src/--ref.")
        self.n = len(references)

    @property
    @abstractmethod
    def signature(self) -> str:
        """sacrebleu's signature of its settings, e.g. nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"""

    @abstractmethod
    def _sentence_stats(self, hypotheses: list[str]) -> np.ndarray:
        """n x width, float64 (integral where the score is a function of counts, so that sums are exact)"""

    @classmethod
    @abstractmethod
    def score(cls, stats: np.ndarray) -> np.ndarray:
        """The corpus score (0-100) from summed statistics.  # ... x width -> ..."""

    def sentence_stats(self, hypotheses: Sequence[str]) -> np.ndarray:
        """Each sentence's sufficient statistics, the rows whose sums `score` takes.  # n x width"""
        if len(hypotheses) != self.n:
            raise NMTError(
                f"{counted(len(hypotheses), 'translation')} for {counted(self.n, 'reference')}: they must be parallel.",
                "Give one line per reference sentence (delete stale cached hypotheses in RUN_DIR/hyps/).",
            )
        return np.asarray(self._sentence_stats(list(hypotheses)), dtype=np.float64).reshape(self.n, self.width)

    @classmethod
    def statistics(cls) -> tuple[BucketStatistic, ...]:
        """The floor, then `extra_statistics`, in report order."""
        floor = BucketStatistic(
            "floor", ("floor",), lambda stats, floor: cls.score(floor)[..., None],
            f"the {cls.label} of the same system's translations of wrong sources of the same length (a fixed, "
            "seeded pairing), against these references: what it scores without reading its source.",
        )
        return (floor, *cls.extra_statistics)


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


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, 0 where the denominator is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, numerator / denominator, 0.0)


def _length_ratio(stats: np.ndarray, floor: np.ndarray) -> np.ndarray:
    return _ratio(stats[..., 0], stats[..., 1])[..., None]


def _precisions(stats: np.ndarray, floor: np.ndarray) -> np.ndarray:
    return _ratio(100.0 * stats[..., 2 : 2 + MAX_ORDER], stats[..., 2 + MAX_ORDER :])


class _FromSacrebleu(Metric):
    """A metric whose signature and per-sentence statistics are those of a sacrebleu metric object
    (`_sacrebleu`, built by the subclass with the references)."""

    _sacrebleu: SacrebleuMetric

    @property
    def signature(self) -> str:
        return str(self._sacrebleu.get_signature())

    def _sentence_stats(self, hypotheses: list[str]) -> np.ndarray:
        return np.asarray(self._sacrebleu._extract_corpus_statistics(hypotheses, None), dtype=np.float64)


class Bleu(_FromSacrebleu):
    """sacrebleu BLEU (exp smoothing); its stats row: hyp length, ref length, matches 1..4, totals 1..4.

    sacrebleu's own "forgot to detokenize" warning is off (it would come once per call): scoring.py's
    `warn_if_tokenized` says it once per command.
    """

    name, label, width = "bleu", "BLEU", N_STATS
    extra_statistics = (
        BucketStatistic("length_ratio", ("length ratio",), _length_ratio, "output / reference length in "
                        "sacrebleu's tokens; under 1, the brevity penalty cuts BLEU, and a fall with a falling "
                        "length ratio is outputs getting short."),
        BucketStatistic("precisions", ("p1", "p2", "p3", "p4"), _precisions, "n-gram precisions; a fall in p4 is "
                        "words going wrong.", digits=1),
    )

    def __init__(self, references: Sequence[str], tokenize: Tokenize, lowercase: bool) -> None:
        super().__init__(references, tokenize, lowercase)
        self._sacrebleu = sacrebleu_bleu(tokenize, lowercase, references=[list(references)], force=True)

    @classmethod
    def score(cls, stats: np.ndarray) -> np.ndarray:
        return bleu_from_stats(stats)


def sacrebleu_bleu(tokenize: Tokenize, lowercase: bool, **options: object) -> BLEU:
    """sacrebleu's BLEU with evaluation.tokenize and evaluation.lowercase (and sacrebleu's own `options`);
    an NMTError where the tokenizer cannot run here (ja-mecab without its packages)."""
    try:
        return BLEU(tokenize=tokenize, lowercase=lowercase, **options)  # type: ignore[arg-type]
    except (ImportError, RuntimeError) as exc:
        raise NMTError(
            f"evaluation.tokenize {tokenize} cannot be used here: {' '.join(str(exc).split())}",
            "Install its extra (pip install 'sacrebleu[ja]' for ja-mecab), or choose another tokenizer.",
        ) from None


class Chrf(_FromSacrebleu):
    """sacrebleu chrF (character 6-grams, beta 2, no word n-grams, sacrebleu's default effective-order
    averaging); its stats row: hyp, ref and matching n-grams for each order 1..6. `tokenize` is BLEU's alone."""

    CHAR_ORDER, BETA = CHRF.CHAR_ORDER, CHRF.BETA
    name, label, width = "chrf", "chrF", 3 * CHAR_ORDER
    computed_as = "sacrebleu corpus chrF"

    def __init__(self, references: Sequence[str], tokenize: Tokenize, lowercase: bool) -> None:
        super().__init__(references, tokenize, lowercase)
        self._sacrebleu = CHRF(char_order=self.CHAR_ORDER, word_order=0, beta=self.BETA, lowercase=lowercase,
                               references=[list(references)])

    @classmethod
    def score(cls, stats: np.ndarray) -> np.ndarray:
        # sacrebleu's CHRF._compute_f_score, operation for operation, so that the floats are the same
        stats = np.asarray(stats, dtype=np.float64)
        factor = cls.BETA**2
        avg_prec, avg_rec = np.zeros(stats.shape[:-1]), np.zeros(stats.shape[:-1])
        effective_order = np.zeros(stats.shape[:-1])
        with np.errstate(divide="ignore", invalid="ignore"):
            for i in range(cls.CHAR_ORDER):
                n_hyp, n_ref, n_match = stats[..., 3 * i], stats[..., 3 * i + 1], stats[..., 3 * i + 2]
                counted = (n_hyp > 0) & (n_ref > 0)  # the orders that count: both sides have n-grams
                avg_prec = np.where(counted, avg_prec + n_match / n_hyp, avg_prec)
                avg_rec = np.where(counted, avg_rec + n_match / n_ref, avg_rec)
                effective_order += counted
            avg_prec = np.where(effective_order > 0, avg_prec / effective_order, 0.0)
            avg_rec = np.where(effective_order > 0, avg_rec / effective_order, 0.0)
            score = (1 + factor) * avg_prec * avg_rec
            score = 100 * (score / (factor * avg_prec + avg_rec))
        return np.where(avg_prec + avg_rec != 0, score, 0.0)


# Every metric scored by bucket, in report order; the first is the report's main table (BLEU).
METRICS: dict[str, type[Metric]] = {"bleu": Bleu, "chrf": Chrf}
