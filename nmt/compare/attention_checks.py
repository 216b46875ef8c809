"""`nmt attention-checks` on trained runs: which runs (those with attention), which test set (`nmt evaluate`'s
rule, the learning curve's sample), which checkpoints, and where attention_checks.json, .md and .png go. The
checks themselves and their report are nmt/analysis/'s (attention_checks.py, attention_report.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nmt.analysis.alignment import Link, Symmetrisation, require_aligner
from nmt.analysis.attention_checks import (
    CheckContext,
    agreement_by_bucket,
    aligner_links,
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
    write_outputs,
)
from nmt.data.sources import prepared_dir
from nmt.errors import NMTError
from nmt.evaluation.curves import sample_test_set
from nmt.evaluation.scoring import CorpusScorer
from nmt.evaluation.testset import shown_path
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
) -> dict[str, Any]:
    """Run the checks on each attention run and write attention_checks.json, .md and .png into `out_dir`
    (default: where `nmt evaluate` writes). `steps`: the periodic checkpoints whose alignment agreement
    is measured besides the evaluated one (None: every kept step_*.pt; []: none). `per_bucket` > 0 takes
    the learning curve's deterministic sample of the test set (None: evaluation.curve_sentences_per_bucket,
    as curve and attention-scaling do; 0: all of it). BLEU uses the first run's
    evaluation.tokenize and evaluation.lowercase, as `nmt evaluate` does. Returns the content of the JSON."""

    check_src_and_ref(src_path, ref_path)
    check_sentences_per_bucket(per_bucket)
    if "alignment" in checks:
        require_aligner()  # before the perturbations' minutes
    runs = describe_runs(run_dirs, checkpoint=checkpoint)
    _refuse_runs_without_attention(runs)
    settings = runs[0].config.evaluation
    per_bucket = settings.curve_sentences_per_bucket if per_bucket is None else per_bucket
    test_set = common_test_set(runs, split or settings.split, src_path, ref_path)  # nmt evaluate's rule
    if per_bucket:
        test_set = sample_test_set(test_set, settings.buckets, settings.by, per_bucket)
    scorer = CorpusScorer(test_set.references, settings.tokenize, settings.lowercase)  # all runs, all kinds
    context = CheckContext(test_set, scorer, settings, seed, batch_size, device)
    results = setting(context, per_bucket, symmetrisation)
    links: dict[str, list[set[Link]]] = {}
    out = default_out_dir(run_dirs, out_dir)
    for run in runs:
        entry: dict[str, Any] = {"run_dir": shown_path(run.run_dir, out), "checkpoint": run.checkpoint.name}
        evaluated = load_run(run.run_dir, run.checkpoint, device)  # read once for both checks
        if "alignment" in checks:  # first: a Transformer's ablation keeps each layer's best-aligning head
            if prepared_dir(run.config.data) not in links:
                links[prepared_dir(run.config.data)] = aligner_links(run.config.data, test_set, symmetrisation)
            entry["alignment"] = _agreements(run, evaluated, context, links[prepared_dir(run.config.data)], steps)
        if "perturbation" in checks:
            heads = entry["alignment"][-1].get("heads") if "alignment" in entry else None
            entry["perturbation"] = perturbation(run.name, evaluated, context, heads)
        results["runs"][run.name] = entry
    write_outputs(out, CHECKS, results, format_checks_markdown(results), checks_figure(results), 100)
    return results


def _agreements(
    run: RunInfo, evaluated: LoadedRun, context: CheckContext, links: list[set[Link]], steps: Sequence[int] | None
) -> list[dict[str, Any]]:
    """`agreement_by_bucket` of each checkpoint of `_checkpoints` (`evaluated`, loaded already, last) with
    the aligner's `links`."""
    return [
        agreement_by_bucket(run.name, evaluated if path == run.checkpoint else load_run(run.run_dir, path, context.device),
                            context, links)
        for path in _checkpoints(run, steps)
    ]


def _refuse_runs_without_attention(runs: Sequence[RunInfo]) -> None:
    """Both checks need attention weights: the fixed-vector model (attention: none) has none."""
    for run in runs:
        without = model_kind(run.config.model).without_attention
        if without:
            raise NMTError(
                f"{run.name} has no attention ({without}): there are no weights to check.",
                "Give runs with attention (RNNsearch); the fixed-vector model has one context for every step.",
            )


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
