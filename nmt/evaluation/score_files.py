"""`nmt score`, and the one scoring and report path it shares with `nmt evaluate` (`score_and_report`).

`nmt evaluate` translates a test set with each run first (nmt/compare/evaluate.py); `nmt score` takes
translations from files, whatever system made them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nmt.config import EvaluationConfig, override_section
from nmt.data.corpus import read_lines
from nmt.errors import NMTError, counted
from nmt.evaluation.buckets import (
    DATA_BUCKET_STEP,
    bucket_members,
    data_cutoffs,
    sentence_lengths,
)
from nmt.evaluation.effect import Check, Comparisons, contrast_checks, long_sentence_bleu, paper_checks
from nmt.evaluation.leaders import Leader, bucket_leaders, format_leaders
from nmt.evaluation.report import (
    PLOT_PNG,
    REPORT_MD,
    RESULTS_JSON,
    format_checks,
    format_examples,
    format_table,
    write_report,
)
from nmt.evaluation.scoring import Evaluation, score_systems, warn_if_tokenized
from nmt.evaluation.testset import (
    TestSet,
    file_test_set,
    given_names,
    reference_test_set,
    shown_path,
    unique_name,
)
from nmt.fileio import atomic_write_text, refuse_unwritable, same_file, sha256_file
from nmt.lengths import make_buckets
from nmt.typed_yaml import parse_override, sets_key


def score_files(
    ref_path: Path,
    hyp_paths: Sequence[Path],
    src_path: Path | None = None,
    names: Sequence[str] | None = None,
    out_dir: Path | None = None,
    baseline: str | None = None,
    overrides: Sequence[str] = (),
    comparisons: Callable[[Sequence[str]], Comparisons] | None = None,
) -> dict[str, Any]:
    """`nmt score`: score translations from files (any system's) against `ref_path`, as `nmt evaluate` does.

    Systems are named by `names` or by what differs between their files' names (`default_names`);
    `baseline` names the fixed-vector system (by its name, its file's name or stem), whose effect checks
    are run against every other system; or `comparisons`, given the systems' names, says what to compare
    (`nmt score --config`: as the runs of a config, nmt/compare/evaluate.py). `overrides` are `--set evaluation.*` keys (buckets, by, ...);
    without `src_path` sentences are bucketed by reference length, whatever evaluation.by says unless an
    override asks for source. Blank reference lines, and a file given twice or two files of the same
    lines, are warned about on stderr. Returns the content of results.json.
    """
    if not hyp_paths:
        raise NMTError("no translation file given.", "Pass one or more HYP files, one translation per line.")
    sized, overrides = _buckets_auto(overrides)
    settings = override_section("evaluation", overrides, "nmt score")
    if src_path is not None:
        test_set = file_test_set(src_path, ref_path, "score")
    else:
        if settings.by == "source" and sets_key(overrides, "evaluation.by"):  # asked for, not the default
            raise NMTError("--by source needs the source sentences.", "Give them with --src, or use --by reference.")
        test_set, settings = reference_test_set(ref_path), dataclasses.replace(settings, by="reference")
    bucketing = ""
    if sized:
        settings, bucketing = _sized_from_data(settings, test_set)
    paths = dict(zip(_system_names(hyp_paths, names), hyp_paths, strict=True))
    compared = comparisons(list(paths)) if comparisons is not None else Comparisons()
    if baseline is not None:
        named = [baseline] if baseline in paths else [
            name for name, path in paths.items() if baseline in (Path(path).name, Path(path).stem, _stem(Path(path).name))
        ]
        if len(named) != 1:  # a file's name or stem names its system too: copy for copy.fr
            files = " and ".join(Path(paths[name]).name for name in named)
            found = f"it is the stem of {files}" if named else "no such system"
            raise NMTError(f"--baseline {baseline}: {found}.", f"The systems are: {', '.join(paths)}.")
        baseline = named[0]
        if len(paths) < 2:
            raise NMTError(
                f"--baseline {baseline}: there is no other system to check it against.",
                "Give the attention system's translations too, or leave --baseline out.",
            )
        compared = Comparisons(pairs=[(baseline, name) for name in paths if name != baseline])
    out = Path(out_dir or "evaluation")
    refuse_unwritable(out, f"--out {out}")
    _refuse_writing_over_inputs(out, ref_path, src_path, paths)
    hypotheses = {name: _read_hypotheses(path, ref_path, len(test_set.references)) for name, path in paths.items()}
    warn_blank_references(test_set.references, ref_path)  # once every input is known to be usable
    warn_duplicates(paths, hypotheses)
    scored = [f"test set: {test_set.describe()}"]
    scored += [f"{name}: `{shown_path(path, out)}`" for name, path in paths.items()]
    systems: dict[str, dict[str, Any]] = {name: {"hypotheses": shown_path(path, out)} for name, path in paths.items()}
    inputs = [ref_path, *([src_path] if src_path is not None else []), *paths.values()]
    return score_and_report(hypotheses, test_set, settings, out, scored, systems, compared, bucketing=bucketing,
                            leaders=True, inputs=inputs)


def _refuse_writing_over_inputs(out: Path, ref_path: Path, src_path: Path | None, paths: Mapping[str, Path]) -> None:
    """NMTError before any work if a file that `score_and_report` writes into `out` is one of the inputs: it
    would be overwritten, by another system's lines (--names b,a over a.hyp.txt, b.hyp.txt) or its own with
    their line ends and byte-order mark changed."""
    inputs = {"--ref": ref_path, **({"--src": src_path} if src_path is not None else {})}
    inputs |= {f"HYP ({name})": path for name, path in paths.items()}
    for name in report_files(paths, sources=src_path is not None):
        for flag, path in inputs.items():
            if same_file(out / name, path):
                raise NMTError(
                    f"--out {out}: nmt score writes its {name} there, and that is {flag} {path}, which it would "
                    "overwrite.",
                    "Give another --out (or move the input files out of that folder); nothing was written.",
                )


def _buckets_auto(overrides: Sequence[str]) -> tuple[bool, list[str]]:
    """Whether the last of `overrides` that sets evaluation.buckets sets it to `auto` (`--buckets auto`),
    and the overrides without those that do, which the config would refuse."""
    auto, kept = False, []
    for text in overrides:
        keys, value = parse_override(text)
        if keys == ["evaluation", "buckets"]:
            auto = value == "auto"
            if auto:
                continue
        kept.append(text)
    return auto, kept


def _sized_from_data(settings: EvaluationConfig, test_set: TestSet) -> tuple[EvaluationConfig, str]:
    """`settings` with buckets sized from the test set (`data_cutoffs`), and how, for the report."""
    lengths = sentence_lengths(test_set.sources or test_set.references, test_set.references, settings.by)
    least = settings.min_bucket_sentences
    cutoffs, even = data_cutoffs(lengths, least)
    how = (
        f"the buckets were sized from the data (--buckets auto): {DATA_BUCKET_STEP}-word buckets up to the longest "
        f"sentence ({counted(max(lengths), 'word')}), each with fewer than evaluation.min_bucket_sentences = {least} "
        "sentences merged with its smaller neighbour, the smallest first"
    )
    if even:
        counts = [len(rows) for rows in bucket_members(lengths, make_buckets(cutoffs)).values()]
        how += (f"; no two such buckets can be made of {counted(len(lengths), 'sentence')}, so two as even as "
                "their lengths allow"
                + (", too small to test" if min(counts) < least else ""))
    return dataclasses.replace(settings, buckets=cutoffs), f"{how}: cutoffs {','.join(map(str, cutoffs))}"


def _read_hypotheses(path: Path, ref_path: Path, count: int) -> list[str]:
    lines = read_lines(path, "HYP", "Give an existing text file, one translation per line.")
    if not lines:
        raise NMTError(f"HYP {path} is empty.", f"Give one translation per line of --ref {ref_path}.")
    if len(lines) != count:
        raise NMTError(
            f"{path} has {counted(len(lines), 'line')} but --ref {ref_path} has {count}.",
            "Give one translation per reference line, in the same order.",
        )
    return lines


def warn_blank_references(references: Sequence[str], ref_path: Path, shown: int = 10) -> None:
    """A warning on stderr, if any reference line is blank: how many, the first `shown` line numbers, and
    what they do to the scores."""
    blank = [number for number, line in enumerate(references, 1) if not line.strip()]
    if blank:
        plural = "s" if len(blank) > 1 else ""
        first = ", ".join(map(str, blank[:shown])) + (", ..." if len(blank) > shown else "")
        print(
            f"warning: --ref {ref_path} has {len(blank)} blank line{plural} (line{plural} {first}): BLEU counts every word a system writes for them as wrong (a blank translation costs "
            "nothing), chrF leaves them out. If their references are missing, remove those lines from --ref, "
            "--src and every HYP.",
            file=sys.stderr,
        )


def warn_duplicates(paths: Mapping[str, Path], hypotheses: Mapping[str, Sequence[str]]) -> None:
    """A warning on stderr for each system whose file is an earlier system's (the same path, or a link to
    it) or holds the same lines: the two score alike, +0.00 between them, which says nothing."""
    names = list(paths)
    for k, name in enumerate(names):
        for earlier in names[:k]:
            if same_file(paths[earlier], paths[name]):
                what = f"HYP {paths[name]} is given twice ({earlier} and {name})"
            elif hypotheses[earlier] == hypotheses[name]:
                what = f"HYP {paths[earlier]} and {paths[name]} hold the same lines ({earlier} and {name})"
            else:
                continue
            print(f"warning: {what}: they score alike, +0.00 between them. Check that each file is the "
                  "system you meant.", file=sys.stderr)
            break  # one warning per file, naming the first it repeats


def _system_names(hyp_paths: Sequence[Path], names: Sequence[str] | None) -> list[str]:
    """--names as given (one per file, unique, usable in file names: `given_names`), else `default_names`."""
    if names is None:
        return default_names(hyp_paths)
    return given_names(names, len(hyp_paths), "translation files", "HYP file")


def default_names(hyp_paths: Sequence[str | Path]) -> list[str]:
    """The systems' names when --names is not given: what differs between their file names, without .txt
    and .hyp (`distinct_parts`: generaltest2022.de-en.hyp.OnlineB.en -> OnlineB), or between their paths
    where two files in different folders share a name (sys1/out.txt -> sys1); one file keeps its stem, and
    files named as nmt's reports write them, NAME.hyp.txt, of different NAMEs, keep their NAMEs
    (rnnencdec-30, rnnsearch-30: not rnnencdec, rnnsearch). A name given twice (the same file) becomes
    name, name-2."""
    resolved = [Path(path).resolve() for path in hyp_paths]
    stems = [_stem(path.name) for path in resolved]
    reports = all(path.name.endswith(".hyp.txt") for path in resolved) and len(set(stems)) == len(stems)
    if len(set(stems)) < len(set(resolved)):
        stems = [_stem(path.as_posix()) for path in resolved]
    taken: set[str] = set()
    # a name is also a file name, NAME.hyp.txt: no folders in it, and no hidden file
    parts = stems if reports else distinct_parts(stems)
    return [unique_name(part.replace("/", "-").lstrip(".") or "system", taken) for part in parts]


def _stem(name: str) -> str:
    return name.removesuffix(".txt").removesuffix(".hyp") or name


_PIECE_END = re.compile(r"(?<=[._/-])")  # splits after each separator
_PIECE_START = re.compile(r"(?=[._/-])")  # splits before each separator


def distinct_parts(texts: Sequence[str]) -> list[str]:
    """Each of `texts` without the longest prefix and suffix that all of them share, cut only at separators
    ('.', '-', '_', '/'): a.de-en.X.en, a.de-en.Y.en -> X, Y. Where that would leave a text empty (it is
    another's prefix or suffix), less is cut, the prefix first; one text, or equal ones, stay whole."""
    if len(set(texts)) < 2:
        return list(texts)
    heads = [_PIECE_END.split(text) for text in texts]  # pieces ending with a separator
    tails = [_PIECE_START.split(text)[::-1] for text in texts]  # pieces starting with one, last first
    prefix, suffix = len(os.path.commonprefix(heads)), len(os.path.commonprefix(tails))
    while True:
        parts = [
            text[len("".join(head[:prefix])) : len(text) - len("".join(tail[:suffix]))].strip("._-/")
            for text, head, tail in zip(texts, heads, tails, strict=True)
        ]
        if all(parts):  # at the latest with nothing cut: a file's name is never empty
            return parts
        if prefix > 0:
            prefix -= 1
        else:
            suffix -= 1


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
        "files": files, "text_sha256": {name: _sha256(text) for name, text in texts.items()},
    }
    ranked = bucket_leaders(evaluation) if leaders else []
    earlier = _earlier_report_files(out)  # before results.json is replaced
    # the lines before results.json: interrupted in between, the folder's results.json still lists the
    # earlier report's files, so the next report into it removes those it does not write
    for name, text in texts.items():
        atomic_write_text(out / name, text)
    results = write_report(
        evaluation, out, extra, effect, scored, examples, comparisons.groups, test_set.describe(), bucketing, ranked
    )
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


def _report_texts(test_set: TestSet, hypotheses: dict[str, list[str]]) -> dict[str, str]:
    """The report's text files by name: src.txt (where the test set has sources), ref.txt and each NAME.hyp.txt."""
    texts = {"src.txt": test_set.sources} if test_set.sources is not None else {}
    texts |= {"ref.txt": test_set.references} | {f"{name}.hyp.txt": hyps for name, hyps in hypotheses.items()}
    # a hypothesis never holds a newline, but one stray one would shift every later line
    return {name: "".join(line.replace("\n", " ") + "\n" for line in lines) for name, lines in texts.items()}


def _sha256(text: str) -> str:
    """Hex sha256 of `text` as a report file holds it (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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

