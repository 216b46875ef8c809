"""nmt/compare/experiment.py and experiment_report.py: the step timings, what --force may delete (and experiment_folder.py: tests/test_experiment_folder.py), the report's tables; and
one tiny experiment end to end with early stopping and the attention checks (whole shipped experiments:
tests/system/test_experiment.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from pathlib import Path

import pytest
import torch

from nmt import environment
from nmt.compare import experiment
from nmt.compare.experiment import Timings, run_experiment
from nmt.compare.experiment_report import _setup_lines, _tables, _time_lines, training_outcomes
from nmt.config import Config, config_from_dict, load_config, save_config
from nmt.data.sources import prepared_dir
from nmt.errors import NMTError
from nmt.rundir.lock import ExperimentLock, RunLock
from nmt.rundir.writing import write_config, write_summary
from tests.helpers import CONFIGS, reverse_task_config, shortened


def test_force_only_deletes_experiment_folders(tmp_path: Path) -> None:
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "thesis.tex").write_text("keep me", encoding="utf-8")
    with pytest.raises(NMTError, match=r"--force would delete .*notes, which is not an experiment folder"):
        run_experiment(CONFIGS / "quick.yaml", [], precious, force=True)
    assert (precious / "thesis.tex").read_text(encoding="utf-8") == "keep me"


def _an_experiment_folder(out: Path) -> Path:
    """An experiment folder as --force finds it: its timings.json and a trained run's folder."""
    (out / "runs" / "x").mkdir(parents=True)
    (out / "timings.json").write_text('{"sessions": []}', encoding="utf-8")
    (out / "runs" / "x" / "log.jsonl").write_text("{}\n", encoding="utf-8")
    return out / "runs" / "x" / "log.jsonl"


@pytest.mark.parametrize("only_that_run", [False, True])
def test_force_deletes_no_run_that_another_process_trains(tmp_path: Path, only_that_run: bool) -> None:
    work = _an_experiment_folder(tmp_path / "out")
    raw = reverse_task_config(tmp_path / "data").to_dict()
    raw["runs"] = {"x": {}, "y": {}}
    save_config(config_from_dict(raw), tmp_path / "config.yaml")
    lock = RunLock(tmp_path / "out" / "runs" / "x")
    lock.acquire()  # as `nmt train` does: the holder() probe opens the file anew, so this process counts as another
    try:
        with pytest.raises(NMTError, match=rf"--force would delete \S+/runs/x, which a process \(PID {os.getpid()} on {socket.gethostname()}\) is training now"):
            run_experiment(tmp_path / "config.yaml", [], tmp_path / "out", force=True, runs=["x"] if only_that_run else ())
    finally:
        lock.release()
    assert work.read_text(encoding="utf-8") == "{}\n"


def test_force_deletes_nothing_when_the_corpus_cannot_be_read(tmp_path: Path) -> None:
    work = _an_experiment_folder(tmp_path / "out")
    raw = reverse_task_config(tmp_path / "data").to_dict()
    raw["data"]["files"]["train"] = str(tmp_path / "missing")
    raw["runs"] = {"x": {}}
    save_config(config_from_dict(raw), tmp_path / "config.yaml")
    with pytest.raises(NMTError, match="missing"):
        run_experiment(tmp_path / "config.yaml", [], tmp_path / "out", force=True)
    assert work.read_text(encoding="utf-8") == "{}\n" and (tmp_path / "out" / "timings.json").is_file()


@pytest.mark.parametrize("text", ['{"prepare": 1', '[1, 2]', '{"prepare": null}', '{"prepare": "soon"}',
                                  '{"sessions": 3}', '{"sessions": [{"command": "nmt experiment"}]}',
                                  '{"sessions": [{"seconds": {"prepare": "soon"}}]}',
                                  '{"sessions": [{"seconds": {}, "machine": "x"}]}',
                                  '{"sessions": [{"seconds": {}, "machine": {"cpu": "x"}, "command": "c", "started": "s"}]}'])
