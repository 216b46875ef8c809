"""`nmt average`: the mean of a run's periodic checkpoints, as fairseq's average_checkpoints.py, JoeyNMT
and Sockeye offer. Averaging the last few steps' weights often gains a little BLEU at no training cost.

The result holds what translation needs (weights, step, config) and the steps it averages; `nmt
translate --checkpoint` and `nmt evaluate --checkpoint` take it like any other checkpoint.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch

from nmt.config import load_saved_config
from nmt.data.subwords import read_manifest
from nmt.errors import NMTError
from nmt.fileio import refuse_unwritable, same_file
from nmt.rundir.checkpoints import (
    CHECKPOINT_DIR,
    Checkpoint,
    checkpoint_step,
    interrupted_checkpoint,
    load_checkpoint,
    refuse_interrupted_only,
    resume_hint,
    save_checkpoint,
    step_checkpoints,
    training_checkpoint_name,
)
from nmt.rundir.folders import is_run, refuse_run_file
from nmt.rundir.loading import check_run_dir, model_differences

AVERAGED_NAME = "averaged.pt"


def choose_checkpoints(run_dir: Path, last: int | None, steps: Sequence[int] | None) -> list[Path]:
    """The periodic checkpoints to average: the `last` N, or those of the given `steps` (oldest first)."""
    refuse_interrupted_only(run_dir, "to average")
    available = step_checkpoints(run_dir)
    have = ", ".join(str(checkpoint_step(p)) for p in available) or "none"
    if last is not None:
        if last < 2:
            raise NMTError(f"--last {last}: averaging needs at least 2 checkpoints.", "Use --last 2 or more.")
        if last > len(available):
            raise _fewer_than_last(run_dir, last, len(available), have)
        return available[-last:]
    assert steps is not None
    by_step = {checkpoint_step(p): p for p in available}
    missing = sorted(set(steps) - set(by_step))
    if missing:
        raise NMTError(
            f"--steps: {run_dir} has no checkpoint of step {', '.join(map(str, missing))} (it has: {have}).",
            "Choose among the steps it has; training.keep_last decides how many a run keeps.",
        )
    if len(set(steps)) < 2:
        raise NMTError("--steps: averaging needs at least 2 different steps.", "e.g. --steps 600,900")
    return [by_step[step] for step in sorted(set(steps))]


def _fewer_than_last(run_dir: Path, last: int, count: int, have: str) -> NMTError:
    """The refusal of a --last above the run's `count` periodic checkpoints (of the steps `have`): an interrupted
    run makes more by going on (said, with how), a finished one by training again."""
    message = f"--last {last}: {run_dir} has {count} periodic checkpoint(s) (steps: {have})"
    # --last under 2 is refused: with fewer than 2 checkpoints, only more of them help
    smaller = f"; or use --last {count}" if count >= 2 else ""
    interrupted = interrupted_checkpoint(run_dir)
    if interrupted is None:
        return NMTError(f"{message}.", "A run writes one every training.checkpoint_every steps and keeps the newest "
                        f"training.keep_last of them (0 keeps all): train one that keeps more to average more{smaller}.")
    return NMTError(
        f"{message}, and its training stopped (or validated best) at step {checkpoint_step(interrupted)} "
        f"({CHECKPOINT_DIR}/{interrupted.name}, for --resume only).",
        f"{resume_hint(run_dir)}, and keeps the newest training.keep_last of them (0 keeps all; a --resume may raise "
        f"it with --set training.keep_last=N){smaller}.",
    )


def _check_output(run_dir: Path, output: Path, named: str) -> None:
    """Before any checkpoint is read, refuse an output (`named`: how the message names it) that would replace
    a file of the run: a checkpoint training or resume reads, by its name in a run's checkpoints/ folder (this
    run's or another's; elsewhere the names are the user's) or the name of the file it links to there (a file
    is written through its link), its config.yaml or tokenizer; or that is a folder, a file other than a
    checkpoint (a text file given by mistake), or in a folder that cannot be written."""
    real = Path(os.path.realpath(output))
    run = real.parent.parent
    if training_checkpoint_name(real.name) and real.parent.name == CHECKPOINT_DIR and (run / "config.yaml").is_file():
        if real.name != output.name:
            that, instead = f"the file it links to, {real},", "Give -o a file that is no link to one of them"
        else:
            that, instead = "that name", f"Use another name, e.g. {AVERAGED_NAME}"
        whose = "the run's own" if run == Path(os.path.realpath(run_dir)) else f"a checkpoint name of the run {run}"
        raise NMTError(
            f"{named}: {that} is {whose} (best.pt, step_*.pt, interrupted_*.pt), which training and resume read.",
            f"{instead}; nothing was written.",
        )
    clash = next((path for path in (run_dir / "config.yaml", *sorted((run_dir / "tokenizer").glob("*")))
                  if same_file(output, path)), None)
    if clash is not None:
        raise NMTError(
            f"{named} is the run's {clash}, which every command that reads the run needs: it would be replaced.",
            f"Give another file, e.g. {run_dir / CHECKPOINT_DIR / AVERAGED_NAME}; nothing was written.",
        )
    refuse_run_file(output, named)
    if output.is_dir():
        raise NMTError(f"{named} is a folder.", f"Give a file's path, e.g. {output / AVERAGED_NAME}.")
    if real.parent.name == CHECKPOINT_DIR and is_run(run) and run != Path(os.path.realpath(run_dir)):
        raise NMTError(f"{named} is in the checkpoints/ folder of another run, {run}: an average of {run_dir} there would "
                       "pass for one of that run's.",
                       f"Write it in {run_dir / CHECKPOINT_DIR} or outside any run; nothing was written.")
    if output.is_file():
        _check_replaces_average(run_dir, output, named)
    refuse_unwritable(output.parent, f"the folder of {named}", "Give -o a file in a folder you can write")


def _check_replaces_average(run_dir: Path, output: Path, named: str) -> None:
    """Refuse to replace an existing file unless it is an earlier average of this run: a checkpoint `nmt average`
    wrote with the run's sentencepiece models and model settings. Any other file would be lost (a zip archive
    too: a document, another toolkit's model)."""
    try:
        earlier = load_checkpoint(output, mmap=True)
    except NMTError:
        earlier = None
    if earlier is not None and earlier.averaged_steps:
        config = load_saved_config(run_dir / "config.yaml")
        models = read_manifest(run_dir / "tokenizer")["sha256"]
        if earlier.tokenizer_sha256 in (None, models) and not model_differences(earlier, config):
            return
    if earlier is None:
        what = "no checkpoint"
    elif not earlier.averaged_steps:
        what = "a checkpoint that no `nmt average` wrote"
    else:
        what = "an average of another run's"
    raise NMTError(f"{named} is a file that is {what}: it would be replaced.",
                   f"Give a new file, or an earlier average of this run to replace, e.g. "
                   f"{run_dir / CHECKPOINT_DIR / AVERAGED_NAME}; nothing was written.")


