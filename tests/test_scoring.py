"""nmt/evaluation/scoring.py: BLEU from summed statistics equals sacrebleu, bootstrap intervals, paired bootstrap
(`nmt score` on files: tests/test_score_files.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import sacrebleu

from nmt.errors import NMTError
from nmt.evaluation.metrics import N_STATS, Bleu, Chrf, bleu_from_stats
from nmt.evaluation.scoring import (
    bootstrap_bleu,
    bootstrap_sums,
    paired_p_value,
    percentile_interval,
    score_systems,
)
from tests.helpers import scoring_settings

VOCAB = [f"w{i}" for i in range(200)]


def make_corpus(n: int, seed: int = 0, max_len: int = 70) -> tuple[list[str], list[str]]:
    """Random sources of 1..max_len words; references are the reversed source words."""
    rng = random.Random(seed)
    sources = [" ".join(rng.choices(VOCAB, k=rng.randint(1, max_len))) for _ in range(n)]
    return sources, [" ".join(reversed(s.split())) for s in sources]


def corrupt(references: list[str], keep: float, seed: int = 1) -> list[str]:
    """Replace each word with probability 1 - keep: a system of controlled quality."""
    rng = random.Random(seed)
    return [" ".join(w if rng.random() < keep else "zz" for w in r.split()) for r in references]


@pytest.fixture(scope="module")
def corpus() -> tuple[list[str], list[str]]:
    return make_corpus(300)


def test_bleu_from_stats_equals_sacrebleu_on_subsets(corpus: tuple[list[str], list[str]]) -> None:
    _, references = corpus
    hyps = corrupt(references, 0.6)
    stats = Bleu(references, "13a", False).sentence_stats(hyps)
    assert stats.shape == (300, N_STATS)
    rng = np.random.default_rng(0)
    for size in (1, 2, 5, 40, 300):
        rows = np.sort(rng.choice(300, size=size, replace=False))
        expected = sacrebleu.corpus_bleu([hyps[i] for i in rows], [[references[i] for i in rows]]).score
        assert float(bleu_from_stats(stats[rows].sum(axis=0))) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    ("hyps", "refs"),
    [
        (["a b c d e"], ["a b c d e"]),  # perfect
        (["a b"], ["a b c d e f"]),  # too short: brevity penalty, no 3-/4-grams at all -> 0
        (["a b c x y z q"], ["a b c d e"]),  # longer than ref, no 4-gram match: exp smoothing
        (["a x b y c z"], ["a b c"]),  # only unigrams match: smoothing halves twice
        (["x y z w"], ["a b c d"]),  # nothing matches -> 0
        ([""], ["a b c"]),  # empty hypothesis
        (["a b c d", "e f g h i j"], ["a b c d", "e f g x i j k l"]),
    ],
)
def test_bleu_conventions_match_sacrebleu(hyps: list[str], refs: list[str]) -> None:
    stats = Bleu(refs, "13a", False).sentence_stats(hyps)
    expected = sacrebleu.corpus_bleu(hyps, [refs]).score
    assert float(bleu_from_stats(stats.sum(axis=0))) == pytest.approx(expected, abs=1e-6)


def test_chrf_from_summed_stats_equals_sacrebleu_on_subsets(corpus: tuple[list[str], list[str]]) -> None:
    _, references = corpus
    references = [*references[:-1], ""]  # a blank reference: sacrebleu counts none of its n-grams
    hyps = corrupt(references, 0.6)
    hyps[:3] = ["", "w1", "W2 w3, w4."]  # empty, one word, punctuation and case
    stats = Chrf(references, "13a", False).sentence_stats(hyps)
    assert stats.shape == (300, 18)
    rng = np.random.default_rng(0)
    for size in (1, 2, 3, 5, 40, 299, 300):
        rows = np.sort(rng.choice(300, size=size, replace=False))
        expected = sacrebleu.corpus_chrf([hyps[i] for i in rows], [[references[i] for i in rows]]).score
        assert float(Chrf.score(stats[rows].sum(axis=0))) == expected  # the same float, not just close
    # vectorised over resamples: each row of a stack of sums is its own score
    sums = np.stack([stats[rows].sum(axis=0) for rows in (slice(0, 10), slice(10, 300), slice(None))])
    assert Chrf.score(sums).tolist() == [float(Chrf.score(row)) for row in sums]


@pytest.mark.parametrize(
    ("hyps", "refs", "lowercase"),
    [
        (["a b c d e"], ["a b c d e"], False),  # perfect
        ([""], ["a b c"], False),  # empty output: 0
        (["a b c"], [""], False),  # blank reference: 0
        (["ab"], ["abcdefgh"], False),  # fewer characters than the higher orders: effective order
        (["The Cat sat."], ["the cat sat ."], True),
        (["The Cat sat."], ["the cat sat ."], False),
        (["x y z"], ["a b c"], False),  # nothing matches
    ],
)
def test_chrf_conventions_match_sacrebleu(hyps: list[str], refs: list[str], lowercase: bool) -> None:
    stats = Chrf(refs, "13a", lowercase).sentence_stats(hyps)
    expected = sacrebleu.metrics.CHRF(lowercase=lowercase).corpus_score(hyps, [refs]).score
    assert float(Chrf.score(stats.sum(axis=0))) == expected


def test_chrf_per_bucket_with_intervals_and_paired_p_from_the_same_resamples(
    corpus: tuple[list[str], list[str]],
) -> None:
    from nmt.evaluation import scoring

    sources, references = corpus
    good, garbled = corrupt(references, 0.8, seed=1), corrupt(references, 0.4, seed=2)
    settings = scoring_settings(bootstrap_samples=200, bootstrap_seed=3)
    evaluation = score_systems({"good": good, "garbled": garbled, "again": list(good)}, sources, references, settings)
    first = evaluation.systems[0]
    whole = first.metrics["chrf"]
    assert whole.value == first.chrf == sacrebleu.corpus_chrf(good, [references]).score
    # the interval is chrF on the resamples BLEU's comes from: the draws depend on the sentences alone
    stats = Chrf(references, "13a", False).sentence_stats(good)
    drawn = Chrf.score(scoring.bootstrap_sums([stats], 200, [3, 0])[:, 0])
    assert whole.ci == scoring.percentile_interval(drawn) and whole.ci[0] < whole.value < whole.ci[1]
    for bucket in first.buckets:
        rows = [i for i, s in enumerate(sources) if bucket.bucket.contains(len(s.split()))]
        chrf = bucket.metrics["chrf"]
        assert chrf.value == sacrebleu.corpus_chrf([good[i] for i in rows], [[references[i] for i in rows]]).score
        assert chrf.ci is not None and chrf.ci[0] <= chrf.value <= chrf.ci[1]
        floor = sacrebleu.corpus_chrf([good[j] for j in _pairing(sources, 3)[rows]], [[references[i] for i in rows]])
        assert chrf.statistics["floor"].values == pytest.approx([floor.score])
    worse, same, _ = evaluation.comparisons  # good-garbled, good-again, garbled-again
    assert worse.metrics["chrf"].diff == pytest.approx(evaluation.systems[1].chrf - first.chrf)
    assert worse.metrics["chrf"].diff < -20 and worse.metrics["chrf"].p < 0.05
    assert all(b.metrics["chrf"].p < 0.05 for b in worse.buckets)
    assert (same.metrics["chrf"].diff, same.metrics["chrf"].p) == (0.0, 1.0)


def _pairing(sources: list[str], seed: int) -> np.ndarray:
    from nmt.evaluation.buckets import length_matched_pairing

    return np.asarray(length_matched_pairing([len(s.split()) for s in sources], seed))


def test_signatures(corpus: tuple[list[str], list[str]]) -> None:
    _, references = corpus
    evaluation = score_systems({"s": corrupt(references, 0.7)}, *corpus, scoring_settings(bootstrap_samples=10))
    bleu, chrf = evaluation.signatures["bleu"], evaluation.signatures["chrf"]
    assert "tok:13a" in bleu and "smooth:exp" in bleu and "nrefs:1" in bleu
    assert "nc:6" in chrf and "nw:0" in chrf
    assert (evaluation.systems[0].signature, evaluation.systems[0].chrf_signature) == (bleu, chrf)


def test_per_bucket_bleu_equals_sacrebleu_on_the_subset(corpus: tuple[list[str], list[str]]) -> None:
    sources, references = corpus
    hyps = corrupt(references, 0.7)
    evaluation = score_systems({"sys": hyps}, sources, references, scoring_settings(bootstrap_samples=100))
    system = evaluation.systems[0]
    assert system.bleu == pytest.approx(sacrebleu.corpus_bleu(hyps, [references]).score, abs=1e-6)
    assert sum(b.n for b in system.buckets) == 300
    for bucket_score in system.buckets:
        rows = [i for i, s in enumerate(sources) if bucket_score.bucket.contains(len(s.split()))]
        assert bucket_score.n == len(rows) > 0
        expected = sacrebleu.corpus_bleu([hyps[i] for i in rows], [[references[i] for i in rows]]).score
        assert bucket_score.bleu == pytest.approx(expected, abs=1e-6)


def test_bucketing_by_reference_uses_reference_lengths() -> None:
    sources = ["a b c", "a b c d e f g h i j k l"]
    references = ["a b c d e f g h i j k l", "a b c"]
    hyps = [references[0], "x y z"]  # the long reference translated, the short one not
    evaluation = score_systems({"s": hyps}, sources, references,
                               scoring_settings(buckets=[10], by="reference", bootstrap_samples=20))
    first, second = evaluation.systems[0].buckets
    assert (first.bucket.label, first.n, second.bucket.label, second.n) == ("<10", 1, ">=10", 1)
    # by reference, <10 holds the second sentence (a 3-word reference); by source it would hold the first
    assert (first.bleu, second.bleu) == pytest.approx((0.0, 100.0))


def test_intervals_contain_the_estimate_and_are_deterministic(corpus: tuple[list[str], list[str]]) -> None:
    sources, references = corpus
    hyps = corrupt(references, 0.6)
    first = score_systems({"s": hyps}, sources, references,
                          scoring_settings(bootstrap_samples=200, bootstrap_seed=7))
    again = score_systems({"s": hyps}, sources, references,
                          scoring_settings(bootstrap_samples=200, bootstrap_seed=7))
    other = score_systems({"s": hyps}, sources, references,
                          scoring_settings(bootstrap_samples=200, bootstrap_seed=8))
    system = first.systems[0]
    assert system.ci[0] < system.bleu < system.ci[1]
    assert system.ci[1] - system.ci[0] < 10  # 300 sentences pin corpus BLEU to a few points
    for bucket_score in system.buckets:
        assert bucket_score.ci is not None and bucket_score.bleu is not None
        assert bucket_score.ci[0] <= bucket_score.bleu <= bucket_score.ci[1]
    assert first == again
    assert other.systems[0].ci != system.ci


def test_the_interval_is_the_middle_95_percent_of_the_resamples() -> None:
    """Worked out by hand: of 0..1000, numpy's percentiles 2.5 and 97.5 are 25 and 975."""
    assert percentile_interval(np.arange(1001.0)) == pytest.approx((25.0, 975.0))


