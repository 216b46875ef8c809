"""Batching: padded tensors, token budget, every pair once per epoch, determinism, DDP shards."""

from __future__ import annotations

import random

import torch

from nmt.data.batching import TokenBatchSampler, make_batch, make_source_batch, padding_fraction, shard
from nmt.special import BOS_ID, EOS_ID, PAD_ID


def lengths(n: int, seed: int = 0) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    src = [rng.randint(1, 80) for _ in range(n)]
    return src, [max(1, s + rng.randint(-5, 10)) for s in src]


def test_make_batch_pads_and_shifts_targets() -> None:
    batch = make_batch([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]], [4, 2])
    assert batch.src.tolist() == [[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.src_lengths.tolist() == [4, 2]
    assert batch.tgt_in.tolist() == [[BOS_ID, 9, 10, PAD_ID], [BOS_ID, 11, 12, 13]]
    assert batch.tgt_out.tolist() == [[9, 10, EOS_ID, PAD_ID], [11, 12, 13, EOS_ID]]
    assert batch.indices.tolist() == [4, 2] and batch.n_tgt_tokens == 7
    # the real target positions (b * tgt_len + t) and their tokens, counted on the host
    assert batch.target_positions.tolist() == [0, 1, 2, 4, 5, 6, 7]
    assert batch.targets.tolist() == [9, 10, EOS_ID, 11, 12, 13, EOS_ID]
    assert batch.src.dtype == batch.tgt_in.dtype == batch.src_lengths.dtype == torch.long
    moved = batch.to("cpu")
    assert torch.equal(moved.tgt_out, batch.tgt_out) and moved.src_lengths.device.type == "cpu"
    assert torch.equal(moved.target_positions, batch.target_positions) and torch.equal(moved.targets, batch.targets)
    src, src_lengths = make_source_batch([[7], [1, 2, 3]])
    assert src.tolist() == [[7, EOS_ID, PAD_ID, PAD_ID], [1, 2, 3, EOS_ID]] and src_lengths.tolist() == [2, 4]
    empty = make_batch([[], [3]], [[], []], [0, 1])  # a line with no pieces is EOS alone
    assert empty.src.tolist() == [[EOS_ID, PAD_ID], [3, EOS_ID]] and empty.src_lengths.tolist() == [1, 2]
    assert empty.tgt_in.tolist() == [[BOS_ID], [BOS_ID]] and empty.tgt_out.tolist() == [[EOS_ID], [EOS_ID]]


def test_budget_respected_and_every_pair_once() -> None:
    src, tgt = lengths(3000)
    src[7] = 500  # longer than the budget on its own
    sampler = TokenBatchSampler(src, tgt, batch_tokens=400, seed=3)
    for epoch in range(3):
        batches = sampler.epoch(epoch)
        assert sorted(i for b in batches for i in b) == list(range(3000))
        for b in batches:
            padded = len(b) * max(max(src[i], tgt[i]) + 1 for i in b)
            assert padded <= 400 or b == [7]
        assert [7] in batches
        assert padding_fraction(batches, src, tgt) < 0.15


def test_deterministic_per_seed_and_epoch() -> None:
    src, tgt = lengths(2000, seed=1)
    a = TokenBatchSampler(src, tgt, 600, seed=1)
    b = TokenBatchSampler(src, tgt, 600, seed=1)
    assert a.epoch(0) == b.epoch(0) and a.epoch(5) == b.epoch(5)
    assert a.epoch(0) != a.epoch(1)
    assert a.epoch(0) != TokenBatchSampler(src, tgt, 600, seed=2).epoch(0)
    unshuffled = TokenBatchSampler(src, tgt, 600, seed=1, shuffle=False)
    assert unshuffled.epoch(0) == unshuffled.epoch(1)


def test_an_epoch_s_batches_come_in_a_mixed_order_of_lengths() -> None:
    """Within a pool the batches are cut shortest first; the epoch then shuffles them, so that training does
    not see each pool's short sentences, then its long ones: a batch's longest length rises and falls."""
    src, tgt = lengths(4000, seed=4)
    sampler = TokenBatchSampler(src, tgt, 1000, seed=0)
    longest = [max(max(src[i], tgt[i]) for i in batch) for batch in sampler.epoch(0)]
    rises = sum(later > earlier for earlier, later in zip(longest, longest[1:], strict=False))
    assert 0.3 < rises / (len(longest) - 1) < 0.7  # sorted runs within pools would rise nearly every time
    assert len(longest) > 20  # enough batches for the share to mean something


def test_length_grouping_beats_random_batches() -> None:
    src, tgt = lengths(4000, seed=2)
    grouped = TokenBatchSampler(src, tgt, 1000, seed=0).epoch(0)
    order = list(range(4000))
    random.Random(0).shuffle(order)
    size = max(1, len(order) // len(grouped))
    ungrouped = [order[i : i + size] for i in range(0, len(order), size)]
    assert padding_fraction(grouped, src, tgt) < 0.5 * padding_fraction(ungrouped, src, tgt)


def test_shard_gives_equal_disjoint_slices() -> None:
    batches = [[i] for i in range(11)]
    shards = [shard(batches, rank, 3) for rank in range(3)]
    assert shards == [[[0], [3], [6]], [[1], [4], [7]], [[2], [5], [8]]]
    assert shard(batches, 0, 1) == batches