def test_unreadable_timings_is_a_user_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "timings.json").write_text(text, encoding="utf-8")
    with pytest.raises(NMTError, match=r"timings.json is not the step timings") as error:
        Timings(tmp_path / "timings.json", "nmt experiment a.yaml", None)
    assert "Delete it" in error.value.hint


def test_timings_keep_each_session_beside_the_earlier_ones(tmp_path: Path) -> None:
    machine = environment.describe_environment()
    Timings(tmp_path / "timings.json", "nmt experiment a.yaml", machine).record("prepare", 12.345)
    timings = Timings(tmp_path / "timings.json", "nmt experiment a.yaml --set training.max_steps=9", machine)
    assert timings.seconds == {}  # a new session
    timings.record("train a", 2.0)
    timings.record("prepare", 0.04)
    sessions = json.loads((tmp_path / "timings.json").read_text(encoding="utf-8"))["sessions"]
    assert [(s["command"], s["seconds"]) for s in sessions] == [
        ("nmt experiment a.yaml", {"prepare": 12.3}),
        ("nmt experiment a.yaml --set training.max_steps=9", {"train a": 2.0, "prepare": 0.0})]
    assert sessions[1]["machine"] == machine and sessions[1]["started"].endswith(" UTC")
    assert Timings(tmp_path / "timings.json", "nmt experiment a.yaml", None).sessions[:2] == sessions


def test_timings_of_an_earlier_nmt_are_one_session_of_unknown_command(tmp_path: Path) -> None:
    (tmp_path / "timings.json").write_text('{"prepare": 1.5, "evaluate": 8}', encoding="utf-8")
    timings = Timings(tmp_path / "timings.json", "nmt experiment a.yaml", None)
    timings.record("evaluate", 3.0)
    assert [s["seconds"] for s in timings.sessions] == [{"prepare": 1.5, "evaluate": 8.0}, {"evaluate": 3.0}]
    lines = _time_lines(timings.sessions)
    assert lines[0] == "Session 1, written by an earlier nmt, which kept no command or machine with its times:"
    assert "| evaluate | 8 |" in lines and "| evaluate | 3 |" in lines


def test_the_report_times_each_session_under_its_command_and_machine() -> None:
    machine = {"cpu": "AMD EPYC", "cpu_model": "family 25 model 1", "gpu": None, "nmt_commit": "ac158fc" * 5 + "ac15"}
    first = {"command": "nmt experiment c.yaml", "started": "2026-12-06 07:50:00 UTC", "machine": machine,
             "seconds": {"prepare": 9.4, "train a": 7520.2}}
    assert _time_lines([first]) == ["| step | seconds |", "|---|---|", "| prepare | 9 |", "| train a | 7520 |"]
    gpu = machine | {"gpu": "NVIDIA H200", "nmt_commit": None}
    second = first | {"command": "nmt experiment c.yaml --set training.max_minutes=0", "machine": gpu,
                      "seconds": {"train a": 349.6, "evaluate": 8.8}}
    lines = _time_lines([first, second])
    assert lines[0] == ("Session 1, started 2026-12-06 07:50:00 UTC on AMD EPYC (family 25 model 1), nmt at "
                        "ac158fcac: `nmt experiment c.yaml`")
    assert lines[7] == ("Session 2, started 2026-12-06 07:50:00 UTC on AMD EPYC (family 25 model 1), GPU NVIDIA "
                        "H200, nmt at no git checkout: `nmt experiment c.yaml --set training.max_minutes=0`")
    assert lines[10:] == ["|---|---|", "| train a | 350 |", "| evaluate | 9 |"]


def test_an_interrupted_experiment_s_session_says_where_it_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nmt.compare import experiment

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt  # Ctrl-C or SIGTERM while the runs train

    monkeypatch.setattr(experiment, "train_runs", interrupted)
    config_path, out = tmp_path / "a.yaml", tmp_path / "out"
    config_path.write_text("model: {hidden_size: 16}\nruns: {a: {}}\n", encoding="utf-8")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config_path, shortened(tmp_path / "data"), out)
    (session,) = json.loads((out / "timings.json").read_text(encoding="utf-8"))["sessions"]
    assert list(session["seconds"]) == ["prepare", "interrupted, after"]
    assert session["seconds"]["interrupted, after"] >= session["seconds"]["prepare"]


