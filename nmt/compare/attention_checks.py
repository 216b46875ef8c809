"""`nmt attention-checks` on trained runs: which runs (those with attention), which test set (`nmt evaluate`'s
rule, the learning curve's sample), which checkpoints, and where attention_checks.json, .md and .png go. The
checks themselves and their report are nmt/analysis/'s (attention_checks.py, attention_report.py).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nmt.analysis.alignment import INSTALL_HINT, Link, Symmetrisation, aligner_installed, require_aligner
from nmt.analysis.attention_checks import (
    CheckContext,
    agreement_by_bucket,
    aligner_links,
    alignment_cache,
    cached_links,
    perturbation,
    setting,
)
from nmt.analysis.attention_report import checks_figure, format_checks_markdown
from nmt.compare.evaluate import check_src_and_ref, common_test_set
from nmt.compare.runs import (
    RunInfo,
    check_sentences_per_bucket,
    default_out_dir,
    describe_runs,
    refuse_foreign_outputs,
    refuse_runs_without_attention,
    split_test_set,
    write_outputs,
)
from nmt.config import Config
from nmt.config_sections import DataConfig
from nmt.data.sources import prepared_dir
from nmt.errors import NMTError
from nmt.evaluation.curves import sample_test_set
from nmt.evaluation.metrics import Bleu
from nmt.evaluation.testset import TestSet, shown_path
from nmt.models.interface import model_kind
from nmt.rundir.checkpoints import CHECKPOINT_DIR, step_checkpoint_name, step_checkpoints
from nmt.rundir.loading import LoadedRun, load_run

CHECKS = "attention_checks"  # the stem of the .json, .md and .png written


def attention_checks(
    run_dirs: Sequence[Path],
    out_dir: Path | None = None,
    split: str | None = None,
    src_path: Path | None = None,
    ref_path: Path | None = None,
    checkpoint: str | None = None,
    steps: Sequence[int] | None = None,
    per_bucket: int | None = None,
    seed: int = 1,
    symmetrisation: Symmetrisation = "grow-diag-final-and",
    checks: Sequence[str] = ("perturbation", "alignment"),
    device: str = "auto",
    batch_size: int = 64,
    skip_alignment_without_aligner: bool = False,
    option: str = "checkpoint=",
) -> dict[str, Any]:
    """Run the checks on each attention run and write attention_checks.json, .md and .png into `out_dir`
    (default: where `nmt evaluate` writes). `steps`: the periodic checkpoints whose alignment agreement
    is measured besides the evaluated one (None: every kept step_*.pt; []: none). `per_bucket` > 0 takes
    the learning curve's deterministic sample of the test set (None: evaluation.curve_sentences_per_bucket,
    as curve and attention-scaling do; 0: all of it). BLEU uses the first run's
    evaluation.tokenize and evaluation.lowercase, as `nmt evaluate` does. The aligner's links come from the
    prepared data's cache where they were computed before (`aligner_links`), else from eflomal; without
    either, the alignment check is refused, or with `skip_alignment_without_aligner` left out (results
    then say so under "alignment_skipped"). Errors name `checkpoint` as `option` ("--checkpoint " for the command's
    flag). Returns the content of the JSON."""

    check_src_and_ref(src_path, ref_path)
    check_sentences_per_bucket(per_bucket)
    runs = describe_runs(run_dirs, checkpoint=checkpoint, option=option)
    refuse_runs_without_attention(runs, "there are no weights to check")
    out = default_out_dir(run_dirs, out_dir)  # before the data is read (or prepared) and the aligner asked for
    refuse_foreign_outputs(out, CHECKS, "nmt attention-checks")
    # every run's --steps refused before any run is checked
    aligned = {run.name: _checkpoints(run, steps) for run in runs} if "alignment" in checks else {}
    settings = runs[0].config.evaluation
    per_bucket = settings.curve_sentences_per_bucket if per_bucket is None else per_bucket
    # nmt evaluate's rule, a --src cleaned as the corpus was: the model, its weights and the aligner read one text
    test_set = common_test_set(runs, split or settings.split, src_path, ref_path)
    if per_bucket:
        test_set = sample_test_set(test_set, settings.buckets, settings.by, per_bucket)
    skipped = _without_aligner(runs, test_set, symmetrisation, skip_alignment_without_aligner) if "alignment" in checks else ""
    if skipped:
        checks = tuple(check for check in checks if check != "alignment")
    scorer = Bleu(test_set.references, settings.tokenize, settings.lowercase)  # all runs, all kinds
    context = CheckContext(test_set, scorer, settings, seed, batch_size, device)
    results = setting(context, per_bucket, symmetrisation)
    if skipped:
        results["alignment_skipped"] = skipped
    links: dict[str, list[set[Link]]] = {}  # data dir -> the aligner's links of the test set
    for run in runs:
        if "alignment" in checks and prepared_dir(run.config.data) not in links:
            links[prepared_dir(run.config.data)] = aligner_links(run.config.data, test_set, symmetrisation)
        entry = _check_run(run, context, links.get(prepared_dir(run.config.data)), aligned.get(run.name, []), checks)
        results["runs"][run.name] = {"run_dir": shown_path(run.run_dir, out), **entry}
    write_outputs(out, CHECKS, results, format_checks_markdown(results), checks_figure(results), 100)
    return results


def _check_run(
    run: RunInfo, context: CheckContext, links: list[set[Link]] | None, checkpoints: Sequence[Path],
    checks: Sequence[str],
) -> dict[str, Any]:
    """One run's entry of results["runs"]: its checkpoint, the alignment agreement of its `checkpoints` with the
    aligner's `links` (where "alignment" is among `checks`), and the perturbations (where "perturbation" is)."""
    entry: dict[str, Any] = {"checkpoint": run.checkpoint.name}
    evaluated = load_run(run.run_dir, run.checkpoint, context.device)  # read once for both checks
    if "alignment" in checks and links is not None:  # first: a Transformer's ablation keeps each layer's best head
        entry["alignment"] = _agreements(run, evaluated, context, links, checkpoints)
    if "perturbation" in checks:
        heads = entry["alignment"][-1].get("heads") if "alignment" in entry else None
        entry["perturbation"] = perturbation(run.name, evaluated, context, heads)
    return entry


