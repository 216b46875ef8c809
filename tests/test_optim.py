"""nmt/training/optim.py: the learning-rate schedule's values along a run (warm-up, cosine, plateau decays),
what it sets on the optimiser, and its state across a resume; the optimisers built (Adam fused on CUDA only)
and their state across a resume from another device, which score is better, and the patience early stopping
counts."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from nmt.config import TrainingConfig
from nmt.errors import NMTError
from nmt.training import trainer
from nmt.training.optim import (
    DEFAULT_LEARNING_RATES,
    LRSchedule,
    Patience,
    base_learning_rate,
    build_optimizer,
    is_better,
    schedule_warnings,
)
from nmt.training.trainer import train
from nmt.training.validation import ValidationResult
from tests.helpers import assert_same_weights, log_without_timing, needs_cuda, resume_config


def test_cosine_with_warm_up_at_its_landmarks() -> None:
    """quick.yaml's recipe: lr 0.002, 100 warm-up steps, cosine to 0 at step 900."""
    schedule = LRSchedule(TrainingConfig(learning_rate=0.002, warmup_steps=100, max_steps=900, lr_schedule="cosine"))
    landmarks = {
        1: 0.002 / 100,  # the first update: one warm-up step's share
        50: 0.001,  # half-way through the warm-up
        100: 0.002,  # warm-up end: the whole base rate
        300: 0.001 * (1 + math.cos(math.pi / 4)),  # a quarter of the decay
        500: 0.001,  # half-way from the warm-up end to max_steps: half the base
        900: 0.0,  # the last step
    }
    assert {step: schedule.lr(step) for step in landmarks} == pytest.approx(landmarks, abs=1e-15)


def test_cosine_falls_strictly_after_the_warm_up_and_stays_at_zero_past_max_steps() -> None:
    config = TrainingConfig(learning_rate=0.01, warmup_steps=10, max_steps=110, lr_schedule="cosine")
    schedule = LRSchedule(config)
    lrs = [schedule.lr(step) for step in range(10, 111)]
    assert all(a > b for a, b in zip(lrs, lrs[1:], strict=False))
    assert schedule.lr(500) == 0.0  # a resumed run past max_steps stays at the end of the schedule


def test_constant_schedule_with_warm_up_rises_linearly_to_the_base_rate() -> None:
    schedule = LRSchedule(TrainingConfig(learning_rate=0.01, warmup_steps=4, lr_schedule="constant"))
    assert [schedule.lr(step) for step in (1, 2, 4, 10)] == pytest.approx([0.0025, 0.005, 0.01, 0.01])


def test_constant_schedule_without_warm_up_is_the_base_rate_at_every_step() -> None:
    schedule = LRSchedule(TrainingConfig(learning_rate=0.0005, warmup_steps=0, max_steps=20000, lr_schedule="constant"))
    assert {schedule.lr(step) for step in (1, 2, 10000, 20000, 30000)} == {0.0005}


def test_cosine_when_the_warm_up_lasts_the_whole_run() -> None:
    schedule = LRSchedule(TrainingConfig(learning_rate=0.01, warmup_steps=10, max_steps=10, lr_schedule="cosine"))
    assert [schedule.lr(step) for step in (5, 10, 11)] == pytest.approx([0.005, 0.01, 0.0])