def test_a_refused_experiment_writes_nothing(tmp_path: Path) -> None:
    config_path, out = tmp_path / "a.yaml", tmp_path / "out"
    config_path.write_text("model: {hidden_size: 16}\nruns: {a: {}}\n", encoding="utf-8")
    overrides = shortened(tmp_path / "data")
    config = load_config(config_path, overrides)
    save_config(config, out / "config.yaml")
    Timings(out / "timings.json", "nmt experiment a.yaml", None).record("prepare", 5.0)
    write_config(config.for_run("a"), out / "runs" / "a")
    write_summary(out / "runs" / "a", {"stopped_by": "max_steps", "wall_time_s": 60.0})
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    with pytest.raises(NMTError, match=r"run 'a' in .* was trained with a different config \(model.hidden_size\)"):
        run_experiment(config_path, [*overrides, "model.hidden_size=32"], out)
    with pytest.raises(NMTError, match=r"finished at training.max_steps 2; continuing it to 4 would stretch its "
                                       r"cosine schedule") as longer:
        run_experiment(config_path, [*overrides, "training.max_steps=4"], out)
    assert "--force" in longer.value.hint
    (out / "runs" / "a" / "checkpoints").mkdir()
    (out / "runs" / "a" / "checkpoints" / "step_00000002.pt").write_bytes(b"weights")
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    with pytest.raises(NMTError, match=r"run 'a' in .* is already at step 2, past training.max_steps 1") as shorter:
        run_experiment(config_path, [*overrides, "training.max_steps=1"], out)
    assert "--force" in shorter.value.hint and "--resume" not in str(shorter.value)
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before


def test_an_experiment_folder_that_another_experiment_writes_is_refused_first(tmp_path: Path) -> None:
    # a second `nmt experiment` on one --out is told so at once, with or without --force, and changes nothing
    config_path, out = tmp_path / "a.yaml", tmp_path / "out"
    config_path.write_text("runs: {a: {}}\n", encoding="utf-8")
    overrides = shortened(tmp_path / "data")
    Timings(out / "timings.json", "nmt experiment a.yaml", None).record("prepare", 5.0)
    with ExperimentLock(out):
        before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
        for force in (False, True):
            with pytest.raises(NMTError, match=rf"{out} is being written by another nmt experiment "
                                               rf"\(PID {os.getpid()} on {socket.gethostname()}\)") as refused:
                run_experiment(config_path, overrides, out, force=force)
            assert "run the same command again" in refused.value.hint
            assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before
    assert ExperimentLock(out).holder() is None  # released where it was taken


def test_force_holds_the_experiment_lock_through_its_preparing_and_its_deletion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a second experiment started while --force prepares the data is refused; the deletion keeps the lock's file
    # (a new file would be a lock that nobody holds), and the folder's other files go
    config_path, out = tmp_path / "a.yaml", tmp_path / "out"
    config_path.write_text("runs: {a: {}}\n", encoding="utf-8")
    overrides = shortened(tmp_path / "data")
    Timings(out / "timings.json", "nmt experiment a.yaml", None).record("prepare", 5.0)
    (out / "report.md").write_text("an earlier report\n", encoding="utf-8")
    lock_file = out / ExperimentLock.name

    def preparing(config: object) -> float:
        with pytest.raises(NMTError, match="is being written by another nmt experiment"):
            run_experiment(config_path, overrides, out)
        return 0.0

    class Stop(Exception):
        pass

    def after_deletion(*args: object) -> None:
        assert sorted(path.name for path in out.iterdir()) == [ExperimentLock.name]
        assert lock_file.stat().st_ino == inode and ExperimentLock(out).holder() is not None
        raise Stop

    monkeypatch.setattr(experiment, "_prepare_data", preparing)
    monkeypatch.setattr(experiment, "check_runs", after_deletion)
    with ExperimentLock(out):  # an earlier experiment's lock file, free now
        pass
    inode = lock_file.stat().st_ino
    with pytest.raises(Stop):
        run_experiment(config_path, overrides, out, force=True)
    assert ExperimentLock(out).holder() is None


