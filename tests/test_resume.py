"""Exact resume: N steps straight == N/2 steps + --resume + N/2 steps, bit for bit; kills and signals."""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch

from nmt.config import config_from_dict
from nmt.rundir.checkpoints import Checkpoint, checkpoint_step, latest_step_checkpoint, load_checkpoint
from nmt.training import trainer
from nmt.training.trainer import train
from nmt.training.validation import ValidationResult
from tests.helpers import (
    TINY_TRANSFORMER,
    assert_same_weights,
    final_state,
    log_without_timing,
    resume_config,
    with_max_steps,
)


@pytest.mark.slow
@pytest.mark.parametrize("model", [None, TINY_TRANSFORMER], ids=["rnn", "transformer"])
def test_half_plus_resume_equals_straight_bitwise(tmp_path: Path, model: dict[str, Any] | None) -> None:
    config = resume_config(tmp_path / "data", model)
    straight = train(config, tmp_path / "straight")
    train(with_max_steps(config, 20), tmp_path / "split")
    resumed = train(config, tmp_path / "split", resume=True)

    a, b = final_state(tmp_path / "straight", 40), final_state(tmp_path / "split", 40)
    assert_same_weights(a["model"], b["model"])
    assert a["epoch"] == b["epoch"] > 1 and a["position"] == b["position"]
    for key in ("exp_avg", "exp_avg_sq"):
        for pa, pb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
            assert torch.equal(pa[key], pb[key])
    assert a["schedule"] == b["schedule"] and a["best_score"] == b["best_score"]
    log = log_without_timing(tmp_path / "straight")
    assert log == log_without_timing(tmp_path / "split")
    losses = [e["loss"] for e in log if e["event"] == "train"]
    assert len(losses) == 13 and len(set(losses)) == 13
    for key in ("final_step", "epoch", "best_step", "best_score", "stopped_by", "last_validation"):
        assert straight[key] == resumed[key], key


@pytest.mark.slow
def test_an_inverse_sqrt_run_continued_to_a_higher_cap_is_the_run_trained_straight_through(tmp_path: Path) -> None:
    """The schedule of a run of unknown length: training.max_steps is only a cap, so a run that ended at
    its cap and is resumed with a higher one takes the straight run's path, lr and plateau decays included."""
    config = resume_config(tmp_path / "data", lr_schedule="inverse_sqrt", warmup_steps=6, learning_rate=0.01,
                           lr_patience=1, lr_decay_factor=0.5)
    straight = train(config, tmp_path / "straight")
    first = train(with_max_steps(config, 20), tmp_path / "split")
    assert first["stopped_by"] == "max_steps" and first["final_step"] == 20
    resumed = train(config, tmp_path / "split", resume=True)
    a, b = final_state(tmp_path / "straight", 40), final_state(tmp_path / "split", 40)
    assert_same_weights(a["model"], b["model"])
    assert a["schedule"] == b["schedule"]
    log = log_without_timing(tmp_path / "straight")
    assert log == log_without_timing(tmp_path / "split")
    lrs = [e["lr"] for e in log if e["event"] == "train"]
    assert lrs[1] > lrs[-1] > 0 and len(set(lrs)) == len(lrs)  # past the warm-up: falling, never 0
    for key in ("final_step", "best_step", "best_score", "stopped_by", "last_validation"):
        assert straight[key] == resumed[key], key


def test_resuming_a_finished_run_changes_nothing(tmp_path: Path) -> None:
    config = resume_config(tmp_path / "data", max_steps=6, validate_every=3)
    first = train(config, tmp_path / "run")
    weights = final_state(tmp_path / "run", 6)["model"]
    again = train(config, tmp_path / "run", resume=True)
    assert_same_weights(weights, final_state(tmp_path / "run", 6)["model"])
    assert {k: v for k, v in again.items() if k != "wall_time_s"} == {
        k: v for k, v in first.items() if k != "wall_time_s"
    }


def test_an_older_checkpoint_whose_best_validation_was_nan_lets_the_next_one_be_best(tmp_path: Path) -> None:
    config = resume_config(tmp_path / "data", max_steps=6, validate_every=3)
    train(with_max_steps(config, 3), tmp_path / "run")
    path = tmp_path / "run" / "checkpoints" / "step_00000003.pt"
    state = torch.load(path, weights_only=True)
    state["best_score"] = math.nan  # what a NaN validation left before is_better refused one
    torch.save(state, path)
    summary = train(config, tmp_path / "run", resume=True)
    assert summary["best_step"] == 6 and not math.isnan(summary["best_score"])


