"""The long-sentence checks on synthetic systems whose length profile is known."""

from __future__ import annotations

import dataclasses
import functools
import random
import re
from typing import Any

import numpy as np
import pytest
import sacrebleu

from nmt.config import EvaluationConfig, config_from_dict
from nmt.errors import NMTError
from nmt.evaluation.effect import (
    LongSentences,
    check_effect,
    check_level,
    contrast_checks,
    long_sentence_bleu,
    paper_checks,
)
from nmt.evaluation.report import format_checks
from nmt.evaluation.scoring import (
    BucketComparison,
    BucketScore,
    Comparison,
    Evaluation,
    MetricDiff,
    MetricScore,
    SystemScore,
    score_systems,
)
from nmt.lengths import make_buckets


def corrupt(reference: str, keep: float, rng: random.Random) -> str:
    """The reference with each word kept with probability `keep`, otherwise replaced by 'x'."""
    return " ".join(w if rng.random() < keep else "x" for w in reference.split())


def systems(seed: int = 0) -> tuple[dict[str, list[str]], list[str], list[str]]:
    """600 sentences of 1-70 words (every bucket holds 70+): 'search' keeps 70% of words at every
    length, 'encdec' keeps 90% of short sentences' words and ever fewer as sentences grow (70% at 17 words, 10% from 55)."""
    rng = random.Random(seed)
    sources = [" ".join(f"w{rng.randrange(300)}" for _ in range(rng.randint(1, 70))) for _ in range(600)]
    references = [" ".join(reversed(s.split())) for s in sources]
    search = [corrupt(r, 0.7, rng) for r in references]
    encdec = [corrupt(r, max(0.1, 0.9 - 0.8 * (len(r.split()) - 5) / 50), rng) for r in references]
    return {"encdec": encdec, "search": search}, sources, references


def test_long_sentence_bleu_is_corpus_bleu_of_the_40_plus_subset() -> None:
    hypotheses, sources, references = systems()
    long = long_sentence_bleu(hypotheses, sources, references, EvaluationConfig())
    rows = [i for i, s in enumerate(sources) if len(s.split()) >= 40]
    assert long.n == len(rows)
    for name, lines in hypotheses.items():
        expected = sacrebleu.corpus_bleu([lines[i] for i in rows], [[references[i] for i in rows]]).score
        assert abs(long.bleu[name] - expected) < 1e-9
    assert long.bleu["search"] > 2 * long.bleu["encdec"]


def test_long_sentences_by_reference_length_are_those_whose_reference_has_40_plus_words() -> None:
    """evaluation.by: reference counts the reference's words: here each reference is its source with two words
    more, so 38- and 39-word sources count as long by reference and not by source."""
    hypotheses, sources, references = systems()
    longer = [f"{r} x y" for r in references]
    by_reference = long_sentence_bleu(hypotheses, sources, longer, EvaluationConfig(by="reference"))
    rows = [i for i, r in enumerate(longer) if len(r.split()) >= 40]
    assert by_reference.n == len(rows) > long_sentence_bleu(hypotheses, sources, longer, EvaluationConfig()).n
    expected = sacrebleu.corpus_bleu([hypotheses["search"][i] for i in rows], [[longer[i] for i in rows]]).score
    assert by_reference.bleu["search"] == pytest.approx(expected, abs=1e-9)


def scored(
    hypotheses: dict[str, list[str]], sources: list[str], references: list[str], **settings: Any
) -> tuple[Evaluation, LongSentences]:
    """The bucket evaluation (200 resamples) and the 40+ BLEU of `hypotheses`, as the evaluation command
    computes them, with the evaluation `settings` given."""
    config = EvaluationConfig(bootstrap_samples=200, **settings)
    return score_systems(hypotheses, sources, references, config), long_sentence_bleu(hypotheses, sources, references, config)


def held_to(evaluation: Evaluation, **limits: Any) -> Evaluation:
    """`evaluation` with the checks' evaluation settings changed as `limits` say (the scores kept)."""
    return dataclasses.replace(evaluation, settings=dataclasses.replace(evaluation.settings, **limits))