def test_an_out_folder_holding_a_run_is_refused_and_the_run_kept(tmp_path: Path) -> None:
    config_path, out = tmp_path / "a.yaml", tmp_path / "first" / "runs" / "a"
    config_path.write_text("runs: {a: {}}\n", encoding="utf-8")
    overrides = shortened(tmp_path / "data")
    write_config(load_config(config_path, overrides).for_run("a"), out)
    write_summary(out, {"stopped_by": "max_steps", "wall_time_s": 60.0})
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    with pytest.raises(NMTError, match=r"--out .*first/runs/a holds a trained run \(summary.json") as refused:
        run_experiment(config_path, overrides, out)
    assert "OUT/runs/NAME" in refused.value.hint
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before


def test_runs_preparing_their_data_differently_into_one_data_dir_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    config_path, out = tmp_path / "a.yaml", tmp_path / "out"
    config_path.write_text("runs: {a: {}, b: {data: {max_train_pairs: 100}}}\n", encoding="utf-8")
    overrides = shortened(tmp_path / "data")
    with pytest.raises(NMTError, match=r"runs 'a' and 'b' prepare their data differently \(data.max_train_pairs\) into "
                                       r"the one data.dir .*prepared") as shared:
        run_experiment(config_path, overrides, out)
    assert "runs.b.data.dir" in shared.value.hint
    assert not out.exists() and not (tmp_path / "data" / "prepared").exists()


def test_runs_picks_the_runs_an_experiment_trains_and_an_unknown_one_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from nmt.cli import main
    from nmt.compare import experiment as experiment_module

    config_path, out = tmp_path / "a.yaml", tmp_path / "out"
    config_path.write_text("runs: {a: {}, b: {model: {attention: none}}, c: {}}\n", encoding="utf-8")
    assert main(["experiment", str(config_path), "--runs", "b", "d", "--out", str(out)]) == 2
    assert f"--runs d: not a run of {config_path}." in capsys.readouterr().err and not out.exists()

    checked = {}

    def stop_at_check(config: object, run_dirs: dict[str, Path]) -> None:  # before anything is written
        checked.update(run_dirs)
        raise NMTError("checked")

    monkeypatch.setattr(experiment_module, "check_runs", stop_at_check)
    assert main(["experiment", str(config_path), "--runs", "c", "b", "--out", str(out)]) == 2
    assert checked == {"c": out / "runs" / "c", "b": out / "runs" / "b"} and not out.exists()


def test_the_report_gives_the_torch_threads_the_runs_trained_with(tmp_path: Path) -> None:
    config = config_from_dict({"runs": {"a": {}, "b": {}}})
    for name in config.runs:
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "environment.json").write_text('{"torch_threads": 1}', encoding="utf-8")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert ", torch threads 1 per training run and 2 in evaluation" in _setup_lines(config, tmp_path, environment.describe_environment())[0]
    finally:
        torch.set_num_threads(threads)


def test_the_machine_is_named_down_to_its_cpu_model_and_torch_s_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One model name ("AMD EPYC") covers CPU generations whose float kernels differ (AVX2, AVX512): the
    environment and the report give the family and model numbers and the kernels torch runs."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                       "model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 26\nmodel\t\t: 2\n\n", encoding="utf-8")
    read = environment._cpuinfo
    monkeypatch.setattr(environment, "_cpuinfo", lambda: read(cpuinfo))
    described = environment.describe_environment()
    assert (described["cpu"], described["cpu_model"]) == ("AMD EPYC", "family 25 model 17")
    assert described["cpu_capability"] == torch.backends.cpu.get_cpu_capability() != ""
    config = config_from_dict({"runs": {"a": {}}})
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "environment.json").write_text('{"torch_threads": 1}', encoding="utf-8")
    assert _setup_lines(config, tmp_path, environment.describe_environment())[0].startswith(
        f"Machine: AMD EPYC (family 25 model 17), torch's {described['cpu_capability']} kernels, ")
    monkeypatch.setattr(environment, "_cpuinfo", lambda: {})  # no /proc/cpuinfo (macOS, Windows)
    assert environment.describe_environment()["cpu_model"] is None