def average_checkpoints(
    run_dir: str | Path, last: int | None = None, steps: Sequence[int] | None = None, output: str | Path | None = None
) -> Path:
    """Write the element-wise mean of the chosen checkpoints' weights (default RUN_DIR/checkpoints/averaged.pt)
    and return its path. The tensors (the models' parameters, all floating-point: they have no integer
    buffers) are summed in float64 and cast back."""
    run_dir = Path(run_dir)
    check_run_dir(run_dir, "")  # not "has 0 checkpoints" for a mistyped or non-run folder
    named = f"-o {output}" if output is not None else f"{run_dir / CHECKPOINT_DIR / AVERAGED_NAME} (without -o)"
    output = Path(output) if output is not None else run_dir / CHECKPOINT_DIR / AVERAGED_NAME
    _check_output(run_dir, output, named)
    chosen = choose_checkpoints(run_dir, last, steps)
    sums: dict[str, torch.Tensor] = {}
    newest: Checkpoint | None = None
    for path in chosen:
        newest = load_checkpoint(path)
        weights = newest.model
        if sums and (set(weights) != set(sums) or any(weights[k].shape != sums[k].shape for k in sums)):
            raise NMTError(
                f"{path} holds another model than {chosen[0]}: checkpoints of one run only can be averaged.",
                "Train the run again, or average the steps of one model.",
            )
        for key, tensor in weights.items():
            sums[key] = sums[key] + tensor.double() if key in sums else tensor.double()
    assert newest is not None  # choose_checkpoints chooses two at least
    model = {key: (total / len(chosen)).to(newest.model[key].dtype) for key, total in sums.items()}
    averaged = Checkpoint(
        model, newest.step, config=newest.config, src_vocab_size=newest.src_vocab_size,
        tgt_vocab_size=newest.tgt_vocab_size, averaged_steps=[checkpoint_step(p) for p in chosen],
        tokenizer_sha256=newest.tokenizer_sha256,
    )
    save_checkpoint(output, averaged)
    return output
