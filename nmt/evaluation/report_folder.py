"""The one scoring and report path of `nmt evaluate` and `nmt score`: score the systems' translations
together, write the report folder (its text files, results.json, report.md, the plot), print its gist, and
remove what an earlier report in the folder wrote and this one does not.

`nmt evaluate` translates a test set with each run first (nmt/compare/evaluate.py); `nmt score` takes
translations from files, whatever system made them (nmt/evaluation/score_files.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nmt.config import EvaluationConfig
from nmt.errors import NMTError
from nmt.evaluation.effect import Check, Comparisons, contrast_checks, long_sentence_bleu, paper_checks
from nmt.evaluation.leaders import Leader, bucket_leaders, format_leaders
from nmt.evaluation.report import (
    PLOT_PNG,
    REPORT_MD,
    RESULTS_JSON,
    format_checks,
    format_examples,
    format_table,
    report_contents,
)
from nmt.evaluation.scoring import Evaluation, score_systems, warn_if_tokenized
from nmt.evaluation.testset import TestSet
from nmt.fileio import (
    atomic_write_files,
    errors_naming,
    folder_locked,
    interrupts_deferred,
    same_file,
    sha256_file,
)

# The file `nmt experiment` writes first in its folder (nmt/compare/experiment.py), beside its report
EXPERIMENT_TIMINGS = "timings.json"


def refuse_experiment_folder(out: Path, command: str, replaced: str = "report.md and results.json") -> None:
    """The report commands write into --out: never into an experiment's folder, whose files of the same names
    (`replaced`: its report.md and results.json, with its training, timings and checks; its learning curve; its
    attention checks) the experiment wrote from all of its runs, and its report shows."""
    if (out / EXPERIMENT_TIMINGS).is_file():
        raise NMTError(
            f"--out {out} is an experiment's folder ({EXPERIMENT_TIMINGS}): {command}'s report would replace the "
            f"experiment's {replaced}. Nothing was written.",
            f"Give --out a folder of its own (e.g. {out / 'evaluation'}); `nmt experiment` writes its own report anew.",
        )


def refuse_foreign_files(out: Path, names: Iterable[str], command: str) -> None:
    """NMTError before any work where `out` holds a file of one of `names` (what the report writes there) that
    no nmt report wrote: a folder of the user's own, whose ref.txt or report.md the report would replace.
    The files of the report there before (results.json's settings.files) are the report's to replace."""
    earlier = _earlier_report_files(out)
    # an nmt report from before settings.files was kept lists its translations only
    owned = set(earlier) | (set(report_files([], sources=True)) if earlier else set())
    foreign = [name for name in names if name not in owned and (out / name).exists()]
    if foreign:
        them = "it" if len(foreign) == 1 else "them"
        raise NMTError(
            f"--out {out} holds {', '.join(foreign)}, which no nmt report wrote there: {command}'s report would "
            f"replace {them}. Nothing was written.",
            f"Give --out a folder of its own (a new or an empty one), or move {them} out of {out}.",
        )


def score_and_report(
    hypotheses: dict[str, list[str]],
    test_set: TestSet,
    settings: EvaluationConfig,
    out: Path,
    scored: Sequence[str],
    systems: dict[str, dict[str, Any]],
    comparisons: Comparisons | None = None,
    bucketing: str = "",
    leaders: bool = False,
    inputs: Sequence[Path] = (),
) -> dict[str, Any]:
    """Score the systems' translations together, write the report and print it.

    `scored` says what was scored (one line each, for report.md); `systems` goes into results.json's
    settings.runs; `comparisons` says which systems the effect checks compare (nmt/evaluation/effect.py)
    and how the plot groups them (nmt/evaluation/report.py; titled with the test set); `bucketing` says how
    the buckets were sized from the data (`nmt score --buckets auto`; results.json's settings.buckets_sized);
    `leaders` adds who is better per bucket, for two or more systems (nmt/evaluation/leaders.py). The files
    of `out` that an earlier report there wrote and this one does not (results.json's settings.files) are
    removed (`_remove_stale`) where they are as that report wrote them (settings.text_sha256), never one of
    `inputs`, the files the report was made from.
    """
    warn_if_tokenized(hypotheses, settings.tokenize)  # once per command, however many resamples are scored
    sources = test_set.sources if test_set.sources is not None else test_set.references
    evaluation = score_systems(hypotheses, sources, test_set.references, settings)
    effect: dict[tuple[str, str], list[Check]] = {}
    comparisons = comparisons or Comparisons()
    pairs, contrasts, ceilings = comparisons.pairs, comparisons.contrasts, comparisons.ceilings
    if pairs or contrasts:  # the paper's checks for each (fixed-vector, attention) pair, and the contrasts
        long = long_sentence_bleu(hypotheses, sources, test_set.references, settings)
        effect = paper_checks(evaluation, long, pairs, ceilings)
        effect |= contrast_checks(evaluation, long, contrasts, ceilings)
    examples = format_examples(evaluation, hypotheses, test_set.sources, test_set.references)
    files = report_files(hypotheses, sources=test_set.sources is not None)
    texts = _report_texts(test_set, hypotheses)
    extra = {
        "test_set": test_set.describe(), "runs": systems, **({"buckets_sized": bucketing} if bucketing else {}),
        "files": files, "text_sha256": {name: hashlib.sha256(data).hexdigest() for name, data in texts.items()},
    }
    ranked = bucket_leaders(evaluation) if leaders else []
    with errors_naming(out):
        out.mkdir(parents=True, exist_ok=True)
    # one report at a time in `out`: two written together left one's translations beside the other's list
    with folder_locked(out, f"waiting for another report to be written into {out} ..."):
        earlier = _earlier_report_files(out)  # before results.json is replaced
        # every file of the report, all or none (a full disk leaves the earlier report whole), then the removal of
        # the earlier report's others, together: Ctrl-C in between would leave files that no report's list names,
        # which no later report would remove
        results, contents = report_contents(evaluation, extra, effect, scored, examples, comparisons.groups,
                                            test_set.describe(), bucketing, ranked)
        with interrupts_deferred():
            atomic_write_files(out, {**contents, **texts})
            _remove_stale(out, earlier, files, inputs)
    _print_summary(evaluation, settings, bucketing, ranked, effect, comparisons.note)
    print(f"\nreport written to {out}/")
    return results


def _print_summary(
    evaluation: Evaluation, settings: EvaluationConfig, bucketing: str, ranked: Sequence[Leader],
    effect: Mapping[tuple[str, str], list[Check]], note: str | None,
) -> None:
    """The report's gist on stdout, as plain text: how the buckets were sized, the BLEU table, who is better
    per bucket, the effect checks and the `note`."""
    if bucketing:
        print(bucketing[0].upper() + bucketing[1:] + ".\n")
    print(format_table(evaluation))
    if ranked:
        print("\n" + format_leaders(ranked, settings).replace("**", ""), end="")
    for (baseline, attention), checks in effect.items():
        print("\n" + format_checks(checks, baseline, attention).replace("**", ""), end="")
    if note:
        print("\n" + note)


def _report_texts(test_set: TestSet, hypotheses: dict[str, list[str]]) -> dict[str, bytes]:
    """The report's text files by name, as UTF-8 bytes: src.txt (where the test set has sources), ref.txt and
    each NAME.hyp.txt."""
    texts = {"src.txt": test_set.sources} if test_set.sources is not None else {}
    texts |= {"ref.txt": test_set.references} | {f"{name}.hyp.txt": hyps for name, hyps in hypotheses.items()}
    # a hypothesis never holds a newline, but one stray one would shift every later line
    return {name: "".join(line.replace("\n", " ") + "\n" for line in lines).encode("utf-8")
            for name, lines in texts.items()}


def report_files(systems: Iterable[str], sources: bool) -> list[str]:
    """The files `score_and_report` writes into its folder for `systems`, src.txt where it has `sources`."""
    return [RESULTS_JSON, REPORT_MD, PLOT_PNG, *(["src.txt"] if sources else []), "ref.txt",
            *(f"{name}.hyp.txt" for name in systems)]


def _earlier_report_files(out: Path) -> dict[str, str | None]:
    """The files that the report in `out` wrote, by its results.json's settings.files (one written before
    that list was kept: the NAME.hyp.txt of each of its settings.runs), each with the sha256 it was written
    with (settings.text_sha256; None where not recorded); none where there is no such report, and only plain
    file names (no folder, no hidden file)."""
    try:
        settings = json.loads((out / RESULTS_JSON).read_text(encoding="utf-8"))["settings"]
        runs = settings.get("runs")
        files = settings.get("files", [f"{name}.hyp.txt" for name in runs] if isinstance(runs, dict) else [])
        hashes = settings.get("text_sha256", {})
    except (OSError, ValueError, TypeError, KeyError, AttributeError):  # no report there, or not one of nmt's
        return {}
    if not isinstance(files, list):
        return {}
    hashes = hashes if isinstance(hashes, dict) else {}
    return {name: hashes.get(name) for name in files
            if isinstance(name, str) and name and not re.search(r"[/\\]|^\.", name)}


def _remove_stale(out: Path, earlier: Mapping[str, str | None], written: Sequence[str], inputs: Sequence[Path]) -> None:
    """Remove from `out` the files of `earlier` (`_earlier_report_files`, read before the report was
    replaced) that this report did not write again, so that the folder holds only the files of its report,
    and say so on stderr. A link, a file that is one of `inputs`, or one changed since the earlier report
    wrote it (its sha256 no longer the recorded one) is left where it is."""
    removed, changed = [], []
    for name, sha256 in earlier.items():
        path = out / name
        if name in written or path.is_symlink() or not path.is_file() or any(same_file(path, given) for given in inputs):
            continue
        if sha256 is not None and sha256_file(path) != sha256:
            changed.append(name)
            continue
        path.unlink(missing_ok=True)
        removed.append(name)
    if removed:
        print(f"note: removed {', '.join(removed)} from {out}: the report there before wrote "
              f"{'it' if len(removed) == 1 else 'them'}, this one does not.", file=sys.stderr)
    if changed:
        print(f"note: kept {', '.join(changed)} in {out}: the report there before wrote "
              f"{'it' if len(changed) == 1 else 'them'}, but {'it has' if len(changed) == 1 else 'they have'} "
              "changed since; this report does not use or list "
              f"{'it' if len(changed) == 1 else 'them'}.", file=sys.stderr)