def test_inverse_sqrt_peaks_at_the_base_rate_at_the_warm_up_end_and_falls_as_one_over_the_root() -> None:
    """Vaswani et al.'s lr = base * min(step / warmup, sqrt(warmup / step)), whatever max_steps says."""
    config = TrainingConfig(learning_rate=0.001, warmup_steps=4000, max_steps=20000, lr_schedule="inverse_sqrt")
    schedule = LRSchedule(config)
    landmarks = {
        1: 0.001 / 4000,
        2000: 0.0005,  # half-way through the warm-up
        4000: 0.001,  # the peak: the base rate
        16000: 0.0005,  # 4x the warm-up: half the peak
        36000: 0.001 / 3,  # 9x: a third, past max_steps too (a cap, not part of the schedule)
    }
    assert {step: schedule.lr(step) for step in landmarks} == pytest.approx(landmarks, rel=1e-12)
    for step in (1, 3999, 4000, 4001, 12345):
        assert schedule.lr(step) == pytest.approx(0.001 * min(step / 4000, math.sqrt(4000 / step)), rel=1e-12)
    longer = LRSchedule(TrainingConfig(learning_rate=0.001, warmup_steps=4000, max_steps=900000,
                                       lr_schedule="inverse_sqrt"))
    assert [longer.lr(s) for s in range(1, 20001, 997)] == [schedule.lr(s) for s in range(1, 20001, 997)]


def test_inverse_sqrt_falls_strictly_after_the_warm_up_and_a_plateau_decay_scales_it() -> None:
    config = TrainingConfig(learning_rate=0.002, warmup_steps=10, lr_schedule="inverse_sqrt", lr_patience=1,
                            lr_decay_factor=0.5, early_stopping_metric="bleu")
    schedule = LRSchedule(config)
    lrs = [schedule.lr(step) for step in range(10, 200)]
    assert all(a > b > 0 for a, b in zip(lrs, lrs[1:], strict=False))
    assert [schedule.observe(bleu) for bleu in (5.0, 4.0)] == [False, True]
    assert schedule.lr(40) == pytest.approx(0.5 * 0.002 * math.sqrt(10 / 40))


def test_inverse_sqrt_needs_a_warm_up() -> None:
    with pytest.raises(NMTError, match="training.warmup_steps"):
        TrainingConfig(lr_schedule="inverse_sqrt", warmup_steps=0).validate()
    TrainingConfig(lr_schedule="inverse_sqrt", warmup_steps=1).validate()


def test_a_plateau_decay_scales_the_cosine_schedule_from_then_on() -> None:
    config = TrainingConfig(learning_rate=0.002, warmup_steps=100, max_steps=900, lr_schedule="cosine",
                            lr_patience=1, lr_decay_factor=0.5, early_stopping_metric="loss")
    schedule = LRSchedule(config)
    before = [schedule.lr(step) for step in (100, 500)]
    assert [schedule.observe(loss) for loss in (3.0, 2.5, 2.6)] == [False, False, True]  # loss: lower is better
    assert [schedule.lr(step) for step in (100, 500)] == pytest.approx([lr / 2 for lr in before])
    assert schedule.state_dict() == {"scale": 0.5, "best": 2.5, "bad_validations": 0}
    # a NaN validation (a loss that overflowed) is a bad one, as early stopping counts it: the rate halves again
    assert schedule.observe(float("nan"))
    assert schedule.state_dict() == {"scale": 0.25, "best": 2.5, "bad_validations": 0}


def test_a_plateau_counts_from_the_last_improvement_and_lr_patience_0_never_decays() -> None:
    schedule = LRSchedule(TrainingConfig(learning_rate=0.01, warmup_steps=4, lr_patience=2,
                                         lr_decay_factor=0.5, early_stopping_metric="bleu",
                                         lr_schedule="constant"))
    # 11.0 beats 10.0 and restarts the count; a score equal to the best is no improvement
    assert [schedule.observe(s) for s in (10.0, 9.0, 11.0, 11.0, 10.0)] == [False, False, False, False, True]
    assert schedule.lr(10) == pytest.approx(0.005)
    off = LRSchedule(TrainingConfig(lr_patience=0, learning_rate=0, warmup_steps=0, lr_schedule="constant"))
    assert not any(off.observe(s) for s in (5.0, 4.0, 3.0, 2.0)) and off.lr(1) == 0.001


