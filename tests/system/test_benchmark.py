"""scripts/benchmark.py end to end on local files (--quick): the JSON report's keys, and sane values.

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
from nmt.data.prepared import load_prepared
from tests.helpers import CONFIGS, TINY_TRANSFORMER, reverse_task_config, shortened

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
        # what the run trained with: the --set batch, fp32 and an unfused Adam on the CPU
        assert (train["batch_tokens"], train["max_words"], train["precision"]) == (400, 0, "fp32")
        assert (train["optimizer"], train["optimizer_fused"]) == ("adam", False)
        decode = report["decode"][run]
        assert train["mfu_peak_dtype"] == decode["mfu_peak_dtype"] == "float32"  # the dtype each phase computes in
        assert 0 <= decode["beam5_empty_outputs"] <= decode["sentences"]
        for key in ("greedy_sent_per_s", "beam5_sent_per_s", "greedy_mfu", "beam5_mfu", "peak_rss_mb"):
            assert decode[key] > 0, key
    assert "rnnsearch" in done.stdout and "transformer" in done.stdout and "written to" in done.stdout
    # each phase's figures printed as it ends: what a time limit cutting the benchmark short leaves in its log
    for run in report["train"]:
        for phase in ("train", "decode"):
            label = {"train": "training", "decode": "decoding"}[phase]
            line = next(line for line in done.stdout.splitlines() if line.startswith(f"  {run} {label}: "))
            assert json.loads(line.split(": ", 1)[1]) == report[phase][run]


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
    # each of 4 sentences decoded again alone: on the CPU the same translation as in its batch
    assert results[0]["beam5_batch1_checked"] == 4
    assert results[0]["beam5_batch1_identical"] == 4 and results[0]["beam5_batch1_differ"] == []


def test_the_batch1_check_names_the_sentences_whose_translation_changed_alone() -> None:
    """batch1_check decodes a spread of the sources one at a time and compares with the batched outputs."""
    src = [[1], [2], [3], [4], [5]]
    batched = [[10], [20], [30], [40], [50]]
    seen: list[list[list[int]]] = []

    def search(beam: int, batches: list, outputs: list[list[int]]) -> int:
        assert beam == 5 and all(ids.shape[0] == 1 for ids, _ in batches)  # one sentence a batch
        seen.append([ids[0].tolist() for ids, _ in batches])
        outputs.extend([10 * ids[0, 0].item()] if ids[0, 0].item() != 3 else [0] for ids, _ in batches)
        return 0

    result = benchmark.batch1_check(search, src, batched, 3)
    assert seen[0][0][0] == 1 and [s[0] for s in seen[0]] == [1, 3, 5]  # shortest, middle, longest
    assert result == {"beam5_batch1_checked": 3, "beam5_batch1_identical": 2, "beam5_batch1_differ": [2],
                      "beam5_batch1_empty": 0}
    # an empty output alike alone and batched is counted alike, and said to be empty: it proves nothing
    assert benchmark.batch1_check(lambda beam, batches, outputs: outputs.extend([] for _ in batches),
                                  src, [[], [20], [], [40], []], 3)["beam5_batch1_empty"] == 3
    assert benchmark.batch1_check(search, src[:2], batched[:2], 48)["beam5_batch1_checked"] == 2


@pytest.mark.slow
def test_a_compiled_run_warms_up_until_nothing_is_traced_and_records_what_ran(tmp_path: Path) -> None:
    """--set training.compile=true: the Transformer trains compiled, compiling in its warm-up (no graph traced
    in the timed steps), and the JSON says so; so does RNNsearch, whose decoder step compiles. The "eager"
    backend of torch.compile (dynamo's tracing, torch's operators: seconds, not inductor's build of the graph)."""
    plan = {**benchmark.QUICK_PLAN, "min_steps": 3}
    threads = torch.get_num_threads()
    torch.compiler.reset()
    torch.compiler.set_default_backend("eager")
    try:
        results = {}
        for name, model in (("transformer", {**TINY_TRANSFORMER, "dropout": 0.0}), ("rnn", None)):
            config = reverse_task_config(tmp_path / "data", model=model, training={"batch_tokens": 300, "compile": True})
            results[name] = benchmark.train_phase(config, "cpu", 1, plan, str(tmp_path / f"{name}.pt"), False)
    finally:
        torch.compiler.set_default_backend(None)
        torch.compiler.reset()
        torch.set_num_threads(threads)
    transformer, rnn = results["transformer"], results["rnn"]
    assert transformer["compile"] is True and transformer["graphs_traced_while_timed"] == 0
    assert transformer["warmup_steps"] >= 2  # the step that traced, then one that traced nothing
    assert rnn["compile"] is True and rnn["graphs_traced_while_timed"] == 0 and rnn["warmup_steps"] >= 2
    assert transformer["steps"] >= 3 and rnn["steps"] >= 3


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


def test_decode_only_needs_trained_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert benchmark.main(["--config", str(CONFIGS / "bench.yaml"), "--decode-only"]) == 2
    assert "--decode-only decodes trained runs: it needs --trained DIR." in capsys.readouterr().err


def test_the_training_batches_are_the_runs_pairs_within_its_max_words(tmp_path: Path) -> None:
    """A -50 run trains on pairs of at most 50 words: the benchmark's batches hold those pairs only, each
    once, as the trainer's epoch does (the longest batch, measured first, is one the run would train on)."""
    config = reverse_task_config(tmp_path, min_len=3, max_len=12, training={"max_words": 6})
    pairs = load_prepared(config.data).pairs("train")
    within = [(s, t) for s, t in pairs if len(s.split()) <= 6 and len(t.split()) <= 6]
    assert 0 < len(within) < len(pairs)
    tok, src, tgt, batches = benchmark.training_batches(config)
    indices = sorted(i for batch in batches for i in batch)
    assert indices == list(range(len(within)))
    assert src == [tok.encode_src(s) for s, _ in within] and tgt == [tok.encode_tgt(t) for _, t in within]


def test_sentences_set_the_decoded_sentences_with_quick_too() -> None:
    assert benchmark.measurement_plan(True, None) == benchmark.QUICK_PLAN
    assert benchmark.measurement_plan(False, None) == benchmark.DEFAULT_PLAN
    assert benchmark.measurement_plan(True, 20) == {**benchmark.QUICK_PLAN, "decode_sentences": 20}
    assert benchmark.measurement_plan(False, 100) == {**benchmark.DEFAULT_PLAN, "decode_sentences": 100}


def test_the_table_keeps_its_columns_under_long_run_names() -> None:
    """converged.yaml's run names are longer than bench.yaml's: every row still lines up with its header."""
    train = {"tgt_tokens_per_s": 41052.3, "flops_per_token": 5.2e7, "mfu": 0.004, "padding_fraction": 0.12,
             "batch_tokens": 24000, "precision": "bfloat16", "optimizer_fused": True, "peak_rss_mb": 2100.0}
    decode = {"weights": "w", "peak_rss_mb": 900.0, "beam5_batch1_identical": 47, "beam5_batch1_checked": 48,
              **{f"{search}_{key}": 1.5 for search in ("greedy", "beam5")
                 for key in ("sent_per_s", "tok_per_s", "mfu", "length_ratio")}}
    runs = ("rnnsearch-50", "transformer-30-relative")
    report = {"peak_gflops": 796000.0, "mfu_note": "n", "machine": {"device": "cuda", "threads": 16}, "torch": "2.x",
              "train": dict.fromkeys(runs, train), "decode": dict.fromkeys(runs, decode)}
    lines = benchmark.format_table(report).splitlines()
    for header in ("training", "decoding"):
        at = next(k for k, line in enumerate(lines) if line.startswith(header))
        block = lines[at : at + 1 + len(runs)]
        assert [line.split()[0] for line in block[1:]] == list(runs)
        assert len({len(line) for line in block}) == 1, block  # right-aligned columns end together
    training = lines[next(k for k, line in enumerate(lines) if line.startswith("training")) + 1].split()
    assert training[-4:-1] == ["24000", "bfloat16", "yes"]
    decoding = lines[next(k for k, line in enumerate(lines) if line.startswith("decoding")) + 1].split()
    assert decoding[-2] == "47/48"
    empty = {**report, "decode": {"rnnsearch-50": {**decode, "beam5_empty_outputs": 5, "sentences": 48,
                                                   "beam5_batch1_empty": 2}}}
    table = benchmark.format_table(empty)
    assert "47/48 (2 empty)" in table and "rnnsearch-50: 5 of 48 beam-5 outputs empty" in table
    decode_only = benchmark.format_table({**report, "train": {}}).splitlines()  # --decode-only: no training table
    assert not any(line.startswith("training") for line in decode_only)
    assert [line.split()[0] for line in decode_only if line.startswith(runs)] == list(runs)
