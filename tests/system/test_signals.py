"""Ctrl-C (SIGINT) and SIGTERM sent to real `nmt prepare`, `nmt experiment` (parallel workers) and `nmt train`
processes at several moments: each ends within seconds with one line and status 130, leaves no process of
its group (workers, sentencepiece's process, multiprocessing's resource tracker) and no broken checkpoint,
and the same command resumes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from nmt.config import config_from_dict, load_config, save_config
from nmt.rundir.folders import read_summary
from tests.helpers import reverse_task_config

REPO = Path(__file__).resolve().parents[2]


def start(*argv: str) -> subprocess.Popen[str]:
    """`nmt ARGV...` in a process group of its own, as a shell starts a foreground job: with Ctrl-C's default
    action even where the suite itself ignores SIGINT (a suite started in the background by a
    non-interactive shell does, and its children would inherit that)."""
    return subprocess.Popen(
        [sys.executable, "-m", "nmt", *argv], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _stat(pid: str) -> list[str]:
    """/proc/PID/stat's fields after the command name: state, ppid, pgid, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def living(pgid: int) -> list[str]:
    """The processes of group `pgid` that have not ended (zombies have: they wait only to be reaped), each as
    'PID STATE COMMAND LINE'."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = _stat(pid)
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # ended meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(f"{pid} {fields[0]} {cmdline}")
    return found


def wait_until(ready: Callable[[], bool], process: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, f"ended early:\n{process.communicate()[0]}"
        assert time.monotonic() < deadline, "the moment to signal never came"
        time.sleep(0.01)


def stopped(
    process: subprocess.Popen[str], signum: int, command: str, group: bool = True, done: str | None = None
) -> str:
    """Send `signum` to the process's group (or to it alone); check it ends within seconds with one line and
    status 130, and that its whole group ends; returns its output. With `done`, the start of what the
    command prints when its work is finished: a signal that came after that ends it as a signal ends a
    program that has done its work (status 0, or killed by the signal on its way out)."""
    (os.killpg if group else os.kill)(process.pid, signum)
    try:
        output = process.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired as timeout:
        left = living(process.pid)  # before the kill: a killed process's command line reads empty
        os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"still running 30 s after {signal.Signals(signum).name}: {left}; its output:\n{timeout.output}")
    if done is not None and process.returncode in (0, -signum):  # a fast idle machine may finish first
        assert output.startswith(done) and "Traceback" not in output, output
    else:
        assert process.returncode == 130, output
        assert output.rstrip().splitlines()[-1].startswith(f"nmt {command}: interrupted.")
    assert "Traceback" not in output and "Process nmt run" not in output, output
    deadline = time.monotonic() + 10
    while living(process.pid):
        assert time.monotonic() < deadline, f"left running: {living(process.pid)}"
        time.sleep(0.05)
    return output


def children(pid: int) -> list[str]:
    return [p for p in filter(str.isdigit, os.listdir("/proc")) if _child_of(p, pid)]


def _child_of(pid: str, parent: int) -> bool:
    try:
        return int(_stat(pid)[1]) == parent
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.1, 0.15, 0.2, 0.3])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_prepare_stops_whenever_the_signal_comes_as_its_sentencepiece_process_starts(
    tmp_path: Path, signum: int, delay: float
) -> None:
    # 20,000 pairs: more start-up data than a pipe holds, so a child dying as it starts once hung the parent
    save_config(reverse_task_config(tmp_path / "data", n_train=20_000), tmp_path / "config.yaml")
    process = start("prepare", str(tmp_path / "config.yaml"))
    wait_until(lambda: bool(children(process.pid)), process)  # the first child: the resource tracker
    time.sleep(delay)
    stopped(process, signum, "prepare", done=f"prepared {tmp_path / 'data' / 'prepared'} from files")


def experiment_config(root: Path) -> Path:
    """Two runs: `long` trains for hours, `short` (no attention) for 4 steps, then its worker idles."""
    raw = reverse_task_config(root / "data", n_train=300).to_dict()
    raw["training"].update(max_steps=100_000, checkpoint_every=20, validate_every=1000, threads=1)
    raw["runs"] = {"long": {}, "short": {"model": {"attention": "none"}, "training": {"max_steps": 4}}}
    save_config(config_from_dict(raw), root / "config.yaml")
    return root / "config.yaml"


def checkpoints_load(out: Path) -> None:
    for path in (out / "runs").glob("*/checkpoints/*.pt"):
        torch.load(path, weights_only=True)


# (signal, to the whole group or to the parent alone, the file whose appearance is the moment to send it)
MOMENTS = [
    (signal.SIGINT, True, "runs/short/summary.json"),  # Ctrl-C with one worker idle
    (signal.SIGTERM, True, "runs/short/summary.json"),  # `timeout`, Slurm
    (signal.SIGINT, True, "runs/long.log"),  # the workers start
    (signal.SIGTERM, True, "runs/long.log"),
    (signal.SIGTERM, False, "runs/long/log.jsonl"),  # `kill PID`, a container's stop
]


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "group", "moment"), MOMENTS)
def test_a_parallel_experiment_stops_every_worker(tmp_path: Path, signum: int, group: bool, moment: str) -> None:
    out = tmp_path / "out"
    command = ["experiment", str(experiment_config(tmp_path)), "--out", str(out), "--jobs", "2"]
    process = start(*command)
    wait_until((out / moment).exists, process)
    try:
        stopped(process, signum, "experiment", group)
    finally:  # shown if it fails: where each worker was
        for log in sorted((out / "runs").glob("*.log")):
            print(f"== {log.name}:\n{log.read_text()[-3000:]}")
    checkpoints_load(out)


@pytest.mark.slow
def test_ctrl_c_saves_the_training_run_and_the_same_experiment_command_resumes_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = ["experiment", str(experiment_config(tmp_path)), "--out", str(out), "--jobs", "2"]
    process = start(*command)
    wait_until(lambda: (out / "runs/short/summary.json").exists() and (out / "runs/long/checkpoints").is_dir(), process)
    stopped(process, signal.SIGINT, "experiment")
    assert "saving a checkpoint, then stopping" in (out / "runs/long.log").read_text()
    checkpoints_load(out)

    again = start(*command)
    wait_until(lambda: "resumed from" in (out / "runs/long.log").read_text(), again)
    stopped(again, signal.SIGTERM, "experiment")


@pytest.mark.slow
def test_sigterm_to_the_whole_group_saves_the_run_in_training(tmp_path: Path) -> None:
    """`timeout` and Slurm send SIGTERM to every process of the group, the training workers included: a run
    in training saves a checkpoint for --resume at the end of its step, as on Ctrl-C."""
    out = tmp_path / "out"
    process = start("experiment", str(experiment_config(tmp_path)), "--out", str(out), "--jobs", "2")
    wait_until((out / "runs/long/log.jsonl").exists, process)  # written in the training loop
    stopped(process, signal.SIGTERM, "experiment")
    assert "saving a checkpoint, then stopping" in (out / "runs/long.log").read_text()
    assert list((out / "runs/long/checkpoints").glob("interrupted_*.pt")), list((out / "runs/long/checkpoints").iterdir())
    checkpoints_load(out)


@pytest.mark.slow
def test_sigterm_stops_nmt_train_as_ctrl_c_does_as_it_starts_and_in_training(tmp_path: Path) -> None:
    config = reverse_task_config(tmp_path / "data", training={"max_steps": 100_000, "checkpoint_every": 1000})
    save_config(config, tmp_path / "config.yaml")
    command = ["train", str(tmp_path / "config.yaml"), "--run-dir"]
    process = start(*command, str(tmp_path / "starting"))
    wait_until((tmp_path / "starting").exists, process)  # with its lock, before the model is built
    stopped(process, signal.SIGTERM, "train")

    process = start(*command, str(tmp_path / "run"))
    wait_until((tmp_path / "run" / "log.jsonl").exists, process)  # written in the training loop
    assert "signal SIGTERM: saving a checkpoint" in stopped(process, signal.SIGTERM, "train")
    steps = [torch.load(p, weights_only=True)["step"] for p in (tmp_path / "run/checkpoints").glob("*.pt")]
    assert len(steps) == 1 and steps[0] > 0


def run_process(parent: int, log: Path) -> int:
    """The process among `parent`'s children that trains the run whose output is `log` (its stdout there)."""
    for pid in children(parent):
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) == str(log) for fd in Path(f"/proc/{pid}/fd").iterdir()):
                return int(pid)
    pytest.fail(f"no process writes {log}")


