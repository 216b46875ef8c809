"""Training the runs of an experiment config (`runs:`), one after another or side by side, each in a process
of its own (nmt/training/run_process.py).

On a 2-core CPU two 1-thread trainings do 1.5x the steps per second of one 2-thread training: the
recurrences' small matrix products keep two threads of one process waiting on each other
(docs/usage.md). Each run's output then goes to OUT/runs/NAME.log. A run's process ends with its run, so
that a run that fails, is killed (the out-of-memory killer) or leaves the device in error fails alone. An
interrupted experiment (Ctrl-C, SIGTERM) asks each run's process once to stop, which it does as `nmt train`
does on Ctrl-C (nmt/interrupts.py). A SIGTERM that reaches a run's process itself (`timeout` and Slurm signal
the whole process group) asks the same, once: the run saves at the end of its step.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path

import torch

from nmt.config import Config, load_saved_config
from nmt.environment import available_cores
from nmt.errors import NMTError, counted
from nmt.interrupts import starting_children
from nmt.models.interface import model_kind
from nmt.rundir.checks import (
    check_not_past,
    check_schedule_kept,
    check_validation_bleu_kept,
    config_differences,
    learning_differences,
)
from nmt.rundir.folders import read_summary
from nmt.rundir.writing import write_config
from nmt.training import run_process
from nmt.training.run_process import AfterTraining


def check_runs(config: Config, run_dirs: dict[str, Path]) -> None:
    """Refuse, before anything is written, a run folder trained with another config, or a run that has trained
    and whose training.max_steps changed under the cosine schedule (check_schedule_kept, the rule of `nmt train
    --resume`; the constant and inverse_sqrt schedules read no max_steps, so such a run continues as if trained
    straight through), a run already past training.max_steps (check_not_past, as `nmt train --resume` refuses it),
    or an unfinished run whose validation BLEU settings differ from its log's (check_validation_bleu_kept)."""
    for name, run_dir in run_dirs.items():
        saved, ours = run_dir / "config.yaml", config.for_run(name)
        if not saved.exists():
            continue
        previous = load_saved_config(saved)
        differing = learning_differences(previous, ours)
        if differing:
            raise NMTError(
                f"run '{name}' in {run_dir} was trained with a different config ({', '.join(differing)}); "
                "nothing was written.",
                f"Re-run with --force --runs {name} to train it afresh (then without them, to report every run), or "
                "choose another --out folder.",
            )
        steps = ours.training.max_steps
        if not _finished(ours, run_dir):  # to train on: with the validation BLEU its log used
            check_validation_bleu_kept(run_dir, ours, f"run '{name}' in {run_dir}")
        check_schedule_kept(run_dir, previous.training, ours.training, f"run '{name}' in {run_dir}",
                            f"Re-run with --force --runs {name} to train it afresh for {counted(steps, 'step')} (then without "
                            "them, to report every run), or choose another --out folder.")
        check_not_past(run_dir, steps, f"run '{name}' in {run_dir}",
                       f"Give training.max_steps at least that step, re-run with --force --runs {name} to train it "
                       f"afresh for {counted(steps, 'step')}, or choose another --out folder.")


def _skip_finished(config: Config, run_dir: Path) -> None:
    """A finished run is not trained again, but evaluation reads the decoding and evaluation settings and the
    data's folders from its config.yaml: those are kept current; the rest stays the record of what it trained with."""
    trained = load_saved_config(run_dir / "config.yaml")
    data = replace(trained.data, dir=config.data.dir, cache_dir=config.data.cache_dir)  # where its data is now
    current = replace(trained, data=data, decoding=config.decoding, evaluation=config.evaluation)
    if config_differences(trained, current):
        write_config(current, run_dir)


