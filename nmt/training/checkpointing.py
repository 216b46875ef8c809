"""The loop's side of checkpoints (their format is nmt.rundir.checkpoints'): best.pt's content, writing
them, resuming from one, and the errors that name the last intact one (a full disk, a diverged run)."""

from __future__ import annotations

from pathlib import Path

import torch

from nmt.config import Config
from nmt.data.subwords import Tokenizer
from nmt.errors import NMTError
from nmt.fileio import DiskFullError
from nmt.rundir.checkpoints import (
    BEST_NAME,
    CHECKPOINT_DIR,
    Checkpoint,
    TrainingState,
    checkpoint_step,
    drop_training_state,
    interrupted_checkpoint_name,
    latest_step_checkpoint,
    load_checkpoint,
    prune_step_checkpoints,
    save_checkpoint,
    step_checkpoint_name,
)
from nmt.training.optim import LRSchedule


def weights_checkpoint(model: torch.nn.Module, step: int, score: float, config: Config, tokenizer: Tokenizer) -> Checkpoint:
    """best.pt's content: what translation needs, and the validation score that chose it."""
    return Checkpoint(
        model.state_dict(), step, config=config.to_dict(), src_vocab_size=tokenizer.src_vocab_size,
        tgt_vocab_size=tokenizer.tgt_vocab_size, score=score, metric=config.training.early_stopping_metric,
        tokenizer_sha256=tokenizer.model_sha256,
    )


def write_best(run_dir: Path, checkpoint: Checkpoint) -> None:
    """RUN_DIR/checkpoints/best.pt."""
    save_checkpoint(run_dir / CHECKPOINT_DIR / BEST_NAME, checkpoint)


def best_checkpoint_step(run_dir: Path) -> int | None:
    """The step of RUN_DIR/checkpoints/best.pt's weights; None where there is none."""
    path = run_dir / CHECKPOINT_DIR / BEST_NAME
    return load_checkpoint(path, mmap=True).step if path.is_file() else None


def write_step(run_dir: Path, checkpoint: Checkpoint, keep_last: int, interrupted: bool = False) -> None:
    """RUN_DIR/checkpoints/step_*.pt of the checkpoint's step, then only the newest `keep_last` are kept; an
    interruption's is interrupted_*.pt, for --resume only (it evicts none). Either replaces an older interruption's.
    Only the newest holds the training state (--resume reads no other): the one it succeeds keeps its weights."""
    path = run_dir / CHECKPOINT_DIR / (interrupted_checkpoint_name if interrupted else step_checkpoint_name)(checkpoint.step)
    previous = latest_step_checkpoint(run_dir)
    save_checkpoint(path, checkpoint)
    for old in path.parent.glob("interrupted_*.pt"):
        if old != path:
            old.unlink()
    if not interrupted:
        prune_step_checkpoints(run_dir, keep_last)
    # after the new one is whole: a kill in between leaves two resumable checkpoints, never none
    if previous is not None and previous.exists() and checkpoint_step(previous) < checkpoint.step:
        drop_training_state(previous)


def restore(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, schedule: LRSchedule,
    scaler: torch.amp.GradScaler, tokenizer: Tokenizer, world_size: int,
) -> tuple[int, TrainingState]:
    """Load step checkpoint `path` into the model, optimiser, schedule and grad scaler (onto the model's
    device), refusing one this run cannot continue: another vocabulary, model or number of processes.
    Writes nothing. Returns the checkpoint's step and training state."""
    try:
        checkpoint = load_checkpoint(path, map_location=next(model.parameters()).device)
    except NMTError as error:  # load_checkpoint's advice (use another of the run's) cannot resume: they hold weights only
        raise NMTError(error.message, "The training state is in that file only (the run's older step_*.pt hold its "
                       "weights): the run cannot be resumed. Start a new run, or evaluate this one from best.pt.") from None
    sizes = (checkpoint.src_vocab_size, checkpoint.tgt_vocab_size)
    ours = (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    if sizes != ours:
        raise NMTError(f"{path} was trained with vocabularies {sizes} but the tokenizer has {ours}.",
                       "Point data.dir at the data the run was trained on, or start a new run.")
    state = checkpoint.training
    if state is None:
        raise NMTError(f"{path} is not a resumable checkpoint: it holds the weights only, as best.pt and every "
                       "step checkpoint but a run's newest do.",
                       "--resume continues from the newest step_*.pt or interrupted_*.pt, the one a run writes with "
                       "its training state: remove a newer file put there by hand, or start a new run.")
    try:
        model.load_state_dict(checkpoint.model)
        optimizer.load_state_dict(state.optimizer)
        schedule.load_state_dict(state.schedule)
        if state.scaler:  # {} = saved with the scaler disabled (fp32, bf16 or CPU): keep the fresh one
            scaler.load_state_dict(state.scaler)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise NMTError(f"{path} is not a resumable checkpoint of this model ({type(exc).__name__}: "
                       f"{str(exc).splitlines()[0]}).",
                       "Resume with the config the run was trained with, or delete that file.") from None
    if state.world_size != world_size:
        # Each process trains on its own shard of every epoch's batches, so another count cannot continue it.
        raise NMTError(f"{path} was saved by a run with {state.world_size} process(es) but this run has {world_size}.",
                       f"Resume with {state.world_size} process(es) (torchrun --nproc_per_node={state.world_size}, "
                       "or plain `nmt train` for 1), or start a new run.")
    return checkpoint.step, state


def disk_error(run_dir: Path, step: int, error: OSError | DiskFullError) -> NMTError:
    """An OSError or DiskFullError writing the run (checkpoints, log, summary) as an NMTError naming the file,
    the checkpoint left intact (each is written whole or not at all) and how to continue."""
    last = latest_step_checkpoint(run_dir)
    reached = checkpoint_step(last) if last is not None else 0
    intact = (f"{last} (step {reached}) is intact, as are the other checkpoints" if last is not None
              else "no step checkpoint was saved yet")
    return NMTError(
        f"could not write {error.filename or f'into {run_dir}'} at step {step} "
        f"({error.strerror or error}); {intact}.",
        "Free space on that disk (or fix the folder), then run the same command with --resume: "
        f"it continues from step {reached}.",
    )


def diverged_error(run_dir: Path, step: int, epoch: int, what: str) -> NMTError:
    """A non-finite loss or gradient at update `step`: nothing of that state is saved. The settings that
    tame it change what is learned, which --resume refuses (and the same settings take the same path), so
    the hint is a new run."""
    last = latest_step_checkpoint(run_dir)
    return NMTError(
        f"training diverged at step {step} (epoch {epoch}): {what}; nothing was saved "
        f"from this state. Last good checkpoint: {last or 'none'}.",
        "Train a new run (another --run-dir) with a lower training.learning_rate, training.clip_grad_norm > 0 or "
        "training.precision: fp32; --resume would take the same path again, and refuses those changes.",
    )