def test_apply_sets_every_parameter_group_and_a_resumed_schedule_continues_exactly() -> None:
    config = TrainingConfig(learning_rate=0.01, warmup_steps=4, max_steps=40, lr_schedule="cosine", lr_patience=2,
                            early_stopping_metric="bleu")
    first, second = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.Adam([{"params": [first]}, {"params": [second]}], lr=1.0)
    schedule = LRSchedule(config)
    for score in (10.0, 9.0, 8.0):  # two validations without improvement: one decay
        schedule.observe(score)
    assert schedule.apply(optimizer, 2) == pytest.approx(0.0025)
    assert [group["lr"] for group in optimizer.param_groups] == pytest.approx([0.0025, 0.0025])
    resumed = LRSchedule(config)
    resumed.load_state_dict(schedule.state_dict())
    assert [resumed.lr(step) for step in range(1, 41)] == [schedule.lr(step) for step in range(1, 41)]
    assert resumed.observe(9.5) is schedule.observe(9.5) is False  # the best (10.0) came back with the state


def test_a_resumed_inverse_sqrt_schedule_with_plateau_decays_continues_exactly() -> None:
    config = TrainingConfig(learning_rate=0.001, warmup_steps=8, max_steps=100, lr_schedule="inverse_sqrt",
                            lr_patience=1, lr_decay_factor=0.7, early_stopping_metric="bleu")
    schedule = LRSchedule(config)
    for score in (3.0, 2.0, 4.0, 1.0):  # two decays
        schedule.observe(score)
    resumed = LRSchedule(config)
    resumed.load_state_dict(schedule.state_dict())
    assert resumed.scale == schedule.scale == pytest.approx(0.49)
    assert [resumed.lr(step) for step in range(1, 301)] == [schedule.lr(step) for step in range(1, 301)]
    assert resumed.observe(3.5) is schedule.observe(3.5) is True  # the best (4.0) came back: a third decay


@pytest.mark.parametrize(("optimizer", "expected"), [("adam", torch.optim.Adam), ("adadelta", torch.optim.Adadelta)])
def test_learning_rate_zero_is_the_optimisers_default(optimizer: str, expected: type) -> None:
    config = TrainingConfig(optimizer=optimizer, learning_rate=0)
    assert base_learning_rate(config) == DEFAULT_LEARNING_RATES[optimizer]
    assert base_learning_rate(TrainingConfig(optimizer=optimizer, learning_rate=0.25)) == 0.25
    for lr in (0.001, 0.5, 2.0):  # any positive learning_rate is used as given
        given = build_optimizer([torch.nn.Parameter(torch.zeros(1))],
                                TrainingConfig(optimizer=optimizer, learning_rate=lr))
        assert given.param_groups[0]["lr"] == lr
    built = build_optimizer([torch.nn.Parameter(torch.zeros(1))], config)
    assert type(built) is expected and built.param_groups[0]["lr"] == DEFAULT_LEARNING_RATES[optimizer]
    assert LRSchedule(config).base == DEFAULT_LEARNING_RATES[optimizer]


def test_adadelta_has_bahdanau_et_al_rho_and_eps_and_adam_the_recipe_rate_by_default() -> None:
    params = [torch.nn.Parameter(torch.zeros(2))]
    group = build_optimizer(params, TrainingConfig(optimizer="adadelta", learning_rate=0)).param_groups[0]
    assert (group["lr"], group["rho"], group["eps"]) == (1.0, 0.95, 1e-6)
    assert build_optimizer(params, TrainingConfig()).param_groups[0]["lr"] == 0.002  # the recipe's default


def test_bleu_improves_upwards_loss_downwards_and_anything_beats_no_score() -> None:
    assert is_better(2.0, 1.0, "bleu") and not is_better(2.0, 1.0, "loss") and is_better(0.0, None, "loss")
    assert not is_better(1.0, 1.0, "bleu") and not is_better(1.0, 1.0, "loss")


