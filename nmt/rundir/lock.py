"""RUN_DIR/train.lock: one training writes a run directory at a time (and OUT/experiment.lock: one
`nmt experiment` writes an experiment's folder at a time, `ExperimentLock`).

`nmt train` holds an exclusive flock on the file, with its PID and host name in it, from the moment its
checks pass until it ends. The OS drops the lock however the process ends (SIGKILL included), so a dead
training never blocks the next; the file stays (removing it would let two trainings lock two different
files). Reading a run (translate, evaluate, curve, average) takes no lock. On a network filesystem the lock
holds across machines only where the mount passes flock to the server (NFSv4 does; `local_lock=flock` or
NFSv3 without lockd do not), and a crashed machine's lock lasts until the server's lease ends.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from nmt.errors import NMTError

LOCK_NAME = "train.lock"
HELD = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES)  # what flock's LOCK_NB says when another process holds it


@dataclass(frozen=True)
class Holder:
    """The process that holds a run's lock, as it wrote itself in the file: its PID ("unknown" until it has
    written it) and its machine's host name ("" in a file written without one)."""

    pid: str
    host: str = ""

    def __str__(self) -> str:
        return f"PID {self.pid}" + (f" on {self.host}" if self.host else "")

    @property
    def stop_command(self) -> str:
        """How to stop it: `kill PID`, run on its machine where that is another."""
        elsewhere = self.host and self.host != socket.gethostname()
        return f"kill {self.pid}" + (f" on {self.host}" if elsewhere else "")


def _holder_in(fd: int) -> Holder:
    """The holder the lock's file names."""
    pid, _, host = os.pread(fd, 300, 0).decode("utf-8", "replace").strip().partition(" ")
    return Holder(pid, host) if pid.isdigit() else Holder("unknown")


class RunLock:
    """The lock of one run directory: `acquire` takes it (or refuses), `release` or the process's end drops it."""

    name = LOCK_NAME
    keeps_out = "two trainings from writing one run"

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = self.run_dir / self.name
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock (the run directory must exist), or raise NMTError naming the process holding it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder_in(fd)
            os.close(fd)
            if exc.errno not in HELD:
                raise NMTError(
                    f"cannot lock {self.path} ({exc.strerror}), which keeps {self.keeps_out}.",
                    f"Put {self.run_dir} on a filesystem with file locks (a local disk).",
                ) from None
            raise self._busy(holder) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def holder(self) -> Holder | None:
        """The process training the run now, None if none is."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):  # no lock, or no folder to hold one: refused for that later
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: no other prober is kept out
        except OSError as exc:
            return _holder_in(fd) if exc.errno in HELD else None  # no file locks there: acquire will say so
        finally:
            os.close(fd)  # and with it the shared lock
        return None

    def refuse_if_held(self) -> None:
        """NMTError naming the process if one is training the run now (before a new run is refused for its files)."""
        holder = self.holder()
        if holder is not None:
            raise self._busy(holder)

    def _busy(self, holder: Holder) -> NMTError:
        return NMTError(
            f"{self.run_dir} is being trained by another process ({holder}): it holds {self.path}.",
            f"Wait for that training to end, or stop it ({holder.stop_command}) and continue the run with --resume. "
            "nmt translate and nmt evaluate can use the run meanwhile.",
        )

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        """Drop the lock if this object holds it (closing the file does)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class ExperimentLock(RunLock):
    """OUT/experiment.lock, held by `nmt experiment` while it writes OUT (its runs hold their own train.lock)."""

    name = "experiment.lock"
    keeps_out = "two experiments from writing one folder"

    def _busy(self, holder: Holder) -> NMTError:
        return NMTError(
            f"{self.run_dir} is being written by another nmt experiment ({holder}): it holds {self.path}.",
            f"Wait for it to end, or stop it ({holder.stop_command}) and run the same command again: finished runs "
            "are kept, an interrupted one resumes. nmt translate and nmt evaluate can use its finished runs meanwhile.",
        )
