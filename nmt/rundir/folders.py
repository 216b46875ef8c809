"""What a run folder and an experiment folder hold, telling them apart, and refusing to write over their own
files: a run's (what training writes at its top level, RUN_MARKERS), an experiment's (its config, timings and
lock, its runs' logs) and a prepared data folder's."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nmt.errors import NMTError
from nmt.rundir.checkpoints import CHECKPOINT_DIR, training_checkpoint_name
from nmt.rundir.lock import LOCK_NAME, ExperimentLock
from nmt.rundir.translations import HYPS_DIR

SUMMARY = "summary.json"  # written last, by write_summary: its presence says the run finished
# What a run writes at its top level: a new run refuses a folder holding any of them (nothing is overwritten).
RUN_MARKERS = (
    "config.yaml", SUMMARY, "log.jsonl", CHECKPOINT_DIR, "environment.json", "tokenizer", "tensorboard", HYPS_DIR
)


def is_run(folder: Path) -> bool:
    """Whether `folder` holds a run: its config.yaml and its copy of the tokenizer (an experiment's has no tokenizer)."""
    return (folder / "config.yaml").is_file() and (folder / "tokenizer").is_dir()


def runs_below(folder: Path, depth: int = 3) -> list[Path]:
    """The runs (`is_run`) in the folders below `folder`, down to `depth` levels (not below a run, nor through
    links or hidden folders), in name order."""
    found: list[Path] = []
    level = [folder]
    for _ in range(depth):
        children = []
        for parent in level:
            try:
                entries = sorted(parent.iterdir())
            except OSError:  # not a folder, or one that cannot be read
                continue
            for entry in entries:
                if entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir():
                    continue
                (found if is_run(entry) else children).append(entry)
        level = children
    return sorted(found)


def run_files(run_dir: Path) -> list[str]:
    """What of a run (RUN_MARKERS) `run_dir` holds."""
    return [name for name in RUN_MARKERS if (run_dir / name).exists()]


def refuse_run_file(output: Path, named: str) -> None:
    """Refuse an output (`named`: how the message names it) that is, through its links, a file of a run's
    own: its config.yaml, summary.json, log, environment, lock, tokenizer, translation cache, TensorBoard
    log, or a checkpoint training and --resume read (best.pt, step_*.pt, interrupted_*.pt); or of an
    experiment's own (its config.yaml, timings.json, lock, and its runs' logs); or anything in a prepared data
    folder (its splits, sentencepiece models, cached alignments); any run's or experiment's, so
    that a command writing where it is told never replaces their work (a run's checkpoints/ holds the user's
    files too: averaged.pt; an experiment's report files are reports, written anew)."""
    real = Path(os.path.realpath(output))
    for folder in real.parents:
        top, *below = real.relative_to(folder).parts
        if is_run(folder):
            kept = top in (*RUN_MARKERS, LOCK_NAME) and (
                top != CHECKPOINT_DIR or (len(below) == 1 and training_checkpoint_name(below[0])))
            what = "the run"
        elif experiment_runs(folder) is not None:
            kept = top in ("config.yaml", "timings.json", ExperimentLock.name) or (
                top == "runs" and len(below) == 1 and below[0].endswith(".log"))
            what = "the experiment"
        elif (folder / "prepared.json").is_file():
            raise NMTError(
                f"{named} is in the prepared data folder {folder}: its splits and models are what runs read, and "
                "`nmt prepare` replaces the folder whole when it prepares it again.",
                "Write it outside that folder (beside it, say); nothing was written.",
            )
        else:
            continue
        if kept:
            raise NMTError(
                f"{named} is {real.relative_to(folder)} of {what} {folder}, which nmt wrote and reads: it would be "
                "replaced.",
                f"Write it outside {what}'s own files (beside its folder, say); nothing was written.",
            )
        return


def refuse_folder_of_run(folder: Path, named: str) -> None:
    """Refuse an output folder (`named`: how the message names it) inside a run's own folders (its tokenizer/,
    checkpoints/, hyps/, tensorboard/), where what is written would pass for the run's, or inside a prepared data
    folder; a report in the run's folder itself (RUN/evaluation, the default) is the user's."""
    real = Path(os.path.realpath(folder))
    for parent in (real, *real.parents):
        if (parent / "prepared.json").is_file():
            where = "is" if parent == real else "is inside"
            raise NMTError(f"{named} {where} the prepared data folder {parent}, which `nmt prepare` replaces whole.",
                           "Write it outside that folder; nothing was written.")
        if parent != real and is_run(parent):
            top = real.relative_to(parent).parts[0]
            if top in RUN_MARKERS:
                raise NMTError(f"{named} is inside {top}/ of the run {parent}, which nmt writes and reads.",
                               f"Write it beside the run's own folders (e.g. {parent / 'evaluation'}); nothing was written.")
            return


def experiment_runs(folder: Path) -> list[str] | None:
    """The names of the runs in `folder` (OUT/runs/NAME) where it is an `nmt experiment` --out, else None. Such a
    folder holds a config.yaml too, the experiment's, but no checkpoints/ of its own; it is told by its runs or
    by the timings.json that an experiment writes first (nmt/compare/experiment.py)."""
    if (folder / CHECKPOINT_DIR).is_dir():
        return None
    runs = sorted(path.name for path in (folder / "runs").glob("*") if (path / "config.yaml").is_file())
    return runs if runs or (folder / "timings.json").is_file() else None


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """RUN_DIR/summary.json, or None while the run has not finished (training writes it last)."""
    path = run_dir / SUMMARY
    if not path.exists():
        return None
    rewrite = "Delete it and run the same `nmt train` with --resume: it writes the summary again."
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise NMTError(f"{path} is unreadable ({error}).", rewrite) from None
    if not isinstance(summary, dict):
        raise NMTError(f"{path} is not a run summary (it holds no JSON object).", rewrite)
    return summary
