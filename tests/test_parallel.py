"""nmt/training/parallel.py: how many runs train at once, a run's error in the parent (a run's own process: tests/test_run_process.py; runs trained in
parallel, end to end: tests/system/test_experiment.py)."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import nmt.training.parallel as parallel
import nmt.training.run_process as run_process
from nmt.config import Config, config_from_dict, load_saved_config
from nmt.errors import NMTError
from nmt.rundir.checkpoints import load_checkpoint, save_checkpoint
from nmt.rundir.folders import read_summary
from nmt.rundir.writing import write_config, write_summary
from nmt.training.trainer import Trainer, train
from tests.helpers import needs_cuda, reverse_task_config


def test_training_jobs_default_to_one_per_core_on_cpu_and_up_to_four_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {name: {} for name in "abcd"}
    config = config_from_dict({"training": {"device": "cpu"}, "runs": runs})
    monkeypatch.setattr(parallel, "available_cores", lambda: 2)
    assert parallel.training_jobs(config, 0) == 2 and parallel.training_jobs(config, 3) == 3
    monkeypatch.setattr(parallel, "available_cores", lambda: 16)
    assert parallel.training_jobs(config, 0) == 4  # never more than the runs
    seven = {name: {} for name in "abcdefg"}
    assert parallel.training_jobs(config_from_dict({"training": {"device": "cpu"}, "runs": seven}), 0) == 7
    # on CUDA: min(runs, GPU_JOBS), whatever the cores; --jobs wins
    monkeypatch.setattr(parallel, "available_cores", lambda: 2)
    monkeypatch.setattr(parallel.torch.cuda, "device_count", lambda: 1)
    assert parallel.GPU_JOBS == 4
    for device, available in (("cuda", False), ("auto", True)):
        monkeypatch.setattr(parallel.torch.cuda, "is_available", lambda available=available: available)
        on_gpu = config_from_dict({"training": {"device": device}, "runs": seven})
        assert parallel.training_jobs(on_gpu, 0) == 4 and parallel.training_jobs(on_gpu, 1) == 1
        two = config_from_dict({"training": {"device": device}, "runs": {"a": {}, "b": {}}})
        assert parallel.training_jobs(two, 0) == 2
    monkeypatch.setattr(parallel.torch.cuda, "is_available", lambda: False)
    assert parallel.training_jobs(config_from_dict({"training": {"device": "auto"}, "runs": seven}), 0) == 2


def test_on_several_gpus_four_runs_train_on_each(monkeypatch: pytest.MonkeyPatch) -> None:
    seven = config_from_dict({"training": {"device": "auto"}, "runs": {name: {} for name in "abcdefg"}})
    monkeypatch.setattr(parallel.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(parallel.torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(parallel, "available_cores", lambda: 16)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert parallel.training_jobs(seven, 0) == 7 and parallel.run_gpus(seven) == ["0", "1"]
    monkeypatch.setattr(parallel, "available_cores", lambda: 6)
    assert parallel.training_jobs(seven, 0) == 6  # a worker queues its kernels from one core
    monkeypatch.setattr(parallel, "available_cores", lambda: 2)
    assert parallel.training_jobs(seven, 0) == 4  # but four, as on one GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3, 5,6")  # torch counts the ones that exist
    assert parallel.visible_gpus() == ["3", "5"]
    on_cpu = config_from_dict({"training": {"device": "cpu"}, "runs": {"a": {}, "b": {}}})
    assert parallel.run_gpus(on_cpu) == []
    monkeypatch.setattr(parallel.torch.cuda, "device_count", lambda: 1)
    assert parallel.training_jobs(seven, 0) == 4 and parallel.run_gpus(seven) == []  # one GPU: nothing to spread


def test_each_run_starts_on_the_gpu_with_the_fewest_runs_training() -> None:
    assert parallel.least_busy(["3", "5"], []) == "3"
    assert parallel.least_busy(["3", "5"], ["3"]) == "5"
    assert parallel.least_busy(["3", "5"], ["3", "5"]) == "3"  # a tie: the first
    assert parallel.least_busy(["3", "5"], ["5", "3", "3"]) == "5"  # a run on 5 ended first: 5 takes the next
    assert parallel.least_busy(["0", "1", "2"], ["0", "2"]) == "1"
    assert parallel.least_busy([], [None, None]) is None  # one device: nothing to choose


def _killed_or_slow(run_dir: Path) -> None:
    """What follows a training here: killed as the out-of-memory killer would (run a of "killed"), or slow."""
    if run_dir.parent.name == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30)


def test_a_run_whose_process_dies_or_is_stopped_after_its_training_has_trained_and_keeps_its_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's outcome reaches the parent before what follows its training: a process killed there fails no run,
    and an experiment interrupted there keeps the time of the run that trained (a re-run skips it as finished)."""
    def train_run(config: Config, run_dir: Path) -> str:
        if run_dir.name == "b" and run_dir.parent.name == "stopped":
            time.sleep(60)  # stopped long before
        return "trained"

    monkeypatch.setattr(run_process, "train_run", train_run)
    monkeypatch.setattr(parallel, "_training_seconds", lambda run_dir, seconds: 1.0)
    _forked(monkeypatch)
    then = run_process.AfterTraining("translate", _killed_or_slow)
    configs = {name: config_from_dict({"training": {"max_steps": steps}}) for name, steps in zip("ab", (20, 10), strict=True)}
    timings: dict[str, float] = {}
    killed = {name: tmp_path / "killed" / name for name in "ab"}
    assert parallel._train_in_parallel(configs, killed, 2, timings.__setitem__, [], then) == {}
    assert set(timings) == {"train a", "train b"}
    timings.clear()
    interrupt = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT))
    began = time.perf_counter()
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in `nmt experiment` (an xdist worker ignores it)
    try:
        interrupt.start()
        with pytest.raises(KeyboardInterrupt):
            parallel._train_in_parallel(configs, {name: tmp_path / "stopped" / name for name in "ab"}, 2,
                                        timings.__setitem__, [], then)
        assert set(timings) == {"train a"} and time.perf_counter() - began < 25  # a's translating stopped too
        assert multiprocessing.active_children() == []
    finally:
        interrupt.cancel()
        signal.signal(signal.SIGINT, handler)
        for left in multiprocessing.active_children():
            left.kill()