def test_every_sentence_is_drawn_alike_in_the_resamples() -> None:
    """Each resample draws n sentences with replacement, each sentence once on average: summing a one-hot column
    per sentence counts its draws; over 2,000 resamples each sentence's mean is 1 (the last included)."""
    n = 50
    counts = bootstrap_sums([np.eye(n)], 2000, seed=3)[:, 0, :]  # n_samples x n: draws of each sentence
    assert (counts.sum(axis=1) == n).all()
    assert counts.mean(axis=0) == pytest.approx(np.ones(n), abs=0.1)


def test_each_system_gets_its_own_interval(corpus: tuple[list[str], list[str]]) -> None:
    """The second system's interval is its own resamples' (every system got the first's), and lies around its BLEU."""
    sources, references = corpus
    evaluation = score_systems({"good": corrupt(references, 0.9), "poor": corrupt(references, 0.4)}, sources,
                               references, scoring_settings(bootstrap_samples=200))
    good, poor = evaluation.systems
    assert poor.ci[0] < poor.bleu < poor.ci[1] and good.ci[0] < good.bleu < good.ci[1]
    assert poor.ci[1] < good.ci[0]  # 0.4 of the words kept against 0.9: far apart


def test_paired_bootstrap_system_against_itself(corpus: tuple[list[str], list[str]]) -> None:
    sources, references = corpus
    hyps = corrupt(references, 0.6)
    evaluation = score_systems({"a": hyps, "b": list(hyps)}, sources, references,
                               scoring_settings(bootstrap_samples=200))
    (comparison,) = evaluation.comparisons
    assert (comparison.a, comparison.b, comparison.bleu_diff, comparison.p) == ("a", "b", 0.0, 1.0)
    assert all(b.bleu_diff == 0.0 and b.p == 1.0 for b in comparison.buckets)


