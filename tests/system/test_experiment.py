"""`nmt experiment` end to end on quick.yaml (shortened, on local files), its re-runs, and parallel training; the
other shipped experiment configs load, name their runs with the settings each run ends up with, and train a step."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from nmt.compare.curve import learning_curves
from nmt.compare.evaluate import effect_pairs, evaluate_runs
from nmt.compare.experiment import Timings, run_experiment
from nmt.config import Config, load_config
from nmt.data.sources import absolute
from nmt.errors import NMTError
from nmt.typed_yaml import config_diff
from tests.helpers import CONFIGS, shortened


@pytest.mark.slow
def test_quick_config_runs_the_whole_pipeline_shortened(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_path = CONFIGS / "quick.yaml"
    out = tmp_path / "out"
    results = run_experiment(config_path, shortened(tmp_path / "data"), out, jobs=2)
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
    overrides = shortened(tmp_path / "data")
    command = " ".join(["nmt experiment", str(config_path), *(f"--set {o}" for o in overrides), "--jobs 2", "--out", str(out)])
    assert f"Command: `{command}`" in report  # what reproduces the run, its output folder included
    assert "What was scored:" in report and "checkpoint best.pt (step " in report and "## Examples" in report
    for label in ("<10", "[10,20)", "[20,30)", "[30,40)", "[40,50)", "[50,60)", ">=60"):
        assert f"| {label} |" in report
    assert (out / "bleu_by_length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if attentive:
        assert (out / "attention_long_sentence.png").is_file()
        assert "nmt attention-checks" in report  # the caveat stands beside the heatmap
        # the heatmap and the entropy table say whose attention, decoded how, on which sentences
        shown = next(run for run in config.runs if run in attentive)
        assert (f"{shown}'s attention in its greedy translation of the first test sentence of 50+ words (or the "
                f"longest):\n\n![{shown}'s attention over one long test sentence](attention_long_sentence.png)") in report
        assert "Attention entropy of each attention run's greedy translations of the first 200 test sentences:" in report
    # the learning curve: every run's kept checkpoints (here the one at step 2), in the report with its plot
    curves = json.loads((out / "learning_curve.json").read_text())
    assert {name: [p["step"] for p in c["checkpoints"]] for name, c in curves["runs"].items()} == {
        run: [2] for run in config.runs
    }
    assert "# Learning curve by sentence length" in report and "](learning_curve.png)" in report
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (session,) = json.loads((out / "timings.json").read_text())["sessions"]
    assert "learning curve" in session["seconds"] and session["command"].startswith("nmt experiment ")
    # each run's process translated for the report once trained (translate_ahead); the report found every one
    # of them, and they are what its own translating gives: the cache emptied, the same hypotheses and curve
    assert set(session["seconds"]) >= {f"translate {run}" for run in config.runs} | {"train and translate (all runs, 2 at once)"}
    reused = capsys.readouterr().err.count("re-using cached translations")
    assert reused == 2 * len(config.runs)  # the test split's, and the curve's checkpoint's
    for run in config.runs:
        shutil.rmtree(out / "runs" / run / "hyps")
    again = evaluate_runs([out / "runs" / run for run in config.runs], out_dir=tmp_path / "again")
    assert "re-using cached translations" not in capsys.readouterr().err
    for run in config.runs:
        assert (tmp_path / "again" / f"{run}.hyp.txt").read_text() == (out / f"{run}.hyp.txt").read_text()
        assert again["runs"][run]["bleu"] == results["runs"][run]["bleu"]
    curve_again = learning_curves([out / "runs" / run for run in config.runs], out_dir=tmp_path / "again")
    assert [c["checkpoints"][0]["bleu"] for c in curve_again["runs"].values()] == [
        c["checkpoints"][0]["bleu"] for c in curves["runs"].values()
    ]
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


# The other experiment configs: what each run ends up with besides the settings of one reference run of
# the config (or of quick.yaml), and the run that trains a step (one of each model kind and attention).
PAPER_SIZES = {"embedding_size": 620, "hidden_size": 1000, "attention_size": 1000, "maxout_size": 500,
               "cell": "gru", "init": "bahdanau"}
PAPER_RUNS = {"rnnencdec-30": ("none", 30), "rnnencdec-50": ("none", 50), "rnnsearch-30": ("additive", 30),
              "rnnsearch-50": ("additive", 50)}
OTHER_CONFIGS = {
    "paper": ("rnnsearch-30", PAPER_SIZES, {"optimizer": "adadelta", "learning_rate": 1.0}),
    "paper-bible": ("rnnencdec-50", PAPER_SIZES, {"optimizer": "adam", "learning_rate": 0.0005}),
    "attention-scaling": ("scaled_dot-1024", {}, {"max_words": 50}),
}


def _as_recorded(config: Config) -> dict:
    """`config` as a run's config.yaml records it: the data section with data.source's keys alone, every
    one given (two configs that list other sources' keys, or leave them out, are the same run)."""
    return {**config.to_dict(), "data": dataclasses.asdict(absolute(config.data))}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OTHER_CONFIGS))