def _forked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs' processes forked (the experiment spawns them; a fork keeps the test's patches)."""
    get_context = multiprocessing.get_context
    monkeypatch.setattr(parallel.multiprocessing, "get_context", lambda method: get_context("fork"))


def test_runs_queue_for_their_jobs_and_each_starts_on_the_least_busy_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three runs, two at once, two GPUs: a and b start on GPUs 3 and 5; c waits for a, which ends first, and
    takes its GPU."""
    def train_run(config: Config, run_dir: Path) -> str:
        began = time.time()
        time.sleep({"a": 0.5, "b": 2.0, "c": 0.1}[run_dir.name])
        (tmp_path / f"{run_dir.name}.json").write_text(json.dumps([os.environ["CUDA_VISIBLE_DEVICES"], began, time.time()]))
        return "trained"

    monkeypatch.setattr(run_process, "train_run", train_run)
    monkeypatch.setattr(parallel, "_training_seconds", lambda run_dir, seconds: 1.0)
    _forked(monkeypatch)
    configs = {name: config_from_dict({"training": {"max_steps": steps}}) for name, steps in zip("abc", (30, 20, 10), strict=True)}
    timings: dict[str, float] = {}
    failed = parallel._train_in_parallel(configs, {name: tmp_path / "runs" / name for name in "abc"}, 2,
                                         timings.__setitem__, ["3", "5"], run_process.AfterTraining("translate", lambda run_dir: None))
    assert failed == {} and set(timings) == {f"{step} {name}" for step in ("train", "translate") for name in "abc"}
    runs = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in "abc"}
    assert {name: gpu for name, (gpu, _, _) in runs.items()} == {"a": "3", "b": "5", "c": "3"}
    assert runs["c"][1] >= runs["a"][2]  # c started once a had ended


def test_a_ctrl_c_as_a_run_s_process_starts_stops_that_run_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interrupt comes while the second run's process starts (held until it has): both runs are asked to
    stop and waited for; none is left training."""
    def train_run(config: Config, run_dir: Path) -> str:
        time.sleep(60)  # stopped long before
        return "trained"

    monkeypatch.setattr(run_process, "train_run", train_run)
    _forked(monkeypatch)
    start = multiprocessing.context.ForkProcess.start

    def start_then_interrupt(process: Any) -> None:
        start(process)
        if process.name == "nmt run b":
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(multiprocessing.context.ForkProcess, "start", start_then_interrupt)
    configs = {name: config_from_dict({"training": {"max_steps": steps}}) for name, steps in zip("ab", (20, 10), strict=True)}
    began = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            parallel._train_in_parallel(configs, {name: tmp_path / "runs" / name for name in "ab"}, 2, lambda *_: None, [],
                                        None)
        assert multiprocessing.active_children() == [] and time.perf_counter() - began < 30
    finally:
        for left in multiprocessing.active_children():
            left.kill()


def _send_when_stopped(sent: Any, size: int) -> None:
    """A run's process that, asked to stop, sends an outcome of `size` bytes (a run that ended as it was asked)."""
    signal.signal(signal.SIGUSR1, lambda *_: (sent.send("x" * size), os._exit(0)))
    time.sleep(60)


