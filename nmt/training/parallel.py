"""Training the runs of an experiment config (`runs:`), one after another or in parallel worker processes.

On a 2-core CPU two 1-thread trainings do 1.5x the steps per second of one 2-thread training: the
recurrences' small matrix products keep two threads of one process waiting on each other
(docs/usage.md). Each run's output then goes to OUT/runs/NAME.log. An interrupted experiment (Ctrl-C,
SIGTERM) asks each worker once to stop, which it does as `nmt train` does on Ctrl-C (nmt/interrupts.py).
A SIGTERM that reaches a training worker itself (`timeout` and Slurm signal the whole process group) asks the
same, once: the run saves at the end of its step; an idle worker ends at once, as the pool expects.
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
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import torch

from nmt.config import Config, load_saved_config
from nmt.environment import available_cores
from nmt.errors import RUNS_MEMORY, NMTError, counted, first_line, out_of_memory
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
from nmt.training.terminal import StopRequest
from nmt.training.trainer import train


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
                "Re-run with --force to redo it, or choose another --out folder.",
            )
        steps = ours.training.max_steps
        if not _finished(ours, run_dir):  # to train on: with the validation BLEU its log used
            check_validation_bleu_kept(run_dir, ours, f"run '{name}' in {run_dir}")
        check_schedule_kept(run_dir, previous.training, ours.training, f"run '{name}' in {run_dir}",
                            f"Re-run with --force to train every run afresh for {counted(steps, 'step')}, or choose another "
                            "--out folder.")
        check_not_past(run_dir, steps, f"run '{name}' in {run_dir}",
                       f"Give training.max_steps at least that step, re-run with --force to train every run afresh "
                       f"for {counted(steps, 'step')}, or choose another --out folder.")


def _train_run(config: Config, run_dir: Path) -> str:
    """Train one run that is not finished (check_runs has accepted its folder), resuming it where it has a
    config.yaml; returns what was done ('trained', 'resumed')."""
    resume = (run_dir / "config.yaml").exists()
    train(config, run_dir, resume=resume)
    return "resumed" if resume else "trained"


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


def _training_seconds(run_dir: Path) -> float:
    """A finished run's whole training time, as its summary.json (and log) has it."""
    return read_summary(run_dir)["wall_time_s"]


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
    (`worker_gpus`), on several GPUs at most one per core, but GPU_JOBS whatever the cores; never more than the runs."""
    if jobs:
        return jobs
    if not _uses_cuda(config):
        return min(len(config.runs), available_cores())
    # each worker queues its kernels from one core: beyond the cores, workers would wait for one
    return min(len(config.runs), GPU_JOBS * max(1, len(visible_gpus())), max(GPU_JOBS, available_cores()))


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (its entries where it is set)."""
    count = torch.cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return [d.strip() for d in visible.split(",")][:count] if visible else [str(i) for i in range(count)]


def worker_gpus(config: Config) -> list[str]:
    """The GPUs the training workers are spread over, one each in turn (the k-th worker on GPU k mod n, all its
    runs there), where the runs use CUDA and more than one GPU is visible; [] otherwise: every worker on the
    current GPU."""
    gpus = visible_gpus() if _uses_cuda(config) else []
    return gpus if len(gpus) > 1 else []


def _start_worker(started: Any, gpus: list[str]) -> None:
    """A worker's GPU (the next of `gpus` in turn, counted by the shared `started`; none to choose if empty),
    and its signals (it starts with them blocked, nmt/interrupts.py): Ctrl-C stays blocked, for the
    parent passes it on once, as SIGUSR1 (_stop); SIGTERM ends an idle worker at once, as the pool expects,
    and stops a run in training as SIGUSR1 does (_train_in_child)."""
    if gpus:
        with started.get_lock():
            index, started.value = started.value, started.value + 1
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]  # before CUDA starts here: its cuda:0
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # until a run starts (_train_in_child)
    signal.signal(signal.SIGUSR1, _stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGUSR1})


def _stop(signum: int, frame: FrameType | None) -> None:
    """SIGUSR1 (or, in a run, SIGTERM) in a worker: a run in training stops as on Ctrl-C (the trainer saves a
    checkpoint at the end of its step), a run still setting up stops at once or, should that KeyboardInterrupt
    be lost, before its first step (with a checkpoint), and no later run starts. Only the first stop counts:
    a group's SIGTERM and the parent's SIGUSR1 both come, and a second request would stop without a checkpoint."""
    if StopRequest.pending:
        return
    StopRequest.pending = True
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):  # announced as the user's Ctrl-C, or as the SIGTERM it is
        handler(signal.SIGTERM if signum == signal.SIGTERM else signal.SIGINT, frame)