def test_the_report_names_the_split_and_lengths_the_evaluation_scored_by(tmp_path: Path) -> None:
    # the evaluation reads the first run's evaluation section, which a run may set
    config = config_from_dict({"evaluation": {"by": "source"},
                               "runs": {"a": {"evaluation": {"by": "reference", "split": "valid"}}, "b": {}}})
    data = _setup_lines(config, tmp_path, environment.describe_environment())[2]
    assert data.endswith("scored on the `valid` split, buckets by reference length in words.")
    assert f"prepared in `{prepared_dir(config.data)}`;" in data  # one folder for every run


def test_the_report_names_each_run_s_data_folder_where_runs_prepare_their_own(tmp_path: Path) -> None:
    """Runs with data keys of their own prepare folders of their own (no data.dir): the report named the top
    level's, which no run used."""
    config = config_from_dict({"data": {"source": "files", "files": {"train": str(tmp_path / "train")}},
                               "runs": {"a": {"data": {"max_train_words": 30}}, "b": {"data": {"max_train_words": 40}}}})
    folders = {name: prepared_dir(config.for_run(name).data) for name in ("a", "b")}
    assert len({*folders.values(), prepared_dir(config.data)}) == 3
    data = _setup_lines(config, tmp_path, environment.describe_environment())[2]
    assert f"prepared in `{folders['a']}` (a), `{folders['b']}` (b);" in data