@functools.cache
def scored_systems() -> tuple[Evaluation, LongSentences]:
    """`scored(*systems())`, computed once for the tests that only read it (its bootstraps take seconds)."""
    return scored(*systems())


def test_a_collapsing_baseline_and_a_flat_attention_run_pass_every_check() -> None:
    checks = check_effect(*scored_systems(), baseline="encdec", attention="search")
    assert [c.passed for c in checks] == [True, True, True, True], checks
    assert "[20,30)" in checks[0].evidence and "[10,20)" not in checks[0].evidence
    assert "(p=0.010)" in checks[0].evidence  # 200 resamples: 0.010 is the smallest p
    assert "| yes |" in format_checks(checks, "encdec", "search")
    assert "cannot show" not in format_checks(checks, "encdec", "search")


def test_swapped_roles_fail_the_checks_they_should() -> None:
    hypotheses, sources, references = systems()
    # Calling the flat system the baseline: it neither collapses nor trails in long buckets, and the
    # differences from 20 words are significant the wrong way round, which is no support either.
    swapped = check_effect(*scored_systems(), baseline="search", attention="encdec")
    assert [c.passed for c in swapped] == [False, False, False, False], swapped
    assert "**no**" in format_checks(swapped, "search", "encdec")
    # Two identical systems: no bucket differs, so nothing is ahead.
    same = {"a": hypotheses["search"], "b": hypotheses["search"]}
    assert check_effect(*scored(same, sources, references), "a", "b")[0].passed is False


def test_ahead_needs_significance_not_a_bare_difference() -> None:
    hypotheses, sources, references = systems()
    rng = random.Random(5)
    # 'b' is the reference on 3% of the sentences: positive differences, far from p < 0.05
    nudged = [line if rng.random() < 0.97 else ref for line, ref in zip(hypotheses["search"], references, strict=True)]
    evaluation, long = scored({"a": hypotheses["search"], "b": nudged}, sources, references)
    (comparison,) = evaluation.comparisons
    from_20 = [b for b in comparison.buckets if b.bucket.low >= 20]
    assert all(b.bleu_diff is not None and b.bleu_diff > 0 for b in from_20)
    assert any(b.p is not None and b.p >= 0.05 for b in from_20)
    assert check_effect(evaluation, long, "a", "b")[0].passed is False


def test_a_bucket_across_the_ahead_length_is_named_as_left_out() -> None:
    # cutoffs of one's own (or nmt score's --buckets auto): [10,30) holds verses of 10-19 words, not the claim's
    merged = check_effect(*scored(*systems(), buckets=[10, 30, 40]), baseline="encdec", attention="search")[0]
    assert merged.passed is True, merged
    assert merged.evidence.startswith("[30,40): ") and "[10,30):" not in merged.evidence
    assert merged.evidence.endswith("; left out, holding sentences under 20 words too: [10,30)")
    (whole,) = [c for c in check_effect(*scored(*systems(), buckets=[10]), "encdec", "search") if "ahead" in c.claim]
    assert whole.passed is None and "left out, holding sentences under 20 words too: >=10" in whole.evidence


def test_buckets_with_too_few_sentences_do_not_speak() -> None:
    hypotheses, sources, references = systems()
    # Three short sentences the baseline translates perfectly: a bucket of 3 must not be its "best".
    sources = ["a b c", "d e", "f g h i"] + [s for s in sources if len(s.split()) >= 10]
    references = [" ".join(reversed(s.split())) for s in sources]
    n_short = 3
    keep = [i for i, s in enumerate(systems()[1]) if len(s.split()) >= 10]
    encdec = references[:n_short] + [hypotheses["encdec"][i] for i in keep]
    search = ["x"] * n_short + [hypotheses["search"][i] for i in keep]
    evaluation, long = scored({"encdec": encdec, "search": search}, sources, references)
    assert evaluation.systems[0].buckets[0].n == 3
    assert evaluation.systems[0].buckets[0].bleu == pytest.approx(100.0)
    checks = check_effect(evaluation, long, "encdec", "search")
    assert [c.passed for c in checks] == [True, True, True, True], checks
    assert "on <10" not in checks[1].evidence and "on [10,20)" in checks[1].evidence
    # were every bucket to speak, the 3 sentences would be the baseline's best bucket
    every = scored({"encdec": encdec, "search": search}, sources, references, min_bucket_sentences=1)
    assert "on <10 (3)" in check_effect(*every, "encdec", "search")[1].evidence
    # With a threshold above every bucket's size, no bucket speaks: nothing can be told.
    largest = max(b.n for b in evaluation.systems[0].buckets)
    strict = check_effect(held_to(evaluation, min_bucket_sentences=largest + 1), long, "encdec", "search")
    assert [c.passed for c in strict] == [None, None, None, None], strict
    assert "too few sentences to count: [20,30)" in strict[0].evidence
    assert strict[1].evidence == f"no bucket with {largest + 1}+ sentences"