def _finished(config: Config, run_dir: Path) -> bool:
    """Whether the run in `run_dir` has trained to its end under `config` (check_runs has accepted its folder):
    it has a summary.json, and `nmt train --resume` would not train it further: its max_steps did not change,
    nor, where its time limit stopped it, that limit, nor, where early stopping did, a patience that grew (or
    went to 0, none)."""
    summary = read_summary(run_dir)
    if not (run_dir / "config.yaml").exists() or summary is None:
        return False
    previous, ours = load_saved_config(run_dir / "config.yaml").training, config.training
    stopped_by = summary.get("stopped_by")
    extended = (
        previous.max_steps != ours.max_steps
        or (stopped_by == "max_minutes" and ours.max_minutes != previous.max_minutes)
        or (stopped_by == "early_stopping" and (ours.patience == 0 or ours.patience > previous.patience))
    )
    return not extended


def _training_seconds(run_dir: Path, seconds: float) -> float:
    """A finished run's whole training time, as its summary.json (and log) has it; `seconds`, this session's,
    where the summary is gone already (an `nmt train --resume` of the run taking it up meanwhile)."""
    return (read_summary(run_dir) or {}).get("wall_time_s", seconds)


# Runs trained side by side on one CUDA GPU by default. The models here are small (RNNs of 256 units, a
# Transformer of d_model 256): one run leaves most of an H200 idle between its small kernels, and four
# runs in four processes on the one GPU trained together in 261 s (transformer-30, -30-relative,
# -50 and rnnsearch-50 at their raised step counts). More at once was not measured.
GPU_JOBS = 4


def _uses_cuda(config: Config) -> bool:
    devices = {config.for_run(name).training.device for name in config.runs}
    return "cuda" in devices or ("auto" in devices and torch.cuda.is_available())