def test_a_validation_of_nan_is_never_the_best_and_counts_against_the_patience() -> None:
    stopping = Patience("loss", patience=2)
    assert not stopping.observe(math.nan, 300) and stopping.best_score is None and stopping.bad_validations == 1
    assert stopping.observe(2.0, 600) and (stopping.best_score, stopping.best_step) == (2.0, 600)
    assert not stopping.observe(math.nan, 900) and stopping.best_score == 2.0 and stopping.bad_validations == 1
    assert stopping.observe(1.5, 1200) and stopping.periodic_best == 1.5


def test_early_stopping_counts_only_the_periodic_validations_that_do_not_improve() -> None:
    stopping = Patience("loss", patience=2)
    assert not stopping.exhausted
    assert stopping.observe(3.0, 10) and (stopping.best_score, stopping.best_step) == (3.0, 10)
    assert not stopping.observe(3.5, 20) and stopping.bad_validations == 1 and not stopping.exhausted
    assert stopping.observe(2.0, 25, counts=False)  # a closing validation can win best.pt ...
    assert stopping.bad_validations == 1 and stopping.best_step == 25  # ... but leaves the patience alone,
    # measured against the periodic 3.0, as in a run trained straight through, which never validated at 25
    assert not stopping.observe(2.5, 30) and stopping.bad_validations == 0 and stopping.best_step == 25
    assert not stopping.observe(2.6, 40) and not stopping.observe(2.7, 50) and stopping.exhausted
    assert stopping.observe(1.0, 60) and stopping.bad_validations == 0 and not stopping.exhausted
    never = Patience("bleu", patience=0)
    for step in range(5):
        never.observe(0.0, step)
    assert not never.exhausted and never.best_step == 0


def test_the_last_step_early_stopping_allows_is_patience_validations_past_the_last_improvement() -> None:
    stopping = Patience("bleu", patience=3)
    assert stopping.last_step(250, 100) == 600  # 300's score is the first, so the best; then 400, 500, 600
    assert stopping.last_step(300, 100) == 600  # step 300's own validation is still to come
    stopping.observe(10.0, 300)
    assert stopping.last_step(350, 100) == 600  # the best at 300: 400, 500, 600 may not improve
    stopping.observe(9.0, 400)
    assert stopping.last_step(450, 100) == 600  # one validation already spent
    stopping.observe(11.0, 500)
    assert stopping.last_step(550, 100) == 800
    assert Patience("bleu", patience=0).last_step(250, 100) is None  # no early stopping: no such step


def tiny_model(device: str) -> torch.nn.Module:
    """The same small two-layer network at every call (seeded), on `device`."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).to(device)


def train_steps(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int, seed: int) -> None:
    """`steps` updates on random inputs drawn from `seed` (on the CPU, so every device sees the same ones)."""
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    for _ in range(steps):
        inputs = torch.randn(8, 6, generator=generator).to(device)
        optimizer.zero_grad(set_to_none=True)
        model(inputs).square().mean().backward()
        optimizer.step()


def checkpointed(state: dict[str, Any], device: str) -> dict[str, Any]:
    """`state` saved and loaded back onto `device`, as a step checkpoint is (a copy: no tensor shared)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, map_location=device, weights_only=True)


def test_adam_on_the_cpu_is_unfused_and_updates_bit_for_bit_as_torchs_default_adam() -> None:
    """The CPU results must not move: no fused or foreach flag, and the very updates of a plain Adam."""
    ours, plain = tiny_model("cpu"), tiny_model("cpu")
    optimizer = build_optimizer(ours.parameters(), TrainingConfig(learning_rate=0.01))
    reference = torch.optim.Adam(plain.parameters(), lr=0.01)
    assert optimizer.defaults == reference.defaults
    assert not optimizer.param_groups[0]["fused"] and optimizer.param_groups[0]["foreach"] is None
    train_steps(ours, optimizer, 4, seed=1)
    train_steps(plain, reference, 4, seed=1)
    assert_same_weights(ours.state_dict(), plain.state_dict())


