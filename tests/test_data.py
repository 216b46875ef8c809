"""nmt.training.data: the encoded training pairs of a prepared data folder, and each process's batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nmt.data.batching import TokenBatchSampler
from nmt.data.prepare import prepare
from nmt.errors import NMTError
from nmt.training.data import TrainingData, load_training_data
from nmt.training.distributed import DistContext
from nmt.training.validation import ValidSet
from tests.helpers import reverse_task_config

SINGLE = DistContext(0, 1, torch.device("cpu"))


def test_the_training_split_is_encoded_within_max_words(tmp_path: Path) -> None:
    config = reverse_task_config(tmp_path, n_train=60, min_len=3, max_len=9,
                                 training={"max_words": 6, "valid_max_sentences": 5})
    prepare(config.data)
    data = load_training_data(config, SINGLE)
    config.training.max_words = 0  # no limit
    everything = load_training_data(config, SINGLE)
    assert 0 < len(data.src) == len(data.tgt) < len(everything.src) == 60
    assert max(map(len, data.src)) < max(map(len, everything.src))  # one piece per digit: the long ones are out
    assert data.src == [s for s in everything.src if len(s) <= max(map(len, data.src))]
    assert len(data.valid.references) == 5
    config.training.max_words = 1
    with pytest.raises(NMTError, match=r"has no pairs of at most 1 word \(training.max_words\)"):
        load_training_data(config, SINGLE)


def test_each_process_takes_its_own_shard_of_an_epoch() -> None:
    lengths = [5] * 40
    data = TrainingData(None, [[1] * 5] * 40, [[1] * 5] * 40, TokenBatchSampler(lengths, lengths, 20, seed=3),  # type: ignore[arg-type]
                        ValidSet([], [], []))
    whole = data.epoch_batches(1, SINGLE)
    assert sorted(i for batch in whole for i in batch) == list(range(40))
    assert whole == data.epoch_batches(1, SINGLE) != data.epoch_batches(2, SINGLE)  # a function of (seed, epoch)
    ranks = [data.epoch_batches(1, DistContext(rank, 2, torch.device("cpu"))) for rank in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == len(whole) // 2
    assert not {i for b in ranks[0] for i in b} & {i for b in ranks[1] for i in b}
    with pytest.raises(NMTError, match=r"an epoch has no batches for 50 process\(es\) \(40 training pairs\)"):
        data.epoch_batches(1, DistContext(0, 50, torch.device("cpu")))
