"""`nmt evaluate` and `nmt score`: two front doors to one scoring and report path (`score_and_report`).

`nmt evaluate` translates a test set with each run first (nmt/run_translations.py, which caches the
translations in RUN_DIR/hyps/); `nmt score` takes translations from files, whatever system made them.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nmt.config import EvaluationConfig, config_from_dict, override_sections
from nmt.data.corpus import read_lines
from nmt.errors import NMTError
from nmt.evaluation.buckets import BucketBy
from nmt.evaluation.effect import Thresholds, format_checks, long_sentence_bleu, paper_checks
from nmt.evaluation.report import format_examples, format_table, write_report
from nmt.evaluation.scoring import looks_tokenized, score_systems
from nmt.fileio import atomic_write_text, same_file
from nmt.run_translations import (
    RunInfo,
    TestSet,
    decoding_settings,
    describe_runs,
    file_test_set,
    split_test_set,
    translate_cached,
    unique_name,
)

# What `--set` may change in `nmt score` (nmt/run_translations.py has `nmt evaluate`'s).
SCORE_SECTIONS = ("evaluation",)


def effect_pairs(runs: Sequence[RunInfo]) -> tuple[list[tuple[str, str]], list[str]]:
    """(fixed-vector run, attention run) names to check for the long-sentence effect: the runs without
    attention and those with it, paired in the order given (rnnencdec-30 with rnnsearch-30, ...);
    and the names of the runs left without a partner."""
    baselines = [run.name for run in runs if run.config.model.attention == "none"]
    attentive = [run.name for run in runs if run.config.model.attention != "none"]
    paired = min(len(baselines), len(attentive))
    return list(zip(baselines[:paired], attentive[:paired], strict=True)), baselines[paired:] + attentive[paired:]


def default_out_dir(run_dirs: Sequence[Path]) -> Path:
    """RUN_DIR/evaluation for one run; `evaluation/` in the runs' common parent for several."""
    if len(run_dirs) == 1:
        return Path(run_dirs[0]) / "evaluation"
    common = Path(os.path.commonpath([str(Path(d).resolve()) for d in run_dirs]))
    return common / "evaluation"


def _write_lines(path: Path, lines: Sequence[str]) -> None:
    # a hypothesis never holds a newline, but one stray one would shift every later line
    atomic_write_text(path, "".join(line.replace("\n", " ") + "\n" for line in lines))


def evaluate_runs(
    run_dirs: Sequence[Path],
    split: str | None = None,
    src_path: Path | None = None,
    ref_path: Path | None = None,
    buckets: list[int] | None = None,
    by: BucketBy | None = None,
    beam_size: int | None = None,
    out_dir: Path | None = None,
    device: str = "auto",
    overrides: Sequence[str] = (),
    checkpoint: str | None = None,
) -> dict[str, Any]:
    """Translate (or re-use cached translations), score all runs together, write and print the report.

    Defaults for split, buckets, `by` and the bootstrap come from the first run's `evaluation`
    section; `overrides` are `--set` decoding.* and evaluation.* keys. Returns the content of results.json.
    """
    from nmt.rundir.checkpoints import describe_checkpoint

    if not run_dirs:
        raise NMTError("no run directory given.", "Pass one or more folders written by `nmt train`.")
    if (src_path is None) != (ref_path is None):
        raise NMTError("--src and --ref go together: give both files, or neither to use --split.")
    if beam_size is not None and beam_size < 1:
        raise NMTError(f"--beam {beam_size}: the beam size must be at least 1.", "Use --beam 1 for greedy search.")
    runs = describe_runs(run_dirs, overrides, checkpoint)
    _refuse_overwriting_inputs(Path(out_dir) if out_dir is not None else default_out_dir(run_dirs), runs, src_path, ref_path)
    settings = runs[0].config.evaluation
    split = split or settings.split
    test_set = _common_test_set(runs, split, src_path, ref_path)

    hypotheses: dict[str, list[str]] = {}
    systems: dict[str, dict[str, Any]] = {}
    scored = [f"test set: {test_set.origin}, {len(test_set.references)} sentences"]
    chosen = []  # "name: best.pt (step 900), beam 5" per run, for the plot's title
    for run in runs:
        checkpoint_text = describe_checkpoint(run.checkpoint)
        print(f"{run.name}: checkpoint {checkpoint_text}", file=sys.stderr)
        hypotheses[run.name], path, _ = translate_cached(run, test_set, beam_size, device)
        decoding = decoding_settings(run.config, beam_size)
        systems[run.name] = {
            "run_dir": str(run.run_dir),
            "checkpoint": str(run.checkpoint),
            "beam_size": decoding["beam_size"],
            "length_penalty": decoding["length_penalty"],
            "alpha": decoding["alpha"],
            "hypotheses": str(path),
        }
        chosen.append(f"{run.name}: {checkpoint_text.split(',')[0].removesuffix(')')}), beam {decoding['beam_size']}")
        scored.append(
            f"{run.name}: `{run.run_dir}`, checkpoint {checkpoint_text}, beam {decoding['beam_size']}, "
            f"length penalty {decoding['length_penalty']} (alpha {decoding['alpha']:g})"
        )
    pairs, unpaired = effect_pairs(runs)
    note = None
    if pairs and unpaired:
        note = (
            f"not checked for the effect: {', '.join(unpaired)} (runs without attention pair with runs "
            "with attention in the order given; give as many of each to check them all)"
        )
    evaluation_settings = dataclasses.replace(settings, buckets=buckets or settings.buckets, by=by or settings.by)
    out = Path(out_dir) if out_dir is not None else default_out_dir(run_dirs)
    ceilings = {run.name: run.config.training.max_words for run in runs}
    groups = {run.name: plot_group(run.config.model.attention, run.config.training.max_words) for run in runs}
    title = f"{plot_test_set(test_set)}\n" + "; ".join(chosen)
    return score_and_report(
        hypotheses, test_set, evaluation_settings, out, scored, systems, pairs, note, ceilings, groups, title
    )