def test_the_environment_names_the_commit_of_the_source_that_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """environment.json and the report name the git commit of the nmt package's folder, and say where its
    files differ from it; an installed copy (no checkout, or an untracked folder inside one) names none."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              check=True, capture_output=True, text=True).stdout.strip()

    package = tmp_path / "nmt"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.delenv("NMT_COMMIT", raising=False)
    assert environment.source_commit(package) is None  # no checkout
    # a copy carried without .git (the GPU scripts'): the commit its maker gave, said to be given
    monkeypatch.setenv("NMT_COMMIT", "0123abc")
    assert environment.source_commit(package) == "0123abc as NMT_COMMIT gives it"
    monkeypatch.delenv("NMT_COMMIT")
    git("init", "-q")
    (tmp_path / "untracked").mkdir()
    (tmp_path / "untracked" / "__init__.py").write_text("", encoding="utf-8")
    git("add", "nmt")
    git("commit", "-q", "-m", "one")
    commit = git("rev-parse", "HEAD")
    assert environment.source_commit(package) == commit
    assert environment.source_commit(tmp_path / "untracked") is None  # a copy inside some checkout
    (tmp_path / "notes.txt").write_text("outside the package", encoding="utf-8")
    assert environment.source_commit(package) == commit
    (package / "new_module.py").write_text("", encoding="utf-8")
    assert environment.source_commit(package) == f"{commit} with uncommitted changes"
    monkeypatch.setattr(environment, "source_commit", lambda: f"{commit} with uncommitted changes")
    config = config_from_dict({"runs": {"a": {}}})
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "environment.json").write_text('{"torch_threads": 1}', encoding="utf-8")
    assert _setup_lines(config, tmp_path, environment.describe_environment())[0].endswith(
        f"; nmt at {commit[:9]} with uncommitted changes (the report's; each run's in the training table).")
    monkeypatch.setattr(environment, "source_commit", lambda: None)  # an installed copy
    assert _setup_lines(config, tmp_path, environment.describe_environment())[0].endswith("; nmt from no git checkout (the report's; each run's in "
                                                      "the training table).")


def test_the_parameter_table_names_each_run_s_attention() -> None:
    config = load_config(CONFIGS / "transformer.yaml")
    counts = dict.fromkeys(config.runs, 1000)
    rows = _tables(config, [], counts, {}, {})[2:7]
    assert rows == [
        "| rnnsearch-30 | additive | 1,000 |",
        "| rnnsearch-50 | additive | 1,000 |",
        "| transformer-30 | 4 x scaled dot-product, sinusoidal positions | 1,000 |",
        "| transformer-50 | 4 x scaled dot-product, sinusoidal positions | 1,000 |",
        "| transformer-30-relative | 4 x scaled dot-product, relative positions | 1,000 |",
    ]


def test_the_training_table_says_how_each_run_stopped_where_and_in_which_precision(tmp_path: Path) -> None:
    config = config_from_dict({"training": {"max_steps": 20000, "patience": 5},
                               "runs": {"a": {}, "b": {}, "old": {}, "timed": {"training": {"max_minutes": 6.5}}}})
    run_dirs = {name: tmp_path / "runs" / name for name in config.runs}
    write_summary(run_dirs["a"], {"stopped_by": "early_stopping", "final_step": 6500, "best_step": 4000,
                                  "best_score": 27.123, "early_stopping_metric": "bleu", "device": "cuda",
                                  "precision": "bf16", "wall_time_s": 150.0})
    # trained at 0c024142a, resumed there once, then at d2e30a95e with a change of its own
    sessions = [{"nmt_commit": f"{'0c024142a' * 4}0c02"}, {"nmt_commit": f"{'0c024142a' * 4}0c02"}]
    (run_dirs["a"] / "environment.json").write_text(json.dumps(
        {"gpu": "NVIDIA H200", "cpu": "Intel Xeon", "nmt_commit": f"{'d2e30a95e' * 4}d2e3 with uncommitted changes",
         "earlier_sessions": sessions}), encoding="utf-8")
    write_summary(run_dirs["b"], {"stopped_by": "max_steps", "final_step": 20000, "best_step": 20000,
                                  "best_score": 20.0, "early_stopping_metric": "bleu", "device": "cpu",
                                  "precision": "fp32", "wall_time_s": 60.0})
    (run_dirs["b"] / "environment.json").write_text('{"gpu": null, "cpu": "AMD EPYC 7B13", "nmt_commit": null}',
                                                    encoding="utf-8")
    write_summary(run_dirs["old"], {"stopped_by": "max_steps", "final_step": 900, "device": "cpu"})  # no precision
    (run_dirs["old"] / "environment.json").write_text('{"earlier_sessions": 3}', encoding="utf-8")  # edited by hand
    write_summary(run_dirs["timed"], {"stopped_by": "max_minutes", "final_step": 2345, "best_step": 2300,
                                      "best_score": 25.0, "early_stopping_metric": "bleu", "device": "cpu",
                                      "precision": "fp32", "wall_time_s": 390.0})
    outcomes = training_outcomes(config, run_dirs)
    assert outcomes["a"] | {"wall_time_s": 0} == {
        "stopped_by": "early_stopping", "final_step": 6500, "max_steps": 20000, "max_minutes": 0.0, "patience": 5,
        "validate_every": 300,
        "best_step": 4000, "best_score": 27.123, "early_stopping_metric": "bleu", "device": "GPU NVIDIA H200",
        "precision": "bf16", "wall_time_s": 0, "commits": ["0c024142a", "d2e30a95e with uncommitted changes"]}
    rows = _tables(config, [], {}, {}, outcomes)
    table = rows[rows.index("| run | training stopped by | device | precision | nmt commit | last step | best step | "
                            "best validation | training minutes |"):]
    assert table[2:6] == [
        "| a | early stopping (5 validations without improvement) | GPU NVIDIA H200 | bf16 | 0c024142a, then "
        "d2e30a95e with uncommitted changes | 6,500 | 4,000 | bleu 27.12 | 2.5 |",
        "| b | its cap (max_steps 20,000) | CPU AMD EPYC 7B13 | fp32 | no git checkout | 20,000 | 20,000 | "
        "bleu 20.00 | 1.0 |",
        "| old | its cap (max_steps 20,000) | cpu | ? | ? | 900 | ? | ? ? | ? |",
        "| timed | its time limit (max_minutes 6.5) | cpu | fp32 | ? | 2,345 | 2,300 | bleu 25.00 | 6.5 |",
    ]
    # a finished run that a later command (--set training.patience=1) skipped: told with what it trained with
    trained = config.for_run("a")
    save_config(dataclasses.replace(trained, training=dataclasses.replace(trained.training, patience=3,
                                                                          validate_every=250)), run_dirs["a"] / "config.yaml")
    again = training_outcomes(config, run_dirs)["a"]
    assert (again["patience"], again["validate_every"], again["max_steps"]) == (3, 250, 20000)
    assert "early stopping (3 validations without improvement)" in "\n".join(_tables(config, [], {}, {}, {"a": again}))


TINY_EXPERIMENT = """\
model: {embedding_size: 16, hidden_size: 16, attention_size: 16, maxout_size: 8}
training: {lr_schedule: inverse_sqrt, warmup_steps: 2}
evaluation: {attention_checks: true, curve_sentences_per_bucket: 5, bootstrap_samples: 40}
runs:
  fixed: {model: {attention: none}}
  search: {training: {max_words: 10}}
  stuck: {training: {learning_rate: 1.0e-12, patience: 1}}  # its BLEU cannot move: it plateaus
