"""DistContext.agreed without a process group: each rank's side of the exchange, the other ranks played by
a broadcast or gather that returns what they would have sent."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from nmt.errors import NMTError
from nmt.training.distributed import DistContext


class Exchange(DistContext):
    """Rank `rank` of 2, whose collectives record what it sent and answer with `answer` (the other
    rank's part) where given, else with what it sent."""

    def __init__(self, rank: int, answer: Any = None) -> None:
        super().__init__(rank, 2, torch.device("cpu"))
        self.sent: list[Any] = []
        self.answer = answer

    def broadcast(self, obj: Any) -> Any:
        self.sent.append(obj)
        return obj if self.is_main else self.answer

    def gather(self, obj: Any) -> list[Any]:
        self.sent.append(obj)
        return [obj, self.answer] if self.is_main else [self.answer, obj]


def out_of_memory() -> None:
    raise RuntimeError("CUDA out of memory")


def test_an_exception_on_rank_0_reaches_the_others_as_an_error_naming_it() -> None:
    main = Exchange(0)
    with pytest.raises(RuntimeError, match="CUDA out of memory"):  # itself, traceback and all, where it happened
        main.agreed(out_of_memory)
    ((result, told),) = main.sent  # rank 0 still took part in the broadcast the others wait in
    assert result is None and told.message == "rank 0 failed: RuntimeError: CUDA out of memory"
    with pytest.raises(NMTError, match="^rank 0 failed: RuntimeError: CUDA out of memory"):
        Exchange(1, answer=(None, told)).agreed(lambda: "never run on rank 1")


def test_on_all_ranks_each_rank_hears_of_the_others_failure() -> None:
    told = NMTError("rank 1 failed: OSError: disk full", "Rank 1's output shows where.")
    main = Exchange(0, answer=told)
    with pytest.raises(NMTError, match="disk full"):
        main.agreed(lambda: 3, on_all_ranks=True)
    assert main.sent == [None]
    assert Exchange(0, answer=None).agreed(lambda: 3, on_all_ranks=True) == 3
    rank_1 = Exchange(1, answer=None)
    with pytest.raises(OSError, match="disk full"):
        rank_1.agreed(lambda: (_ for _ in ()).throw(OSError("disk full")), on_all_ranks=True)
    assert [told.message for told in rank_1.sent] == ["rank 1 failed: OSError: disk full"]  # what rank 0 hears
