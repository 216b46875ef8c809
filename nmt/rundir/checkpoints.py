"""A run's checkpoint files: their names, finding them, the one rule for --checkpoint, their content
(`Checkpoint`, with a step checkpoint's `TrainingState`), atomic save and safe load."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nmt.data.subwords import Tokenizer
from nmt.errors import NMTError
from nmt.evaluation.low_bleu import CHOOSES_BY_NOISE, MIN_BLEU
from nmt.fileio import atomic_open

CHECKPOINT_DIR = "checkpoints"
BEST_NAME = "best.pt"
_STEP_RE = re.compile(r"^step_(\d{8})\.pt$")
# A Ctrl-C's checkpoint, or one of a best validation off the periodic grid (written before best.pt): for --resume
# only, so no periodic checkpoint's reader (average, curve, keep_last) sees it.
_RESUMABLE_RE = re.compile(r"^(?:step|interrupted)_(\d{8})\.pt$")
_INTERRUPTED_RE = re.compile(r"^interrupted_(\d{8})\.pt$")


def step_checkpoint_name(step: int) -> str:
    """File name of the periodic checkpoint taken after `step` updates."""
    return f"step_{step:08d}.pt"


def interrupted_checkpoint_name(step: int) -> str:
    """File name of a checkpoint for --resume only after `step` updates: an interruption's (Ctrl-C), or a best
    validation's off the periodic grid."""
    return f"interrupted_{step:08d}.pt"


def training_checkpoint_name(name: str) -> bool:
    """Whether `name` is one training writes and --resume reads (best.pt, step_*.pt, interrupted_*.pt)."""
    return name == BEST_NAME or _RESUMABLE_RE.match(name) is not None


def checkpoint_step(path: Path) -> int:
    """The step in a periodic or interruption checkpoint's file name (step_00000300.pt -> 300)."""
    match = _RESUMABLE_RE.match(path.name)
    if match is None:
        raise ValueError(f"{path.name} is not a periodic checkpoint name")
    return int(match.group(1))


def _named(run_dir: Path, pattern: re.Pattern[str]) -> list[Path]:
    """The files of RUN_DIR/checkpoints/ whose names match `pattern` (none while the folder is absent)."""
    folder = run_dir / CHECKPOINT_DIR
    return [p for p in folder.iterdir() if pattern.match(p.name)] if folder.is_dir() else []


def step_checkpoints(run_dir: Path) -> list[Path]:
    """The run's periodic checkpoints, oldest first."""
    return sorted(_named(run_dir, _STEP_RE), key=checkpoint_step)


def interrupted_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint for --resume only (interrupted_*.pt: an interruption's, or a best validation's off the
    periodic grid) where it is the newest checkpoint of the run, the one --resume continues from; None where the
    run has none (a periodic checkpoint replaces it)."""
    latest = latest_step_checkpoint(run_dir)
    return latest if latest is not None and _INTERRUPTED_RE.match(latest.name) else None


def resume_hint(run_dir: Path) -> str:
    """How to continue the unfinished run in `run_dir`, which makes more periodic checkpoints (no full stop)."""
    return (
        f"Continue the run with `nmt train CONFIG --run-dir {run_dir} --resume` (CONFIG: the one it was trained "
        "with; for a run of `nmt experiment`, run the same experiment again): it saves a step_*.pt every "
        "training.checkpoint_every steps"
    )


def refuse_interrupted_only(run_dir: Path, wanted: str) -> None:
    """NMTError where the run has no periodic checkpoint but an interruption's (`wanted`: what the periodic ones
    are read for, "to average"): it was stopped before its first one, and only resuming it makes some, which
    training.keep_last does not. Nothing where it has a periodic checkpoint, or no interruption's either."""
    interrupted = interrupted_checkpoint(run_dir)
    if interrupted is None or step_checkpoints(run_dir):
        return
    raise NMTError(
        f"{run_dir} has no periodic checkpoint ({CHECKPOINT_DIR}/step_*.pt) {wanted}: its training stopped (or "
        f"validated best) at step {checkpoint_step(interrupted)}, before its first one, and left {CHECKPOINT_DIR}/"
        f"{interrupted.name}, which is for --resume only.",
        f"{resume_hint(run_dir)}.",
    )