def _without_aligner(runs: Sequence[RunInfo], test_set: TestSet, symmetrisation: Symmetrisation, skip: bool) -> str:
    """Before the perturbations' minutes: "" where the alignment check can run (every run's links cached, or
    eflomal installed); else NMTError, or with `skip` why it is skipped (said on stderr too)."""
    if all(cached_links(run.config.data, test_set, symmetrisation) is not None for run in runs):
        return ""
    if not skip:
        require_aligner()
    if aligner_installed():
        return ""
    why = f"the alignment check was skipped: eflomal is not installed and no links were cached ({INSTALL_HINT})"
    print(f"attention checks: {why}", file=sys.stderr)
    return why


def cache_experiment_links(config: Config, symmetrisation: Symmetrisation = "grow-diag-final-and") -> Path:
    """Align and cache (`aligner_links`) the sample an experiment's attention checks measure (`attention_checks`
    with its defaults: the first attention run's evaluation split and curve sample), so that the experiment
    can run the alignment check on a machine without eflomal once the prepared folder is carried there.
    Returns the cache file."""
    data, test_set = _experiment_sample(config)
    aligner_links(data, test_set, symmetrisation)
    return alignment_cache(data, test_set, symmetrisation)[0]


def experiment_links_cached(config: Config, symmetrisation: Symmetrisation = "grow-diag-final-and") -> Path | None:
    """The cache file of `cache_experiment_links` where it is there, else None: the experiment's alignment check
    would then need eflomal (and skips itself without it)."""
    path = alignment_cache(*_experiment_sample(config), symmetrisation)[0]
    return path if path.is_file() else None


def _experiment_sample(config: Config) -> tuple[DataConfig, TestSet]:
    """The data section and test sample an experiment's attention checks measure (`attention_checks`' defaults:
    the first attention run's evaluation split and curve sample)."""
    attentive = [name for name in config.runs if not model_kind(config.for_run(name).model).without_attention]
    run = config.for_run(attentive[0]) if attentive else config
    settings = run.evaluation
    test_set = split_test_set(run, settings.split)
    if settings.curve_sentences_per_bucket:
        test_set = sample_test_set(test_set, settings.buckets, settings.by, settings.curve_sentences_per_bucket)
    return run.data, test_set


def _agreements(
    run: RunInfo, evaluated: LoadedRun, context: CheckContext, links: list[set[Link]], checkpoints: Sequence[Path]
) -> list[dict[str, Any]]:
    """`agreement_by_bucket` of each of the run's `checkpoints` (`_checkpoints`; `evaluated`, loaded already,
    last) with the aligner's `links`."""
    return [
        agreement_by_bucket(run.name, evaluated if path == run.checkpoint else load_run(run.run_dir, path, context.device),
                            context, links)
        for path in checkpoints
    ]


def _checkpoints(run: RunInfo, steps: Sequence[int] | None) -> list[Path]:
    """The periodic checkpoints asked for (None: every kept one), then the run's evaluated checkpoint."""
    if steps is None:
        chosen = step_checkpoints(run.run_dir)
    else:
        chosen = [run.run_dir / CHECKPOINT_DIR / step_checkpoint_name(step) for step in steps]
        missing = [path.name for path in chosen if not path.is_file()]
        if missing:
            have = ", ".join(p.name for p in step_checkpoints(run.run_dir)) or "none"
            raise NMTError(f"{run.name} has no {', '.join(missing)} (it keeps: {have}).", "Give --steps it has.")
    return [path for path in chosen if path.resolve() != run.checkpoint.resolve()] + [run.checkpoint]