@pytest.mark.slow
def test_a_killed_run_fails_alone_and_the_same_command_resumes_it(tmp_path: Path) -> None:
    """The out-of-memory killer ends one run's process: that run is told failed, with how to resume it; the other
    trains to its end (its time limit, 30 s), is reported, and the experiment exits 2."""
    raw = load_config(experiment_config(tmp_path)).to_dict()
    raw["runs"]["short"]["training"] = {"max_steps": 100_000, "max_minutes": 0.5}
    save_config(config_from_dict(raw), tmp_path / "config.yaml")
    out = tmp_path / "out"
    command = ["experiment", str(tmp_path / "config.yaml"), "--out", str(out), "--jobs", "2"]
    process = start(*command)
    # a periodic checkpoint of `long` to resume from (SIGKILL leaves no interruption checkpoint)
    wait_until(lambda: any((out / "runs/long/checkpoints").glob("step_*.pt")), process)
    assert not (out / "runs/short/summary.json").exists()  # still training
    os.kill(run_process(process.pid, out / "runs/long.log"), signal.SIGKILL)
    try:
        output = process.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"still running 120 s after a run's process was killed: {living(process.pid)}")
    assert process.returncode == 2, output
    assert ("run long: its training process was killed by signal SIGKILL (the out-of-memory killer sends SIGKILL) "
            "before the run finished; its saved checkpoints are kept.") in output
    assert f"Run the same command again to resume it (its output: {out / 'runs/long.log'})" in output
    assert "Traceback" not in output, output
    assert read_summary(out / "runs/short")["stopped_by"] == "max_minutes"
    assert "short" in (out / "report.md").read_text() and "Not in this report" in (out / "report.md").read_text()
    checkpoints_load(out)
    again = start(*command)
    wait_until(lambda: "resumed from" in (out / "runs/long.log").read_text(), again)
    stopped(again, signal.SIGINT, "experiment")
