"""nmt.training.data: the encoded training pairs of a prepared data folder, and each process's batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nmt.data.batching import TokenBatchSampler, make_batch
from nmt.data.prepare import prepare
from nmt.errors import NMTError
from nmt.evaluation.metrics import sacrebleu_bleu
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
                        ValidSet([], [], [], sacrebleu_bleu("13a", False)))
    whole = data.epoch_batches(1, SINGLE)
    assert sorted(i for batch in whole for i in batch.indices) == list(range(40))
    assert whole == data.epoch_batches(1, SINGLE) != data.epoch_batches(2, SINGLE)  # a function of (seed, epoch)
    ranks = [data.epoch_batches(1, DistContext(rank, 2, torch.device("cpu"))) for rank in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == len(whole) // 2
    assert not {i for b in ranks[0] for i in b.indices} & {i for b in ranks[1] for i in b.indices}
    with pytest.raises(NMTError, match=r"an epoch has no batches for 50 process\(es\) \(40 training pairs\)"):
        data.epoch_batches(1, DistContext(0, 50, torch.device("cpu")))


def test_every_process_knows_the_target_tokens_of_a_step_on_all_of_them() -> None:
    """The loss's denominator, computed by each process from the epoch's list: no collective per step."""
    src, tgt = [[5] * 4 for _ in range(60)], [[7] * (1 + i % 12) for i in range(60)]  # targets of 1-12 pieces
    data = TrainingData(None, src, tgt, TokenBatchSampler([4] * 60, [len(t) for t in tgt], 40, seed=2),  # type: ignore[arg-type]
                        ValidSet([], [], [], sacrebleu_bleu("13a", False)))

    def tokens(indices: list[int]) -> int:  # what the process's own batch counts
        return make_batch([src[i] for i in indices], [tgt[i] for i in indices], indices).n_tgt_tokens

    assert all(b.step_tokens == tokens(b.indices) for b in data.epoch_batches(1, SINGLE))
    ranks = [data.epoch_batches(1, DistContext(rank, 3, torch.device("cpu"))) for rank in range(3)]
    assert len(data.sampler.epoch(1)) % 3  # a tail of batches no rank trains: counted in no step
    for step in zip(*ranks, strict=True):
        assert [b.step_tokens for b in step] == [sum(tokens(b.indices) for b in step)] * 3
    assert len({b.step_tokens for b in ranks[0]}) > 1  # steps of unequal sizes: a count that could be wrong