def test_stopping_runs_reads_what_they_send_meanwhile_however_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """An outcome larger than the pipe's buffer (64 KiB on Linux) would keep its process from ending, and the
    stop waiting for it, were it not read."""
    fork = multiprocessing.get_context("fork")
    training: dict[Any, Any] = {}
    for name, size in (("a", 1 << 20), ("b", 10)):
        results, sent = fork.Pipe(duplex=False)
        process = fork.Process(target=_send_when_stopped, args=(sent, size))
        process.start()
        sent.close()
        training[results] = (name, process, None)
    time.sleep(0.5)  # their handlers set
    stopping = threading.Thread(target=parallel._stop_runs, args=(training,), daemon=True)
    try:
        stopping.start()
        stopping.join(timeout=20)
        assert not stopping.is_alive()
        assert [process.exitcode for _, process, _ in training.values()] == [0, 0]
        assert all(results.closed for results in training)
    finally:
        for _, process, _ in training.values():
            process.kill()


def test_a_run_whose_process_ends_without_a_word_is_told_why_and_how_to_resume(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    killed = parallel._ended_without_outcome("a", -signal.SIGKILL, log)
    assert killed.message == ("run a: its training process was killed by signal SIGKILL (the out-of-memory killer "
                              "sends SIGKILL) before the run finished; its saved checkpoints are kept.")
    assert killed.hint == f"Run the same command again to resume it (its output: {log})."
    assert "was stopped by a signal to it alone" in parallel._ended_without_outcome("a", 130, log).message
    assert "its training process ended with status 1 before" in parallel._ended_without_outcome("a", 1, log).message
    assert "killed by signal 35 (the" in parallel._ended_without_outcome("a", -35, log).message  # a real-time one: no name


def test_the_experiment_help_states_the_default_jobs_on_cuda() -> None:
    import argparse

    from nmt.commands import experiment

    parser = argparse.ArgumentParser()
    experiment.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert f"on CUDA, min(runs, {parallel.GPU_JOBS}) sharing the one GPU" in text
    jobs = text[text.index("--jobs N runs trained"):text.index("--threads N torch")]
    assert jobs.count("(") == jobs.count(")")  # each parenthesis of the help closed


@pytest.mark.parametrize("schedule", ["cosine", "inverse_sqrt", "constant"])
def test_only_a_cosine_run_that_reached_its_cap_is_refused_a_higher_one(schedule: str, tmp_path: Path) -> None:
    """A run's cosine reads max_steps; inverse_sqrt and constant do not, so such a run may be extended."""
    config = config_from_dict({"training": {"lr_schedule": schedule, "max_steps": 100}, "runs": {"a": {}}})
    run_dir = tmp_path / "runs" / "a"
    write_config(config.for_run("a"), run_dir)
    write_summary(run_dir, {"stopped_by": "max_steps", "wall_time_s": 1.0})
    longer = config_from_dict({"training": {"lr_schedule": schedule, "max_steps": 200}, "runs": {"a": {}}})
    if schedule == "cosine":
        with pytest.raises(NMTError, match="would stretch its cosine schedule"):
            parallel.check_runs(longer, {"a": run_dir})
    else:
        parallel.check_runs(longer, {"a": run_dir})


@pytest.mark.slow  # a spawned worker process imports torch and the package: 2.6-3.7 s on 2 cores
def test_a_run_failing_in_a_worker_reaches_the_parent_with_its_hint_and_log(tmp_path: Path) -> None:
    config = config_from_dict({"training": {"device": "cpu"}, "runs": {"a": {}}})
    run_dir = tmp_path / "runs" / "a"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("model: {hiden_size: 8}", encoding="utf-8")  # refused, nothing trained
    timings: dict[str, float] = {}
    failed = parallel._train_in_parallel({"a": config.for_run("a")}, {"a": run_dir}, 1, timings.__setitem__, [], None)
    assert timings == {}  # it trained nothing
    assert list(failed) == ["a"]
    assert failed["a"].message.startswith(f"run a: {run_dir / 'config.yaml'}, line 1: unknown key 'model.hiden_size'")
    assert failed["a"].hint.startswith("A run's config.yaml is written by its training and read as it is: ")
    assert failed["a"].hint.endswith(f"(its output: {run_dir}.log)")


def test_a_run_s_bug_is_told_with_its_traceback_and_the_next_run_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run after another: a run raising another exception than NMTError (a bug, a device's fault) prints its
    traceback and is returned as failed; the next run trains and its time is recorded."""
    def train_run(config: Config, run_dir: Path) -> str:
        if run_dir.name == "a":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return "trained"

    monkeypatch.setattr(run_process, "train_run", train_run)
    config = config_from_dict({"runs": {"a": {}, "b": {}}})
    timings: dict[str, float] = {}
    then = run_process.AfterTraining("translate", lambda run_dir: pytest.fail("one run after another: the caller follows"))
    failed = parallel.train_runs(config, {name: tmp_path / name for name in "ab"}, 1, timings.__setitem__, then)
    assert list(timings) == ["train b", "train (all runs, 1 at once)"]
    assert [str(error) for error in failed.values()] == [
        "run a failed: RuntimeError: CUDA error: an illegal memory access was encountered Its traceback: above, "
        "after '== run a'."]
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and 'raise RuntimeError("CUDA error' in err
    assert err.endswith("\nrun a failed: RuntimeError: CUDA error: an illegal memory access was encountered Its traceback: "
                        "above, after '== run a'. The other runs go on.\n")  # the run named once


def test_a_run_out_of_memory_is_told_with_what_to_lower_and_no_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def train_run(config: Config, run_dir: Path) -> str:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore")

    monkeypatch.setattr(run_process, "train_run", train_run)
    failed = parallel.train_runs(config_from_dict({"runs": {"a": {}}}), {"a": tmp_path / "a"}, 1, lambda *_: None)
    assert failed["a"].message == "run a: out of memory (CUDA out of memory. Tried to allocate 2.00 GiB)."
    assert failed["a"].hint.startswith("Lower training.batch_tokens") and "fewer runs at once take less: --jobs" in failed["a"].hint
    assert "Traceback" not in capsys.readouterr().err


def test_a_resumed_run_records_this_session_s_training_time_and_its_summary_the_whole(tmp_path: Path) -> None:
    tiny = {"embedding_size": 8, "hidden_size": 8, "attention_size": 8, "maxout_size": 8}
    config = reverse_task_config(tmp_path / "data", n_train=100, model=tiny,
                                 training={"max_steps": 4, "checkpoint_every": 2, "validate_every": 2,
                                           "lr_schedule": "constant"})  # cosine: at its max_steps, not stretched
    config = dataclasses.replace(config, runs={"a": {}})
    run_dir = tmp_path / "runs" / "a"
    train(config.for_run("a"), run_dir)
    checkpoint = load_checkpoint(run_dir / "checkpoints" / "step_00000004.pt")
    assert checkpoint.training is not None
    checkpoint.training.elapsed_s = 1000.0  # as if the first session had trained for 1000 s
    save_checkpoint(run_dir / "checkpoints" / "step_00000004.pt", checkpoint)
    (run_dir / "summary.json").unlink()  # interrupted after that checkpoint
    longer = dataclasses.replace(config, training=dataclasses.replace(config.training, max_steps=6))
    timings: dict[str, float] = {}
    parallel.train_runs(longer, {"a": run_dir}, 1, timings.__setitem__)
    assert read_summary(run_dir)["wall_time_s"] > 1000 > timings["train a"] > 0
    assert set(timings) == {"train a", "train (all runs, 1 at once)"}


def test_an_interruption_keeps_the_times_of_the_runs_that_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run a ends, Ctrl-C stops run b: a's time is recorded (a is finished, so no later session trains it and
    records it), b's and the wall time are not."""
    def train_run(config: Config, run_dir: Path) -> str:
        if run_dir.name == "b":
            raise KeyboardInterrupt
        return "trained"

    monkeypatch.setattr(run_process, "train_run", train_run)
    config = config_from_dict({"runs": {"a": {}, "b": {}}})
    timings: dict[str, float] = {}
    with pytest.raises(KeyboardInterrupt):
        parallel.train_runs(config, {name: tmp_path / name for name in "ab"}, 1, timings.__setitem__)
    assert list(timings) == ["train a"]


def test_an_experiment_re_run_continues_a_run_its_time_limit_stopped_only_where_the_limit_grew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Trainer, "_elapsed", lambda self: float(self.step))  # one second a step
    tiny = {"embedding_size": 8, "hidden_size": 8, "attention_size": 8, "maxout_size": 8}
    config = reverse_task_config(tmp_path / "data", n_train=100, model=tiny,
                                 training={"max_steps": 50, "max_minutes": 2 / 60, "validate_every": 2,
                                           "checkpoint_every": 50, "lr_schedule": "constant"})
    config = dataclasses.replace(config, runs={"a": {}})
    run_dir = tmp_path / "runs" / "a"
    timings: dict[str, float] = {}
    parallel.train_runs(config, {"a": run_dir}, 1, timings.__setitem__)
    assert "train a" in timings
    assert (read_summary(run_dir)["stopped_by"], read_summary(run_dir)["final_step"]) == ("max_minutes", 2)
    # the same limit: finished, which train_runs asks once; its config.yaml takes the decoding settings that
    # evaluation reads from it
    asked: list[Path] = []
    finished = parallel._finished
    monkeypatch.setattr(parallel, "_finished", lambda run, folder: asked.append(folder) or finished(run, folder))
    beam = config.decoding.beam_size + 1
    wider = dataclasses.replace(config, decoding=dataclasses.replace(config.decoding, beam_size=beam))
    timings.clear()
    parallel.train_runs(wider, {"a": run_dir}, 1, timings.__setitem__)
    assert timings == {}  # skipped: nothing trained in this call
    assert asked == [run_dir] and load_saved_config(run_dir / "config.yaml").decoding.beam_size == beam
    longer = dataclasses.replace(config, training=dataclasses.replace(config.training, max_minutes=4 / 60))
    parallel.train_runs(longer, {"a": run_dir}, 1, timings.__setitem__)
    assert read_summary(run_dir)["final_step"] == 4 and "train a" in timings


def test_an_experiment_re_run_continues_an_early_stopped_run_only_where_its_patience_grew(tmp_path: Path) -> None:
    """As `nmt train --resume` does: a larger patience (or 0, none) lets an early-stopped run go on; a re-run
    that changes only keys of its record (keep_last) skips it, and its config.yaml keeps what it trained with."""
    tiny = {"embedding_size": 8, "hidden_size": 8, "attention_size": 8, "maxout_size": 8}
    config = reverse_task_config(tmp_path / "data", n_train=100, model=tiny,  # its BLEU cannot move: it plateaus
                                 training={"max_steps": 50, "validate_every": 2, "checkpoint_every": 50, "patience": 1,
                                           "learning_rate": 1e-12, "lr_schedule": "constant"})
    config = dataclasses.replace(config, runs={"a": {}})
    run_dir = tmp_path / "runs" / "a"
    timings: dict[str, float] = {}
    parallel.train_runs(config, {"a": run_dir}, 1, timings.__setitem__)
    assert (read_summary(run_dir)["stopped_by"], read_summary(run_dir)["final_step"]) == ("early_stopping", 4)
    kept = dataclasses.replace(config, training=dataclasses.replace(config.training, keep_last=3))
    timings.clear()
    parallel.train_runs(kept, {"a": run_dir}, 1, timings.__setitem__)
    assert timings == {} and load_saved_config(run_dir / "config.yaml").training.keep_last == 0
    # scored anew with another BLEU: a finished run takes it; a run that trains on keeps the one its log records
    char = dataclasses.replace(config, evaluation=dataclasses.replace(config.evaluation, tokenize="char"))
    parallel.check_runs(char, {"a": run_dir})
    parallel.train_runs(char, {"a": run_dir}, 1, timings.__setitem__)
    assert timings == {} and load_saved_config(run_dir / "config.yaml").evaluation.tokenize == "char"
    patient_char = dataclasses.replace(char, training=dataclasses.replace(config.training, patience=3))
    with pytest.raises(NMTError, match=r"run 'a' in \S+: the run was validated with BLEU nrefs:1\|case:mixed\|eff:no\|"
                                       r"tok:13a\|.*, and evaluation.tokenize char / evaluation.lowercase false would"):
        parallel.check_runs(patient_char, {"a": run_dir})
    patient = dataclasses.replace(config, training=dataclasses.replace(config.training, patience=3))
    parallel.train_runs(patient, {"a": run_dir}, 1, timings.__setitem__)
    assert "train a" in timings
    assert (read_summary(run_dir)["stopped_by"], read_summary(run_dir)["final_step"]) == ("early_stopping", 8)
    assert load_saved_config(run_dir / "config.yaml").training.patience == 3


def _side_by_side(tmp_path: Path, device: str) -> tuple[Config, dict[str, dict]]:
    """Three tiny runs trained by train_runs' default jobs (0) on `device`: their config, and their summaries
    and the moments each started (environment.json written) and finished (summary.json written)."""
    from nmt.data.prepare import prepare

    tiny = {"embedding_size": 8, "hidden_size": 8, "attention_size": 8, "maxout_size": 8}
    config = reverse_task_config(tmp_path / "data", n_train=100, model=tiny,
                                 training={"max_steps": 120, "checkpoint_every": 120, "validate_every": 40,
                                           "device": device})
    config = dataclasses.replace(config, runs={"a": {}, "b": {"model": {"attention": "none"}}, "c": {}})
    prepare(config.data)
    run_dirs = {name: tmp_path / "runs" / name for name in config.runs}
    timings: dict[str, float] = {}
    parallel.train_runs(config, run_dirs, 0, timings.__setitem__)
    assert timings.keys() == {"train a", "train b", "train c", "train (all runs, 3 at once)"}
    return config, {name: {"summary": read_summary(run_dir),
                           "started": (run_dir / "environment.json").stat().st_mtime,
                           "finished": (run_dir / "summary.json").stat().st_mtime} for name, run_dir in run_dirs.items()}


def assert_trained_together(runs: dict[str, dict]) -> None:
    """Each run's training overlapped another's (run one after another, none would). Not all three at once: on
    2 cores a process can start after another run has ended, its startup being longer than a tiny run."""
    spans = {name: (r["started"], r["finished"]) for name, r in runs.items()}
    for name, (start, end) in spans.items():
        assert any(start < other_end and other_start < end for other, (other_start, other_end) in spans.items()
                   if other != name), f"run {name} trained alone: {spans}"


@pytest.mark.slow  # three spawned workers: about 10 s on 2 cores
def test_several_runs_train_side_by_side_on_one_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CPU stands for the one GPU: the default jobs (as many as the runs, here) put the three runs in three
    processes at once on the one device; each finishes its 120 steps there, each training beside another."""
    monkeypatch.setattr(parallel, "available_cores", lambda: 3)  # one per run, the default on a 3-core CPU
    config, runs = _side_by_side(tmp_path, "cpu")
    assert {name: (r["summary"]["device"], r["summary"]["final_step"]) for name, r in runs.items()} == {
        name: ("cpu", 120) for name in "abc"}
    assert_trained_together(runs)
    # run again: every run is finished, said once each, and no worker is started for them
    monkeypatch.setattr(parallel, "_train_in_parallel", lambda *args: pytest.fail("workers were started"))
    capsys.readouterr()
    timings: dict[str, float] = {}
    parallel.train_runs(config, {name: tmp_path / "runs" / name for name in "abc"}, 0, timings.__setitem__)
    assert timings == {}
    assert capsys.readouterr().out == "".join(f"run {name} already finished: skipped\n" for name in "abc")


@needs_cuda
@pytest.mark.slow
def test_several_runs_share_the_one_gpu_by_default(tmp_path: Path) -> None:
    """On CUDA the default jobs (min(runs, 4)) train the runs at once, each worker on the one GPU."""
    _, runs = _side_by_side(tmp_path, "cuda")
    assert {name: r["summary"]["device"] for name, r in runs.items()} == {name: "cuda" for name in "abc"}
    assert_trained_together(runs)


def test_a_run_s_training_time_without_its_summary_is_this_session_s(tmp_path: Path) -> None:
    """The parent reads a finished run's summary.json for its whole time; one taken up meanwhile by `nmt train
    --resume` (which removes it) crashed the experiment with a TypeError."""
    assert parallel._training_seconds(tmp_path, 12.5) == 12.5
    (tmp_path / "summary.json").write_text('{"wall_time_s": 90.0}', encoding="utf-8")
    assert parallel._training_seconds(tmp_path, 12.5) == 90.0