def plot_test_set(test_set: TestSet) -> str:
    """The test set in a few words for a plot's title: its split or file, and its size."""
    return f"{test_set.origin.split(', prepared from')[0]}, {len(test_set.references)} sentences"


def plot_group(attention: str, max_words: int) -> tuple[str, str]:
    """(model, variant) of a run for the plot: RNNencdec / RNNsearch (or the attention's name), and its
    training ceiling, e.g. ("RNNsearch", "-30")."""
    model = {"none": "RNNencdec", "additive": "RNNsearch"}.get(attention, f"{attention} attention")
    return model, f"-{max_words}" if max_words else "all lengths"


def score_files(
    ref_path: Path,
    hyp_paths: Sequence[Path],
    src_path: Path | None = None,
    names: Sequence[str] | None = None,
    buckets: list[int] | None = None,
    by: BucketBy | None = None,
    out_dir: Path | None = None,
    baseline: str | None = None,
    overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """`nmt score`: score translations from files (any system's) against `ref_path`, as `nmt evaluate` does.

    Systems are named by `names` or by their files' names; `baseline` names the fixed-vector system,
    whose effect checks are run against every other system. Without `src_path` sentences are bucketed
    by reference length. `overrides` are `--set evaluation.*` keys. Returns the content of results.json.
    """
    if not hyp_paths:
        raise NMTError("no translation file given.", "Pass one or more HYP files, one translation per line.")
    settings = override_sections(config_from_dict({}), list(overrides), SCORE_SECTIONS, "nmt score").evaluation
    if src_path is not None:
        test_set = file_test_set(src_path, ref_path)
    else:
        references = read_lines(ref_path, "--ref", "Give an existing text file to --ref.")
        if not references:
            raise NMTError(f"--ref {ref_path} is empty: nothing to score.", "Give a file with one sentence a line.")
        test_set = TestSet(None, references, f"--ref {ref_path}")
        if by == "source":
            raise NMTError("--by source needs the source sentences.", "Give them with --src, or use --by reference.")
        by = "reference"
    system_names = _system_names(hyp_paths, names)
    if baseline is not None and baseline not in system_names:
        raise NMTError(
            f"--baseline {baseline}: no such system.", f"The systems are: {', '.join(system_names)}."
        )
    if baseline is not None and len(system_names) < 2:
        raise NMTError(
            f"--baseline {baseline}: there is no other system to check it against.",
            "Give the attention system's translations too, or leave --baseline out.",
        )
    hypotheses: dict[str, list[str]] = {}
    for name, path in zip(system_names, hyp_paths, strict=True):
        lines = read_lines(path, "HYP", "Give an existing text file, one translation per line.")
        if not lines:
            raise NMTError(f"HYP {path} is empty.", f"Give one translation per line of --ref {ref_path}.")
        if len(lines) != len(test_set.references):
            raise NMTError(
                f"{path} has {len(lines)} lines but --ref {ref_path} has {len(test_set.references)}.",
                "Give one translation per reference line, in the same order.",
            )
        hypotheses[name] = lines
    scored = [f"test set: {test_set.origin}, {len(test_set.references)} sentences"]
    scored += [f"{name}: `{path}`" for name, path in zip(system_names, hyp_paths, strict=True)]
    systems: dict[str, dict[str, Any]] = {
        name: {"hypotheses": str(path)} for name, path in zip(system_names, hyp_paths, strict=True)
    }
    pairs = [(baseline, name) for name in system_names if name != baseline] if baseline is not None else []
    evaluation_settings = dataclasses.replace(settings, buckets=buckets or settings.buckets, by=by or settings.by)
    out = Path(out_dir) if out_dir is not None else Path("evaluation")
    title = plot_test_set(test_set) + "\n" + ", ".join(system_names)
    return score_and_report(
        hypotheses, test_set, evaluation_settings, out, scored, systems, pairs, title=title
    )


def _system_names(hyp_paths: Sequence[Path], names: Sequence[str] | None) -> list[str]:
    """--names as given (one per file, unique, usable in file names), else the files' names made unique."""
    if names is None:
        taken: set[str] = set()
        return [unique_name(Path(path).name.removesuffix(".txt").removesuffix(".hyp"), taken) for path in hyp_paths]
    names = [name.strip() for name in names]
    if len(names) != len(hyp_paths):
        raise NMTError(
            f"--names gives {len(names)} names for {len(hyp_paths)} translation files.",
            "Give one name per HYP file, comma-separated, e.g. --names encdec,search.",
        )
    for name in names:
        if not name or "/" in name or "\\" in name or name.startswith("."):
            raise NMTError(f"--names: '{name}' cannot name a system (it names its NAME.hyp.txt file too).",
                           "Use letters, digits, '-' and '_'.")
    if len(set(names)) != len(names):
        raise NMTError(f"--names {','.join(names)}: the names must differ.", "Give each system its own name.")
    return names


def score_and_report(
    hypotheses: dict[str, list[str]],
    test_set: TestSet,
    settings: EvaluationConfig,
    out: Path,
    scored: Sequence[str],
    systems: dict[str, dict[str, Any]],
    pairs: Sequence[tuple[str, str]],
    note: str | None = None,
    ceilings: dict[str, int] | None = None,
    groups: dict[str, tuple[str, str]] | None = None,
    title: str = "",
) -> dict[str, Any]:
    """Score the systems' translations together and write and print the report: the one path behind
    `nmt evaluate` and `nmt score`.

    `scored` says what was scored (one line each, for report.md); `systems` goes into results.json's
    settings.runs; `pairs` are (fixed-vector, attention) systems to run the effect checks on, and
    `ceilings` each system's training.max_words where known (nmt/evaluation/effect.py); `groups` and
    `title` style the plot (nmt/evaluation/report.py).
    """
    tokenized = looks_tokenized(hypotheses, settings.tokenize)
    if tokenized:  # once per command, however many systems and resamples are scored
        print(
            f"warning: {', '.join(tokenized)}: 100 or more lines end in ' .', as tokenized text does; "
            "BLEU expects detokenized text (or evaluation.tokenize none for pre-tokenized data).",
            file=sys.stderr,
        )
    sources = test_set.sources if test_set.sources is not None else test_set.references
    evaluation = score_systems(
        hypotheses,
        sources,
        test_set.references,
        cutoffs=settings.buckets,
        by=settings.by,
        bootstrap_samples=settings.bootstrap_samples,
        bootstrap_seed=settings.bootstrap_seed,
        tokenize=settings.tokenize,
        lowercase=settings.lowercase,
        min_bucket_sentences=settings.min_bucket_sentences,
    )
    effect = {}
    if pairs:
        limits = Thresholds(**{key.name: getattr(settings, key.name) for key in dataclasses.fields(Thresholds)})
        long = long_sentence_bleu(
            hypotheses, sources, test_set.references, evaluation.by, settings.tokenize, settings.lowercase,
            settings.bootstrap_samples, settings.bootstrap_seed, settings.long_words,
        )
        effect = paper_checks(evaluation, long, pairs, ceilings or {}, limits)
    examples = format_examples(evaluation, hypotheses, test_set.sources, test_set.references)
    extra = {"test_set": test_set.origin, "runs": systems}
    results = write_report(evaluation, out, extra, effect, scored, examples, groups, title)
    if test_set.sources is not None:
        _write_lines(out / "src.txt", test_set.sources)
    _write_lines(out / "ref.txt", test_set.references)
    for name, hyps in hypotheses.items():
        _write_lines(out / f"{name}.hyp.txt", hyps)
    print(format_table(evaluation))
    for (baseline, attention), checks in effect.items():
        print("\n" + format_checks(checks, baseline, attention).replace("**", ""), end="")
    if note:
        print("\n" + note)
    print(f"\nreport written to {out}/")
    return results


def _common_test_set(runs: list[RunInfo], split: str, src_path: Path | None, ref_path: Path | None) -> TestSet:
    if src_path is not None and ref_path is not None:
        return file_test_set(src_path, ref_path)
    by_dir: dict[str, TestSet] = {}
    for run in runs:
        if run.config.data.dir not in by_dir:
            by_dir[run.config.data.dir] = split_test_set(run.config, split)
    first, *others = by_dir.values()
    for other in others:
        if (other.sources, other.references) != (first.sources, first.references):
            raise NMTError(
                f"the runs were trained on different data: the {first.origin} differs from the {other.origin}.",
                "Runs are compared on one test set: evaluate them with the same --src/--ref files.",
            )
    return first


def _refuse_overwriting_inputs(out: Path, runs: Sequence[RunInfo], src_path: Path | None, ref_path: Path | None) -> None:
    """Refuse an --out folder where the report's files would replace --src or --ref."""
    written = [out / name for name in ("results.json", "report.md", "bleu_by_length.png", "src.txt", "ref.txt")]
    written += [out / f"{run.name}.hyp.txt" for run in runs]
    for flag, given in (("--src", src_path), ("--ref", ref_path)):
        clash = next((path for path in written if given is not None and same_file(path, given)), None)
        if clash is not None:
            raise NMTError(
                f"{flag} {given} is the file {clash} that the report writes: it would be replaced.",
                "Give another --out folder; nothing was written.",
            )
