"""nmt/torchrun.py: the place torchrun gives a process, read from its environment, and a bad value refused."""

from __future__ import annotations

import pytest

from nmt.errors import NMTError
from nmt.torchrun import TorchrunPlace, torchrun_place
from nmt.training.distributed import setup_distributed


@pytest.fixture(autouse=True)
def no_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a process that torchrun did not start."""
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("env", "place"),
    [
        ({}, TorchrunPlace(1, 0, 0)),
        ({"WORLD_SIZE": "1", "RANK": "x"}, TorchrunPlace(1, 0, 0)),  # one process of one: RANK is not read
        ({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}, TorchrunPlace(4, 3, 1)),  # two machines of two GPUs
        ({"WORLD_SIZE": "2", "RANK": "1"}, TorchrunPlace(2, 1, 1)),  # LOCAL_RANK defaults to RANK
    ],
)
def test_the_place_is_read_from_torchruns_variables(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], place: TorchrunPlace
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert torchrun_place() == place


def test_training_refuses_a_bad_world_size_naming_it_rather_than_raising_a_value_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # setup_distributed reads the environment through torchrun_place, as the command line does
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(NMTError, match=r"WORLD_SIZE='two' is not a whole number 1 or more") as raised:
        setup_distributed("cpu")
    assert "unset WORLD_SIZE RANK LOCAL_RANK" in raised.value.hint