def test_paired_bootstrap_good_against_garbled(corpus: tuple[list[str], list[str]]) -> None:
    sources, references = corpus
    good, garbled = corrupt(references, 0.8, seed=1), corrupt(references, 0.4, seed=2)
    evaluation = score_systems({"good": good, "garbled": garbled}, sources, references,
                               scoring_settings(bootstrap_samples=500))
    (comparison,) = evaluation.comparisons
    expected = evaluation.systems[1].bleu - evaluation.systems[0].bleu  # b - a
    assert comparison.bleu_diff == pytest.approx(expected, abs=1e-9)
    assert comparison.bleu_diff < -20
    assert comparison.p < 0.05
    assert all(b.p is not None and b.p < 0.05 for b in comparison.buckets)


def test_close_systems_are_not_significant(corpus: tuple[list[str], list[str]]) -> None:
    sources, references = corpus
    a, b = corrupt(references, 0.6, seed=1), corrupt(references, 0.6, seed=2)
    evaluation = score_systems({"a": a, "b": b}, sources, references,
                               scoring_settings(bootstrap_samples=500, bootstrap_seed=1))
    (comparison,) = evaluation.comparisons
    assert comparison.bleu_diff != 0.0 and comparison.p > 0.05


def test_paired_p_value_is_two_sided() -> None:
    better = np.full(99, 2.0)
    worse = np.full(99, 1.0)
    assert paired_p_value(worse, better) == pytest.approx(2 / 100)
    assert paired_p_value(better, worse) == pytest.approx(2 / 100)