def hand_made(base_buckets: list[tuple[int, float, tuple[float, float]]], base_bleu: float = 10.0) -> Evaluation:
    """An Evaluation with a baseline of the given (n, BLEU, CI) per bucket (cutoffs 10..60; 200 resamples
    spread evenly over the CI) and an attention run 10 BLEU above it with p = 0.001 everywhere."""
    buckets = make_buckets([10, 20, 30, 40, 50, 60])

    def system(name: str, rows: list[tuple[int, float, tuple[float, float]]], bleu: float) -> SystemScore:
        scores = [BucketScore(b, n, {"bleu": MetricScore(x, ci, samples=np.linspace(*ci, 200))})
                  for b, (n, x, ci) in zip(buckets, rows, strict=True)]
        whole = {"bleu": MetricScore(bleu, (bleu - 1, bleu + 1)), "chrf": MetricScore(30.0, None)}
        return SystemScore(name, sum(n for n, _, _ in rows), scores, whole, {"bleu": "sig", "chrf": "sig"})

    att_rows = [(n, x + 10, (lo + 10, hi + 10)) for n, x, (lo, hi) in base_buckets]
    ahead = {"bleu": MetricDiff(10.0, 0.001)}
    comparison = Comparison("base", "att", [BucketComparison(b, ahead) for b in buckets], ahead)
    return Evaluation(
        [system("base", base_buckets, base_bleu), system("att", att_rows, base_bleu + 10)],
        [comparison],
        EvaluationConfig(),
    )


def steady_long(n: int, bleu: dict[str, float]) -> LongSentences:
    """n sentences of 40+ words on which each system scores `bleu` on every one of 200 resamples."""
    return LongSentences(n, bleu, 40, {name: np.full(200, value) for name, value in bleu.items()})


def test_the_fixed_vector_fall_must_lie_beyond_the_best_buckets_interval() -> None:
    rows = [(60, 12.0, (10.0, 14.0))] + [(100, 8.0, (7.0, 9.0))] * 3 + [(60, 5.0, (3.0, 7.0))] * 3
    long = steady_long(180, {"base": 5.5, "att": 15.5})
    at_most_half = check_effect(hand_made(rows), long, "base", "att")[1]
    # the ratio and its 95% interval shown; the verdict on the ratio itself and the fall beyond the best's interval
    assert at_most_half.passed is True and at_most_half.evidence.endswith(": 0.46 [0.40, 0.54]")
    # The same ratio (5.5 / 12 = 0.46) with a best bucket whose interval reaches down to 5: noise.
    rows[0] = (60, 12.0, (5.0, 19.0))
    check = check_effect(hand_made(rows), long, "base", "att")[1]
    assert check.passed is False and "reaches down to 5.00" in check.evidence
    # 40+ words held by 12 sentences: neither ratio check may speak
    few = check_effect(hand_made(rows), LongSentences(12, long.bleu, 40), "base", "att")
    assert [c.passed for c in few] == [True, None, None, None]
    assert few[1].evidence == "40+ words: 12 sentences, fewer than evaluation.min_bucket_sentences = 50"
    one = check_effect(hand_made(rows), LongSentences(1, long.bleu, 40), "base", "att")
    assert one[1].evidence == "40+ words: 1 sentence, fewer than evaluation.min_bucket_sentences = 50"


