"""The four long-sentence checks on synthetic systems whose length profile is known."""

from __future__ import annotations

import random

import sacrebleu

from nmt.evaluation.effect import check_effect, format_checks, long_sentence_bleu
from nmt.evaluation.scoring import Evaluation, score_systems


def corrupt(reference: str, keep: float, rng: random.Random) -> str:
    """The reference with each word kept with probability `keep`, otherwise replaced by 'x'."""
    return " ".join(w if rng.random() < keep else "x" for w in reference.split())


def systems(seed: int = 0) -> tuple[dict[str, list[str]], list[str], list[str]]:
    """600 sentences of 1-70 words: 'search' keeps 70% of words at every length, 'encdec' keeps 90%
    of short sentences' words and ever fewer as sentences grow (10% at 70 words)."""
    rng = random.Random(seed)
    sources = [" ".join(f"w{rng.randrange(300)}" for _ in range(rng.randint(1, 70))) for _ in range(600)]
    references = [" ".join(reversed(s.split())) for s in sources]
    search = [corrupt(r, 0.7, rng) for r in references]
    encdec = [corrupt(r, max(0.1, 0.9 - 0.8 * (len(r.split()) - 10) / 60), rng) for r in references]
    return {"encdec": encdec, "search": search}, sources, references


def test_long_sentence_bleu_is_corpus_bleu_of_the_40_plus_subset() -> None:
    hypotheses, sources, references = systems()
    long_bleu = long_sentence_bleu(hypotheses, sources, references, "source")
    rows = [i for i, s in enumerate(sources) if len(s.split()) >= 40]
    for name, lines in hypotheses.items():
        expected = sacrebleu.corpus_bleu([lines[i] for i in rows], [[references[i] for i in rows]]).score
        assert abs(long_bleu[name] - expected) < 1e-9
    assert long_bleu["search"] > 2 * long_bleu["encdec"]


def scored(hypotheses: dict[str, list[str]], sources: list[str], references: list[str]) -> tuple[Evaluation, dict[str, float]]:
    """The bucket evaluation and the 40+ BLEU of `hypotheses`, as the evaluation command computes them."""
    evaluation = score_systems(hypotheses, sources, references, bootstrap_samples=200)
    return evaluation, long_sentence_bleu(hypotheses, sources, references, "source")


def test_a_collapsing_baseline_and_a_flat_attention_run_pass_every_check() -> None:
    checks = check_effect(*scored(*systems()), baseline="encdec", attention="search")
    assert [c.passed for c in checks] == [True, True, True, True], checks
    assert "[40,50)" in checks[0].evidence and "[10,20)" not in checks[0].evidence
    assert "| yes |" in format_checks(checks, "encdec", "search")


def test_swapped_roles_fail_the_checks_they_should() -> None:
    hypotheses, sources, references = systems()
    # Calling the flat system the baseline: it neither collapses nor trails in long buckets, and the
    # differences from 30 words are significant the wrong way round, which is no support either.
    swapped = check_effect(*scored(hypotheses, sources, references), baseline="search", attention="encdec")
    assert [c.passed for c in swapped] == [False, False, False, False], swapped
    assert "[40,50): -29.10 (p=0.010)" in swapped[3].evidence  # 200 resamples: 0.010 is the smallest p
    assert "**no**" in format_checks(swapped, "search", "encdec")
    # Two identical systems: no bucket differs, so nothing is above and nothing significant.
    same = {"a": hypotheses["search"], "b": hypotheses["search"]}
    checks = check_effect(*scored(same, sources, references), "a", "b")
    assert checks[0].passed is False and checks[3].passed is False


def test_checks_without_the_sentences_they_speak_of_cannot_tell() -> None:
    hypotheses, sources, references = systems()
    short = [i for i, s in enumerate(sources) if len(s.split()) < 20]
    subset = {name: [lines[i] for i in short] for name, lines in hypotheses.items()}
    checks = check_effect(
        *scored(subset, [sources[i] for i in short], [references[i] for i in short]), "encdec", "search"
    )
    assert [c.passed for c in checks] == [None, None, None, None], checks
    assert checks[1].evidence == "no sentence of 40+ words" and checks[3].evidence == "no such bucket"
    assert "| cannot tell |" in format_checks(checks, "encdec", "search")
