"""Checkpoints: atomic save, safe load, the RNG states that make resume exact, and `load_run`.

A step checkpoint holds everything the loop needs to continue bit for bit (model, optimiser,
schedule, grad scaler, position in the epoch's batch list, early-stopping state, every RNG);
`best.pt` holds only what translation needs (weights, step, score, config).
"""

from __future__ import annotations

import dataclasses
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nmt.config import Config, config_diff, load_config
from nmt.data.subwords import Tokenizer
from nmt.errors import NMTError
from nmt.fileio import atomic_open
from nmt.models.seq2seq import Seq2Seq, build_model

CHECKPOINT_DIR = "checkpoints"
BEST_NAME = "best.pt"
_STEP_RE = re.compile(r"^step_(\d{8})\.pt$")


def resolve_device(name: str) -> torch.device:
    """'auto' -> CUDA when available, else CPU; 'cuda' without a GPU is a user mistake."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise NMTError(
            f"device '{name}' was asked for but torch sees no CUDA GPU (torch {torch.__version__}).",
            "Use --device cpu / training.device: cpu, or install a CUDA build of torch.",
        )
    try:
        return torch.device(name)
    except RuntimeError:
        raise NMTError(f"unknown device '{name}'.", "Use auto, cpu or cuda.") from None


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


def capture_rng() -> dict[str, Any]:
    """Every RNG the loop draws from, in a form torch.load(weights_only=True) accepts."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore_rng(state: dict[str, Any]) -> None:
    """Put back the RNG states saved by `capture_rng` (CUDA ones only when this machine has the same GPUs)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    saved = state["numpy"]
    np.random.set_state(
        (saved["kind"], saved["keys"].cpu().numpy().astype(np.uint32), saved["pos"], saved["has_gauss"], saved["cached"])
    )
    torch.set_rng_state(state["torch"].cpu())
    cuda_states = state.get("cuda") or []
    if cuda_states and torch.cuda.is_available() and len(cuda_states) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda_states])


@dataclass
class LoadedRun:
    """A trained run ready to translate: its config, tokenizer and model (eval mode, on `device`)."""

    run_dir: Path
    config: Config
    model: Seq2Seq
    tokenizer: Tokenizer
    checkpoint: Path
    step: int


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


def load_run(run_dir: Path, checkpoint: Path | None = None, device: str = "auto") -> LoadedRun:
    """Load a run directory's config, tokenizer copy and model weights for translation or evaluation."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise NMTError(f"run directory not found: {run_dir}", "Pass the --run-dir a training run wrote.")
    config_path = run_dir / "config.yaml"
    if not config_path.is_file():
        raise NMTError(f"{config_path} is missing, so {run_dir} is not a complete run.", "Pass the folder `nmt train` wrote.")
    config = load_config(config_path)
    tokenizer_dir = run_dir / "tokenizer"
    try:
        tokenizer = Tokenizer.load(tokenizer_dir)
    except NMTError:
        raise
    except Exception as exc:
        raise NMTError(
            f"cannot load the tokenizer copy in {tokenizer_dir} ({type(exc).__name__}: {exc}).",
            "The run directory is incomplete; retrain, or copy the tokenizer files back from the data dir.",
        ) from None
    path = Path(checkpoint) if checkpoint is not None else default_checkpoint(run_dir)
    target = resolve_device(device)
    state = load_checkpoint(path, map_location=target)
    model = build_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError:
        raise NMTError(
            f"{path} does not fit the model described by {config_path}: "
            f"{'; '.join(mismatch(state, model.state_dict(), config, tokenizer))}.",
            "Use a checkpoint of this run, or the config it was trained with.",
        ) from None
    model.to(target).eval()
    return LoadedRun(run_dir, config, model, tokenizer, path, int(state.get("step", 0)))


def mismatch(state: dict[str, Any], expected: dict[str, Any], config: Config, tokenizer: Tokenizer) -> list[str]:
    """Why checkpoint `state` does not load into a model whose state dict is `expected`: the model keys
    and vocabulary sizes that differ (when the checkpoint records its config), then the first weights
    whose shapes differ, and the weights one side lacks."""
    reasons = []
    saved_model = (state.get("config") or {}).get("model")
    if isinstance(saved_model, dict):
        reasons += [
            f"model.{key} {saved_model.get(key)!r} in the checkpoint, {getattr(config.model, key)!r} in the config"
            for key in config_diff(saved_model, dataclasses.asdict(config.model))
        ]
    for side in ("src", "tgt"):
        saved, now = state.get(f"{side}_vocab_size"), getattr(tokenizer, f"{side}_vocab_size")
        if saved is not None and saved != now:
            reasons.append(f"{side} vocabulary {saved} in the checkpoint, {now} in the run's tokenizer")
    weights = state["model"]
    shapes = [
        f"{name} {'x'.join(map(str, weights[name].shape))} in the checkpoint, "
        f"{'x'.join(map(str, tensor.shape))} for the config"
        for name, tensor in expected.items()
        if name in weights and tuple(weights[name].shape) != tuple(tensor.shape)
    ]
    shown = 1 if reasons else 3  # once the config keys say why, one weight is example enough
    reasons += shapes[:shown] + ([f"{len(shapes) - shown} more weights of other sizes"] if len(shapes) > shown else [])
    missing = [name for name in expected if name not in weights]
    unexpected = [name for name in weights if name not in expected]
    if missing:
        reasons.append(f"the checkpoint lacks {len(missing)} weights of the config's model ({_first(missing)})")
    if unexpected:
        reasons.append(f"the config's model has none of {len(unexpected)} weights of the checkpoint ({_first(unexpected)})")
    return reasons or ["the weights do not load"]


def _first(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