"""


@pytest.mark.slow  # three tiny trainings, evaluation, the attention checks and the learning curve: ~30 s
def test_a_tiny_experiment_reports_devices_precision_phases_early_stopping_and_attention_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nmt.analysis import attention_checks as checks_module
    from tests.synthetic import reversal_links

    # eflomal's links of a reversal task are its own business: the reversal's links stand in (no eflomal needed)
    monkeypatch.setattr(checks_module, "align_words",
                        lambda sources, targets, how: reversal_links([s for s in sources]))
    config_path, out = tmp_path / "tiny.yaml", tmp_path / "out"
    config_path.write_text(TINY_EXPERIMENT, encoding="utf-8")
    overrides = [*shortened(tmp_path / "data"), "training.max_steps=4", "training.threads=1",
                 "runs.stuck.training.max_steps=10"]
    results = run_experiment(config_path, overrides, out, jobs=1)
    training = results["training"]
    assert {name: (t["stopped_by"], t["final_step"]) for name, t in training.items()} == {
        "fixed": ("max_steps", 4), "search": ("max_steps", 4), "stuck": ("early_stopping", 4)}  # of at most 10: validations at 2 and 4
    assert {t["precision"] for t in training.values()} == {"fp32"}  # on the CPU
    assert all(t["device"].startswith("CPU ") for t in training.values())
    assert results["machine"]["cpu"] and results["machine"]["gpu"] is None
    phases = {"prepare", "train fixed", "train search", "train stuck", "evaluate", "attention entropy and heatmap",
              "attention checks", "learning curve", "end to end"}
    assert [session["seconds"].keys() >= phases for session in results["timings"]] == [True]
    assert json.loads((out / "timings.json").read_text())["sessions"] == results["timings"]
    saved = json.loads((out / "results.json").read_text())
    assert saved["training"] == training and saved["attention_checks"]["checks"] == ["perturbation", "alignment"]
    assert saved["attention_checks"]["runs"] == ["search", "stuck"]
    checks = json.loads((out / "attention_checks.json").read_text())
    assert set(checks["runs"]) == {"search", "stuck"} and "alignment_skipped" not in checks
    report = (out / "report.md").read_text()
    assert "| stuck | early stopping (1 validation without improvement) | CPU " in report
    commit = environment.source_commit()  # the commit each run trained at, as the table names it
    made = "no git checkout" if commit is None else commit[:9] + commit[40:]
    assert f"| fp32 | {made} | 4 | 2 | bleu " in report
    assert "| fixed | its cap (max_steps 4) | CPU " in report
    assert "](attention_checks.md)" in report and "![attention checks](attention_checks.png)" in report
    for phase in phases:
        assert f"| {phase} |" in report


@pytest.mark.slow  # one tiny training, its evaluation and learning curve: ~10 s
def test_a_run_that_fails_to_train_leaves_the_others_reported_and_the_experiment_failing(tmp_path: Path) -> None:
    """A run refused where it trains (no training pair fits its max_words) fails alone: the other trains, the
    report covers it and names the failed run, and the experiment ends with an error saying so; the same
    command, once the run is mended with --force --runs, trains only that run and reports both."""
    config_path, out = tmp_path / "two.yaml", tmp_path / "out"
    config_path.write_text("model: {embedding_size: 16, hidden_size: 16, attention_size: 16, maxout_size: 8}\n"
                           "evaluation: {bootstrap_samples: 40, curve_sentences_per_bucket: 3}\n"
                           "runs: {fixed: {model: {attention: none}}, short: {training: {max_words: 1}}}\n",
                           encoding="utf-8")
    overrides = [*shortened(tmp_path / "data"), "training.threads=1"]
    with pytest.raises(NMTError) as caught:
        run_experiment(config_path, overrides, out, jobs=1)
    assert caught.value.message.startswith(f"1 run failed to train; the report ({out / 'report.md'}) covers the "
                                           "other 1 run. run short: ")
    assert "no pairs of at most 1 word" in caught.value.message
    assert caught.value.message.endswith("(its output: above, after '== run short')")
    assert caught.value.hint == experiment.RETRY_FAILED
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert set(results["runs"]) == {"fixed"} and list(results["training"]) == ["fixed"]
    assert list(results["failed_runs"]) == ["short"] and "no pairs of at most 1 word" in results["failed_runs"]["short"]
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "**Not in this report: run short, which failed to train.** run short: " in report
    assert "| fixed | its cap (max_steps 2) | CPU " in report and "| short |" not in report
    fixed_summary = (out / "runs" / "fixed" / "summary.json").stat().st_mtime_ns
    results = run_experiment(config_path, [*overrides, "runs.short.training.max_words=12"], out, force=True,
                             jobs=1, runs=["short"])
    assert set(results["runs"]) == {"short"} and "failed_runs" not in results
    assert (out / "runs" / "fixed" / "summary.json").stat().st_mtime_ns == fixed_summary
    assert "Not in this report" not in (out / "report.md").read_text(encoding="utf-8")


def test_no_run_trained_no_report_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def nothing_trained(config: Config, run_dirs: dict[str, Path], *args: object) -> dict[str, NMTError]:
        return {name: NMTError(f"run {name}: refused.") for name in run_dirs}

    monkeypatch.setattr(experiment, "train_runs", nothing_trained)
    config_path, out = tmp_path / "a.yaml", tmp_path / "out"
    config_path.write_text("model: {hidden_size: 16}\nruns: {a: {}, b: {}}\n", encoding="utf-8")
    with pytest.raises(NMTError) as caught:
        run_experiment(config_path, shortened(tmp_path / "data"), out)
    assert caught.value.message == ("2 runs failed to train; no run trained, so no report was written. "
                                    "run a: refused. run b: refused.")
    assert not (out / "report.md").exists() and not (out / "results.json").exists()


def test_the_report_names_the_command_that_reproduces_it() -> None:
    """Its overrides as --set each, --runs only where some runs were chosen, --jobs where given, paths quoted for a
    shell."""
    command = experiment._reproducing_command(Path("my configs/c.yaml"), ["training.seed=2", "runs.a.model.heads=8"],
                                              ["a"], Path("out"))
    assert command == ("nmt experiment 'my configs/c.yaml' --set training.seed=2 --set runs.a.model.heads=8 --runs a "
                       "--out out")
    assert experiment._reproducing_command(Path("c.yaml"), [], [], Path("o")) == "nmt experiment c.yaml --out o"
    # --jobs where given: on a CPU a run's threads, and so its floats, follow it
    assert experiment._reproducing_command(Path("c.yaml"), [], [], Path("o"), 1) == "nmt experiment c.yaml --jobs 1 --out o"


def test_a_heatmap_of_a_run_the_experiment_no_longer_has_is_removed(tmp_path: Path) -> None:
    """Run again with no attention run left, the experiment's folder kept the earlier report's heatmap, linked
    from nothing, as if it were this report's."""
    (tmp_path / "attention_long_sentence.png").write_bytes(b"an earlier run's")
    config = config_from_dict({"model": {"attention": "none"}, "runs": {"fixed": {}}})
    results: dict[str, object] = {}
    assert experiment._attention(config, {"fixed": tmp_path / "runs" / "fixed"}, results, tmp_path) is None
    assert results == {"attention": {}} and not (tmp_path / "attention_long_sentence.png").exists()
