"""`nmt attention-scaling` on trained runs: why scaled dot-product attention divides by sqrt(d). Which runs,
the sample of the test split (the learning curve's rule, nmt/evaluation/curves.py), the model at
initialisation and at the checkpoint, and where attention_scaling.json, .md and .png go; the statistics
and the report are nmt/analysis/'s (attention_scaling.py, attention_report.py)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nmt.analysis.attention_report import format_scaling_markdown, scaling_figure
from nmt.analysis.attention_scaling import MAIN, SATURATED, attention_statistics
from nmt.compare.evaluate import common_test_set
from nmt.compare.runs import (
    check_sentences_per_bucket,
    default_out_dir,
    describe_runs,
    refuse_foreign_outputs,
    refuse_runs_without_attention,
    write_outputs,
)
from nmt.evaluation.curves import sample_test_set
from nmt.evaluation.testset import shown_path
from nmt.models.interface import model_kind
from nmt.rundir.loading import load_run
from nmt.training import trainer

SCALING = "attention_scaling"  # the stem of the .json, .md and .png written


def scaling_statistics(
    run_dirs: Sequence[Path],
    out_dir: Path | None = None,
    split: str | None = None,
    per_bucket: int | None = None,
    checkpoint: str | None = None,
    option: str = "checkpoint=",
) -> dict[str, Any]:
    """Measure every run on the sample of the split (runs on different data are refused, as by `nmt
    evaluate`) and write attention_scaling.json, .md and .png into `out_dir`. Errors name `checkpoint` as
    `option` ("--checkpoint " for the command's flag). Returns the JSON's content."""
    check_sentences_per_bucket(per_bucket)
    runs = describe_runs(run_dirs, checkpoint=checkpoint, option=option)
    refuse_runs_without_attention(runs, "there are no attention scores to measure")
    out = default_out_dir(run_dirs, out_dir)  # before the data is read (or prepared): refused, nothing was done
    refuse_foreign_outputs(out, SCALING, "nmt attention-scaling")
    settings = runs[0].config.evaluation
    per_bucket = settings.curve_sentences_per_bucket if per_bucket is None else per_bucket
    test_set = common_test_set(runs, split or settings.split, None, None, takes_files=False)
    sample = sample_test_set(test_set, settings.buckets, settings.by, per_bucket)
    assert sample.sources is not None
    measured: dict[str, Any] = {}
    for run in runs:
        loaded = load_run(run.run_dir, run.checkpoint, device="cpu")
        tokenizer = loaded.tokenizer
        pairs = [(tokenizer.encode_src(s), tokenizer.encode_tgt(t)) for s, t in zip(sample.sources, sample.references, strict=True)]
        initial = trainer.initial_model(run.config, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
        at_init, trained = attention_statistics(initial, pairs), attention_statistics(loaded.model, pairs)
        kind = model_kind(run.config.model)
        stages = {group: {"initialisation": asdict(stats), "trained": asdict(trained[group])} for group, stats in at_init.items()}
        measured[run.name] = {  # a Transformer: its cross-attention, d = d_k
            "attention": kind.scaling_attention,
            "attention_size": kind.scaling_size,
            "checkpoint": shown_path(run.checkpoint, out),
            "step": loaded.step,
            **stages.pop(MAIN),
        }
        if stages:  # groups beside MAIN: a Transformer's per layer and per head
            measured[run.name]["parts"] = stages
        print(f"{run.name}: measured at initialisation and at step {loaded.step}", file=sys.stderr)
    results = {"sentences": sample.describe(), "saturated_above": SATURATED, "runs": measured}
    markdown, figure = format_scaling_markdown(results), scaling_figure(results)
    write_outputs(out, SCALING, results, markdown, figure, 120)
    return results
