"""nmt/training/run_process.py: a run's process trains the run, tells the parent how, then does what follows its
training, whatever befalls that (the parent's side: tests/test_parallel.py)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import nmt.training.run_process as run_process
from nmt.config import Config, config_from_dict
from nmt.errors import NMTError
from nmt.training.terminal import StopRequest


def _run_in_fork(
    name: str, gpu: str | None, log: Path, config: Config | None = None, then: run_process.AfterTraining | None = None
) -> tuple[Any, int | None]:
    """run_process.main for run `name` in a forked process (the experiment spawns them; a fork keeps this test's
    patches): what it sent (its first message, and with `then` the second, each None if none came) and its exit
    status."""
    fork = multiprocessing.get_context("fork")
    results, sent = fork.Pipe(duplex=False)
    config = config or config_from_dict({})
    process = fork.Process(target=run_process.main, args=(name, config, log.parent / name, log, gpu, then, sent))
    process.start()
    sent.close()
    messages: list[Any] = []
    for _ in range(1 if then is None else 2):
        try:
            messages.append(results.recv() if results.poll(60) else None)
        except EOFError:  # it ended without sending
            messages.append(None)
    process.join(timeout=60)
    return messages[0] if then is None else tuple(messages), process.exitcode


def test_a_run_s_process_trains_on_its_gpu_and_sends_its_outcome_or_its_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def train_run(config: Config, run_dir: Path) -> str:
        if run_dir.name == "bug":
            raise RuntimeError("boom")
        if run_dir.name == "stopped":
            raise KeyboardInterrupt  # as _stop makes it
        return os.environ.get("CUDA_VISIBLE_DEVICES", "unset")

    monkeypatch.setattr(run_process, "train_run", train_run)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    (done, seconds), status = _run_in_fork("a", "1", tmp_path / "a.log")
    assert (done, status) == ("1", 0) and seconds >= 0
    assert _run_in_fork("a", None, tmp_path / "a.log")[0][0] == "0,1"  # one GPU: left as it is
    failure, status = _run_in_fork("bug", None, tmp_path / "bug.log")
    assert status == 0 and isinstance(failure, NMTError)
    assert str(failure) == f"run bug failed: RuntimeError: boom Its traceback: {tmp_path / 'bug.log'}."
    assert (tmp_path / "bug.log").read_text(encoding="utf-8").endswith("RuntimeError: boom\n")
    assert _run_in_fork("stopped", None, tmp_path / "stopped.log") == (None, 130)  # it saved; nothing to say


def _after(run_dir: Path) -> None:
    """What a run's process does after its training in these tests: notes its torch threads, or fails, or is stopped."""
    if run_dir.name == "fails":
        raise RuntimeError("no test split")
    if run_dir.name == "stopped":
        raise KeyboardInterrupt  # as _stop makes it
    (run_dir.parent / f"{run_dir.name}.threads").write_text(str(torch.get_num_threads()), encoding="utf-8")


def test_a_run_s_process_then_does_what_follows_with_the_run_s_threads_and_the_run_has_trained_whatever_befalls_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_process, "train_run", lambda config, run_dir: "trained")
    then = run_process.AfterTraining("translate", _after)
    one_thread = config_from_dict({"training": {"threads": 1}})
    torch_threads = torch.get_num_threads()
    for threads, config in ((1, one_thread), (torch_threads, config_from_dict({}))):
        ((done, _), after), status = _run_in_fork("a", None, tmp_path / "a.log", config, then)
        assert (done, status) == ("trained", 0) and isinstance(after, float)
        assert (tmp_path / "a.threads").read_text(encoding="utf-8") == str(threads)
    # its failure or a stop leaves the run trained: its outcome is sent first, then no time for what follows
    ((done, _), after), status = _run_in_fork("fails", None, tmp_path / "fails.log", one_thread, then)
    assert (done, after, status) == ("trained", None, 0)
    log = (tmp_path / "fails.log").read_text(encoding="utf-8")
    assert log.startswith(f"{tmp_path / 'fails'}: 'translate' failed here (RuntimeError: no test split); the run has "
                          "trained, and what was to be done here is done later\nTraceback")
    ((done, _), after), status = _run_in_fork("stopped", None, tmp_path / "stopped.log", one_thread, then)
    assert (done, after, status) == ("trained", None, 0)
    # a failed training does not go on to it
    monkeypatch.setattr(run_process, "train_run", lambda config, run_dir: (_ for _ in ()).throw(NMTError("refused.")))
    (failure, after), status = _run_in_fork("a", None, tmp_path / "b.log", one_thread, then)
    assert isinstance(failure, NMTError) and (after, status) == (None, 0)


def test_a_workers_stop_holds_when_the_interrupt_that_asks_for_it_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGUSR1 reaching a worker whose run is still setting up raises KeyboardInterrupt there; should that be
    lost, the run's StopRequest still starts requested."""
    monkeypatch.setattr(StopRequest, "pending", False)
    with StopRequest(print) as untouched:
        assert not untouched.requested
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as _train sets it
    try:
        with contextlib.suppress(KeyboardInterrupt):  # the interrupt, lost
            run_process._stop(signal.SIGUSR1, None)
    finally:
        signal.signal(signal.SIGINT, previous)
    with StopRequest(print) as request:
        assert request.requested


def test_a_worker_writes_a_failing_run_s_traceback_to_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a worker, a run's bug raises to the parent (which reports the run as failed) with its traceback
    written to the run's log first; an NMTError, which the parent tells whole, writes none."""
    def train_run(config: Config, run_dir: Path) -> str:
        raise RuntimeError("boom") if run_dir.name == "bug" else NMTError("refused.")

    monkeypatch.setattr(run_process, "train_run", train_run)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(RuntimeError, match="boom"):
            run_process._train(config_from_dict({}), tmp_path / "bug", tmp_path / "bug.log")
        with pytest.raises(NMTError, match="refused"):
            run_process._train(config_from_dict({}), tmp_path / "refused", tmp_path / "refused.log")
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    log = (tmp_path / "bug.log").read_text(encoding="utf-8")
    assert log.startswith("Traceback (most recent call last)") and log.endswith("RuntimeError: boom\n")
    assert (tmp_path / "refused.log").read_text(encoding="utf-8") == ""


def test_a_run_s_process_stops_as_on_sigterm_once_the_experiment_is_killed(tmp_path: Path) -> None:
    """The experiment killed with SIGKILL passes nothing on: its run processes trained on, orphans holding their
    locks against the experiment run again. Each stops as on SIGTERM (the run saves) once its parent is gone."""
    marker = tmp_path / "stopped"
    child = ("import os, signal, sys, time\n"
             "from nmt.training.run_process import _stop_when_orphaned\n"
             f"signal.signal(signal.SIGTERM, lambda *_: (open({str(marker)!r}, 'w').close(), sys.exit(0)))\n"
             "print('ready', flush=True)\n"
             "_stop_when_orphaned(os.getppid(), every=0.05)\n"
             "time.sleep(60)\n")
    parent = ("import subprocess, sys, time\n"
              f"child = subprocess.Popen([sys.executable, '-c', {child!r}], stdout=subprocess.PIPE, text=True)\n"
              "child.stdout.readline()\n"
              "print(child.pid, flush=True)\n"
              "time.sleep(60)\n")
    experiment = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert experiment.stdout is not None
    child_pid = int(experiment.stdout.readline())
    try:
        time.sleep(0.3)
        assert not marker.exists()  # its parent alive: it trains on
        experiment.kill()
        experiment.wait()
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child_pid, signal.SIGKILL)