def test_a_resumed_run_removes_what_a_killed_checkpoint_writer_left(tmp_path: Path) -> None:
    config = resume_config(tmp_path / "data", max_steps=6, validate_every=3)
    train(with_max_steps(config, 3), tmp_path / "run")
    checkpoints = tmp_path / "run" / "checkpoints"
    names = (".step_00000006.pt.k2j3_x.tmp", ".best.pt.abc.tmp", ".interrupted_00000004.pt.q.tmp")
    left = [checkpoints / name for name in names]
    averaging = checkpoints / ".averaged.pt.q.tmp"  # nmt average's, which may be writing it now
    for path in [*left, averaging]:
        path.write_bytes(b"half a checkpoint")
    train(config, tmp_path / "run", resume=True)
    assert [path.name for path in left if path.exists()] == [] and averaging.exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_resume_on_cuda_fp16_from_a_run_saved_without_a_grad_scaler(tmp_path: Path) -> None:
    # On CPU fp16 falls back to fp32 and the scaler is disabled, so the checkpoint holds scaler {}.
    config = resume_config(tmp_path / "data", max_steps=4, checkpoint_every=2, validate_every=4, precision="fp16")
    cpu_run = with_max_steps(config, 2)
    train(cpu_run, tmp_path / "run")
    assert final_state(tmp_path / "run", 2)["scaler"] == {}
    raw = config.to_dict()
    raw["training"]["device"] = "cuda"
    summary = train(config_from_dict(raw), tmp_path / "run", resume=True)
    assert summary["final_step"] == 4 and summary["device"].startswith("cuda")
    resumed = final_state(tmp_path / "run", 4)
    assert resumed["scaler"]["scale"] > 0
    # the CPU run's optimiser state (fused unset) went on in the fused Adam that CUDA builds
    assert [group["fused"] for group in resumed["optimizer"]["param_groups"]] == [True]


@pytest.mark.slow
def test_a_run_ended_off_the_validation_grid_resumes_to_the_straight_runs_weights(tmp_path: Path) -> None:
    # The first part ends at step 15, between validations (every 10): its closing validation chooses
    # best.pt, but the learning-rate plateau schedule (lr_patience 1) follows the periodic ones only.
    config = resume_config(tmp_path / "data", max_steps=24)
    train(config, tmp_path / "straight")
    train(with_max_steps(config, 15), tmp_path / "split")
    train(config, tmp_path / "split", resume=True)
    a, b = final_state(tmp_path / "straight", 24), final_state(tmp_path / "split", 24)
    assert_same_weights(a["model"], b["model"])
    assert a["schedule"] == b["schedule"]
    valid = [e["step"] for e in log_without_timing(tmp_path / "split") if e["event"] == "valid"]
    assert valid == [10, 15, 20, 24]


