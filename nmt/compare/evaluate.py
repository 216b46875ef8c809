"""`nmt evaluate`: translate a test set with each run (through its cache) and score them together on the
path `nmt score` takes too (nmt/evaluation/report_folder.py)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nmt.compare.runs import (
    RunInfo,
    decoding_settings,
    default_out_dir,
    describe_runs,
    split_test_set,
    translate_cached,
)
from nmt.config import Config, load_config
from nmt.config_sections import ModelConfig
from nmt.data.sources import corpus_source, prepared_dir, sharing_one_data_dir
from nmt.errors import NMTError
from nmt.evaluation.effect import Comparisons
from nmt.evaluation.metrics import sacrebleu_bleu
from nmt.evaluation.report_folder import refuse_foreign_files, report_files, score_and_report
from nmt.evaluation.testset import TestSet, file_test_set, shown_path
from nmt.fileio import same_file
from nmt.models.interface import model_kind
from nmt.overrides import sets_key
from nmt.rundir.checkpoints import describe_checkpoint

# each run's best translation is scored, whatever its decoding.nbest
ONE_BEST = "decoding.nbest=1"


def _kind(config: Config) -> str:
    """How a run's decoder sees the source: "fixed vector" (RNNencdec), "rnn attention", or a Transformer
    with "relative" or "absolute" positions (its model's `ModelKind.length_kind`)."""
    return model_kind(config.model).length_kind


def effect_pairs(runs: Mapping[str, Config]) -> tuple[list[tuple[str, str]], list[str]]:
    """(fixed-vector run, attention run) names to check for the long-sentence effect, of `runs` (name ->
    config): each run without attention paired with the first one with attention, in the order given, that
    was trained on the same lengths (training.max_words: rnnencdec-30 with rnnsearch-30, -50 with -50), as
    the checks compare the two; and the names of the runs left without a partner."""
    baselines = [name for name, config in runs.items() if _kind(config) == "fixed vector"]
    attentive = [name for name, config in runs.items() if _kind(config) == "rnn attention"]
    pairs = []
    for baseline in baselines:
        ceiling = runs[baseline].training.max_words
        partner = next((name for name in attentive if runs[name].training.max_words == ceiling), None)
        if partner is not None:
            pairs.append((baseline, partner))
            attentive.remove(partner)
    paired = {name for pair in pairs for name in pair}
    return pairs, [name for name in runs if _kind(runs[name]) in ("fixed vector", "rnn attention") and name not in paired]


def length_contrasts(runs: Mapping[str, Config]) -> list[tuple[str, str]]:
    """(expected to fall, expected to hold) on long sentences, both trained on the same lengths, of `runs`
    (name -> config): each Transformer with absolute positions against each RNN with attention and each
    Transformer with relative positions (Neishi & Yoshinaga 2019; nmt/evaluation/effect.py's contrast checks)."""
    return [
        (falls, holds)
        for falls, fall_config in runs.items() if _kind(fall_config) == "absolute"
        for holds, hold_config in runs.items() if _kind(hold_config) in ("rnn attention", "relative")
        if hold_config.training.max_words == fall_config.training.max_words
    ]


def run_comparisons(runs: Mapping[str, Config]) -> Comparisons:
    """What a report compares of `runs` (name -> config, in the order given): their effect pairs and
    contrasts, training ceilings and plot groups, and a note naming the runs left unpaired."""
    pairs, unpaired = effect_pairs(runs)
    note = (
        f"not checked for the effect: {', '.join(unpaired)} (a run without attention pairs with a run with "
        "attention trained on the same lengths, in the order given; give one of each per training.max_words)"
    ) if unpaired and {"fixed vector", "rnn attention"} <= {_kind(config) for config in runs.values()} else None
    return Comparisons(
        pairs, length_contrasts(runs), {name: config.training.max_words for name, config in runs.items()},
        {name: plot_group(config.model, config.training.max_words) for name, config in runs.items()}, note,
    )


def config_comparisons(config_path: Path) -> Callable[[Sequence[str]], Comparisons]:
    """For `nmt score --config`: given the systems' names, `run_comparisons` of the runs of those names in
    the config at `config_path` (its runs: entries); NMTError if one is not a run of it."""
    config = load_config(config_path)

    def compare(names: Sequence[str]) -> Comparisons:
        missing = [name for name in names if name not in config.runs]
        if missing:
            runs = f"its runs are {', '.join(config.runs)}" if config.runs else "it has no runs: section"
            raise NMTError(
                f"--config {config_path}: {runs}; no run is named {', '.join(map(repr, missing))}.",
                "Name each HYP file's system as the run that translated it: --names, one name per HYP, in order.",
            )
        return run_comparisons({name: config.for_run(name) for name in names})

    return compare


def plot_group(model: ModelConfig, max_words: int) -> tuple[str, str]:
    """(model, variant) of a run for the plot: RNNencdec / RNNsearch (or the attention's name) / Transformer
    (with its positions unless the paper's): its model's `ModelKind.name`; and its training ceiling, e.g.
    ("RNNsearch", "-30")."""
    return model_kind(model).name, f"-{max_words}" if max_words else "all lengths"


def evaluate_runs(
    run_dirs: Sequence[Path],
    *,
    src_path: Path | None = None,
    ref_path: Path | None = None,
    out_dir: Path | None = None,
    device: str = "auto",
    overrides: Sequence[str] = (),
    checkpoint: str | None = None,
    option: str = "checkpoint=",
    names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Translate (or re-use cached translations), score all runs together, write and print the report.

    Each run decodes with its `decoding` section; split, buckets, `by` and the bootstrap come from the
    first run's `evaluation` section; `overrides` are `--set` decoding.* and evaluation.* keys that
    change them for every run (decoding.beam_size=10; evaluation.split=valid). Errors name `checkpoint` as
    `option` ("--checkpoint " for the command's flag). `names` names the runs in the report, one per run
    (default: each run folder's name, NAME-2 for a second of the same name). Keywords only, so that a call
    written for the earlier `split` argument fails instead of shifting. Returns results.json's content.
    """
    check_src_and_ref(src_path, ref_path)  # before the runs are read: the flags' mistake comes first
    if sets_key(overrides, "decoding.nbest"):  # a beam that must end with n translations may end on another best
        raise NMTError("nmt evaluate scores each run's best translation: decoding.nbest does not apply to it.",
                       "Leave --set decoding.nbest out; nmt translate --nbest K writes the K best of each line.",
                       "decoding.nbest")
    # the 1-best is scored: a run's decoding.nbest does not apply, nor bound --beam from below
    runs = describe_runs(run_dirs, [ONE_BEST, *overrides], checkpoint, option, names)
    out = default_out_dir(run_dirs, out_dir)
    _refuse_overwriting_inputs(out, runs, src_path, ref_path)
    refuse_foreign_files(out, report_files((run.name for run in runs), sources=True), "nmt evaluate")
    settings = runs[0].config.evaluation
    sacrebleu_bleu(settings.tokenize, settings.lowercase)  # a tokenizer that cannot run here: refused before translating
    test_set = common_test_set(runs, settings.split, src_path, ref_path)
    hypotheses, systems, scored = _translate_runs(runs, test_set, device, out)
    comparisons = run_comparisons({run.name: run.config for run in runs})
    inputs = [path for path in (src_path, ref_path) if path is not None]
    return score_and_report(hypotheses, test_set, settings, out, scored, systems, comparisons, inputs=inputs)


def _translate_runs(
    runs: list[RunInfo], test_set: TestSet, device: str, out: Path
) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]], list[str]]:
    """Each run's translations, and what the report in `out` says of them: (hypotheses, results.json's
    systems, report.md's lines on what was scored)."""
    hypotheses: dict[str, list[str]] = {}
    systems: dict[str, dict[str, Any]] = {}
    scored = [f"test set: {test_set.describe()}"]
    for run in runs:
        checkpoint_text = describe_checkpoint(run.checkpoint)
        print(f"{run.name}: checkpoint {checkpoint_text}", file=sys.stderr)
        hypotheses[run.name], path, _ = translate_cached(run, test_set, device)
        decoding = decoding_settings(run.config)
        systems[run.name] = {
            "run_dir": shown_path(run.run_dir, out),
            "checkpoint": shown_path(run.checkpoint, out),
            **{key: decoding[key] for key in ("beam_size", "length_penalty", "alpha", "min_length") if key in decoding},
            "hypotheses": None if path is None else shown_path(path, out),  # the run's cache file
        }
        least = f", at least {decoding['min_length']} pieces" if "min_length" in decoding else ""
        scored.append(
            f"{run.name}: `{shown_path(run.run_dir, out)}`, checkpoint {checkpoint_text}, beam {decoding['beam_size']}, "
            f"length penalty {decoding['length_penalty']} (alpha {decoding['alpha']:g}){least}"
        )
    return hypotheses, systems, scored


def check_src_and_ref(src_path: Path | None, ref_path: Path | None) -> None:
    """Refuse --src without --ref or the reverse: the other one is not left to the split."""
    if (src_path is None) != (ref_path is None):
        raise NMTError("--src and --ref go together: give both files, or neither to use --split.")


def common_test_set(
    runs: list[RunInfo], split: str, src_path: Path | None, ref_path: Path | None, takes_files: bool = True
) -> TestSet:
    """The one test set the runs are scored on: --src/--ref when given (both: the caller has refused one
    alone, `check_src_and_ref`), else the `split` of their prepared data, which must be the same for every run.
    A --src is cleaned as the first run's corpus was (`Source.clean_input`), as the split's sources were: the
    model reads, the buckets count and the report shows one text. Where the split cannot be prepared (its
    corpus gone), the error names --src/--ref, if the command `takes_files`."""
    if src_path is not None and ref_path is not None:
        given = file_test_set(src_path, ref_path)
        clean = corpus_source(runs[0].config.data).clean_input
        return dataclasses.replace(given, sources=[clean(source) for source in given.sources or []])
    shared = sharing_one_data_dir({run.name: run.config.data for run in runs})
    if shared is not None:  # the folder holds the data of one of them, whichever was prepared last
        other, name, folder, differing = shared
        raise NMTError(
            f"the runs were trained on different data: {other} and {name} prepare theirs differently "
            f"({', '.join(differing)}) into the one data.dir {folder}, which holds one of them.",
            "Runs are compared on one test set: evaluate them with the same --src/--ref files.",
        )
    by_dir: dict[str, TestSet] = {}
    for run in runs:
        if prepared_dir(run.config.data) not in by_dir:
            try:
                by_dir[prepared_dir(run.config.data)] = split_test_set(run.config, split)
            except NMTError as error:
                if not takes_files:
                    raise
                instead = f"Without the {split} split, give --src FILE --ref FILE to use files of your own."
                raise NMTError(error.message, f"{error.hint} {instead}".strip(), error.key) from None
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
    written = [out / name for name in report_files((run.name for run in runs), sources=True)]
    for flag, given in (("--src", src_path), ("--ref", ref_path)):
        clash = next((path for path in written if given is not None and same_file(path, given)), None)
        if clash is not None:
            raise NMTError(
                f"{flag} {given} is the file {clash} that the report writes: it would be replaced.",
                "Give another --out folder; nothing was written.",
            )