def _end_stopped_worker() -> NoReturn:
    """End a worker whose run stopped on request, instead of returning to the pool's queue: a sibling that
    SIGTERM or the out-of-memory killer ended while it waited on that queue may hold its lock for ever. The
    pool then counts the worker as broken: a parent that is stopping too no longer reads it; one that is not
    (SIGTERM to this worker alone) stops the experiment, the checkpoints kept."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


def _stop_workers() -> None:
    """Ask every worker once to stop (_stop)."""
    for worker in multiprocessing.active_children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGUSR1)


def _train_in_child(config: Config, run_dir: Path, log_path: Path) -> tuple[str, float]:
    """One run's training in a worker process, its output in `log_path`; returns (what was done, seconds).
    An NMTError reaches the parent whole, hint included (exceptions cross pickled)."""
    start = time.perf_counter()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # set before `pending` is read: no stop is lost
    signal.signal(signal.SIGTERM, _stop)
    try:
        if StopRequest.pending:
            raise KeyboardInterrupt
        with open(log_path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                done = _train_run(config, run_dir)
            except Exception as error:  # a bug's traceback beside the run's output; the parent says where
                if not told_whole(error):
                    traceback.print_exc()
                raise
    except KeyboardInterrupt:  # a stop (_stop): the run has saved
        _end_stopped_worker()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return done, time.perf_counter() - start


def told_whole(error: Exception) -> bool:
    """Whether a run's failure is told whole by its message, without a traceback: a user's mistake (NMTError)
    or memory run out."""
    return isinstance(error, NMTError) or out_of_memory(error)


def run_failure(name: str, error: Exception, output: str) -> NMTError:
    """Run `name`'s failure to train as the experiment reports it: an NMTError's message and hint, another
    exception's type and message (a bug, or the device's fault) with where its traceback is (`output`)."""
    if isinstance(error, NMTError):
        return NMTError(f"run {name}: {error.message}", f"{error.hint} (its output: {output})".strip())
    if out_of_memory(error):
        return NMTError(f"run {name}: out of memory ({first_line(error)}).", f"{RUNS_MEMORY} (its output: {output})")
    return NMTError(f"run {name} failed: {type(error).__name__}: {error}", f"Its traceback: {output}.")


def train_runs(
    config: Config, run_dirs: dict[str, Path], jobs: int, record: Callable[[str, float], None]
) -> dict[str, NMTError]:
    """Train every run that is not finished, `jobs` at once (see training_jobs); returns the runs that failed
    (run_failure's errors, by name): one run's error does not stop the others, which train to their end.
    `record(step, seconds)` receives the time each run trained in this call as soon as it ends (its earlier
    sessions are in its summary.json; an interruption keeps those already recorded) and, when all have, the
    wall time of them all; a finished run is skipped and recorded nowhere."""
    configs = {name: config.for_run(name) for name in run_dirs}
    # finished runs are skipped here, so that no worker starts for them
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
                _train_run(configs[name], run_dir)
            except Exception as error:
                if not told_whole(error):
                    traceback.print_exc()
                failed[name] = run_failure(name, error, f"above, after '== run {name}'")
                print(f"run {name}: {failed[name]}; the other runs go on", file=sys.stderr)
                continue
            record(f"train {name}", time.perf_counter() - began)
    elif left:  # in workers, as when no run was finished: the same threads each, the output in runs/NAME.log
        threads = max(1, available_cores() // jobs)
        for name in left:
            if not configs[name].training.threads:
                configs[name] = replace(configs[name], training=replace(configs[name].training, threads=threads))
        failed = _train_in_parallel({name: configs[name] for name in left}, left, min(jobs, len(left)), record,
                                    worker_gpus(config))
    if left:  # the runs' own times overlap when they train side by side
        record(f"train (all runs, {min(jobs, len(left))} at once)", time.perf_counter() - start)
    return failed


def _train_in_parallel(
    configs: dict[str, Config], run_dirs: dict[str, Path], jobs: int, record: Callable[[str, float], None],
    gpus: list[str],
) -> dict[str, NMTError]:
    """Train the runs in `jobs` worker processes, the costliest first (steps x 2 for attention runs),
    so that the last to finish starts early; each run's output goes to runs/NAME.log. `record` receives
    each run's seconds of training in its worker as soon as it ends (as `train_runs` says); returns the runs
    that failed (the others train on). `gpus`: as `worker_gpus` chose them. A worker that dies (a signal,
    the out-of-memory killer) breaks the pool: every run stops, its checkpoints kept."""
    order = sorted(run_dirs, key=lambda n: -configs[n].training.max_steps * (1 if model_kind(configs[n].model).without_attention else 2))
    logs = {name: run_dir.parent / f"{name}.log" for name, run_dir in run_dirs.items()}
    for log in logs.values():
        log.parent.mkdir(parents=True, exist_ok=True)
    print(f"\n== training {counted(len(order), 'run')}, {jobs} at once ({configs[order[0]].training.threads} torch threads each); "
          f"each run's output: {logs[order[0]].parent}/NAME.log ==")
    start = time.perf_counter()
    spawn = multiprocessing.get_context("spawn")
    if gpus:
        print(f"   spread over GPUs {', '.join(gpus)} (CUDA_VISIBLE_DEVICES), {jobs} workers in turn")
    started = spawn.Value("i", 0)
    failed: dict[str, NMTError] = {}
    with ProcessPoolExecutor(max_workers=jobs, mp_context=spawn, initializer=_start_worker,
                             initargs=(started, gpus)) as pool:
        futures = {}
        try:
            with starting_children():  # submit starts the workers
                futures = {pool.submit(_train_in_child, configs[n], run_dirs[n], logs[n]): n for n in order}
            for future in as_completed(futures):
                name = futures[future]
                try:
                    done, seconds = future.result()
                except BrokenProcessPool:  # a worker was killed (the out-of-memory killer) or stopped alone
                    raise NMTError(
                        f"run {name}: a training worker ended without finishing (stopped or killed by a signal, or "
                        "out of memory); "
                        "every run's saved checkpoints are kept.",
                        f"Run the same command again to resume (the run's output: {logs[name]}).",
                    ) from None
                except Exception as error:  # raised in the worker, which goes on to the next run
                    failed[name] = run_failure(name, error, str(logs[name]))
                    print(f"run {name}: {failed[name]}; the other runs go on", file=sys.stderr)
                    continue
                record(f"train {name}", seconds)
                print(f"run {name}: {done}, {_training_seconds(run_dirs[name]) / 60:.1f} min of training in all "
                      f"({seconds / 60:.1f} min now, done {time.perf_counter() - start:.0f} s after the trainings began)")
        except BaseException:
            for future in futures:
                future.cancel()
            _stop_workers()
            raise
    return failed


