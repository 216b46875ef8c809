"""nmt.training.checkpointing: what best.pt and a step checkpoint hold, resuming from one into a fresh
model and optimiser, and the errors that name the last intact checkpoint."""

from __future__ import annotations

import dataclasses
import errno
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from nmt.config import Config
from nmt.errors import NMTError
from nmt.rundir.averaging import choose_checkpoints
from nmt.rundir.checkpoints import (
    TrainingState,
    checkpoint_step,
    latest_step_checkpoint,
    load_checkpoint,
    step_checkpoint_name,
    step_checkpoints,
)
from nmt.rundir.checks import RESUMABLE_KEYS
from nmt.training.checkpointing import (
    disk_error,
    diverged_error,
    restore,
    weights_checkpoint,
    write_best,
    write_step,
)
from nmt.training.optim import LRSchedule, build_optimizer
from nmt.training.rng import capture_rng

TOKENIZER = SimpleNamespace(src_vocab_size=25, tgt_vocab_size=26, model_sha256={"spm.model": "0" * 64})


def parts(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, LRSchedule, torch.amp.GradScaler]:
    """A model with its optimiser, schedule and (disabled, as on CPU) grad scaler."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    config = Config().training
    return model, build_optimizer(model.parameters(), config), LRSchedule(config), torch.amp.GradScaler("cuda", enabled=False)


def training_state(optimizer: torch.optim.Optimizer, schedule: LRSchedule, world_size: int = 1) -> TrainingState:
    return TrainingState(
        optimizer=optimizer.state_dict(), schedule=schedule.state_dict(), scaler={}, epoch=3, position=4,
        best_score=21.5, best_step=10, bad_validations=2, log_acc={"loss": 1.0, "tokens": 2.0, "seconds": 3.0},
        elapsed_s=9.0, rng=[capture_rng(torch.device("cpu"))] * world_size, last_validation={"step": 10}, world_size=world_size,
    )


def test_a_step_checkpoint_restores_model_optimiser_schedule_and_counters(tmp_path: Path) -> None:
    model, optimizer, schedule, scaler = parts(seed=0)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()  # the optimiser now has state (Adam's moments) to carry over
    schedule.scale = 0.5
    best = weights_checkpoint(model, 12, 21.5, Config(), TOKENIZER)
    assert (best.step, best.score, best.metric, best.src_vocab_size, best.training) == (12, 21.5, "bleu", 25, None)
    write_best(tmp_path, best)
    assert load_checkpoint(tmp_path / "checkpoints" / "best.pt").score == 21.5
    write_step(tmp_path, dataclasses.replace(best, training=training_state(optimizer, schedule)), keep_last=1)
    write_step(tmp_path, dataclasses.replace(best, step=14, training=training_state(optimizer, schedule)), keep_last=1)
    path = tmp_path / "checkpoints" / step_checkpoint_name(14)
    assert sorted(p.name for p in path.parent.iterdir()) == ["best.pt", path.name]  # keep_last pruned step 12

    fresh, fresh_optimizer, fresh_schedule, fresh_scaler = parts(seed=1)
    step, state = restore(path, fresh, fresh_optimizer, fresh_schedule, fresh_scaler, TOKENIZER, world_size=1)
    assert step == 14 and (state.epoch, state.position, state.best_step, state.bad_validations) == (3, 4, 10, 2)
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values(), strict=True))
    assert fresh_schedule.scale == 0.5
    restored, saved = fresh_optimizer.state_dict()["state"], optimizer.state_dict()["state"]
    assert restored.keys() == saved.keys() == {0, 1}  # the weight and the bias
    for index, moments in saved.items():  # Adam's step count and moments, value for value
        assert restored[index].keys() == moments.keys() == {"step", "exp_avg", "exp_avg_sq"}
        assert all(torch.equal(restored[index][name], value) for name, value in moments.items()), index


def test_restore_refuses_what_this_run_cannot_continue(tmp_path: Path) -> None:
    model, optimizer, schedule, scaler = parts(seed=0)
    best = weights_checkpoint(model, 4, 1.0, Config(), TOKENIZER)
    write_best(tmp_path, best)
    with pytest.raises(NMTError, match=r"best.pt is not a resumable checkpoint: it holds the weights only"):
        restore(tmp_path / "checkpoints" / "best.pt", model, optimizer, schedule, scaler, TOKENIZER, 1)
    write_step(tmp_path, dataclasses.replace(best, training=training_state(optimizer, schedule, 2)), keep_last=0)
    path = tmp_path / "checkpoints" / step_checkpoint_name(4)
    with pytest.raises(NMTError, match=r"saved by a run with 2 process\(es\) but this run has 1") as error:
        restore(path, model, optimizer, schedule, scaler, TOKENIZER, 1)
    assert "--nproc_per_node=2" in error.value.hint
    other_vocabulary = SimpleNamespace(src_vocab_size=25, tgt_vocab_size=30)
    with pytest.raises(NMTError, match=r"trained with vocabularies \(25, 26\) but the tokenizer has \(25, 30\)"):
        restore(path, model, optimizer, schedule, scaler, other_vocabulary, 2)
    with pytest.raises(NMTError, match=r"step_00000004.pt is not a resumable checkpoint of this model"):
        restore(path, torch.nn.Linear(3, 5), optimizer, schedule, scaler, TOKENIZER, 2)


def test_errors_name_the_last_intact_checkpoint(tmp_path: Path) -> None:
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "log.jsonl"))
    error = disk_error(tmp_path, 5, full)
    assert error.message == (f"could not write {tmp_path}/log.jsonl at step 5 (No space left on device); "
                             "no step checkpoint was saved yet.")
    assert "continues from step 0" in error.hint
    model, optimizer, schedule, _ = parts(seed=0)
    write_step(tmp_path, dataclasses.replace(weights_checkpoint(model, 4, math.nan, Config(), TOKENIZER),
                                             training=training_state(optimizer, schedule)), keep_last=0)
    last = tmp_path / "checkpoints" / step_checkpoint_name(4)
    assert f"{last} (step 4) is intact" in disk_error(tmp_path, 5, OSError(errno.ENOSPC, "full")).message
    assert "continues from step 4" in disk_error(tmp_path, 5, OSError(errno.ENOSPC, "full")).hint
    diverged = diverged_error(tmp_path, 6, 2, "the training loss is nan")
    assert diverged.message.startswith("training diverged at step 6 (epoch 2): the training loss is nan;")
    assert f"Last good checkpoint: {last}." in diverged.message
    # every setting the hint names is one --resume refuses to change, so the hint is a new run
    named = set(re.findall(r"training\.\w+", diverged.hint))
    assert named and not named & RESUMABLE_KEYS and "Train a new run" in diverged.hint


def test_an_interruption_checkpoint_is_for_resuming_only(tmp_path: Path) -> None:
    model, optimizer, schedule, _ = parts(seed=0)
    state = weights_checkpoint(model, 0, math.nan, Config(), TOKENIZER)
    for step, interrupted in ((2, False), (4, False), (5, True)):
        write_step(tmp_path, dataclasses.replace(state, step=step, training=training_state(optimizer, schedule)),
                   keep_last=2, interrupted=interrupted)
    folder = tmp_path / "checkpoints"
    assert [checkpoint_step(p) for p in step_checkpoints(tmp_path)] == [2, 4]  # keep_last evicted none for it
    assert latest_step_checkpoint(tmp_path) == folder / "interrupted_00000005.pt"  # what --resume continues
    assert [checkpoint_step(p) for p in choose_checkpoints(tmp_path, 2, None)] == [2, 4]  # nmt average, curve
    write_step(tmp_path, dataclasses.replace(state, step=6, training=training_state(optimizer, schedule)), keep_last=2)
    assert sorted(p.name for p in folder.iterdir()) == ["step_00000004.pt", "step_00000006.pt"]


def test_only_the_newest_step_checkpoint_keeps_the_training_state(tmp_path: Path) -> None:
    model, optimizer, schedule, _ = parts(seed=0)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()  # Adam's moments: twice the weights
    state = weights_checkpoint(model, 0, math.nan, Config(), TOKENIZER)
    folder = tmp_path / "checkpoints"
    for step, interrupted in ((2, False), (4, False), (5, True), (6, False)):
        write_step(tmp_path, dataclasses.replace(state, step=step, training=training_state(optimizer, schedule)),
                   keep_last=0, interrupted=interrupted)
        resumable = {p.name: load_checkpoint(p).training is not None for p in sorted(folder.iterdir())}
        newest = latest_step_checkpoint(tmp_path)
        assert newest is not None and checkpoint_step(newest) == step
        assert resumable == {name: name == newest.name for name in resumable}, step
    for path in step_checkpoints(tmp_path):  # what nmt curve and nmt average read: the weights, whole
        checkpoint = load_checkpoint(path)
        assert checkpoint.model.keys() == model.state_dict().keys()
        assert all(torch.equal(checkpoint.model[k], v) for k, v in model.state_dict().items())
        assert (checkpoint.step, checkpoint.config, checkpoint.src_vocab_size) == (checkpoint_step(path), Config().to_dict(), 25)
