"""Does a bucket table show Bahdanau et al.'s Figure 2? The paper's claims as checks of a fixed-vector
run against an attention run trained on the same sentence lengths, each with the numbers it rests on.

1. the attention run is ahead with paired-bootstrap p < 0.05 in every bucket from 20 words;
2. the fixed-vector run's BLEU on 40+ words is at most half of its best bucket, and that bucket's 95%
   bootstrap interval lies above the 40+ figure (the ratio's own 95% interval is shown, not judged: it may
   reach above one half where the verdict is yes);
3. the attention run's BLEU on 40+ words is at least three quarters of its best bucket, the whole 95%
   bootstrap interval of that ratio: only for an attention run trained on sentences of 50 words or more
   (the paper's RNNsearch-50 is flat; its RNNsearch-30 falls);
4. the attention run keeps more of its best bucket on 40+ words than the fixed-vector run does, with
   paired-bootstrap p < 0.05 on the two ratios;
5. (`check_level`, across two training ceilings) the attention run of the lower ceiling is at least level on
   40+ words with the fixed-vector run of the higher one ("RNNsearch-30 even outperforms RNNencdec-50"): ahead
   with p < 0.05.

The Transformer's claims (Neishi & Yoshinaga 2019) are `contrast_checks` of a run expected to fall on
long sentences against one expected to hold, both trained on the same lengths: below `flat_from_ceiling`
the second keeps more of its best bucket on 40+ words (as 4); at or above it both are flat (as 3).

"BLEU on 40+ words" is corpus BLEU over all those sentences, so that no small bucket decides a check alone.
The verdicts are conservative, so that noise never reads as the effect: check 1, and check 2's fall, say yes
only beyond the bootstrap's noise (and no otherwise); checks 3-5 say no only where the bootstrap shows the contrary as
clearly as yes would need, and "cannot tell" between. A ratio's resamples
divide the 40+ set's by its best bucket's, each drawn on its own (a best bucket inside 40+ words, drawn twice,
only widens the interval); the best bucket is the highest, which favours check 2 a little, check 3 not at
all. A bucket (the best one included)
and the 40+ set speak only with `evaluation.min_bucket_sentences` sentences or more, else "cannot tell"
(check 1 leaves such a bucket out of its verdict and names it, so that the 20 verses of 60+ words, say, do not
silence the buckets that can speak);
so does every check of a system under 1 BLEU overall; what the test set cannot have (no sentence of 40+
words) is said once, under the table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from nmt.config_sections import EvaluationConfig
from nmt.errors import counted
from nmt.evaluation.buckets import sentence_lengths
from nmt.evaluation.low_bleu import too_weak
from nmt.evaluation.metrics import Bleu, bleu_from_stats
from nmt.evaluation.scoring import (
    BucketScore,
    Evaluation,
    SystemScore,
    bootstrap_bleu,
    paired_p_value,
    percentile_interval,
)
from nmt.evaluation.tables import beside, p_text

_TINY_BLEU = 1e-9


@dataclass(frozen=True)
class Check:
    """One claim about a (fixed-vector, attention) pair, whether the scores bear it out, and why."""

    claim: str
    passed: bool | None  # None: the scores cannot decide it
    evidence: str
    # what the test set itself lacks for this check (e.g. "no sentence of 40+ words"), "" if nothing
    missing: str = ""


@dataclass(frozen=True)
class Comparisons:
    """What a report knows of its systems beyond their translations: the (fixed-vector, attention) `pairs`
    of the paper's checks, the (expected to fall, expected to hold) `contrasts`, each system's training
    ceiling (`ceilings`: training.max_words; 0 or missing: none), its plot group (`groups`: (model,
    variant); none: a style per system) and a `note` on what is left unchecked."""

    pairs: Sequence[tuple[str, str]] = ()
    contrasts: Sequence[tuple[str, str]] = ()
    ceilings: Mapping[str, int] = field(default_factory=dict)
    groups: Mapping[str, tuple[str, str]] | None = None
    note: str | None = None


@dataclass(frozen=True)
class LongSentences:
    """The long sentences (`words` words or more): how many, and each system's corpus BLEU on them."""

    n: int
    bleu: dict[str, float]  # empty when n is 0
    words: int  # "long": this many words or more (evaluation.long_words)
    # each system's BLEU on the same bootstrap resamples of these sentences (n_samples); empty when n is 0
    samples: dict[str, np.ndarray] = field(default_factory=dict)