def test_other_experiment_configs_load_name_their_runs_and_train_a_step(name: str, tmp_path: Path) -> None:
    from nmt.data.prepare import prepare
    from nmt.training.trainer import train

    config_path = CONFIGS / f"{name}.yaml"
    trained_run, model, training = OTHER_CONFIGS[name]
    as_written = load_config(config_path)
    if name == "attention-scaling":  # dot vs scaled_dot at d=128 and d=1024, each otherwise quick's RNNsearch-50
        expected = {"dot-128": ("dot", 128), "scaled_dot-128": ("scaled_dot", 128), "dot-1024": ("dot", 1024),
                    "scaled_dot-1024": ("scaled_dot", 1024)}
        reference, varied = load_config(CONFIGS / "quick.yaml").for_run("rnnsearch-50"), "model.attention_size"
    else:  # RNNencdec and RNNsearch at ceilings 30 and 50, otherwise the config's rnnsearch-50
        expected, reference, varied = PAPER_RUNS, as_written.for_run("rnnsearch-50"), "training.max_words"
    section, field = varied.split(".")
    runs = {run: (as_written.for_run(run).model.attention, getattr(getattr(as_written.for_run(run), section), field))
            for run in as_written.runs}
    assert runs == expected and list(as_written.runs) == list(expected)  # names, settings and order
    for run in as_written.runs:
        differences = config_diff(_as_recorded(reference), _as_recorded(as_written.for_run(run)))
        assert set(differences) <= {"model.attention", varied}, (run, differences)
        settings = as_written.for_run(run)
        assert {key: getattr(settings.model, key) for key in model} == model
        assert {key: getattr(settings.training, key) for key in training} == training

    # shortened onto local files: every run keeps its model and ceiling, and trains 2 steps
    config = load_config(config_path, shortened(tmp_path / "data"))
    for run in config.runs:
        short, full = config.for_run(run), as_written.for_run(run)
        assert short.model == full.model and short.training.max_words == full.training.max_words
        assert (short.training.max_steps, short.data.source) == (2, "files")
    # the runs without attention are checked against those with it, pairwise in config order
    pairs, unpaired = effect_pairs({run: config.for_run(run) for run in config.runs})
    if name == "attention-scaling":
        assert (pairs, unpaired) == ([], list(expected))
    else:
        assert (pairs, unpaired) == ([("rnnencdec-30", "rnnsearch-30"), ("rnnencdec-50", "rnnsearch-50")], [])

    run_config = config.for_run(trained_run)
    prepare(run_config.data)
    summary = train(run_config, tmp_path / "runs" / trained_run)
    assert summary["final_step"] == 2
    attention = run_config.model.attention  # the name the plot's legend gives it too
    assert summary["model"] == {"none": "RNNencdec", "additive": "RNNsearch"}.get(attention, f"{attention} attention")
    written = load_config(tmp_path / "runs" / trained_run / "config.yaml")
    assert written.model == as_written.for_run(trained_run).model
    assert written.training.max_words == as_written.for_run(trained_run).training.max_words


