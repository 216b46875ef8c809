"""`nmt experiment`: every shipped config runs end to end (shortened, on local files), and re-runs resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nmt.compare.experiment import Timings, run_experiment
from nmt.config import load_config
from nmt.decoding.attention_stats import attention_entropy
from nmt.errors import NMTError
from tests.synthetic import reverse_pairs, write_parallel

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def shortened(config_path: Path, root: Path) -> list[str]:
    """Overrides that point a config's data at local reverse-digit files and cut training to 2 steps."""
    for name, n, seed in (("train", 200, 0), ("valid", 20, 1), ("test", 30, 2)):
        write_parallel(root / name, reverse_pairs(n, 3, 12, seed=seed))
    overrides = [
        "data.source=files",
        f"data.dir={root / 'prepared'}",
        "data.src_lang=src",
        "data.tgt_lang=tgt",
        f"data.train={root / 'train'}",
        f"data.valid={root / 'valid'}",
        f"data.test={root / 'test'}",
        "data.vocab_size=25",
        "data.subword_type=bpe",
        "data.joint_vocab=true",
        "training.max_steps=2",
        "training.validate_every=2",
        "training.checkpoint_every=2",
        "training.valid_max_sentences=5",
        "training.batch_tokens=400",
        "training.device=cpu",
        "decoding.batch_size=16",
    ]
    for run, sections in load_config(config_path).runs.items():
        if "dir" in (sections.get("data") or {}):  # runs with their own data folder (the -30 / -50 runs)
            overrides.append(f"runs.{run}.data.dir={root / ('prepared-' + run)}")
    return overrides


@pytest.mark.slow
@pytest.mark.parametrize("name", ["quick", "paper", "paper-bible", "attention-scaling"])
def test_shipped_config_runs_shortened(name: str, tmp_path: Path) -> None:
    config_path = CONFIGS / f"{name}.yaml"
    out = tmp_path / "out"
    results = run_experiment(config_path, shortened(config_path, tmp_path / "data"), out)
    config = load_config(config_path)
    assert set(results["runs"]) == set(config.runs)
    for run in config.runs:
        assert (out / "runs" / run / "summary.json").is_file()
        assert results["runs"][run]["buckets"][0]["label"] == "<10"
    saved = json.loads((out / "results.json").read_text())
    attentive = {run for run in config.runs if config.for_run(run).model.attention != "none"}
    assert set(saved["attention"]) == attentive
    for stats in saved["attention"].values():
        assert stats["sentences"] == 30  # every sentence of the shortened test split (at most 200)
    report = (out / "report.md").read_text()
    assert "| bucket | n |" in report
    overrides = shortened(config_path, tmp_path / "data")
    command = " ".join(["nmt experiment", str(config_path), *(f"--set {o}" for o in overrides), "--out", str(out)])
    assert f"Command: `{command}`" in report  # what reproduces the run, its output folder included
    assert "What was scored:" in report and "checkpoint best.pt (step " in report and "## Examples" in report
    for label in ("<10", "[10,20)", "[20,30)", "[30,40)", "[40,50)", "[50,60)", ">=60"):
        assert f"| {label} |" in report
    assert (out / "bleu_by_length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if attentive:
        assert (out / "attention_long_sentence.png").is_file()
    # the learning curve: every run's kept checkpoints (here the one at step 2), in the report with its plot
    curves = json.loads((out / "learning_curve.json").read_text())
    assert {name: [p["step"] for p in c["checkpoints"]] for name, c in curves["runs"].items()} == {
        run: [2] for run in config.runs
    }
    assert "# Learning curve by sentence length" in report and "](learning_curve.png)" in report
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "learning curve" in json.loads((out / "timings.json").read_text())
    # the fixed-vector runs are checked against the attention runs, pairwise in config order
    # (and, across training ceilings, each lower ceiling's attention run against the higher fixed-vector runs)
    baselines = [run for run in config.runs if run not in attentive]
    paired = list(zip(baselines, [run for run in config.runs if run in attentive], strict=False))
    ceiling = {run: config.for_run(run).training.max_words or 10**9 for run in config.runs}
    checks = {(e["baseline"], e["attention"]): e["checks"] for e in saved.get("effect", [])}
    assert list(checks)[: len(paired)] == paired
    for base, att in paired:  # the flat check only for an attention run trained on 50+ words
        assert len(checks[(base, att)]) == (4 if ceiling[att] >= 50 else 3)
    crossed = list(checks)[len(paired):]
    assert crossed == [(b, a) for _, a in paired for b, a50 in paired if ceiling[a] < min(ceiling[b], ceiling[a50])]
    assert all(len(checks[pair]) == 1 for pair in crossed)
    for base, att in checks:
        assert f"## Does the table show the effect? ({base} vs {att})" in report


@pytest.mark.slow
def test_rerun_skips_finished_runs_and_refuses_changed_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path = CONFIGS / "quick.yaml"
    overrides = shortened(config_path, tmp_path / "data")
    out = tmp_path / "out"
    run_experiment(config_path, overrides, out)
    summary = out / "runs" / "rnnsearch-50" / "summary.json"
    first = summary.stat().st_mtime_ns
    capsys.readouterr()
    first_timings = json.loads((out / "timings.json").read_text())
    run_experiment(config_path, overrides, out)
    assert "run rnnsearch-50 already finished: skipped" in capsys.readouterr().out
    assert summary.stat().st_mtime_ns == first
    # the re-run's (cached) evaluation time sits beside the first run's, never over it
    timings = json.loads((out / "timings.json").read_text())
    assert timings["evaluate"] == first_timings["evaluate"]
    assert timings["learning curve"] == first_timings["learning curve"]
    assert "evaluate (re-run, training skipped)" in timings and "learning curve (re-run, training skipped)" in timings
    # a decoding change needs no training, but evaluation must use it: each run's own beam, from its config
    results = run_experiment(config_path, [*overrides, "runs.rnnsearch-50.decoding.beam_size=1"], out)
    assert summary.stat().st_mtime_ns == first
    assert load_config(out / "runs" / "rnnsearch-50" / "config.yaml").decoding.beam_size == 1
    beams = {name: run["beam_size"] for name, run in results["settings"]["runs"].items()}
    assert beams == {"rnnencdec-30": 5, "rnnsearch-30": 5, "rnnencdec-50": 5, "rnnsearch-50": 1}
    with pytest.raises(NMTError, match="model.hidden_size"):
        run_experiment(config_path, [*overrides, "model.hidden_size=32"], out)
    run_experiment(config_path, [*overrides, "model.hidden_size=32"], out, force=True)
    assert summary.stat().st_mtime_ns != first


def test_force_only_deletes_experiment_folders(tmp_path: Path) -> None:
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "thesis.tex").write_text("keep me", encoding="utf-8")
    with pytest.raises(NMTError, match=r"--force would delete .*notes, which is not an experiment folder"):
        run_experiment(CONFIGS / "quick.yaml", [], precious, force=True)
    assert (precious / "thesis.tex").read_text(encoding="utf-8") == "keep me"