def long_sentence_bleu(
    hypotheses: Mapping[str, Sequence[str]],
    sources: Sequence[str],
    references: Sequence[str],
    settings: EvaluationConfig,
) -> LongSentences:
    """Corpus BLEU of each system on the sentences of `settings.long_words` words or more (bucketed by
    `settings.by`), with paired resamples."""
    words = settings.long_words
    rows = np.flatnonzero(np.asarray(sentence_lengths(sources, references, settings.by)) >= words)
    if rows.size == 0:
        return LongSentences(0, {}, words)
    scorer = Bleu(references, settings.tokenize, settings.lowercase)
    stats = {name: scorer.sentence_stats(lines)[rows] for name, lines in hypotheses.items()}
    samples = bootstrap_bleu(list(stats.values()), settings.bootstrap_samples, [settings.bootstrap_seed, words])
    return LongSentences(
        int(rows.size),
        {name: float(bleu_from_stats(s.sum(axis=0))) for name, s in stats.items()},
        words,
        dict(zip(stats, samples, strict=True)),
    )


def _ahead_check(evaluation: Evaluation, baseline: str, att: SystemScore) -> Check:
    limits = evaluation.settings
    min_sentences, from_words, attention = limits.min_bucket_sentences, limits.ahead_from_words, att.name
    (comparison,) = [c for c in evaluation.comparisons if {c.a, c.b} == {baseline, attention}]
    sign = 1.0 if comparison.b == attention else -1.0
    claim = f"{attention} ahead with p < {limits.significance:g} in every bucket from {counted(from_words, 'word')}"
    tested, skipped, straddling = [], [], []
    for b, score in zip(comparison.buckets, att.buckets, strict=True):
        if b.bleu_diff is None:  # an empty bucket
            continue
        if b.bucket.low < from_words:
            # a bucket of custom or data-sized cutoffs, [10,30), holds shorter sentences too: not the claim's
            if b.bucket.high is None or b.bucket.high > from_words:
                straddling.append(b.bucket.label)
        elif score.n < min_sentences or b.p is None:
            skipped.append(f"{b.bucket.label} ({score.n})")
        else:
            tested.append((b.bucket.label, sign * b.bleu_diff, b.p))
    left_out = f"; too few sentences to count: {', '.join(skipped)}" if skipped else ""
    if straddling:
        left_out += f"; left out, holding sentences under {from_words} words too: {', '.join(straddling)}"
    if not tested:
        if not skipped and not straddling:
            none = f"no sentence of {from_words}+ words"
            return Check(claim, None, none, none)
        return Check(claim, None, f"no bucket from {counted(from_words, 'word')} with {min_sentences}+ sentences{left_out}")
    return Check(
        claim,
        all(diff > 0 and p < limits.significance for _, diff, p in tested),
        ", ".join(f"{label}: {diff:+.2f} ({p_text(p, limits.significance)})" for label, diff, p in tested) + left_out,
    )


def _long_untold(claim: str, long: LongSentences, min_sentences: int) -> Check | None:
    """Why `claim` cannot be told from the long sentences (none, or too few), or None if it can."""
    if long.n == 0:
        none = f"no sentence of {long.words}+ words"
        return Check(claim, None, none, none)
    if long.n < min_sentences:
        few = f"{long.words}+ words: {counted(long.n, 'sentence')}, fewer than evaluation.min_bucket_sentences = {min_sentences}"
        return Check(claim, None, few)
    return None


