"""A run's checkpoint files: their names, finding them, the default choice, the one rule for --checkpoint,
atomic save and safe load.

A step checkpoint (checkpoints/step_*.pt) holds everything the loop needs to continue bit for bit
(model, optimiser, schedule, grad scaler, position in the epoch's batch list, early-stopping state,
every RNG); `best.pt` and `nmt average`'s averaged.pt hold only what translation needs (weights,
step, score or averaged steps, config).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from nmt.errors import NMTError
from nmt.fileio import atomic_open

CHECKPOINT_DIR = "checkpoints"
BEST_NAME = "best.pt"
_STEP_RE = re.compile(r"^step_(\d{8})\.pt$")


def step_checkpoint_name(step: int) -> str:
    """File name of the periodic checkpoint taken after `step` updates."""
    return f"step_{step:08d}.pt"


def checkpoint_step(path: Path) -> int:
    """The step in a periodic checkpoint's file name (step_00000300.pt -> 300)."""
    match = _STEP_RE.match(path.name)
    if match is None:
        raise ValueError(f"{path.name} is not a periodic checkpoint name")
    return int(match.group(1))


def step_checkpoints(run_dir: Path) -> list[Path]:
    """The run's periodic checkpoints, oldest first."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if _STEP_RE.match(p.name)]
    return sorted(found, key=checkpoint_step)


def latest_step_checkpoint(run_dir: Path) -> Path | None:
    """The periodic checkpoint with the highest step, or None."""
    found = step_checkpoints(run_dir)
    return found[-1] if found else None


def prune_step_checkpoints(run_dir: Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` periodic checkpoints (0 keeps them all)."""
    if keep_last <= 0:
        return
    for path in step_checkpoints(run_dir)[:-keep_last]:
        path.unlink(missing_ok=True)


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write `state` with torch.save through a temporary file, so a kill never leaves half a file."""
    with atomic_open(path, "wb") as handle:
        torch.save(state, handle)


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint`; anything unreadable becomes an NMTError."""
    path = Path(path)
    if not path.is_file():
        raise NMTError(f"checkpoint not found: {path}", "Check the path, or list the run's checkpoints/ folder.")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types for a damaged zip/pickle
        raise NMTError(
            f"checkpoint {path} is unreadable or corrupt ({type(exc).__name__}: {str(exc)[:200]}).",
            "Delete it and use another checkpoint of the run (checkpoints/step_*.pt), or retrain.",
        ) from None
    if not isinstance(state, dict) or "model" not in state:
        raise NMTError(f"{path} is not an nmt checkpoint (no model weights in it).", "Point to a file in RUN_DIR/checkpoints/.")
    return state


def default_checkpoint(run_dir: Path) -> Path:
    """best.pt if the run has one, else its latest periodic checkpoint."""
    best = Path(run_dir) / CHECKPOINT_DIR / BEST_NAME
    if best.is_file():
        return best
    latest = latest_step_checkpoint(run_dir)
    if latest is None:
        raise NMTError(
            f"{run_dir} has no checkpoint ({CHECKPOINT_DIR}/{BEST_NAME} or {CHECKPOINT_DIR}/step_*.pt).",
            "Train it first (nmt train CONFIG --run-dir ...), or --resume an interrupted run.",
        )
    return latest


def resolve_checkpoint(run_dir: Path, checkpoint: str | Path | None) -> Path:
    """The checkpoint file a command uses, by one rule for every --checkpoint: none given is the run's
    default (`default_checkpoint`); a bare file name (best.pt, averaged.pt, step_00000300.pt) is looked
    up in RUN_DIR/checkpoints/; a path with a folder part is used as it is."""
    run_dir = Path(run_dir)
    if checkpoint is None:
        return default_checkpoint(run_dir)
    given = Path(checkpoint)
    if given.parent != Path("."):
        if not given.is_file():
            raise NMTError(f"--checkpoint {checkpoint}: no such file.",
                           f"Check the path, or give a bare file name of the run's {CHECKPOINT_DIR}/ folder.")
        return given
    path = run_dir / CHECKPOINT_DIR / given
    if not path.is_file():
        have = sorted(p.name for p in (run_dir / CHECKPOINT_DIR).glob("*.pt"))
        raise NMTError(
            f"--checkpoint {checkpoint}: {run_dir} has no {path} (it has: {', '.join(have) or 'none'}).",
            f"A bare file name is looked up in the run's {CHECKPOINT_DIR}/ folder; give one it has, or the "
            f"path of a file elsewhere with its folder (e.g. $PWD/{given.name} for one in the current folder).",
        )
    return path


def describe_checkpoint(path: Path) -> str:
    """A checkpoint for reports: its file, its step, and what chose it (best.pt) or what it averages.

    best.pt is the step with the best validation score by training.early_stopping_metric; a BLEU
    under 1 (a tiny or hard validation set) says little, so the text says so.
    """
    state = load_checkpoint(path)
    text = f"{Path(path).name} (step {int(state.get('step', 0))}"
    averaged = state.get("averaged_steps")
    if averaged:
        text += f", the average of steps {', '.join(str(int(s)) for s in averaged)}"
    elif Path(path).name == BEST_NAME and isinstance(state.get("score"), (int, float)):
        metric, score = state.get("metric", "bleu"), float(state["score"])
        text += f", best validation {metric} {score:.2f}"
        if metric == "bleu" and score < 1.0:
            text += "; a BLEU this low chooses by noise: consider training.early_stopping_metric: loss"
    return text + ")"
