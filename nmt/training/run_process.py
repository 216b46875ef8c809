"""A run's process, where an experiment trains its runs side by side (nmt/training/parallel.py): it trains the run,
tells the parent how the training ended, then does what follows the training (`AfterTraining`) and tells its time.

A run stopped on request (SIGUSR1 from the parent, or a SIGTERM to the process group) saves at the end of its
step, as `nmt train` does on Ctrl-C (nmt/interrupts.py), and ends with status 130 without a word: the parent
knows it asked.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import NamedTuple

import torch

from nmt.config import Config
from nmt.errors import RUNS_MEMORY, NMTError, first_line, out_of_memory
from nmt.training.terminal import StopRequest
from nmt.training.trainer import train


class AfterTraining(NamedTuple):
    """What a run's process does once its run has trained (nmt/training/parallel.py, `train_runs`' `then`): `work(run_dir)`, picklable (a
    module's function, or a partial of one), its time recorded as "`step` NAME" (e.g. "translate rnnsearch-50")."""

    step: str
    work: Callable[[Path], None]


def train_run(config: Config, run_dir: Path) -> str:
    """Train one run that is not finished (check_runs has accepted its folder), resuming it where it has a
    config.yaml; returns what was done ('trained', 'resumed')."""
    resume = (run_dir / "config.yaml").exists()
    train(config, run_dir, resume=resume)
    return "resumed" if resume else "trained"


def _stop(signum: int, frame: FrameType | None) -> None:
    """SIGUSR1 (or, in a run, SIGTERM) in a run's process: a run in training stops as on Ctrl-C (the trainer
    saves a checkpoint at the end of its step), a run still setting up stops at once or, should that
    KeyboardInterrupt be lost, before its first step (with a checkpoint). Only the first stop counts: a group's
    SIGTERM and the parent's SIGUSR1 both come, and a second request would stop without a checkpoint."""
    if StopRequest.pending:
        return
    StopRequest.pending = True
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):  # announced as the user's Ctrl-C, or as the SIGTERM it is
        handler(signal.SIGTERM if signum == signal.SIGTERM else signal.SIGINT, frame)


def _train(config: Config, run_dir: Path, log_path: Path) -> tuple[str, float]:
    """One run's training in its own process, its output in `log_path`; returns (what was done, seconds).
    A bug's traceback is written to the log (the parent says where); KeyboardInterrupt where it was stopped."""
    start = time.perf_counter()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # set before `pending` is read: no stop is lost
    try:
        if StopRequest.pending:
            raise KeyboardInterrupt
        with open(log_path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                done = train_run(config, run_dir)
            except Exception as error:
                if not told_whole(error):
                    traceback.print_exc()
                raise
    finally:  # a stop that comes once the run is over, as the process ends, has nothing to stop
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return done, time.perf_counter() - start


def _after_training(then: AfterTraining, config: Config, run_dir: Path, log_path: Path) -> float | None:
    """Do `then`'s work in a run's process once the run has trained, with the run's torch threads, its output in
    `log_path`; its seconds, or None where it did not finish: stopped (Ctrl-C, SIGTERM), or failed (told in the
    log). Either way the run has trained: that work is left to whoever needs it next."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # set before `pending` is read: no stop is lost
    try:
        if StopRequest.pending:
            return None
        start = time.perf_counter()
        if config.training.threads > 0:  # the process ends after this: nothing else needs the threads back
            torch.set_num_threads(config.training.threads)
        with open(log_path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                then.work(run_dir)
            except Exception as error:
                print(f"{run_dir}: '{then.step}' failed here ({type(error).__name__}: {error}); the run has trained, "
                      "and what was to be done here is done later", file=sys.stderr)
                if not told_whole(error):
                    traceback.print_exc()
                return None
        return time.perf_counter() - start
    except KeyboardInterrupt:
        return None
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def main(
    name: str, config: Config, run_dir: Path, log_path: Path, gpu: str | None, then: AfterTraining | None,
    results: Connection,
) -> None:
    """A run's process (spawned, with HELD signals blocked: nmt/interrupts.py): on `gpu` where one is given (set
    before CUDA starts here: its cuda:0), it trains the run and sends the parent (what was done, seconds) or the
    run's failure (run_failure); a run stopped on request (_stop) sends nothing and ends with status 130. Once it
    has trained and sent so, it does `then`'s work and sends its seconds (None where it did not finish): whatever
    befalls that work, the parent already knows the run has trained. Ctrl-C
    stays ignored until the run starts, for the parent passes it on once, as SIGUSR1; SIGTERM stops the run as
    SIGUSR1 does."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, _stop)
    signal.signal(signal.SIGTERM, _stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGUSR1})
    threading.Thread(target=_stop_when_orphaned, args=(os.getppid(),), daemon=True).start()
    try:
        outcome: tuple[str, float] | NMTError = _train(config, run_dir, log_path)
    except KeyboardInterrupt:  # the run has saved
        sys.exit(130)
    except Exception as error:  # told as the experiment tells it: only an NMTError crosses, whatever the error holds
        outcome = run_failure(name, error, str(log_path))
    try:
        results.send(outcome)
        if then is not None and not isinstance(outcome, NMTError):
            results.send(_after_training(then, config, run_dir, log_path))
    except (BrokenPipeError, ConnectionResetError):  # the experiment is gone: nobody to tell, the run has saved
        sys.exit(130)


def _stop_when_orphaned(parent: int, every: float = 1.0) -> None:
    """Stop this run's process as on SIGTERM (the run saves at the end of its step) once `parent`, the experiment,
    is gone (killed with SIGKILL, which it cannot pass on): a run training on with nobody to tell would hold its
    lock against the experiment run again."""
    while os.getppid() == parent:
        time.sleep(every)
    os.kill(os.getpid(), signal.SIGTERM)


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
