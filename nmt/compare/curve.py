"""`nmt curve`: greedy BLEU per length bucket of every kept checkpoint of a run, against training step.

It shows when a model learns sentences of each length, and whether a fall with length is still
closing or has settled when training stops. Each checkpoint translates the same fixed sample of the
evaluation split (nmt/evaluation/curves.py says which sentences, and draws the table and plot), through
the run's translation cache: a checkpoint already scored is not translated again.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nmt.compare.runs import (
    RunInfo,
    check_sentences_per_bucket,
    default_out_dir,
    describe_runs,
    refuse_foreign_outputs,
    split_test_set,
    translate_cached,
    write_outputs,
)
from nmt.config_sections import BucketBy
from nmt.data.sources import prepared_dir
from nmt.errors import NMTError, counted
from nmt.evaluation import curves
from nmt.evaluation.metrics import Bleu
from nmt.evaluation.testset import TestSet, shown_path
from nmt.models.interface import model_kind
from nmt.rundir.checkpoints import checkpoint_step, refuse_interrupted_only, step_checkpoints

# each checkpoint translates greedily, whatever the run's decoding section
GREEDY = ("decoding.beam_size=1", "decoding.nbest=1")


def learning_curves(
    run_dirs: Sequence[Path],
    out_dir: Path | None = None,
    split: str | None = None,
    per_bucket: int | None = None,
    device: str = "auto",
) -> dict[str, Any]:
    """Score every kept periodic checkpoint (RUN_DIR/checkpoints/step_*.pt) of each run greedily on the
    fixed sample, and write learning_curve.json, .md and .png (one panel per run) into `out_dir`.

    Split, buckets, bucketing and sample size default to the first run's `evaluation` section
    (`curve_sentences_per_bucket`), whose tokenize and lowercase score every run, as in `nmt evaluate`;
    runs prepared on different data each translate their own data's sample.
    Returns the content of learning_curve.json.
    """
    check_sentences_per_bucket(per_bucket)
    runs = describe_runs(run_dirs, GREEDY, option="")  # no --checkpoint
    settings = runs[0].config.evaluation
    split = split or settings.split
    per_bucket = settings.curve_sentences_per_bucket if per_bucket is None else per_bucket
    cutoffs, by = list(settings.buckets), settings.by
    out = default_out_dir(run_dirs, out_dir)
    refuse_foreign_outputs(out, curves.CURVE, "nmt curve")
    kept = {run.name: _periodic_checkpoints(run) for run in runs}  # a run without any refused before any work
    # data dir -> the sample of its split, and a scorer of its references for every checkpoint of its runs
    samples: dict[str, tuple[TestSet, Bleu]] = {}
    measured: dict[str, Any] = {}
    for run in runs:
        if prepared_dir(run.config.data) not in samples:
            sample = curves.sample_test_set(split_test_set(run.config, split), cutoffs, by, per_bucket)
            scorer = Bleu(sample.references, settings.tokenize, settings.lowercase)
            samples[prepared_dir(run.config.data)] = sample, scorer
        sample, scorer = samples[prepared_dir(run.config.data)]
        measured[run.name] = {
            "run_dir": shown_path(run.run_dir, out),
            "attention": model_kind(run.config.model).curve_attention,
            "sentences": sample.describe(),
            "n": curves.bucket_counts(sample, cutoffs, by),
            "n_sample": len(sample.references),
            "checkpoints": _score_checkpoints(run, kept[run.name], sample, scorer, cutoffs, by, device, out),
        }
    results = {
        "split": split,
        "buckets": cutoffs,
        "by": by,
        "sentences_per_bucket": per_bucket,
        "selection": curves.SELECTION,
        "beam_size": 1,
        # one scorer's settings for every run (the first run's evaluation.tokenize and lowercase)
        "bleu_signature": next(iter(samples.values()))[1].signature,
        "runs": measured,
    }
    write_outputs(out, curves.CURVE, results, curves.format_curve_markdown(results), curves.learning_curve_figure(results), 120)
    return results


def _periodic_checkpoints(run: RunInfo) -> list[Path]:
    """The run's kept step_*.pt, oldest first; an NMTError where it has none, a warning where
    training.keep_last deleted some the curve could use."""
    checkpoints = step_checkpoints(run.run_dir)
    if not checkpoints:
        refuse_interrupted_only(run.run_dir, "to draw a curve from")
        raise NMTError(
            f"{run.run_dir} has no periodic checkpoints (checkpoints/step_*.pt) to draw a curve from.",
            "Train it with training.keep_last: 0 to keep every training.checkpoint_every checkpoint.",
        )
    training = run.config.training  # say so when training.keep_last deleted checkpoints the curve could use
    if training.keep_last and len(checkpoints) < checkpoint_step(checkpoints[-1]) // training.checkpoint_every:
        print(
            f"{run.name}: only {counted(len(checkpoints), 'checkpoint')} kept (training.keep_last {training.keep_last}); "
            "train with training.keep_last: 0 to keep one every training.checkpoint_every steps for the curve",
            file=sys.stderr,
        )
    return checkpoints


def _score_checkpoints(
    run: RunInfo, checkpoints: list[Path], sample: TestSet, scorer: Bleu, cutoffs: list[int], by: BucketBy,
    device: str, out: Path,
) -> list[dict[str, Any]]:
    """One point per checkpoint of the run: its step, files (shown_path from `out`), and greedy BLEU per
    bucket on `sample` (`scorer`: its references)."""
    assert sample.sources is not None
    points = []
    for path in checkpoints:
        hyps, cache, cached = translate_cached(dataclasses.replace(run, checkpoint=path), sample, device)
        bleu, sample_bleu = curves.bucket_bleu(scorer, hyps, sample.sources, sample.references, cutoffs, by)
        points.append({"step": checkpoint_step(path), "checkpoint": shown_path(path, out),
                       "hypotheses": None if cache is None else shown_path(cache, out),  # the run's cache file
                       "cached": cached, "bleu": bleu, "sample_bleu": sample_bleu})
    return points