@pytest.mark.slow
def test_rerun_skips_finished_runs_and_refuses_changed_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path = CONFIGS / "quick.yaml"
    overrides = shortened(tmp_path / "data")
    out = tmp_path / "out"
    # one run at a time (half the time: no worker processes to start): re-runs are the point here; training in
    # parallel is test_quick_config_runs_the_whole_pipeline_shortened's
    run_experiment(config_path, overrides, out, jobs=1)
    summary = out / "runs" / "rnnsearch-50" / "summary.json"
    first = summary.stat().st_mtime_ns
    capsys.readouterr()
    first_timings = json.loads((out / "timings.json").read_text())
    run_experiment(config_path, overrides, out, jobs=1)
    assert "run rnnsearch-50 already finished: skipped" in capsys.readouterr().out
    assert summary.stat().st_mtime_ns == first
    # the re-run's (cached) evaluation time is a session of its own beside the first run's, never over it
    earlier, rerun = json.loads((out / "timings.json").read_text())["sessions"]
    assert earlier == first_timings["sessions"][0]
    assert "evaluate" in rerun["seconds"] and "learning curve" in rerun["seconds"]
    assert not any(step.startswith("train") for step in rerun["seconds"])  # nothing trained again
    # a decoding change needs no training, but evaluation must use it: each run's own beam, from its config
    results = run_experiment(config_path, [*overrides, "runs.rnnsearch-50.decoding.beam_size=1"], out, jobs=1)
    assert summary.stat().st_mtime_ns == first
    assert load_config(out / "runs" / "rnnsearch-50" / "config.yaml").decoding.beam_size == 1
    beams = {name: run["beam_size"] for name, run in results["settings"]["runs"].items()}
    assert beams == {"rnnencdec-30": 5, "rnnsearch-30": 5, "rnnencdec-50": 5, "rnnsearch-50": 1}
    with pytest.raises(NMTError, match="model.hidden_size"):
        run_experiment(config_path, [*overrides, "model.hidden_size=32"], out, jobs=1)
    run_experiment(config_path, [*overrides, "model.hidden_size=32"], out, force=True, jobs=1)
    assert summary.stat().st_mtime_ns != first
    # --force with --runs trains those runs afresh and leaves the others as they were
    others = {run: (out / "runs" / run / "summary.json").stat().st_mtime_ns
              for run in ("rnnencdec-30", "rnnsearch-30", "rnnencdec-50")}
    second = summary.stat().st_mtime_ns
    run_experiment(config_path, [*overrides, "model.hidden_size=32"], out, force=True, jobs=1, runs=["rnnsearch-50"])
    assert summary.stat().st_mtime_ns != second
    assert {run: (out / "runs" / run / "summary.json").stat().st_mtime_ns for run in others} == others


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
    overrides = shortened(tmp_path / "data") + ["training.max_steps=6", "training.validate_every=3"]
    config = load_config(config_path, overrides + ["training.threads=1"])
    prepare(config.data)
    for jobs in (1, 2):
        timings = Timings(tmp_path / f"jobs{jobs}" / "timings.json", "nmt experiment two.yaml", None)
        run_dirs = {run: tmp_path / f"jobs{jobs}" / "runs" / run for run in config.runs}
        train_runs(config, run_dirs, jobs, timings.record)
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
    # a run that fails in a worker is returned with its message, naming the run and its output; the other trains on
    bad = load_config(config_path, overrides + ["runs.search.training.max_words=1"])
    run_dirs = {run: tmp_path / "bad" / "runs" / run for run in bad.runs}
    timings = Timings(tmp_path / "bad" / "timings.json", "nmt experiment two.yaml", None)
    failed = train_runs(bad, run_dirs, 2, timings.record)
    assert list(failed) == ["search"]
    assert re.match(r"run search: .*no pairs of at most 1 word ", failed["search"].message)
    assert "runs/search.log" in failed["search"].hint
    assert set(timings.seconds) == {"train fixed", "train (all runs, 2 at once)"}
    assert (run_dirs["fixed"] / "summary.json").is_file()


@pytest.mark.slow
def test_transformer_config_runs_the_whole_pipeline_shortened(tmp_path: Path) -> None:
    config_path = CONFIGS / "transformer.yaml"
    as_written = load_config(config_path)
    quick = load_config(CONFIGS / "quick.yaml")
    for run in ("rnnsearch-30", "rnnsearch-50"):  # the main job's runs, so that they can be re-used
        assert as_written.for_run(run).model == quick.for_run(run).model
        assert as_written.for_run(run).training == quick.for_run(run).training
    kinds = {run: (as_written.for_run(run).model.architecture, as_written.for_run(run).model.positions,
                   as_written.for_run(run).training.max_words) for run in as_written.runs}
    assert kinds == {
        "rnnsearch-30": ("rnn", "sinusoidal", 30), "rnnsearch-50": ("rnn", "sinusoidal", 50),
        "transformer-30": ("transformer", "sinusoidal", 30), "transformer-50": ("transformer", "sinusoidal", 50),
        "transformer-30-relative": ("transformer", "relative", 30),
    }
    out = tmp_path / "out"
    # one run at a time, as the re-run test: training in parallel is the quick config's test
    results = run_experiment(config_path, [*shortened(tmp_path / "data"), "model.hidden_size=32",
                                           "model.embedding_size=32"], out, jobs=1)
    assert set(results["runs"]) == set(as_written.runs)
    summary = json.loads((out / "runs" / "transformer-30-relative" / "summary.json").read_text())
    assert summary["model"] == "Transformer (relative positions)" and summary["final_step"] == 2
    contrasts = {(e["baseline"], e["attention"]): e["checks"] for e in results["effect"]}
    assert list(contrasts) == [("transformer-30", "rnnsearch-30"), ("transformer-30", "transformer-30-relative"),
                               ("transformer-50", "rnnsearch-50")]
    assert [len(checks) for checks in contrasts.values()] == [1, 1, 2]  # keeps more; both flat at 50
    report = (out / "report.md").read_text()
    assert "## Does the table show the effect? (transformer-30 vs transformer-30-relative)" in report
    assert set(results["attention"]) == set(as_written.runs)  # the Transformer's last-layer cross-attention too
    curves = json.loads((out / "learning_curve.json").read_text())["runs"]
    assert curves["transformer-30-relative"]["attention"] == "multi-head (Transformer, relative positions)"
    assert curves["rnnsearch-30"]["attention"] == "additive"
