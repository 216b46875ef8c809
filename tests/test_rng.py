"""nmt.training.rng: seeding, and the RNG states a step checkpoint saves."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from nmt.training.rng import capture_rng, restore_rng, seed_everything

CPU = torch.device("cpu")


def test_rng_states_are_restored_exactly() -> None:
    state = capture_rng(CPU)
    assert state["cuda"] == []  # a CPU run draws nothing on a GPU
    first = (random.random(), float(np.random.rand()), torch.rand(3))
    random.random(), np.random.rand(), torch.rand(5)
    assert restore_rng(state, CPU) == ""
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


class FakeCuda:
    """torch.cuda's RNG calls on `count` visible GPUs, recording what is set."""

    def __init__(self, count: int) -> None:
        self.count, self.set_one, self.set_all = count, [], []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "device_count", lambda: self.count)
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: torch.tensor([device.index or 0], dtype=torch.uint8))
        monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: self.set_one.append((state.tolist(), device)))
        monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: self.set_all.append([s.tolist() for s in states]))


def test_the_gpu_trained_on_gets_its_state_back_whatever_the_number_of_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda, gpu = FakeCuda(1), torch.device("cuda", 1)
    cuda.install(monkeypatch)
    state = capture_rng(gpu)
    assert [s.tolist() for s in state["cuda"]] == [[1]]  # the training GPU's state only
    cuda.count = 4  # resumed where more GPUs are visible (another CUDA_VISIBLE_DEVICES)
    assert restore_rng(state, torch.device("cuda", 0)) == "" and cuda.set_one == [([1], torch.device("cuda", 0))]
    # a checkpoint that saved every visible GPU's state: all of them back on as many GPUs ...
    every = {**state, "cuda": [torch.tensor([0], dtype=torch.uint8), torch.tensor([1], dtype=torch.uint8)]}
    cuda.count = 2
    assert restore_rng(every, gpu) == "" and cuda.set_all == [[[0], [1]]]
    # ... and on another number of them, said, not passed over in silence
    cuda.count = 1
    note = restore_rng(every, gpu)
    assert note.startswith("the checkpoint holds the random states of 2 GPUs and 1 are visible") and len(cuda.set_all) == 1