def test_empty_bucket_has_no_score(corpus: tuple[list[str], list[str]]) -> None:
    sources, references = make_corpus(50, max_len=30)
    hyps = corrupt(references, 0.7)
    evaluation = score_systems({"a": hyps, "b": corrupt(references, 0.5)}, sources, references,
                               scoring_settings(bootstrap_samples=50))
    last = evaluation.systems[0].buckets[-1]
    assert (last.bucket.label, last.n, last.bleu, last.ci) == (">=60", 0, None, None)
    assert evaluation.comparisons[0].buckets[-1].bleu_diff is None
    assert evaluation.comparisons[0].buckets[-1].p is None


def test_bootstrap_resamples_both_systems_alike() -> None:
    rng = np.random.default_rng(0)
    totals = rng.integers(4, 60, size=(3000, 1)) - np.arange(4)
    stats = np.concatenate(
        [totals[:, :1], totals[:, :1] + 1, totals // 2, totals], axis=1
    ).astype(np.float64)
    samples = bootstrap_bleu([stats, stats], 1000, seed=0)
    assert samples.shape == (2, 1000)
    np.testing.assert_array_equal(samples[0], samples[1])  # paired: same resamples for both


def test_a_declared_statistic_that_bootstraps_gets_an_interval_from_bleus_resamples(
    corpus: tuple[list[str], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from nmt.evaluation import metrics, scoring

    sources, references = corpus
    hyps = corrupt(references, 0.7)
    hyp_words = scoring.BucketStatistic(  # a new statistic: hypothesis tokens, resampled
        "hyp_tokens", ("hyp tokens",), lambda stats, floor: stats[..., :1], "tokens output.", bootstraps=True)
    monkeypatch.setattr(metrics.Bleu, "extra_statistics", (*metrics.Bleu.extra_statistics, hyp_words))
    settings = scoring_settings(bootstrap_samples=200, min_bucket_sentences=45)
    system = score_systems({"s": hyps}, sources, references, settings).systems[0]
    whole = system.statistics["hyp_tokens"]
    stats = Bleu(references, "13a", False).sentence_stats(hyps)
    assert whole.values == (stats[:, 0].sum(),)
    # the interval is the percentile interval of the same resamples (seed [seed, 0]) BLEU's comes from
    drawn = scoring.bootstrap_sums([stats], 200, [settings.bootstrap_seed, 0])[:, 0, 0]  # draws: n's alone
    assert whole.intervals == (scoring.percentile_interval(drawn),)
    assert whole.intervals[0][0] < whole.values[0] < whole.intervals[0][1]
    for bucket in system.buckets:  # a bucket too small to resample gets none
        if bucket.n:
            assert (bucket.statistics["hyp_tokens"].intervals is None) == (bucket.n < 45)


def test_mismatched_lengths_are_user_errors(corpus: tuple[list[str], list[str]]) -> None:
    sources, references = corpus
    with pytest.raises(NMTError, match="299 translations for 300 references"):
        score_systems({"s": references[:-1]}, sources, references, scoring_settings())
    with pytest.raises(NMTError, match="evaluation set is empty"):
        score_systems({"s": []}, [], [], scoring_settings())


def test_the_statistics_are_sacrebleus_length_ratio_and_precisions_per_bucket(corpus: tuple[list[str], list[str]]) -> None:
    sources, references = corpus
    # drop the last word of long sentences: short outputs from 30 words on
    hyps = [" ".join(h.split()[: max(1, len(h.split()) - (5 if len(h.split()) >= 30 else 0))])
            for h in corrupt(references, 0.8)]
    evaluation = score_systems({"s": hyps}, sources, references, scoring_settings(bootstrap_samples=20))
    system = evaluation.systems[0]
    for bucket in system.buckets:
        rows = [i for i, s in enumerate(sources) if bucket.bucket.contains(len(s.split()))]
        expected = sacrebleu.corpus_bleu([hyps[i] for i in rows], [[references[i] for i in rows]])
        assert bucket.statistics["length_ratio"].values == pytest.approx([expected.sys_len / expected.ref_len])
        assert bucket.statistics["precisions"].values == pytest.approx(expected.precisions)
        assert all(value.intervals is None for value in bucket.statistics.values())  # none of them bootstraps
    ratios = [b.statistics["length_ratio"].values[0] for b in system.buckets if b.statistics]
    assert ratios[0] == pytest.approx(1.0) and ratios[-1] < 0.95  # the cut shows as brevity


def test_the_floor_scores_each_systems_translation_of_a_length_matched_wrong_source(
    corpus: tuple[list[str], list[str]],
) -> None:
    from nmt.evaluation.buckets import length_matched_pairing

    sources, references = corpus
    perfect = list(references)  # reads its source perfectly: BLEU 100, floor near 0
    evaluation = score_systems({"perfect": perfect}, sources, references,
                               scoring_settings(bootstrap_samples=20, bootstrap_seed=4))
    system = evaluation.systems[0]
    assert system.bleu == pytest.approx(100.0)
    pairing = length_matched_pairing([len(s.split()) for s in sources], 4)
    expected = sacrebleu.corpus_bleu([perfect[j] for j in pairing], [references]).score
    (floor,) = system.statistics["floor"].values
    assert floor == pytest.approx(expected) and floor < 10
    # a system that ignores its source (the same line for all) has its BLEU as its floor
    blind = ["w1 w2 w3 w4 w5"] * len(references)
    (blind_score,) = score_systems({"b": blind}, sources, references,
                                   scoring_settings(bootstrap_samples=20)).systems
    assert blind_score.statistics["floor"].values == pytest.approx([blind_score.bleu])


def test_a_bucket_under_min_bucket_sentences_has_bleu_but_no_interval_or_p(corpus: tuple[list[str], list[str]]) -> None:
    sources, references = corpus
    hyps = {"a": corrupt(references, 0.6), "b": corrupt(references, 0.8, seed=2)}
    evaluation = score_systems(hyps, sources, references,
                               scoring_settings(bootstrap_samples=50, min_bucket_sentences=45))
    sizes = [b.n for b in evaluation.systems[0].buckets]
    assert any(0 < n < 45 for n in sizes) and any(n >= 45 for n in sizes), sizes
    (comparison,) = evaluation.comparisons
    for system in evaluation.systems:
        for bucket, diff in zip(system.buckets, comparison.buckets, strict=True):
            if bucket.n == 0:
                continue
            assert bucket.bleu is not None and set(bucket.statistics) == {"floor", "length_ratio", "precisions"}
            assert (bucket.ci is None) == (bucket.n < 45) == (diff.p is None)
            assert diff.bleu_diff is not None
    assert evaluation.systems[0].ci is not None and comparison.p is not None  # 300 sentences: resampled


def test_one_sentence_is_never_resampled_whatever_min_bucket_sentences() -> None:
    """Every resample of a bucket of one sentence is that sentence: its interval has no width, and a difference of
    one word came out "p=0.002, ahead" with min_bucket_sentences 1. Two sentences are resampled."""
    references = ["a b c d e", "f g h i j k l m n o p", "q r s t u v w x y z a b"]
    sources = ["1 2 3 4 5", "1 2 3 4 5 6 7 8 9 10 11", "1 2 3 4 5 6 7 8 9 10 11 12"]
    hyps = {"a": ["a b c d x", "f g h i j k l m n o x", "q r s t u v w x y z a x"],
            "b": ["a b c d e", "f g h i j k l m n o x", "q r s t u v w x y z a b"]}
    evaluation = score_systems(hyps, sources, references,
                               scoring_settings(bootstrap_samples=50, min_bucket_sentences=1, buckets=[10]))
    (comparison,) = evaluation.comparisons
    one, two = evaluation.systems[1].buckets
    assert (one.n, one.ci, comparison.buckets[0].p) == (1, None, None) and one.bleu == pytest.approx(100.0)
    assert comparison.buckets[0].bleu_diff is not None and comparison.buckets[0].bleu_diff > 0
    assert two.n == 2 and two.ci is not None and comparison.buckets[1].p is not None


def test_the_all_row_follows_the_buckets_rule(corpus: tuple[list[str], list[str]]) -> None:
    sources, references = corpus[0][:10], corpus[1][:10]
    hyps = {"a": corrupt(references, 0.6), "b": references}
    small = score_systems(hyps, sources, references,
                          scoring_settings(bootstrap_samples=20, min_bucket_sentences=50))
    assert [s.ci for s in small.systems] == [None, None] and small.comparisons[0].p is None
    assert small.systems[0].bleu > 0 and small.comparisons[0].bleu_diff > 0
    resampled = score_systems(hyps, sources, references,
                              scoring_settings(bootstrap_samples=20, min_bucket_sentences=10))
    assert resampled.systems[0].ci is not None and resampled.comparisons[0].p is not None