def test_a_system_under_1_bleu_makes_every_check_cannot_tell() -> None:
    rows = [(60, 0.9, (0.1, 1.6))] + [(100, 0.2, (0.0, 0.4))] * 3 + [(60, 0.1, (0.0, 0.3))] * 3
    long = steady_long(180, {"base": 0.1, "att": 10.1})
    checks = check_effect(hand_made(rows, base_bleu=0.28), long, "base", "att")
    assert [c.passed for c in checks] == [None, None, None, None], checks
    assert all("base scores 0.28 BLEU on all sentences (under 1" in c.evidence for c in checks)


def test_checks_without_the_sentences_they_speak_of_cannot_tell_and_say_so_once() -> None:
    hypotheses, sources, references = systems()
    short = [i for i, s in enumerate(sources) if len(s.split()) < 20]
    subset = {name: [lines[i] for i in short] for name, lines in hypotheses.items()}
    checks = check_effect(
        *scored(subset, [sources[i] for i in short], [references[i] for i in short]), "encdec", "search"
    )
    assert [c.passed for c in checks] == [None, None, None, None], checks
    assert checks[0].evidence == "no sentence of 20+ words" and checks[1].evidence == "no sentence of 40+ words"
    text = format_checks(checks, "encdec", "search")
    assert "| cannot tell |" in text
    assert text.count("This test set cannot show all of it") == 1
    assert "no sentence of 20+ words (check 1); no sentence of 40+ words (checks 2, 3, 4)." in text


def test_the_flat_check_is_left_out_for_an_attention_run_trained_on_short_sentences() -> None:
    evaluation, long = scored_systems()
    checks = check_effect(evaluation, long, "encdec", "search", flat_expected=False)
    assert [c.claim.split(" on ")[0] for c in checks[1:]] == ["encdec", "search keeps more of its best bucket"]
    # a flat baseline keeps about as much as the attention run: within the bootstrap's noise, not a "no"
    same_shape = {"encdec": evaluation_lines(0.5), "search": evaluation_lines(0.7)}
    flat = check_effect(*scored(same_shape, *systems()[1:]), "encdec", "search")
    said_p = re.search(r"\(p=([0-9.]+)\)$", flat[3].evidence)
    assert flat[3].passed is None and said_p and float(said_p.group(1)) > 0.05, flat[3]  # the default significance


def evaluation_lines(keep: float, seed: int = 3) -> list[str]:
    """The references of `systems()` with each word kept with probability `keep` at every length."""
    rng = random.Random(seed)
    return [corrupt(r, keep, rng) for r in systems()[2]]


def test_level_check_reads_the_paired_bootstrap_on_40_plus_words() -> None:
    evaluation, long = scored_systems()
    (level,) = check_level(evaluation, long, baseline="encdec", attention="search")
    assert level.passed is True and "(p=0.010)" in level.evidence, level  # 200 resamples: the smallest p
    assert f"{long.bleu['search']:.2f} vs {long.bleu['encdec']:.2f}" in level.evidence
    (reverse,) = check_level(evaluation, long, baseline="search", attention="encdec")
    assert reverse.passed is False


def test_two_systems_alike_on_long_sentences_are_neither_level_nor_behind_but_cannot_tell() -> None:
    alike = {"e50": evaluation_lines(0.6, seed=3), "s30": evaluation_lines(0.6, seed=4)}
    evaluation, long = scored(alike, *systems()[1:])
    assert long.bleu["e50"] != long.bleu["s30"]
    for baseline, attention in (("e50", "s30"), ("s30", "e50")):
        (level,) = check_level(evaluation, long, baseline, attention)
        assert level.passed is None, level


def test_the_flat_check_needs_the_whole_interval_of_the_ratio_on_one_side() -> None:
    long = steady_long(180, {"base": 5.5, "att": 15.5})
    tail = [(100, 8.0, (7.0, 9.0))] * 3 + [(60, 5.0, (3.0, 7.0))] * 3

    def flat_check(best: tuple[float, tuple[float, float]]) -> Any:
        (x, (low, high)) = best  # the baseline's best bucket; the attention run's is 10 BLEU above
        return check_effect(hand_made([(60, x, (low, high))] + tail), long, "base", "att")[2]

    wide = flat_check((12.0, (6.0, 18.0)))  # 15.5 / 22 = 0.70; resamples from 15.5 / 28 to 15.5 / 16
    assert wide.passed is None and wide.evidence.endswith(": 0.70 [0.56, 0.95]"), wide
    assert flat_check((12.0, (11.0, 13.0))).passed is False  # 0.67 to 0.74: below 0.75 throughout
    assert flat_check((9.0, (8.5, 9.5))).passed is True  # 0.79 to 0.84


