"""Does a bucket table show Bahdanau et al.'s Figure 2? Three checks of a fixed-vector run against an
attention run, each with the numbers it rests on.

1. the attention run is ahead with paired-bootstrap p < 0.05 in every bucket from 20 words;
2. the fixed-vector run's BLEU on all sentences of 40+ words is at most half of its best bucket, and
   that bucket's 95% bootstrap interval lies above the 40+ figure;
3. the attention run's BLEU on 40+ words is at least three quarters of its best bucket.

The verdicts are conservative, so that noise never reads as the effect:

- a bucket speaks only with `evaluation.min_bucket_sentences` sentences or more (the "best bucket"
  included), and so does the set of 40+ words; a check left without such a bucket says "cannot tell";
- a system whose BLEU on all sentences is under 1 has learned too little to show anything: every check
  of its pair says "cannot tell";
- what the test set cannot have (no sentence of 40+ words, none of 20+) is said once, under the table.

"BLEU on 40+ words" is corpus BLEU over every sentence of 40 words or more, one number rather than
one per bucket, so that a bucket of 20 sentences cannot decide a check on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from nmt.evaluation.buckets import BucketBy, sentence_lengths
from nmt.evaluation.scoring import (
    BucketScore,
    CorpusScorer,
    Evaluation,
    SystemScore,
    Tokenize,
    bleu_from_stats,
)

AHEAD_FROM_WORDS = 20
LONG_WORDS = 40
BASELINE_MAX_RATIO = 0.5
ATTENTION_MIN_RATIO = 0.75
ALPHA = 0.05
MIN_SYSTEM_BLEU = 1.0
MIN_SENTENCES_KEY = "evaluation.min_bucket_sentences"


@dataclass(frozen=True)
class Check:
    """One claim about a (fixed-vector, attention) pair, whether the scores bear it out, and why."""

    claim: str
    passed: bool | None  # None: the scores cannot decide it
    evidence: str
    # what the test set itself lacks for this check (e.g. "no sentence of 40+ words"), "" if nothing
    missing: str = ""


@dataclass(frozen=True)
class LongSentences:
    """The sentences of LONG_WORDS words or more: how many, and each system's corpus BLEU on them."""

    n: int
    bleu: dict[str, float]  # NaN for every system when n is 0


def long_sentence_bleu(
    hypotheses: Mapping[str, Sequence[str]],
    sources: Sequence[str],
    references: Sequence[str],
    by: BucketBy,
    tokenize: Tokenize = "13a",
    lowercase: bool = False,
) -> LongSentences:
    """Corpus BLEU of each system on the sentences of LONG_WORDS words or more."""
    rows = np.flatnonzero(np.asarray(sentence_lengths(sources, references, by)) >= LONG_WORDS)
    if rows.size == 0:
        return LongSentences(0, dict.fromkeys(hypotheses, float("nan")))
    scorer = CorpusScorer(references, tokenize, lowercase)
    return LongSentences(
        int(rows.size),
        {
            name: float(bleu_from_stats(scorer.sentence_stats(lines)[rows].sum(axis=0)))
            for name, lines in hypotheses.items()
        },
    )


def _best_bucket(system: SystemScore, min_sentences: int) -> BucketScore | None:
    """The bucket of `min_sentences`+ sentences with the highest BLEU, or None if there is none."""
    speaking = [b for b in system.buckets if b.n >= min_sentences and b.bleu is not None]
    return max(speaking, key=lambda b: b.bleu or 0.0, default=None)


def _too_few(what: str, n: int, min_sentences: int) -> str:
    return f"{what}: {n} sentences, fewer than {MIN_SENTENCES_KEY} = {min_sentences}"