def test_a_fused_runs_state_resumes_unfused_on_the_cpu_and_continues_bit_for_bit() -> None:
    """A CUDA run's checkpoint (its groups say fused) resumed on the CPU gets the CPU's own unfused Adam,
    which continues exactly as the run that never stopped (torch alone would take the saved flag)."""
    config = TrainingConfig(learning_rate=0.01)
    straight = tiny_model("cpu")
    optimizer = build_optimizer(straight.parameters(), config)
    train_steps(straight, optimizer, 3, seed=1)
    saved = checkpointed(optimizer.state_dict(), "cpu")
    from_cuda = {**saved, "param_groups": [{**group, "fused": True} for group in saved["param_groups"]]}
    resumed = tiny_model("cpu")
    resumed.load_state_dict(straight.state_dict())
    resumed_optimizer = build_optimizer(resumed.parameters(), config)
    resumed_optimizer.load_state_dict(from_cuda)
    assert resumed_optimizer.param_groups[0]["fused"] is None
    assert from_cuda["param_groups"][0]["fused"] is True  # the caller's state is left as it was
    train_steps(straight, optimizer, 3, seed=2)
    train_steps(resumed, resumed_optimizer, 3, seed=2)
    assert_same_weights(straight.state_dict(), resumed.state_dict())


@needs_cuda
def test_on_cuda_adam_is_fused_and_updates_as_unfused_adam_within_float32_rounding() -> None:
    fused_model, plain_model = tiny_model("cuda"), tiny_model("cuda")
    fused = build_optimizer(fused_model.parameters(), TrainingConfig(learning_rate=0.01))
    assert fused.param_groups[0]["fused"] is True
    train_steps(fused_model, fused, 5, seed=1)
    train_steps(plain_model, torch.optim.Adam(plain_model.parameters(), lr=0.01, foreach=False), 5, seed=1)
    start = tiny_model("cuda").parameters()
    moved = [(p - p0).abs().max().item() for p, p0 in zip(fused_model.parameters(), start, strict=True)]
    assert min(moved) > 1e-3  # Adam's steps are about lr (0.01) each: what is compared below has moved
    for a, b in zip(fused_model.parameters(), plain_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@needs_cuda
def test_a_cpu_checkpoint_resumes_fused_on_cuda_and_continues_as_on_the_cpu() -> None:
    """Resume onto a GPU from a CPU run: the saved state (no fused flag, CPU step counts) loads into the
    fused Adam, which keeps its flag and its step counts on the GPU, and the run goes on as on the CPU."""
    config = TrainingConfig(learning_rate=0.01)
    cpu = tiny_model("cpu")
    cpu_optimizer = build_optimizer(cpu.parameters(), config)
    train_steps(cpu, cpu_optimizer, 3, seed=1)
    gpu = tiny_model("cpu")
    gpu.load_state_dict(cpu.state_dict())
    gpu.to("cuda")
    gpu_optimizer = build_optimizer(gpu.parameters(), config)
    gpu_optimizer.load_state_dict(checkpointed(cpu_optimizer.state_dict(), "cuda"))
    assert gpu_optimizer.param_groups[0]["fused"] is True
    steps = [state["step"] for state in gpu_optimizer.state.values()]
    assert len(steps) == 4 and all(s.device.type == "cuda" and s.dtype == torch.float32 and s.item() == 3 for s in steps)
    train_steps(cpu, cpu_optimizer, 3, seed=2)
    train_steps(gpu, gpu_optimizer, 3, seed=2)
    for a, b in zip(gpu.parameters(), cpu.parameters(), strict=True):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("decay_metric", "decayed_at"), [("", []), ("bleu", []), ("loss", [30, 40])])