def latest_step_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint a run resumes from: the periodic or interruption checkpoint of the highest step (the
    periodic one where both are of that step), or None."""
    return max(_named(run_dir, _RESUMABLE_RE), key=lambda path: (checkpoint_step(path), path.name.startswith("step_")),
               default=None)


def prune_step_checkpoints(run_dir: Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` periodic checkpoints (0 keeps them all)."""
    if keep_last <= 0:
        return
    for path in step_checkpoints(run_dir)[:-keep_last]:
        path.unlink(missing_ok=True)


@dataclass
class TrainingState:
    """What a step checkpoint holds beyond `Checkpoint`'s weights: everything the loop needs to continue
    bit for bit. Its fields are the checkpoint file's top-level keys of the same names."""

    optimizer: dict[str, Any]
    schedule: dict[str, Any]
    scaler: dict[str, Any]  # {} = saved with the scaler disabled (fp32, bf16 or CPU)
    epoch: int
    position: int  # batches of the epoch's list already trained on
    best_score: float | None
    best_step: int
    bad_validations: int
    log_acc: dict[str, float]  # the running log accumulators, so a resumed run logs the same numbers
    elapsed_s: float
    rng: list[dict[str, Any]]  # every rank's RNG states, in rank order
    last_validation: dict[str, Any] | None
    world_size: int
    # the best score of the periodic validations, against which patience counts (NaN: none yet); absent
    # (None) from checkpoints written before it was kept, where best_score served
    periodic_best: float | None = None


@dataclass
class Checkpoint:
    """One checkpoint file. best.pt and averaged.pt hold the weights and what describes them; a run's newest
    step checkpoint (or its interruption's) holds its `training` state too, the older ones do not. `to_dict` and `from_dict` are the only code that writes
    and reads the file's keys, so that every reader agrees with the writer."""

    model: dict[str, torch.Tensor]
    step: int
    config: dict[str, Any] | None = None  # the run's Config.to_dict()
    src_vocab_size: int | None = None
    tgt_vocab_size: int | None = None
    score: float | None = None  # best.pt: its validation score; a step checkpoint: the best so far (NaN: none)
    metric: str | None = None  # the score's metric (training.early_stopping_metric)
    averaged_steps: list[int] | None = None  # averaged.pt: the steps whose weights it averages
    # the sha256 of the sentencepiece model files the weights were trained with (tokenizer.json's), by file name
    tokenizer_sha256: dict[str, str] | None = None
    training: TrainingState | None = None  # a run's newest step checkpoint only (--resume reads no other)

    def to_dict(self) -> dict[str, Any]:
        """The file's content: one flat dict (fields left None are left out), as torch.save writes it."""
        flat = {key: value for key, value in vars(self).items() if key != "training" and value is not None}
        if self.training is not None:
            # by reference: asdict would deep-copy the optimiser's tensors at every checkpoint; a field added
            # later is left out where it is None, so that an older checkpoint rewritten keeps its keys
            flat.update({key: value for key, value in vars(self.training).items()
                         if value is not None or key not in _ADDED_TRAINING_FIELDS})
        return flat

    @classmethod
    def from_dict(cls, state: Any, path: Path) -> Checkpoint:
        """Read what `to_dict` wrote (the content of file `path`, which errors name); a foreign or truncated
        content is an NMTError saying which keys are missing."""
        if not isinstance(state, dict) or "model" not in state:
            raise NMTError(f"{path} is not an nmt checkpoint (no model weights in it).",
                           "Point to a file in RUN_DIR/checkpoints/.")
        fields = _checked(state, _WEIGHT_FIELDS, path)
        training = None
        if any(f.name in state for f in _TRAINING_FIELDS):  # a step checkpoint: all of it, or it is damaged
            training = TrainingState(**_checked(state, _TRAINING_FIELDS, path))
        return cls(**fields, training=training)