@pytest.mark.slow
def test_a_closing_validation_leaves_early_stopping_where_the_straight_run_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run ended off the validation grid (max_steps 15) validates there and may keep that step as best.pt,
    but the run continued to a higher cap stops early at the straight run's step, with its weights: patience
    counts against the best of the periodic validations. Validation BLEU scripted, in call order."""
    config = resume_config(tmp_path / "data", max_steps=100, patience=2)
    scripted = [10.0, 12.0, 13.0, 12.5, 13.5, 13.0, 13.0]  # every 10 steps: best at 50, stopped at 70
    scores = iter(scripted + [10.0, 14.0] + scripted[1:])  # the straight run; the split run's 10, 15 | 20, 30, ...

    def validate(*args: Any, **kwargs: Any) -> ValidationResult:
        return ValidationResult(loss=1.0, ppl=math.e, bleu=next(scores), signature="scripted", sentences=10)

    monkeypatch.setattr(trainer, "validate", validate)
    straight = train(config, tmp_path / "straight")
    first = train(with_max_steps(config, 15), tmp_path / "split")
    assert (first["best_step"], first["best_score"]) == (15, 14.0)
    resumed = train(config, tmp_path / "split", resume=True)
    assert (straight["stopped_by"], straight["final_step"], straight["best_step"]) == ("early_stopping", 70, 50)
    assert (resumed["stopped_by"], resumed["final_step"], resumed["best_step"]) == ("early_stopping", 70, 15)
    assert_same_weights(final_state(tmp_path / "straight", 70)["model"], final_state(tmp_path / "split", 70)["model"])


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["constant", "inverse_sqrt"])  # the validation done again logs its step's lr
def test_a_stop_during_a_validation_records_none_of_it_and_the_run_resumes_to_the_straight_runs_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, schedule: str
) -> None:
    # validations at steps 10 and 20, the last; a real SIGINT comes as the 1st validation of the first session
    # and the 2nd of the second (the step-10 one done again, then step 20's) starts
    config = resume_config(tmp_path / "data", max_steps=20, lr_schedule=schedule)
    straight = train(config, tmp_path / "straight")
    signalled = iter([True, False, True, False])
    real_validate = trainer.validate

    def validate(*args: Any, **kwargs: Any) -> Any:
        if next(signalled):
            os.kill(os.getpid(), signal.SIGINT)
        return real_validate(*args, **kwargs)

    monkeypatch.setattr(trainer, "validate", validate)
    run, folder = tmp_path / "split", tmp_path / "split" / "checkpoints"
    for stopped_at, validated in ((10, []), (20, [10])):
        with pytest.raises(KeyboardInterrupt):
            train(config, run, resume=stopped_at == 20)
        assert [e["step"] for e in log_without_timing(run) if e["event"] == "valid"] == validated
        checkpoint = load_checkpoint(folder / f"interrupted_{stopped_at:08d}.pt")
        assert checkpoint.training is not None and checkpoint.step == stopped_at
        assert (checkpoint.training.last_validation or {}).get("step") != stopped_at
        best = folder / "best.pt"  # only a whole validation may choose it
        assert (load_checkpoint(best).step if best.exists() else None) == (validated[-1] if validated else None)
    resumed = train(config, run, resume=True)

    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in (tmp_path / "straight/checkpoints").iterdir())
    assert_same_weights(final_state(tmp_path / "straight", 20)["model"], final_state(run, 20)["model"])
    assert log_without_timing(run) == log_without_timing(tmp_path / "straight")
    for key in ("final_step", "best_step", "best_score", "stopped_by", "last_validation"):
        assert straight[key] == resumed[key], key


class Killed(BaseException):
    """The process killed (not an exception the trainer may catch)."""


@pytest.mark.slow
def test_best_pt_follows_a_checkpoint_that_records_it_so_a_kill_never_leaves_it_ahead_of_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validations every 10 steps, checkpoints every 20: the best validations off that grid (10, 30) are
    checkpointed for --resume before best.pt is written. Killed while writing best.pt of step 30, the run
    resumes at step 30 and writes it then; its replay validates otherwise (as a GPU's may) and never beats
    step 30, so best.pt stays the weights of the summary's best step. Validation BLEU scripted, in call order."""
    config = resume_config(tmp_path / "data", max_steps=40, checkpoint_every=20)
    scores = iter([10.0, 9.0, 15.0, 10.5])  # steps 10, 20, 30 | 40 after the kill
    monkeypatch.setattr(trainer, "validate", lambda *args, **kwargs: ValidationResult(
        loss=1.0, ppl=math.e, bleu=next(scores), signature="scripted", sentences=10))
    run = tmp_path / "run"
    real_write_best = trainer.write_best
    written: list[int] = []
    killed_at: dict[str, torch.Tensor] = {}  # best.pt's weights when the kill came

    def write_best(run_dir: Path, checkpoint: Checkpoint) -> None:
        latest = latest_step_checkpoint(run_dir)
        assert latest is not None, f"best.pt of step {checkpoint.step} before any checkpoint"
        state = load_checkpoint(latest).training
        assert state is not None and (checkpoint_step(latest), state.best_step) == (checkpoint.step,) * 2
        written.append(checkpoint.step)
        if checkpoint.step == 30 and written.count(30) == 1:
            killed_at.update({name: tensor.clone() for name, tensor in checkpoint.model.items()})
            raise Killed
        real_write_best(run_dir, checkpoint)

    monkeypatch.setattr(trainer, "write_best", write_best)
    with pytest.raises(Killed):
        train(config, run)
    assert written == [10, 30] and load_checkpoint(run / "checkpoints/best.pt").step == 10
    resumed = train(config, run, resume=True)
    assert written == [10, 30, 30]  # on resume, before any step
    best = load_checkpoint(run / "checkpoints/best.pt")
    assert (resumed["best_step"], resumed["best_score"]) == (best.step, best.score) == (30, 15.0)
    assert_same_weights(best.model, killed_at)
