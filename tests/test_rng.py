"""nmt.training.rng: seeding, and the RNG states a step checkpoint saves."""

from __future__ import annotations

import random

import numpy as np
import torch

from nmt.training.rng import capture_rng, restore_rng, seed_everything


def test_rng_states_are_restored_exactly() -> None:
    state = capture_rng()
    first = (random.random(), float(np.random.rand()), torch.rand(3))
    random.random(), np.random.rand(), torch.rand(5)
    restore_rng(state)
    second = (random.random(), float(np.random.rand()), torch.rand(3))
    assert first[:2] == second[:2] and torch.equal(first[2], second[2])


def test_seeding_makes_every_generator_repeat() -> None:
    seed_everything(7)
    first = (random.random(), float(np.random.rand()), torch.rand(3))
    seed_everything(7)
    second = (random.random(), float(np.random.rand()), torch.rand(3))
    assert first[:2] == second[:2] and torch.equal(first[2], second[2])
    seed_everything(8)
    assert random.random() != first[0]