@dataclass(frozen=True)
class Retention:
    """What a system keeps of its best bucket on the long sentences: BLEU on them / the best bucket's BLEU
    (`ratio`), the same on each bootstrap resample (`samples`, n_samples), and that `best` bucket."""

    ratio: float
    samples: np.ndarray
    best: BucketScore


def _retention(system: SystemScore, long: LongSentences, min_sentences: int, claim: str) -> Retention | Check:
    """What `system` keeps of its best bucket on the long sentences, or a Check of `claim` saying why it
    cannot be told."""
    untold = _long_untold(claim, long, min_sentences)
    if untold is not None:
        return untold
    speaking = [b for b in system.buckets if b.n >= min_sentences]  # min_bucket_sentences >= 1: never empty
    best = max(speaking, key=lambda b: b.bleu or 0.0, default=None)  # the best bucket that speaks
    if best is None or best.bleu is None or best.samples is None:
        return Check(claim, None, f"no bucket with {min_sentences}+ sentences")
    if best.bleu <= 0:
        return Check(claim, None, f"BLEU 0 in every bucket with {min_sentences}+ sentences")
    # a resample of the best bucket at BLEU 0 gives a huge ratio, not a division by zero
    samples = long.samples[system.name] / np.maximum(best.samples, _TINY_BLEU)
    return Retention(long.bleu[system.name] / best.bleu, samples, best)


def _ratio_check(system: SystemScore, long: LongSentences, limits: EvaluationConfig, at_most: bool) -> Check:
    limit = limits.fixed_vector_max_ratio if at_most else limits.attention_min_ratio
    words = long.words
    claim = f"{system.name} on {words}+ words {'at most' if at_most else 'at least'} {limit:g} x its best bucket"
    if at_most:
        claim += f", that bucket's 95% interval above the {words}+ figure"
    kept = _retention(system, long, limits.min_bucket_sentences, claim)
    if isinstance(kept, Check):
        return kept
    best, long_bleu = kept.best, long.bleu[system.name]
    assert best.bleu is not None and best.ci is not None
    evidence = (
        f"{long_bleu:.2f} on {words}+ ({long.n}) vs {best.bleu:.2f} [{best.ci[0]:.2f}, {best.ci[1]:.2f}] "
        f"on {best.bucket.label} ({best.n}): {beside(kept.ratio, limit, 2)}"
    )
    low, high = percentile_interval(kept.samples)
    evidence += f" [{beside(low, limit, 2)}, {beside(high, limit, 2)}]"  # the ratio's 95% interval
    if not at_most:
        return Check(claim, True if low >= limit else False if high < limit else None, evidence)
    # at most: the ratio itself, and the fall beyond the best bucket's interval (its own interval is shown)
    above = best.ci[0] > long_bleu
    if not above:
        evidence += f"; the interval reaches down to {best.ci[0]:.2f}, not above {long_bleu:.2f}"
    return Check(claim, kept.ratio <= limit and above, evidence)


def _keeps_more_check(
    base: SystemScore, att: SystemScore, long: LongSentences, limits: EvaluationConfig
) -> Check:
    claim = f"{att.name} keeps more of its best bucket on {long.words}+ words than {base.name}"
    base_kept, att_kept = (_retention(system, long, limits.min_bucket_sentences, claim) for system in (base, att))
    if isinstance(base_kept, Check):
        return base_kept
    if isinstance(att_kept, Check):
        return att_kept
    p = paired_p_value(base_kept.samples, att_kept.samples)
    evidence = (
        f"{att_kept.ratio:.2f} of {att_kept.best.bucket.label} vs {base_kept.ratio:.2f} of "
        f"{base_kept.best.bucket.label} ({p_text(p, limits.significance)})"
    )
    return Check(claim, _significant(att_kept.ratio - base_kept.ratio, p, limits.significance), evidence)


def _significant(diff: float, p: float, significance: float) -> bool | None:
    """A paired comparison's verdict: True if ahead, False if behind, with p below `significance`; else
    None (within the bootstrap's noise)."""
    return None if p >= significance else diff > 0


