"""nmt/training/optim.py: the learning-rate schedule's values along a run (warm-up, cosine, plateau decays),
what it sets on the optimiser, and its state across a resume."""

from __future__ import annotations

import math

import pytest
import torch

from nmt.config import TrainingConfig
from nmt.training.optim import DEFAULT_LEARNING_RATES, LRSchedule, base_learning_rate, build_optimizer


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


def test_constant_schedule_without_warm_up_is_the_base_rate_at_every_step() -> None:
    schedule = LRSchedule(TrainingConfig(learning_rate=0.0005, warmup_steps=0, max_steps=20000, lr_schedule="constant"))
    assert {schedule.lr(step) for step in (1, 2, 10000, 20000, 30000)} == {0.0005}


def test_cosine_when_the_warm_up_lasts_the_whole_run() -> None:
    schedule = LRSchedule(TrainingConfig(learning_rate=0.01, warmup_steps=10, max_steps=10, lr_schedule="cosine"))
    assert [schedule.lr(step) for step in (5, 10, 11)] == pytest.approx([0.005, 0.01, 0.0])


def test_a_plateau_decay_scales_the_cosine_schedule_from_then_on() -> None:
    config = TrainingConfig(learning_rate=0.002, warmup_steps=100, max_steps=900, lr_schedule="cosine",
                            lr_patience=1, lr_decay_factor=0.5, early_stopping_metric="loss")
    schedule = LRSchedule(config)
    before = [schedule.lr(step) for step in (100, 500)]
    assert [schedule.observe(loss) for loss in (3.0, 2.5, 2.6)] == [False, False, True]  # loss: lower is better
    assert [schedule.lr(step) for step in (100, 500)] == pytest.approx([lr / 2 for lr in before])
    assert not schedule.observe(float("nan"))  # a NaN validation neither improves nor counts
    assert schedule.state_dict() == {"scale": 0.5, "best": 2.5, "bad_validations": 0}


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


@pytest.mark.parametrize(("optimizer", "expected"), [("adam", torch.optim.Adam), ("adadelta", torch.optim.Adadelta)])
def test_learning_rate_zero_is_the_optimisers_default(optimizer: str, expected: type) -> None:
    config = TrainingConfig(optimizer=optimizer, learning_rate=0)
    assert base_learning_rate(config) == DEFAULT_LEARNING_RATES[optimizer]
    assert base_learning_rate(TrainingConfig(optimizer=optimizer, learning_rate=0.25)) == 0.25
    built = build_optimizer([torch.nn.Parameter(torch.zeros(1))], config)
    assert type(built) is expected and built.param_groups[0]["lr"] == DEFAULT_LEARNING_RATES[optimizer]
    assert LRSchedule(config).base == DEFAULT_LEARNING_RATES[optimizer]