def test_paper_checks_pair_each_ceiling_and_cross_the_ceilings() -> None:
    hypotheses, sources, references = systems()
    four = {"e30": hypotheses["encdec"], "s30": hypotheses["search"],
            "e50": hypotheses["encdec"], "s50": hypotheses["search"]}
    settings = EvaluationConfig(bootstrap_samples=200)
    evaluation = score_systems(four, sources, references, settings)
    long = long_sentence_bleu(four, sources, references, settings)
    ceilings = {"e30": 30, "s30": 30, "e50": 50, "s50": 50}
    checks = paper_checks(evaluation, long, [("e30", "s30"), ("e50", "s50")], ceilings)
    assert list(checks) == [("e30", "s30"), ("e50", "s50"), ("e50", "s30")]
    assert len(checks[("e30", "s30")]) == 3 and len(checks[("e50", "s50")]) == 4  # no flat check at -30
    assert [c.claim for c in checks[("e50", "s30")]] == ["s30 at least level with e50 on 40+ words"]
    # without ceilings every attention run is expected flat and no pair is crossed
    assert list(paper_checks(evaluation, long, [("e30", "s30"), ("e50", "s50")], {})) == [("e30", "s30"), ("e50", "s50")]


def test_min_bucket_sentences_is_a_validated_key() -> None:
    assert config_from_dict({"evaluation": {"min_bucket_sentences": 20}}).evaluation.min_bucket_sentences == 20
    with pytest.raises(NMTError, match="evaluation.min_bucket_sentences"):
        config_from_dict({"evaluation": {"min_bucket_sentences": 0}})
    # it only changes how runs are scored: a finished run is re-scored, never refused or retrained
    from nmt.rundir.checks import learning_differences

    changed = config_from_dict({"evaluation": {"min_bucket_sentences": 20}})
    assert learning_differences(config_from_dict({}), changed) == []


def test_the_thresholds_are_evaluation_settings() -> None:
    hypotheses, sources, references = systems()
    evaluation = scored_systems()[0]
    long = long_sentence_bleu(hypotheses, sources, references, EvaluationConfig(long_words=30, bootstrap_samples=200))
    assert long.n == sum(len(s.split()) >= 30 for s in sources)
    checks = check_effect(evaluation, long, "encdec", "search")
    assert checks[1].passed is True and "on 30+ words" in checks[1].claim
    strict = check_effect(held_to(evaluation, fixed_vector_max_ratio=0.01), long, "encdec", "search")
    assert strict[1].passed is False and "at most 0.01 x" in strict[1].claim
    assert check_effect(held_to(evaluation, ahead_from_words=1), long, "encdec", "search")[0].claim.endswith(
        "in every bucket from 1 word")  # one word, singular as every count of one
    with pytest.raises(NMTError, match="evaluation.significance"):
        config_from_dict({"evaluation": {"significance": 1.5}})


def test_contrasts_below_the_flat_ceiling_ask_who_keeps_more_and_at_it_both_flat() -> None:
    evaluation, long = scored_systems()
    ceilings = {"encdec": 30, "search": 30}
    (checks,) = contrast_checks(evaluation, long, [("encdec", "search")], ceilings).values()
    assert [c.claim for c in checks] == ["search keeps more of its best bucket on 40+ words than encdec"]
    assert [c.passed for c in checks] == [True]
    reverse = contrast_checks(evaluation, long, [("search", "encdec")], ceilings)[("search", "encdec")]
    assert [c.passed for c in reverse] == [False]
    flat = contrast_checks(evaluation, long, [("encdec", "search")], {"encdec": 50, "search": 50})
    claims = [(c.claim.split()[0], c.passed) for c in flat[("encdec", "search")]]
    assert claims == [("search", True), ("encdec", False)]
