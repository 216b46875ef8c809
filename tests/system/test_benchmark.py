"""scripts/benchmark.py end to end on local files (--quick): the JSON schema of issue 7, and sane values.

Speed itself is not asserted here (that is what the benchmark is for), only that what it measures
is there, positive, and consistent with the analytic FLOP count.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import benchmark  # scripts/benchmark.py (pyproject's pytest pythonpath)
import pytest
import torch

from nmt.config import load_config
from tests.helpers import CONFIGS, shortened

ROOT = CONFIGS.parent


@pytest.mark.slow
def test_quick_benchmark_writes_the_schema_with_sane_values(tmp_path: Path) -> None:
    config = CONFIGS / "bench.yaml"
    # the RNN-only keys run by run: a transformer refuses them set (and the RNNs the transformer's)
    overrides = shortened(tmp_path / "data") + [
        "model.embedding_size=16", "model.hidden_size=16", "training.recompute_attention=true",
        *(f"runs.{run}.model.{key}=16" for run in ("rnnsearch", "rnnencdec") for key in ("attention_size", "maxout_size")),
        "runs.transformer.model.feedforward_size=32",
    ]
    out = tmp_path / "bench.json"
    command = [sys.executable, str(ROOT / "scripts" / "benchmark.py"), "--config", str(config), "--quick",
               "--threads", "1", "--device", "cpu", "--out", str(out), "--runs", "rnnsearch", "rnnencdec", "transformer"]
    command += [arg for override in overrides for arg in ("--set", override)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())

    assert report["peak_gflops"] > 0 and report["torch"]
    assert report["settings"]["recompute_attention"] is True
    assert report["settings"]["overrides"] == overrides
    assert list(report["train"]) == list(report["decode"]) == ["rnnsearch", "rnnencdec", "transformer"]
    for run in report["train"]:
        train = report["train"][run]
        assert train["tgt_tokens_per_s"] > 0 and train["flops_per_token"] > 0 and train["peak_rss_mb"] > 50
        assert 0 < train["mfu"] < 1
        achieved = train["tgt_tokens_per_s"] * train["flops_per_token"] / 1e9
        assert achieved == pytest.approx(train["achieved_gflops"], rel=1e-6)
        assert train["mfu"] == pytest.approx(achieved / train["mfu_peak_gflops"], rel=1e-6)
        decode = report["decode"][run]
        for key in ("greedy_sent_per_s", "beam5_sent_per_s", "greedy_mfu", "beam5_mfu", "peak_rss_mb"):
            assert decode[key] > 0, key
    assert "rnnsearch" in done.stdout and "transformer" in done.stdout and "written to" in done.stdout


@pytest.mark.slow
def test_decoding_a_trained_run_counts_its_own_sizes(trained_reverse_run: Path) -> None:
    """--trained decodes a run whose sizes need not be the bench config's: the FLOP count must follow the
    run's model, so a config with another hidden size counts the same FLOPs for the same decoding."""
    trained = load_config(trained_reverse_run / "config.yaml")
    plan = {**benchmark.QUICK_PLAN, "decode_sentences": 8}
    threads = torch.get_num_threads()
    results = []
    try:
        for hidden in (trained.model.hidden_size, 3 * trained.model.hidden_size):
            config = dataclasses.replace(trained, model=dataclasses.replace(trained.model, hidden_size=hidden))
            results.append(
                benchmark.decode_phase(config, trained_reverse_run.name, "cpu", 1, plan, "", "", str(trained_reverse_run.parent), False)
            )
    finally:
        torch.set_num_threads(threads)
    for search in ("greedy", "beam5"):
        assert results[0][f"{search}_flops"] > 0
        assert results[0][f"{search}_flops"] == results[1][f"{search}_flops"], search


def test_the_largest_batch_trains_first_and_the_rest_keep_their_order() -> None:
    """The batch of most sentences x longest source x longest target leads; not the one of most tokens."""
    src = [[1] * n for n in (5, 5, 5, 9, 2, 8)]
    tgt = [[1] * n for n in (5, 5, 5, 2, 9, 8)]
    batches = [[0, 1, 2], [3, 4], [5]]  # 30, 22 and 16 tokens; sizes 3*5*5 = 75, 2*9*9 = 162, 1*8*8 = 64
    assert benchmark.largest_first(batches, src, tgt) == [[3, 4], [0, 1, 2], [5]]
    assert benchmark.largest_first([[3, 4], [5], [0, 1, 2]], src, tgt) == [[3, 4], [5], [0, 1, 2]]


def test_an_unknown_run_is_named_before_any_work(capsys: pytest.CaptureFixture[str]) -> None:
    assert benchmark.main(["--config", str(CONFIGS / "bench.yaml"), "--runs", "transformer", "rnnsaerch"]) == 2
    error = capsys.readouterr().err
    assert "--runs rnnsaerch: not a run of" in error and "rnnsearch, rnnencdec, transformer, transformer-relative" in error