def training_jobs(config: Config, jobs: int) -> int:
    """How many runs train at once: `jobs`, or if 0, one per core on a CPU (each run then gets
    cores / jobs torch threads; see this module's docstring for why) and on CUDA GPU_JOBS per GPU
    (`run_gpus`), on several GPUs at most one per core, but GPU_JOBS whatever the cores; never more than the runs."""
    if jobs:
        return jobs
    if not _uses_cuda(config):
        return min(len(config.runs), available_cores())
    # each run's process queues its kernels from one core: beyond the cores, they would wait for one
    return min(len(config.runs), GPU_JOBS * max(1, len(visible_gpus())), max(GPU_JOBS, available_cores()))


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (its entries where it is set)."""
    count = torch.cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return [d.strip() for d in visible.split(",")][:count] if visible else [str(i) for i in range(count)]


def run_gpus(config: Config) -> list[str]:
    """The GPUs the runs are spread over (`least_busy`), where the runs use CUDA and more than one GPU is
    visible; [] otherwise: every run on the current GPU."""
    gpus = visible_gpus() if _uses_cuda(config) else []
    return gpus if len(gpus) > 1 else []


def least_busy(gpus: list[str], busy: list[str | None]) -> str | None:
    """The GPU of `gpus` with the fewest of the runs training now (`busy`, each run's GPU), the first of them on a
    tie; None where there is none to choose."""
    return min(gpus, key=busy.count) if gpus else None


def _ended_without_outcome(name: str, exitcode: int | None, log_path: Path) -> NMTError:
    """The failure of run `name` whose process ended without sending its outcome: killed by a signal (the
    out-of-memory killer's SIGKILL), stopped alone (status 130: a signal to it, not to the experiment), or
    another exit status."""
    if exitcode is not None and exitcode < 0:
        why = f"was killed by signal {_signal_name(-exitcode)} (the out-of-memory killer sends SIGKILL)"
    elif exitcode == 130:
        why = "was stopped by a signal to it alone"
    else:
        why = f"ended with status {exitcode}"
    return NMTError(f"run {name}: its training process {why} before the run finished; its saved checkpoints are kept.",
                    f"Run the same command again to resume it (its output: {log_path}).")


def _signal_name(number: int) -> str:
    """SIGKILL for 9; a real-time signal, which has no name in Python, by its number."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _stop_runs(training: dict[Connection, tuple[str, BaseProcess, str | None]]) -> None:
    """Ask each run's process of `training` once to stop (_stop), and wait for them to save and end. What one
    sends meanwhile (a run that ended as it was asked) is read and dropped: a pipe holds only its buffer, and a
    process whose message does not fit would never end."""
    for _, process, _ in training.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGUSR1)
    for results, (_, process, _) in training.items():
        reading = True
        while process.exitcode is None:
            if results in wait([results, process.sentinel] if reading else [process.sentinel]):
                try:
                    results.recv()
                except EOFError:
                    reading = False
        results.close()


def train_runs(
    config: Config, run_dirs: dict[str, Path], jobs: int, record: Callable[[str, float], None],
    then: AfterTraining | None = None,
) -> dict[str, NMTError]:
    """Train every run that is not finished, `jobs` at once (see training_jobs); returns the runs that failed
    (run_failure's errors, by name): one run's error does not stop the others, which train to their end.
    `record(step, seconds)` receives the time each run trained in this call as soon as it ends (its earlier
    sessions are in its summary.json; an interruption keeps those already recorded) and, when all have, the
    wall time of them all; a finished run is skipped and recorded nowhere. Where runs train side by side, each
    run's process then does `then`'s work, recorded as "STEP NAME" and counted in the wall time ("train and STEP
    (all runs, N at once)"): work that needs
    the trained run, done with its threads while the others still train. One after another, or where it fails
    or is stopped, it is not done here: the caller does it (its result is not awaited from here)."""
    configs = {name: config.for_run(name) for name in run_dirs}
    # finished runs are skipped here, so that no process starts for them
    left = {name: run_dir for name, run_dir in run_dirs.items() if not _finished(configs[name], run_dir)}
    for name, run_dir in run_dirs.items():
        if name not in left:
            _skip_finished(configs[name], run_dir)
            print(f"run {name} already finished: skipped")
    jobs = min(training_jobs(config, jobs), len(run_dirs))
    start = time.perf_counter()
    failed: dict[str, NMTError] = {}
    if jobs == 1:
        for name, run_dir in left.items():
            print(f"\n== run {name} ({model_kind(configs[name].model).name}) ==")
            began = time.perf_counter()
            try:
                run_process.train_run(configs[name], run_dir)
            except Exception as error:
                if not run_process.told_whole(error):
                    traceback.print_exc()
                failed[name] = run_process.run_failure(name, error, f"above, after '== run {name}'")
                print(f"{failed[name]} The other runs go on.", file=sys.stderr)
                continue
            record(f"train {name}", time.perf_counter() - began)
    elif left:  # in processes of their own, as when no run was finished: the same threads each, the output in runs/NAME.log
        threads = max(1, available_cores() // jobs)
        for name in left:
            if not configs[name].training.threads:
                configs[name] = replace(configs[name], training=replace(configs[name].training, threads=threads))
        failed = _train_in_parallel({name: configs[name] for name in left}, left, min(jobs, len(left)), record,
                                    run_gpus(config), then)
    if left:  # the runs' own times overlap when they train side by side
        steps = f"train and {then.step}" if then is not None and jobs > 1 else "train"
        record(f"{steps} (all runs, {min(jobs, len(left))} at once)", time.perf_counter() - start)
    return failed


def _train_in_parallel(
    configs: dict[str, Config], run_dirs: dict[str, Path], jobs: int, record: Callable[[str, float], None],
    gpus: list[str], then: AfterTraining | None,
) -> dict[str, NMTError]:
    """Train each run in a process of its own, `jobs` at once, the costliest first (steps x 2 for attention
    runs), so that the last to finish starts early; each run's output goes to runs/NAME.log, each starts on the
    least busy of `gpus` (as `run_gpus` chose them; none: the current device), and does `then`'s work once it has
    trained (`train_runs`), holding its place among the `jobs` meanwhile. `record` receives each run's
    seconds of training in its process as soon as it ends (as `train_runs` says); returns the runs that failed:
    an error, or a process that ended without finishing (a signal, the out-of-memory killer). The others train
    on, each in a fresh process: a device's sticky error dies with the run that met it."""
    order = sorted(run_dirs, key=lambda n: -configs[n].training.max_steps * (1 if model_kind(configs[n].model).without_attention else 2))
    logs = {name: run_dir.parent / f"{name}.log" for name, run_dir in run_dirs.items()}
    for log in logs.values():
        log.parent.mkdir(parents=True, exist_ok=True)
    print(f"\n== training {counted(len(order), 'run')}, {jobs} at once ({configs[order[0]].training.threads} torch threads each); "
          f"each run's output: {logs[order[0]].parent}/NAME.log ==")
    if gpus:
        print(f"   spread over GPUs {', '.join(gpus)} (CUDA_VISIBLE_DEVICES): each run on the one with the fewest runs")
    start = time.perf_counter()
    spawn = multiprocessing.get_context("spawn")
    training: dict[Connection, tuple[str, BaseProcess, str | None]] = {}  # a run's end of the pipe: name, process, GPU
    told: set[Connection] = set()  # the runs of `training` that have said how their training ended (`_collect`)
    failed: dict[str, NMTError] = {}
    try:
        for name in order:
            while len(training) == jobs:
                failed.update(_collect(training, record, logs, start, run_dirs, then, told))
            gpu = least_busy(gpus, [run_gpu for _, _, run_gpu in training.values()])
            results, sent = spawn.Pipe(duplex=False)
            process = spawn.Process(target=run_process.main, args=(name, configs[name], run_dirs[name], logs[name], gpu, then, sent),
                                    name=f"nmt run {name}")
            with starting_children():  # a Ctrl-C here is raised at its end: the process is then among those to stop
                process.start()
                sent.close()  # the parent reads; once the process ends, its end is closed and `results` reads EOF
                training[results] = (name, process, gpu)
        while training:
            failed.update(_collect(training, record, logs, start, run_dirs, then, told))
    except BaseException:
        _stop_runs(training)
        raise
    return failed


def _collect(
    training: dict[Connection, tuple[str, BaseProcess, str | None]], record: Callable[[str, float], None],
    logs: dict[str, Path], start: float, run_dirs: dict[str, Path], then: AfterTraining | None, told: set[Connection],
) -> dict[str, NMTError]:
    """Wait until a run of `training` sends or ends. Its first message says how its training ended: its time is
    recorded and said, or its failure returned, at once (`told` holds the runs that have sent it); the second, the
    seconds of `then`'s work. A run whose process has ended is taken out, a failure if it ended before its first
    message (`_ended_without_outcome`). Returns the failures (by name; several where several ended at once)."""
    failed: dict[str, NMTError] = {}
    # a process's end too, not only its pipe's: a child it left behind may hold the pipe open
    ends = {process.sentinel: results for results, (_, process, _) in training.items()}
    for ready in wait([*training, *ends]):
        results = ends.get(ready, ready)
        if results not in training:  # its message and its end came at once: taken out already
            continue
        name, process, _ = training[results]
        ended, after = ready is process.sentinel, None
        try:
            while results.poll():
                message = results.recv()
                if results not in told:
                    told.add(results)
                    failed.update(_training_told(name, message, record, run_dirs[name], start))
                elif then is not None and message is not None:
                    after = message
                    record(f"{then.step} {name}", after)
        except EOFError:  # the process ended (and, before its first message, without a word)
            ended = True
        if after is not None and then is not None:
            print(f"run {name}: {then.step} took {after:.0f} s, done {time.perf_counter() - start:.0f} s after the "
                  "trainings began")
        if not ended:
            continue
        process.join()  # it ends once it has sent
        if results not in told:
            failed[name] = _ended_without_outcome(name, process.exitcode, logs[name])
            print(f"{failed[name]} The other runs go on.", file=sys.stderr)
        del training[results]
        told.discard(results)
        results.close()
    return failed


def _training_told(
    name: str, outcome: tuple[str, float] | NMTError, record: Callable[[str, float], None], run_dir: Path, start: float
) -> dict[str, NMTError]:
    """Record and say how run `name`'s training ended, as its process sent it; its failure, if it failed."""
    if isinstance(outcome, NMTError):
        print(f"{outcome} The other runs go on.", file=sys.stderr)  # its message names the run
        return {name: outcome}
    done, seconds = outcome
    record(f"train {name}", seconds)
    print(f"run {name}: {done}, {_training_seconds(run_dir, seconds) / 60:.1f} min of training in all "
          f"({seconds / 60:.1f} min now, done {time.perf_counter() - start:.0f} s after the trainings began)")
    return {}