def test_the_rate_decays_on_the_plateaus_of_the_score_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decay_metric: str, decayed_at: list[int]
) -> None:
    """training.lr_decay_metric: the validation BLEU climbs while the loss turns up (scripted): a plateau of the
    loss halves the rate where BLEU's would not; "" follows early_stopping_metric (BLEU)."""
    losses, bleus = iter([3.0, 2.5, 2.7, 2.6]), iter([10.0, 11.0, 12.0, 13.0])

    def validate(*args: Any, **kwargs: Any) -> ValidationResult:
        loss = next(losses)
        return ValidationResult(loss=loss, ppl=math.exp(loss), bleu=next(bleus), signature="scripted", sentences=10)

    monkeypatch.setattr(trainer, "validate", validate)
    config = resume_config(tmp_path / "data", max_steps=40, lr_decay_metric=decay_metric)
    train(config, tmp_path / "run")
    valid = [e for e in log_without_timing(tmp_path / "run") if e["event"] == "valid"]
    assert [e["step"] for e in valid if e["lr_decayed"]] == decayed_at


def test_adadelta_refuses_an_adam_rate_which_would_barely_train() -> None:
    """Adadelta's rate scales its own adaptive steps (1.0 in Bahdanau et al.): the recipe's Adam rate, 0.002, the
    default that `optimizer: adadelta` alone would keep, is refused naming the rates that train."""
    with pytest.raises(NMTError, match=r"'training.learning_rate': must be 0 \(Adadelta's default, 1.0\) or >= 0.05 "
                                       r"with optimizer adadelta, .* at 0.002, a rate for Adam, it would barely train"):
        TrainingConfig(optimizer="adadelta").validate()
    for rate in (0.0, 0.05, 1.0):
        TrainingConfig(optimizer="adadelta", learning_rate=rate).validate()
    TrainingConfig(optimizer="adam", learning_rate=0.002).validate()


def test_a_schedule_that_cannot_do_what_it_says_is_warned_about() -> None:
    """A short run of a recipe (quick.yaml's 100 warm-up steps, --set training.max_steps=30) never reaches its rate,
    and its cosine never decays; a decay on plateaus that early stopping always ends the run at never decays: said,
    not refused (a smoke run is still one)."""
    short = TrainingConfig(max_steps=30, warmup_steps=100)
    assert schedule_warnings(short) == [
        "warning: training.warmup_steps (100) >= training.max_steps (30): the warm-up takes the whole run, the rate "
        "climbing towards training.learning_rate, and cosine never decays. For a run this short, lower "
        "training.warmup_steps."]
    assert max(LRSchedule(short).lr(step) for step in range(1, 31)) < short.learning_rate  # what it warns of
    (constant,) = schedule_warnings(TrainingConfig(max_steps=30, warmup_steps=30, lr_schedule="constant"))
    assert "cosine" not in constant
    late = TrainingConfig(patience=3, lr_patience=3)
    assert schedule_warnings(late) == [
        "warning: training.lr_patience (3) >= training.patience (3): early stopping ends the run by the validation "
        "that first decays the rate, so no step trains at a decayed rate. Give training.lr_patience a count under "
        "training.patience."]
    for lr_patience, stops_first in ((3, True), (2, False)):  # what it warns of, and where it does not
        config = TrainingConfig(patience=3, lr_patience=lr_patience)
        stopping, schedule = Patience("bleu", config.patience), LRSchedule(config)
        for step, score in enumerate((5.0, 4.0, 4.0, 4.0), 1):
            schedule.observe(score)
            stopping.observe(score, step)
            if stopping.exhausted or schedule.scale < 1:
                break
        assert stopping.exhausted is stops_first and schedule.scale == 0.5  # decayed, and trained on or not
    for fine in (TrainingConfig(max_steps=101, warmup_steps=100), TrainingConfig(max_steps=30, warmup_steps=0),
                 TrainingConfig(patience=3, lr_patience=2), TrainingConfig(patience=0, lr_patience=2),
                 TrainingConfig(patience=2, lr_patience=2, early_stopping_metric="bleu", lr_decay_metric="loss")):
        assert schedule_warnings(fine) == []
