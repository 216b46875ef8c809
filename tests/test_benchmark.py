"""scripts/benchmark.py end to end on local files (--quick): the JSON schema of issue 7, and sane values.

Speed itself is not asserted here (that is what the benchmark is for), only that what it measures
is there, positive, and consistent with the analytic FLOP count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_experiment import CONFIGS, shortened

ROOT = CONFIGS.parent


@pytest.mark.slow
def test_quick_benchmark_writes_the_schema_with_sane_values(tmp_path: Path) -> None:
    config = CONFIGS / "bench.yaml"
    overrides = shortened(config, tmp_path / "data") + [
        "model.embedding_size=16", "model.hidden_size=24", "model.attention_size=24", "model.maxout_size=16",
        "training.recompute_attention=true",
    ]
    out = tmp_path / "bench.json"
    command = [sys.executable, str(ROOT / "scripts" / "benchmark.py"), "--config", str(config), "--quick",
               "--threads", "1", "--device", "cpu", "--out", str(out)]
    command += [arg for override in overrides for arg in ("--set", override)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())

    assert report["peak_gflops"] > 0 and report["torch"]
    assert report["settings"]["recompute_attention"] is True
    assert report["settings"]["overrides"] == overrides
    for run in ("rnnsearch", "rnnencdec"):
        train = report["train"][run]
        assert train["tgt_tokens_per_s"] > 0 and train["flops_per_token"] > 0 and train["peak_rss_mb"] > 50
        assert 0 < train["mfu"] < 1
        achieved = train["tgt_tokens_per_s"] * train["flops_per_token"] / 1e9
        assert achieved == pytest.approx(train["achieved_gflops"], rel=1e-6)
        assert train["mfu"] == pytest.approx(achieved / train["mfu_peak_gflops"], rel=1e-6)
        decode = report["decode"][run]
        for key in ("greedy_sent_per_s", "beam5_sent_per_s", "greedy_mfu", "beam5_mfu", "peak_rss_mb"):
            assert decode[key] > 0, key
    assert "rnnsearch" in done.stdout and "written to" in done.stdout
