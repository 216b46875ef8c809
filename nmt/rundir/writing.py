"""Writing a run directory as training does: config.yaml, the tokenizer copy, environment, log and summary.
`claim` runs every check of nmt/rundir/checks.py (another run there, a resume that differs) before anything is
written, so a mistake never overwrites a previous run."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from nmt.config import Config, save_config
from nmt.data.subwords import Tokenizer
from nmt.environment import describe_environment
from nmt.errors import NMTError
from nmt.fileio import atomic_open, atomic_write_json, atomic_write_text, errors_naming
from nmt.rundir.checkpoints import (
    CHECKPOINT_DIR,
)
from nmt.rundir.checks import (
    check_run_dir,
    check_subword_settings,
    check_tokenizer,
    check_training_data,
    training_data,
    with_absolute_paths,
)
from nmt.rundir.folders import SUMMARY
from nmt.rundir.lock import RunLock


def claim(run_dir: Path, config: Config, tokenizer: Tokenizer, resume: bool, lock: RunLock) -> Path | None:
    """Check everything, then create the run directory and take its lock, which the training holds to its
    end. Returns the checkpoint to resume from (None: start at step 0), as found with the lock held.
    Nothing but the folder and its lock file is written, and nothing unless every check passes."""
    check_subword_settings(tokenizer, config)
    check_run_dir(run_dir, config, resume)
    if resume:
        check_tokenizer(tokenizer, run_dir)
        check_training_data(tokenizer.directory, run_dir)
    if config.training.tensorboard:
        summary_writer_class()
    try:  # create the run directory and prove a file can be written in it
        run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=run_dir, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise NMTError(
            f"cannot write to the run directory {run_dir} ({exc.strerror or exc}).",
            "Choose a writable --run-dir or fix its permissions.",
        ) from None
    lock.acquire()
    # again with the lock held: a training that ended a moment ago may have written the run meanwhile
    return check_run_dir(run_dir, config, resume)


def set_up(
    run_dir: Path, config: Config, tokenizer: Tokenizer, device: torch.device, world_size: int, step: int = 0
) -> None:
    """Write config.yaml, environment.json and tokenizer/ (a copy of the tokenizer's files: models +
    tokenizer.json with their sha256) into a run directory `claim` has checked and locked, for a session that
    trains from `step` (0: a new run). environment.json describes this session (library versions, commit,
    hardware, from_step); a resumed run's earlier sessions stay in it, oldest first, under earlier_sessions."""
    # a resumed run is unfinished again until it ends (a new one has no summary: claim refused it)
    (run_dir / SUMMARY).unlink(missing_ok=True)
    # the temporary files of a checkpoint writer killed midway (atomic_open's, each up to 3x the model);
    # only training writes these names, and it holds the run's lock (averaged.pt's are another command's)
    for stale in (run_dir / CHECKPOINT_DIR).glob(".*.tmp"):
        if re.fullmatch(r"\.(step_\d+|interrupted_\d+|best)\.pt\..+\.tmp", stale.name):
            stale.unlink(missing_ok=True)
    write_config(config, run_dir)
    environment = {**describe_environment(device), "device": str(device), "world_size": world_size, "from_step": step,
                   "training_data": training_data(tokenizer.directory)}
    earlier = _earlier_sessions(run_dir / "environment.json") if step > 0 else []
    atomic_write_json(run_dir / "environment.json", environment | ({"earlier_sessions": earlier} if earlier else {}))
    (run_dir / "tokenizer").mkdir(exist_ok=True)  # claim made run_dir
    for name, content in tokenizer.contents().items():  # the files as loaded: the model this run encodes with
        with atomic_open(run_dir / "tokenizer" / name, "wb") as dest:
            dest.write(content)


def _earlier_sessions(path: Path) -> list[dict[str, Any]]:
    """The sessions environment.json at `path` describes, oldest first: its earlier_sessions, then its own
    (none where there is no such file or it is not one of nmt's)."""
    try:
        environment = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(environment, dict):
        return []
    earlier = environment.pop("earlier_sessions", [])
    return [*(earlier if isinstance(earlier, list) else []), environment]


def summary_writer_class() -> Any:
    """torch's TensorBoard SummaryWriter, imported only when asked for (tensorboard is optional)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise NMTError(
            "training.tensorboard is on but the tensorboard package is not installed.",
            "pip install tensorboard, or set training.tensorboard: false.",
        ) from None
    return SummaryWriter


def write_config(config: Config, run_dir: Path) -> None:
    """RUN_DIR/config.yaml, loadable by nmt.config.load_config. Its data paths are absolute, so that
    evaluating or resuming the run works from any working directory."""
    save_config(with_absolute_paths(config), run_dir / "config.yaml")


@dataclasses.dataclass
class RunLog:
    """RUN_DIR/log.jsonl: one JSON object per logging or validation event."""

    path: Path

    def truncate_after(self, step: int) -> None:
        """Drop events after `step`: those steps are redone by a resumed run."""
        if not self.path.is_file():
            return
        lines = self.path.read_text(encoding="utf-8").splitlines()
        kept = [line for line in lines if line.strip() and _event_step(line) <= step]
        atomic_write_text(self.path, "".join(line + "\n" for line in kept))

    def write(self, event: dict[str, Any]) -> None:
        """Append one event and flush it to disk (as the step checkpoints are: a power cut leaves no gap in
        the log before a checkpoint that --resume would not fill)."""
        with errors_naming(self.path), open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(event) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def _event_step(line: str) -> int:
    try:
        return int(json.loads(line).get("step", 0))
    except (ValueError, AttributeError, TypeError):
        return sys.maxsize  # a half-written last line from a kill, or a line that is no event: drop it


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """RUN_DIR/summary.json, written atomically at the end of training."""
    atomic_write_json(run_dir / SUMMARY, summary)