def check_effect(
    evaluation: Evaluation,
    long: LongSentences,
    baseline: str,
    attention: str,
    flat_expected: bool = True,
) -> list[Check]:
    """Checks 1-4 of the module docstring for runs `baseline` (no attention) and `attention` (check 3
    only if `flat_expected`), held to the evaluation's settings."""
    systems, limits = {s.name: s for s in evaluation.systems}, evaluation.settings
    base, att = systems[baseline], systems[attention]
    checks = [
        _ahead_check(evaluation, baseline, att),
        _ratio_check(base, long, limits, at_most=True),
    ]
    if flat_expected:
        checks.append(_ratio_check(att, long, limits, at_most=False))
    checks.append(_keeps_more_check(base, att, long, limits))
    return _unless_weak(checks, base, att)


def check_level(evaluation: Evaluation, long: LongSentences, baseline: str, attention: str) -> list[Check]:
    """Check 5: `attention` (trained on shorter sentences) at least level with `baseline` on 40+ words."""
    systems = {s.name: s for s in evaluation.systems}
    claim = f"{attention} at least level with {baseline} on {long.words}+ words"
    check = _long_untold(claim, long, evaluation.settings.min_bucket_sentences)
    if check is None:
        diff = long.bleu[attention] - long.bleu[baseline]
        p = paired_p_value(long.samples[baseline], long.samples[attention])
        evidence = (
            f"{long.bleu[attention]:.2f} vs {long.bleu[baseline]:.2f} on {long.words}+ ({long.n}): "
            f"{diff:+.2f} ({p_text(p, evaluation.settings.significance)})"
        )
        check = Check(claim, _significant(diff, p, evaluation.settings.significance), evidence)
    return _unless_weak([check], systems[baseline], systems[attention])


def _unless_weak(checks: list[Check], *pair: SystemScore) -> list[Check]:
    """The checks, or all "cannot tell" when a system of the pair has learned too little to show anything."""
    why = too_weak({s.name: s.bleu for s in pair})
    if not why:
        return checks
    return [Check(c.claim, None, why, c.missing) for c in checks]


def paper_checks(
    evaluation: Evaluation,
    long: LongSentences,
    pairs: Sequence[tuple[str, str]],
    ceilings: Mapping[str, int],
) -> dict[tuple[str, str], list[Check]]:
    """Every check for the (fixed-vector, attention) `pairs`: 1-4 per pair, and 5 for each pair of a lower
    training ceiling against each of a higher one. `ceilings` maps a run to training.max_words (0 or
    missing: no ceiling)."""
    def ceiling(name: str) -> float:
        return ceilings.get(name, 0) or math.inf

    flat_from = evaluation.settings.flat_from_ceiling
    checks = {(base, att): check_effect(evaluation, long, base, att, ceiling(att) >= flat_from) for base, att in pairs}
    for _, short_att in pairs:
        for long_base, long_att in pairs:
            if ceiling(short_att) < ceiling(long_att) and ceiling(short_att) < ceiling(long_base):
                checks[(long_base, short_att)] = check_level(evaluation, long, long_base, short_att)
    return checks


def contrast_checks(
    evaluation: Evaluation,
    long: LongSentences,
    contrasts: Sequence[tuple[str, str]],
    ceilings: Mapping[str, int],
) -> dict[tuple[str, str], list[Check]]:
    """The module docstring's contrast checks for each (expected to fall, expected to hold) pair of runs
    trained on the same lengths (`ceilings`: training.max_words, 0 or missing: no ceiling)."""
    systems, limits = {s.name: s for s in evaluation.systems}, evaluation.settings
    checks = {}
    for falls, holds in contrasts:
        a, b = systems[falls], systems[holds]
        if (ceilings.get(falls, 0) or math.inf) >= limits.flat_from_ceiling:
            found = [_ratio_check(b, long, limits, at_most=False), _ratio_check(a, long, limits, at_most=False)]
        else:
            found = [_keeps_more_check(a, b, long, limits)]
        checks[(falls, holds)] = _unless_weak(found, a, b)
    return checks