# The file's keys are these fields' names.
_WEIGHT_FIELDS = [field for field in dataclasses.fields(Checkpoint) if field.name != "training"]
_TRAINING_FIELDS = list(dataclasses.fields(TrainingState))
_ADDED_TRAINING_FIELDS = {f.name for f in _TRAINING_FIELDS if f.default is not dataclasses.MISSING}


def _checked(state: dict[str, Any], fields: list[dataclasses.Field], path: Path) -> dict[str, Any]:
    """The values of `fields` in `state`; an absent key is an error for a field without a default, else None.
    Their types are not checked: the files are this program's own, and torch.load(weights_only=True) has
    already refused any content but tensors and plain containers."""
    missing = [f.name for f in fields if f.name not in state and f.default is dataclasses.MISSING]
    if missing:
        raise NMTError(f"{path} is not a complete nmt checkpoint: it lacks {', '.join(missing)}.",
                       "It was damaged or written by another program; use another checkpoint of the run.")
    return {f.name: state.get(f.name) for f in fields}


def save_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Write `checkpoint` with torch.save through a temporary file, so a kill never leaves half a file."""
    with atomic_open(path, "wb") as handle:
        torch.save(checkpoint.to_dict(), handle)


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu", mmap: bool = False) -> Checkpoint:
    """Read a checkpoint written by `save_checkpoint`; anything unreadable becomes an NMTError naming the file.
    `mmap` maps the file instead of reading it: only the tensors used are read."""
    if not path.is_file():
        raise NMTError(f"checkpoint not found: {path}", "Check the path, or list the run's checkpoints/ folder.")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except FileNotFoundError:  # not damaged: deleted since it was found
        raise NMTError(
            f"checkpoint {path} was removed while it was read (a run in training deletes its older step_*.pt as "
            "training.keep_last says).",
            "Run the command again: it takes the checkpoints there are now.",
        ) from None
    except Exception as exc:  # torch raises many types for a damaged zip/pickle
        # torch's first sentence says what failed; the rest is advice for torch.load's callers (weights_only=False)
        reason = str(exc).split(". ")[0][:200]
        raise NMTError(
            f"checkpoint {path} is unreadable or corrupt ({type(exc).__name__}{': ' if reason else ''}{reason}).",
            # --checkpoint may name any file, one of the user's own: not "delete it" unless it is a checkpoint
            "If it is a run's checkpoint, it is damaged: delete it and use another of the run's "
            "(checkpoints/step_*.pt), or retrain; else give a checkpoint that nmt train or nmt average wrote.",
        ) from None
    return Checkpoint.from_dict(state, path)


def drop_training_state(path: Path) -> None:
    """Rewrite step checkpoint `path` (atomically) with the weights only, as `nmt curve` and `nmt average` read
    them: a newer checkpoint now carries the state a resume needs (for Adam, twice the weights' size)."""
    checkpoint = load_checkpoint(path, mmap=True)  # the optimiser's state, dropped, is never read
    if checkpoint.training is not None:
        save_checkpoint(path, dataclasses.replace(checkpoint, training=None))


def check_same_tokenizer(checkpoint: Path, run_dir: Path) -> None:
    """Refuse a checkpoint of another run whose sentencepiece models differ from RUN_DIR's: with the same
    vocabulary sizes its weights load, and the run would translate silently wrong (each id another piece)."""
    folder = checkpoint.resolve().parent
    other = folder.parent
    if folder.name != CHECKPOINT_DIR or other == run_dir.resolve() or not (other / "tokenizer").is_dir():
        return  # the run's own, or a file outside any run (nmt average -o FILE): nothing to compare with

    def models(tokenizer: Path) -> dict[str, bytes] | None:
        """The tokenizer's own files (tokenizer.json and the models it names), not what else lies in the folder (a
        copy from a Mac brings .DS_Store); None where they cannot be read."""
        try:
            return Tokenizer.load(tokenizer).contents()
        except NMTError:
            return None

    ours = models(run_dir / "tokenizer")
    if ours is not None and models(other / "tokenizer") != ours:  # a run without its own: the loading tells
        raise NMTError(
            f"{checkpoint} is a checkpoint of the run {other}, whose sentencepiece models ({other / 'tokenizer'}) "
            f"differ from those of {run_dir}: its weights would read every piece as another.",
            f"Use it with its own run ({other}, checkpoint {checkpoint.name}), or give a checkpoint of {run_dir}.",
        )


def names_a_file(checkpoint: str | Path) -> bool:
    """Whether a --checkpoint names a file by its path (a folder part, "./" too: a Path would drop it), not a
    file name looked up in each run's checkpoints/ folder."""
    return "/" in str(checkpoint) or os.sep in str(checkpoint)


def resolve_checkpoint(run_dir: Path, checkpoint: str | Path | None, option: str = "checkpoint=") -> Path:
    """The checkpoint file a command uses, by one rule for every --checkpoint: none given is the run's
    best.pt, else its newest weights (the periodic or interruption checkpoint of the highest step); a bare file name (best.pt, averaged.pt, step_00000300.pt)
    is looked up in RUN_DIR/checkpoints/; a path with a folder part (./averaged.pt too) is used as it is.
    `option` is how the caller's user gave `checkpoint`, written before it in errors: "--checkpoint " on the
    command line, the argument "checkpoint=" (the default) in Python."""
    folder = run_dir / CHECKPOINT_DIR
    if checkpoint is None:
        if (folder / BEST_NAME).is_file():
            return folder / BEST_NAME
        latest = latest_step_checkpoint(run_dir)
        if latest is None:
            raise NMTError(
                f"{run_dir} has no checkpoint ({CHECKPOINT_DIR}/{BEST_NAME} or {CHECKPOINT_DIR}/step_*.pt).",
                "Train it first (nmt train CONFIG --run-dir ...), or --resume an interrupted run.",
            )
        return latest
    given = Path(checkpoint)
    if names_a_file(checkpoint):
        if given.is_dir():  # often a run folder: its checkpoints/best.pt is the example
            example = given / CHECKPOINT_DIR / BEST_NAME if (given / CHECKPOINT_DIR).is_dir() else given / BEST_NAME
            raise NMTError(f"{option}{checkpoint} is a folder, not a checkpoint file.",
                           f"Give a .pt file, e.g. {example}, or a bare file name of the run's {CHECKPOINT_DIR}/ folder.")
        if not given.is_file():
            raise NMTError(f"{option}{checkpoint}: no such file.",
                           f"Check the path, or give a bare file name of the run's {CHECKPOINT_DIR}/ folder.")
        check_same_tokenizer(given, run_dir)
        # ./NAME.pt: a Path drops the "./", and the bare NAME.pt it leaves would be looked up in the run when the
        # path is resolved again (evaluate's translating); with the current folder it stays a path
        return given if given.parent != Path(".") else Path.cwd() / given
    path = folder / given
    if not path.is_file():
        have = sorted(p.name for p in folder.glob("*.pt"))
        raise NMTError(
            f"{option}{checkpoint}: {run_dir} has no {path} (it has: {', '.join(have) or 'none'}).",
            f"A bare file name is looked up in the run's {CHECKPOINT_DIR}/ folder; give one it has, or the "
            f"path of a file elsewhere with its folder (e.g. ./{given.name} for one in the current folder).",
        )
    return path


def describe_checkpoint(path: Path) -> str:
    """A checkpoint for reports: its file, its step, and what it averages or what chose it (best.pt: the
    best validation score by training.early_stopping_metric; a BLEU under 1 says little, and the text says so)."""
    checkpoint = load_checkpoint(path)
    text = f"{path.name} (step {checkpoint.step}"
    if checkpoint.averaged_steps:
        text += f", the average of steps {', '.join(str(int(s)) for s in checkpoint.averaged_steps)}"
    elif path.name == BEST_NAME and checkpoint.score is not None:
        metric, score = checkpoint.metric or "bleu", checkpoint.score
        text += f", best validation {metric} {score:.2f}"
        if metric == "bleu" and score < MIN_BLEU:
            text += f"; {CHOOSES_BY_NOISE}: consider training.early_stopping_metric: loss"
    return text + ")"
