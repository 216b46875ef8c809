"""Who is better, by length (`nmt score`, two or more systems): per length bucket and for all sentences,
the system with the highest BLEU and the paired bootstrap test of it against the runner-up, as report.md's
section and results.json's "leaders", then the answer for the longest sentences in words."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nmt.config_sections import EvaluationConfig
from nmt.errors import counted
from nmt.evaluation.low_bleu import CHOOSES_BY_NOISE, too_weak
from nmt.evaluation.scoring import Evaluation
from nmt.evaluation.tables import diff_cell, markdown_table, p_text

TOO_FEW = "too few sentences to test"


@dataclass(frozen=True)
class Leader:
    """The best system on one bucket (or `all`) by BLEU, and the paired bootstrap test of it against the
    runner-up: `ahead` None where the test cannot tell, `untold` then says why (too few sentences to
    resample, `p` None; or a pair too weak to show anything, low_bleu.too_weak)."""

    bucket: str
    n: int
    best: str
    runner_up: str
    bleu_diff: float  # best - runner-up
    p: float | None
    ahead: bool | None  # p < evaluation.significance
    untold: str = ""


def bucket_leaders(evaluation: Evaluation) -> list[Leader]:
    """A Leader for each non-empty bucket of the evaluation's buckets, then for all sentences; none for a
    single system. On a tie in BLEU the system given first leads."""
    leaders: list[Leader] = []
    if len(evaluation.systems) < 2:
        return leaders
    overall = {s.name: s.bleu for s in evaluation.systems}
    labels = [b.bucket.label for b in evaluation.systems[0].buckets] + ["all"]
    for k, label in enumerate(labels):
        scores = [(s.name, [*s.buckets, s][k]) for s in evaluation.systems]
        if scores[0][1].bleu is None:  # an empty bucket
            continue
        (best, score), (runner_up, second) = sorted(scores, key=lambda named: -(named[1].bleu or 0.0))[:2]
        (comparison,) = [c for c in evaluation.comparisons if {c.a, c.b} == {best, runner_up}]
        p = [*comparison.buckets, comparison][k].p
        weak = too_weak({name: overall[name] for name in (best, runner_up)})
        untold = f"cannot tell: {weak}" if weak else TOO_FEW if p is None else ""
        ahead = None if untold else p is not None and p < evaluation.settings.significance
        leaders.append(Leader(label, score.n, best, runner_up, (score.bleu or 0.0) - (second.bleu or 0.0), p, ahead,
                              untold))
    return leaders


def format_leaders(leaders: Sequence[Leader], settings: EvaluationConfig) -> str:
    """A Markdown section: per bucket, who is best and whether the paired bootstrap sets it apart from the
    runner-up; then, in words, the answer for the longest sentences."""
    def verdict(leader: Leader) -> str:
        return leader.untold or ("**ahead**" if leader.ahead else "cannot tell apart")

    rows = [[x.bucket, str(x.n), x.best, x.runner_up, diff_cell(x.bleu_diff, x.p, settings.significance), verdict(x)]
            for x in leaders]
    lines = [
        "## Who is better, by length",
        "",
        f"Per bucket, the system with the highest BLEU and the paired bootstrap test of it against the runner-up: "
        f"ahead with p < {settings.significance:g} (evaluation.significance); a bucket under "
        f"evaluation.min_bucket_sentences = {counted(settings.min_bucket_sentences, 'sentence')} is too small to test.",
        "",
        *markdown_table(["bucket", "n", "best", "runner-up", "best - runner-up (p)", "verdict"], rows, left=4),
        "",
        _longest_answer([x for x in leaders if x.bucket != "all"], settings),
    ]
    return "\n".join(lines) + "\n"


def _longest_answer(leaders: Sequence[Leader], settings: EvaluationConfig) -> str:
    """Who is better on the longest sentences, in words: the longest bucket's answer, and where it is too
    small to test, the longest bucket's that can be tested."""
    longest = leaders[-1]
    if longest.ahead is not None:
        return _answer(longest, "the longest sentences", settings.significance)
    if longest.untold != TOO_FEW:  # the pair is too weak to tell, whatever its sentences
        return (f"On the longest sentences ({longest.bucket}, {counted(longest.n, 'sentence')}) this {longest.untold}; "
                f"{CHOOSES_BY_NOISE}, whatever its p.")
    answer = (f"The longest sentences ({longest.bucket}, {counted(longest.n, 'sentence')}) are too few to test (evaluation."
              f"min_bucket_sentences = {settings.min_bucket_sentences}; --buckets auto merges small buckets with "
              f"their neighbours until each can be tested, where the sentences are enough).")
    tested = [x for x in leaders if x.ahead is not None]
    return answer + (f" {_answer(tested[-1], 'the longest bucket that can be tested', settings.significance)}"
                     if tested else "")


def _answer(leader: Leader, which: str, significance: float) -> str:
    where = f"On {which} ({leader.bucket}, {counted(leader.n, 'sentence')})"
    if leader.ahead:
        return (f"{where}, {leader.best} is better: {leader.bleu_diff:+.2f} BLEU over {leader.runner_up} "
                f"({p_text(leader.p, significance)}).")
    return (f"{where}, {leader.best} and {leader.runner_up} cannot be told apart: {leader.bleu_diff:+.2f} BLEU "
            f"({p_text(leader.p, significance)}).")
