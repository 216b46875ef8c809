"""`nmt score`: the systems' translations from files, whatever made them, named and checked against the
references, then scored and reported on the path `nmt evaluate` takes too (nmt/evaluation/report_folder.py).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nmt.config import EvaluationConfig, override_section
from nmt.data.corpus import blank_surplus, read_lines
from nmt.errors import NMTError, counted
from nmt.evaluation.buckets import (
    DATA_BUCKET_STEP,
    bucket_members,
    data_cutoffs,
    sentence_lengths,
)
from nmt.evaluation.effect import Comparisons
from nmt.evaluation.report_folder import (
    refuse_experiment_folder,
    refuse_foreign_files,
    report_files,
    score_and_report,
)
from nmt.evaluation.testset import (
    TestSet,
    file_test_set,
    given_names,
    reference_test_set,
    shown_path,
    unique_name,
)
from nmt.fileio import refuse_unwritable, same_file
from nmt.lengths import make_buckets
from nmt.overrides import parse_override, sets_key


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
    (`nmt score --config`: as the runs of a config, nmt/compare/evaluate.py). `overrides` are `--set
    evaluation.*` keys (buckets, by, ...); without `src_path` sentences are bucketed by reference length,
    whatever evaluation.by says unless an override asks for source. Blank reference lines, a file given twice
    or two files of the same lines, and the reference given as a system are warned about on stderr. Returns
    the content of results.json.
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
    if baseline is not None:
        compared = _against_baseline(baseline, paths)
    else:
        compared = comparisons(list(paths)) if comparisons is not None else Comparisons()
    out = Path(out_dir or "evaluation")
    refuse_experiment_folder(out, "nmt score")
    refuse_unwritable(out, f"--out {out}")
    _refuse_writing_over_inputs(out, ref_path, src_path, paths)
    refuse_foreign_files(out, report_files(paths, sources=src_path is not None), "nmt score")
    hypotheses = {name: _read_hypotheses(path, ref_path, test_set.references) for name, path in paths.items()}
    warn_blank_references(test_set.references, ref_path)  # once every input is known to be usable
    warn_duplicates(paths, hypotheses)
    warn_references_scored(paths, hypotheses, ref_path, test_set.references)
    scored = [f"test set: {test_set.describe()}"]
    scored += [f"{name}: `{shown_path(path, out)}`" for name, path in paths.items()]
    systems: dict[str, dict[str, Any]] = {name: {"hypotheses": shown_path(path, out)} for name, path in paths.items()}
    inputs = [ref_path, *([src_path] if src_path is not None else []), *paths.values()]
    return score_and_report(hypotheses, test_set, settings, out, scored, systems, compared, bucketing=bucketing,
                            leaders=True, inputs=inputs)


def _against_baseline(baseline: str, paths: Mapping[str, Path]) -> Comparisons:
    """--baseline: the effect checks of the system `baseline` names (its name, its file's name or stem) against
    every other of `paths` (name -> file); NMTError if it names none, two, or the only system."""
    by_file = [name for name, path in paths.items() if baseline in (Path(path).name, Path(path).stem, _stem(Path(path).name))]
    # a file's name or stem names its system too (copy for copy.fr): one system's name and another's stem name two
    named = list(dict.fromkeys([*([baseline] if baseline in paths else []), *by_file]))
    if len(named) != 1:
        found = ("it names " + " and ".join(f"{name} ({Path(paths[name]).name})" for name in named)) if named else (
            "no such system")
        raise NMTError(f"--baseline {baseline}: {found}.", f"The systems are: {', '.join(paths)}; give one name.")
    if len(paths) < 2:
        raise NMTError(
            f"--baseline {named[0]}: there is no other system to check it against.",
            "Give the attention system's translations too, or leave --baseline out.",
        )
    return Comparisons(pairs=[(named[0], name) for name in paths if name != named[0]])


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


def _read_hypotheses(path: Path, ref_path: Path, references: Sequence[str]) -> list[str]:
    lines = read_lines(path, "HYP", "Give an existing text file, one translation per line.")
    if not lines:
        raise NMTError(f"HYP {path} is empty.", f"Give one translation per line of --ref {ref_path}.")
    if len(lines) != len(references):
        raise NMTError(
            f"{path} has {counted(len(lines), 'line')} but --ref {ref_path} has {len(references)}"
            f"{blank_surplus(lines, references)}.",
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


def warn_references_scored(
    paths: Mapping[str, Path], hypotheses: Mapping[str, Sequence[str]], ref_path: Path, references: Sequence[str]
) -> None:
    """A warning on stderr for each system whose file is --ref (the same path, or a link to it) or holds its
    lines: it scores 100 BLEU, as a translation that is the reference would, which says nothing of a system."""
    for name, path in paths.items():
        if same_file(path, ref_path):
            what = f"HYP {path} ({name}) is --ref itself"
        elif list(hypotheses[name]) == list(references):
            what = f"HYP {path} ({name}) holds the lines of --ref {ref_path}"
        else:
            continue
        print(f"warning: {what}: it scores as the reference would (BLEU 100). Check that each file is the system "
              "you meant.", file=sys.stderr)


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
    if len(set(stems)) < len(set(resolved)):  # one name in two folders, or two names of one stem: their paths
        common = Path(os.path.commonpath([path.parent for path in resolved]))  # from where they part, never the machine's
        stems = [path.relative_to(common).as_posix().removesuffix(".txt") for path in resolved]
    taken: set[str] = set()
    # a name is also a file name, NAME.hyp.txt: no folders in it, no hidden file, and none of the characters a
    # shell would need quoted (a process substitution's file, <(...), is a pipe named pipe:[N]: pipe-N)
    parts = stems if reports else distinct_parts(stems)
    # at most 100 characters, as --names: NAME.hyp.txt must fit a file name (255 bytes)
    return [unique_name(re.sub(r"[^\w.-]+", "-", part).strip("-").lstrip(".")[:100] or "system", taken) for part in parts]


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
        if all(parts):
            return parts
        if prefix == suffix == 0:  # nothing cut: a name of separators alone ("-", "_") stays as it is
            return [part or text for part, text in zip(parts, texts, strict=True)]
        if prefix > 0:
            prefix -= 1
        else:
            suffix -= 1