@pytest.mark.parametrize("text", ['{"prepare": 1', '[1, 2]', '{"prepare": null}', '{"prepare": "soon"}'])
def test_unreadable_timings_is_a_user_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "timings.json").write_text(text, encoding="utf-8")
    with pytest.raises(NMTError, match=r"timings.json is not the step timings") as error:
        Timings(tmp_path / "timings.json")
    assert "Delete it" in error.value.hint


def test_timings_read_back_what_they_recorded(tmp_path: Path) -> None:
    Timings(tmp_path / "timings.json").record("prepare", 12.345)
    assert Timings(tmp_path / "timings.json").seconds == {"prepare": 12.3}
    timings = Timings(tmp_path / "timings.json")
    timings.record("evaluate", 2.0)
    timings.forget("prepare")
    assert Timings(tmp_path / "timings.json").seconds == {"evaluate": 2.0}


def test_attention_entropy_values() -> None:
    import torch

    uniform = torch.full((3, 4), 0.25)
    entropy, ratio = attention_entropy(uniform)
    assert entropy == pytest.approx(torch.log(torch.tensor(4.0)).item())
    assert ratio == pytest.approx(1.0)
    one_hot = torch.eye(4)[:3]
    entropy, ratio = attention_entropy(one_hot)
    assert entropy == pytest.approx(0.0, abs=1e-9)
    assert ratio == pytest.approx(0.0, abs=1e-9)


def test_training_jobs_default_to_one_per_core_on_cpu_and_one_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    import nmt.training.parallel as experiment
    from nmt.config import config_from_dict

    runs = {name: {} for name in "abcd"}
    config = config_from_dict({"training": {"device": "cpu"}, "runs": runs})
    monkeypatch.setattr(experiment, "available_cores", lambda: 2)
    assert experiment.training_jobs(config, 0) == 2 and experiment.training_jobs(config, 3) == 3
    monkeypatch.setattr(experiment, "available_cores", lambda: 16)
    assert experiment.training_jobs(config, 0) == 4  # never more than the runs
    on_gpu = config_from_dict({"training": {"device": "cuda"}, "runs": runs})
    assert experiment.training_jobs(on_gpu, 0) == 1


@pytest.mark.slow
def test_runs_trained_in_parallel_learn_what_they_learn_one_after_the_other(tmp_path: Path) -> None:
    from nmt.data.prepare import prepare
    from nmt.training.parallel import train_runs

    config_path = tmp_path / "two.yaml"
    config_path.write_text(
        "model: {embedding_size: 16, hidden_size: 16, attention_size: 16, maxout_size: 8}\n"
        "runs:\n  fixed: {model: {attention: none}}\n  search: {training: {max_words: 8}}\n",
        encoding="utf-8",
    )
    overrides = shortened(config_path, tmp_path / "data") + ["training.max_steps=6", "training.validate_every=3"]
    config = load_config(config_path, overrides + ["training.threads=1"])
    prepare(config.data)
    for jobs in (1, 2):
        timings = Timings(tmp_path / f"jobs{jobs}" / "timings.json")
        run_dirs = {run: tmp_path / f"jobs{jobs}" / "runs" / run for run in config.runs}
        assert train_runs(config, run_dirs, jobs, timings.record) == 0
        assert set(timings.seconds) == {"train fixed", "train search", f"train (all runs, {jobs} at once)"}
    for run in ("fixed", "search"):
        losses = [
            [json.loads(line).get("valid_loss") for line in (tmp_path / f"jobs{jobs}" / "runs" / run / "log.jsonl")
             .read_text().splitlines() if '"valid"' in line]
            for jobs in (1, 2)
        ]
        assert len(losses[0]) == 2 and losses[0] == pytest.approx(losses[1], rel=1e-6)
    # each worker's output is kept beside its run; the ceiling shows there
    assert "(of at most 8 words)" in (tmp_path / "jobs2" / "runs" / "search.log").read_text()
    # a run that fails in a worker fails the experiment with its message, naming the run and its output
    bad = load_config(config_path, overrides + ["runs.search.training.max_words=1"])
    run_dirs = {run: tmp_path / "bad" / "runs" / run for run in bad.runs}
    with pytest.raises(NMTError, match=r"run search: .*no pairs of at most 1 words") as error:
        train_runs(bad, run_dirs, 2, Timings(tmp_path / "bad" / "timings.json").record)
    assert "runs/search.log" in error.value.hint
