"""Does a bucket table show Bahdanau et al.'s Figure 2? Four checks of a fixed-vector run against an
attention run, each with the numbers it rests on.

1. the attention run scores above the fixed-vector run in every bucket from 20 words up;
2. the fixed-vector run's BLEU on all sentences of 40+ words is at most half of its best bucket;
3. the attention run's BLEU on 40+ words is at least three quarters of its best bucket;
4. the attention run is above the fixed-vector run with paired-bootstrap p < 0.05 in every bucket from
   30 words up that holds 50+ sentences.

"BLEU on 40+ words" is corpus BLEU over every sentence of 40 words or more, one number rather than
one per bucket, so that a bucket of 20 sentences cannot decide a check on its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from nmt.evaluation.buckets import BucketBy, sentence_lengths
from nmt.evaluation.scoring import CorpusScorer, Evaluation, SystemScore, Tokenize, bleu_from_stats

ABOVE_FROM_WORDS = 20
LONG_WORDS = 40
BASELINE_MAX_RATIO = 0.5
ATTENTION_MIN_RATIO = 0.75
SIGNIFICANT_FROM_WORDS = 30
SIGNIFICANT_MIN_SENTENCES = 50
ALPHA = 0.05


@dataclass(frozen=True)
class Check:
    """One claim about a (fixed-vector, attention) pair, whether the scores bear it out, and why."""

    claim: str
    passed: bool | None  # None: the scores cannot decide it (no bucket or sentence it speaks of)
    evidence: str


def long_sentence_bleu(
    hypotheses: Mapping[str, Sequence[str]],
    sources: Sequence[str],
    references: Sequence[str],
    by: BucketBy,
    tokenize: Tokenize = "13a",
    lowercase: bool = False,
) -> dict[str, float]:
    """Corpus BLEU of each system on the sentences of LONG_WORDS words or more (NaN if there are none)."""
    rows = np.flatnonzero(np.asarray(sentence_lengths(sources, references, by)) >= LONG_WORDS)
    if rows.size == 0:
        return dict.fromkeys(hypotheses, float("nan"))
    scorer = CorpusScorer(references, tokenize, lowercase)
    return {
        name: float(bleu_from_stats(scorer.sentence_stats(lines)[rows].sum(axis=0)))
        for name, lines in hypotheses.items()
    }


def _best_bucket(system: SystemScore) -> tuple[float, str]:
    return max((b.bleu, b.bucket.label) for b in system.buckets if b.bleu is not None)


def check_effect(
    evaluation: Evaluation, long_bleu: Mapping[str, float], baseline: str, attention: str
) -> list[Check]:
    """The four checks of the module docstring for runs `baseline` (no attention) and `attention`."""
    systems = {s.name: s for s in evaluation.systems}
    base, att = systems[baseline], systems[attention]
    (comparison,) = [c for c in evaluation.comparisons if {c.a, c.b} == {baseline, attention}]
    sign = 1.0 if comparison.b == attention else -1.0

    long_pairs = [
        (a.bucket.label, a.bleu - b.bleu)
        for a, b in zip(att.buckets, base.buckets, strict=True)
        if a.bucket.low >= ABOVE_FROM_WORDS and a.bleu is not None and b.bleu is not None
    ]
    checks = [
        Check(
            f"{attention} above {baseline} in every bucket from {ABOVE_FROM_WORDS} words",
            all(diff > 0 for _, diff in long_pairs) if long_pairs else None,
            ", ".join(f"{label}: {diff:+.2f}" for label, diff in long_pairs) or "no such bucket",
        )
    ]
    for name, system, limit, at_most in (
        (baseline, base, BASELINE_MAX_RATIO, True),
        (attention, att, ATTENTION_MIN_RATIO, False),
    ):
        best, label = _best_bucket(system)
        claim = f"{name} on {LONG_WORDS}+ words {'at most' if at_most else 'at least'} {limit:g} x its best bucket"
        if math.isnan(long_bleu[name]) or best <= 0:
            why = f"no sentence of {LONG_WORDS}+ words" if math.isnan(long_bleu[name]) else "BLEU 0 in every bucket"
            checks.append(Check(claim, None, why))
            continue
        ratio = long_bleu[name] / best
        checks.append(
            Check(
                claim,
                ratio <= limit if at_most else ratio >= limit,
                f"{long_bleu[name]:.2f} on {LONG_WORDS}+ vs {best:.2f} on {label}: {ratio:.2f}",
            )
        )
    tested = [
        (b.bucket.label, b.p, sign * b.bleu_diff)
        for b, score in zip(comparison.buckets, att.buckets, strict=True)
        if b.bucket.low >= SIGNIFICANT_FROM_WORDS
        and score.n >= SIGNIFICANT_MIN_SENTENCES
        and b.p is not None
        and b.bleu_diff is not None
    ]
    checks.append(
        Check(
            f"{attention} above with p < {ALPHA:g} in every bucket from {SIGNIFICANT_FROM_WORDS} words with "
            f"{SIGNIFICANT_MIN_SENTENCES}+ sentences",
            all(p < ALPHA and diff > 0 for _, p, diff in tested) if tested else None,
            ", ".join(f"{label}: {diff:+.2f} (p={p:.3f})" for label, p, diff in tested) or "no such bucket",
        )
    )
    return checks


def checks_dict(checks: Sequence[Check]) -> list[dict[str, Any]]:
    """The checks as JSON-ready dicts (claim, passed, evidence)."""
    return [asdict(check) for check in checks]


def format_checks(checks: Sequence[Check], baseline: str, attention: str) -> str:
    """A Markdown section: one row per check with its verdict and numbers."""
    lines = [
        f"## Does the table show the effect? ({baseline} vs {attention})",
        "",
        "| check | holds | numbers |",
        "|---|---|---|",
    ]
    verdicts = {True: "yes", False: "**no**", None: "cannot tell"}
    lines += [f"| {c.claim} | {verdicts[c.passed]} | {c.evidence} |" for c in checks]
    return "\n".join(lines) + "\n"
