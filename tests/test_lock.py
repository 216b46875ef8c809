"""nmt.rundir.lock: one training writes a run directory at a time; readers and dead holders never block."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.config import Config
from nmt.decoding.translator import Translator
from nmt.errors import NMTError
from nmt.rundir.lock import Holder
from nmt.training.trainer import train
from tests.helpers import reverse_task_config

# Holds the run's lock as a running training does (an exclusive flock on RUN_DIR/train.lock with its PID
# in the file) until its stdin closes; written out here so that the test does not rely on RunLock itself.
HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o666)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.ftruncate(fd, 0)
os.write(fd, f"{os.getpid()}\\n".encode())
print("locked", flush=True)
sys.stdin.read()
"""


def tiny(root: Path, max_steps: int) -> Config:
    model = {"embedding_size": 16, "hidden_size": 32, "attention_size": 32, "maxout_size": 16}
    # constant: the finished runs here are extended, which a cosine schedule refuses
    training = {"max_steps": max_steps, "validate_every": 2, "checkpoint_every": 2, "valid_max_sentences": 10,
                "batch_tokens": 300, "lr_schedule": "constant"}
    return reverse_task_config(root, n_train=200, min_len=4, max_len=8, model=model, training=training)


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def hold_lock(run_dir: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir / "train.lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


def test_a_second_training_is_refused_while_one_holds_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(tiny(tmp_path / "data", 2), run)
    holder = hold_lock(run)
    try:
        before = snapshot(run)
        with pytest.raises(NMTError, match=rf"{run} is being trained by another process \(PID {holder.pid}\)") as error:
            train(tiny(tmp_path / "data", 4), run, resume=True)
        assert "--resume" in error.value.hint and "translate" in error.value.hint
        assert snapshot(run) == before  # the refused training wrote nothing
        # a new training there without --resume: the holder named, not "add --resume", which would meet the lock
        with pytest.raises(NMTError, match=rf"{run} is being trained by another process \(PID {holder.pid}\)") as error:
            train(tiny(tmp_path / "data", 2), run)  # its own config: only the lock is in the way
        assert "Wait for that training to end" in error.value.hint and snapshot(run) == before
        # reading the run goes on while it is held
        assert len(Translator.from_run(run, device="cpu").translate(["1 2 3"])) == 1
    finally:
        holder.kill()  # SIGKILL: no chance to unlock, the operating system releases the lock
        holder.wait()
    assert holder.returncode == -signal.SIGKILL
    assert train(tiny(tmp_path / "data", 4), run, resume=True)["final_step"] == 4
    assert (run / "train.lock").read_text() == f"{os.getpid()} {socket.gethostname()}\n"  # the last holder named in it


def test_the_lock_is_released_when_training_ends_even_by_an_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(tiny(tmp_path / "data", 2), run)
    latest = run / "checkpoints" / "step_00000002.pt"
    latest.write_bytes(latest.read_bytes()[:100])  # refused after the lock is taken, as the checkpoint loads
    with pytest.raises(NMTError, match="unreadable or corrupt"):
        train(tiny(tmp_path / "data", 4), run, resume=True)
    holder = hold_lock(run)  # would block if the training had kept the lock
    holder.kill()
    holder.wait()


def test_a_holder_on_another_machine_is_named_with_it() -> None:
    # a run folder on a network filesystem, trained from another machine
    assert str(Holder("123", "node7")) == "PID 123 on node7" and Holder("123", "node7").stop_command == "kill 123 on node7"
    here = Holder("123", socket.gethostname())
    assert here.stop_command == "kill 123" and str(Holder("123")) == "PID 123"  # a file of an older nmt: no host