def _ahead_check(
    evaluation: Evaluation, baseline: str, attention: str, min_sentences: int
) -> Check:
    att = next(s for s in evaluation.systems if s.name == attention)
    (comparison,) = [c for c in evaluation.comparisons if {c.a, c.b} == {baseline, attention}]
    sign = 1.0 if comparison.b == attention else -1.0
    claim = f"{attention} ahead with p < {ALPHA:g} in every bucket from {AHEAD_FROM_WORDS} words"
    tested, skipped = [], []
    for b, score in zip(comparison.buckets, att.buckets, strict=True):
        if b.bucket.low < AHEAD_FROM_WORDS or score.n == 0 or b.p is None or b.bleu_diff is None:
            continue
        if score.n < min_sentences:
            skipped.append(f"{b.bucket.label} ({score.n})")
        else:
            tested.append((b.bucket.label, sign * b.bleu_diff, b.p))
    left_out = f"; too few sentences to count: {', '.join(skipped)}" if skipped else ""
    if not tested:
        if not skipped:
            none = f"no sentence of {AHEAD_FROM_WORDS}+ words"
            return Check(claim, None, none, none)
        return Check(
            claim, None, f"no bucket from {AHEAD_FROM_WORDS} words with {min_sentences}+ sentences{left_out}"
        )
    return Check(
        claim,
        all(diff > 0 and p < ALPHA for _, diff, p in tested),
        ", ".join(f"{label}: {diff:+.2f} (p={p:.3f})" for label, diff, p in tested) + left_out,
    )


def _ratio_check(
    system: SystemScore, long: LongSentences, min_sentences: int, at_most: bool
) -> Check:
    limit = BASELINE_MAX_RATIO if at_most else ATTENTION_MIN_RATIO
    claim = f"{system.name} on {LONG_WORDS}+ words {'at most' if at_most else 'at least'} {limit:g} x its best bucket"
    if at_most:
        claim += f", that bucket's 95% interval above the {LONG_WORDS}+ figure"
    if long.n == 0:
        none = f"no sentence of {LONG_WORDS}+ words"
        return Check(claim, None, none, none)
    if long.n < min_sentences:
        return Check(claim, None, _too_few(f"{LONG_WORDS}+ words", long.n, min_sentences))
    best = _best_bucket(system, min_sentences)
    if best is None or best.bleu is None or best.ci is None:
        return Check(claim, None, f"no bucket with {min_sentences}+ sentences")
    if best.bleu <= 0:
        return Check(claim, None, f"BLEU 0 in every bucket with {min_sentences}+ sentences")
    long_bleu = long.bleu[system.name]
    ratio = long_bleu / best.bleu
    evidence = (
        f"{long_bleu:.2f} on {LONG_WORDS}+ ({long.n}) vs {best.bleu:.2f} [{best.ci[0]:.2f}, {best.ci[1]:.2f}] "
        f"on {best.bucket.label} ({best.n}): {ratio:.2f}"
    )
    if not at_most:
        return Check(claim, ratio >= limit, evidence)
    above = best.ci[0] > long_bleu
    if not above:
        evidence += f"; the interval reaches down to {best.ci[0]:.2f}, not above {long_bleu:.2f}"
    return Check(claim, ratio <= limit and above, evidence)


def check_effect(
    evaluation: Evaluation,
    long: LongSentences,
    baseline: str,
    attention: str,
    min_sentences: int = 50,
) -> list[Check]:
    """The three checks of the module docstring for runs `baseline` (no attention) and `attention`;
    only buckets (and a 40+ set) of `min_sentences` sentences or more speak."""
    systems = {s.name: s for s in evaluation.systems}
    base, att = systems[baseline], systems[attention]
    checks = [
        _ahead_check(evaluation, baseline, attention, min_sentences),
        _ratio_check(base, long, min_sentences, at_most=True),
        _ratio_check(att, long, min_sentences, at_most=False),
    ]
    weak = [s for s in (base, att) if s.bleu < MIN_SYSTEM_BLEU]
    if weak:
        why = ", ".join(f"{s.name} scores {s.bleu:.2f} BLEU on all sentences" for s in weak)
        why += f" (under {MIN_SYSTEM_BLEU:g}: too weak for its buckets to show anything)"
        checks = [Check(c.claim, None, why, c.missing) for c in checks]
    return checks


def checks_dict(checks: Sequence[Check]) -> list[dict[str, Any]]:
    """The checks as JSON-ready dicts (claim, passed, evidence, missing)."""
    return [asdict(check) for check in checks]


def format_checks(checks: Sequence[Check], baseline: str, attention: str) -> str:
    """A Markdown section: one row per check with its verdict and numbers, then one line naming what
    the test set lacks for the checks it cannot have."""
    lines = [
        f"## Does the table show the effect? ({baseline} vs {attention})",
        "",
        "| check | holds | numbers |",
        "|---|---|---|",
    ]
    verdicts = {True: "yes", False: "**no**", None: "cannot tell"}
    lines += [f"| {c.claim} | {verdicts[c.passed]} | {c.evidence} |" for c in checks]
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
