"""Token-budget batches of pairs of similar length, and their padded tensors.

Like Bahdanau et al. (sort a large random pool by length, cut it into minibatches), but the
cut follows a token budget so that long sentences come in smaller batches.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from nmt.special import BOS_ID, EOS_ID, PAD_ID
from nmt.transfer import to_device

POOL_BATCHES = 100  # a pool holds about this many batches: large enough to sort well, small enough to mix


@dataclass
class Batch:
    """A padded batch of pairs; lengths count EOS (source, tgt_out) or BOS (tgt_in)."""

    src: Tensor  # batch x src_len: ids + EOS, right-padded with PAD_ID
    src_lengths: Tensor  # batch (long, on cpu): lengths incl. EOS
    tgt_in: Tensor  # batch x tgt_len: BOS + ids, padded
    tgt_out: Tensor  # batch x tgt_len: ids + EOS, padded
    indices: Tensor  # batch: index of each pair in the dataset
    n_tgt_tokens: int  # real target tokens incl. EOS
    target_positions: Tensor  # n_tgt_tokens: b * tgt_len + t of each real tgt_out position, row-major
    targets: Tensor  # n_tgt_tokens: the tokens of tgt_out there, in the same order

    def to(self, device: torch.device | str) -> Batch:
        """The batch with its tensors on `device`, copied without waiting for it (`to_device`); src_lengths
        stay on the host, where the models check them without a wait before they copy them over (pinned for a
        GPU, so that those copies, compiled ones included, do not wait either)."""
        device = torch.device(device)
        return dataclasses.replace(
            self,
            src_lengths=self.src_lengths.pin_memory() if device.type == "cuda" else self.src_lengths,
            src=to_device(self.src, device),
            tgt_in=to_device(self.tgt_in, device),
            tgt_out=to_device(self.tgt_out, device),
            target_positions=to_device(self.target_positions, device),
            targets=to_device(self.targets, device),
        )


def _pad(seqs: list[list[int]], bos: bool = False, eos: bool = False) -> Tensor:
    """batch x max_len long tensor: each sequence, after BOS and before EOS where asked, right-padded with PAD_ID.

    Filled row by row into one array, not a tensor per sequence: a batch is built on the host while a GPU
    waits, every step (docs/performance.md)."""
    start = int(bos)
    ids = np.full((len(seqs), max(map(len, seqs), default=0) + start + int(eos)), PAD_ID, dtype=np.int64)
    if bos:
        ids[:, 0] = BOS_ID
    for row, seq in zip(ids, seqs, strict=True):
        row[start : start + len(seq)] = seq
        if eos:
            row[start + len(seq)] = EOS_ID
    return torch.from_numpy(ids)


def make_source_batch(src_seqs: list[list[int]]) -> tuple[Tensor, Tensor]:
    """(batch x src_len ids + EOS right-padded, batch lengths incl. EOS) for encoding sources."""
    return _pad(src_seqs, eos=True), torch.tensor([len(s) + 1 for s in src_seqs], dtype=torch.long)


def target_tokens(tgt_seqs: Iterable[list[int]]) -> int:
    """The real target tokens of a batch of these targets: each one's ids and its EOS."""
    return sum(len(t) + 1 for t in tgt_seqs)


def make_batch(src_seqs: list[list[int]], tgt_seqs: list[list[int]], indices: list[int]) -> Batch:
    """Pad a list of (source ids, target ids) pairs into a Batch (teacher forcing: tgt_in / tgt_out)."""
    src, src_lengths = make_source_batch(src_seqs)
    tgt_out = _pad(tgt_seqs, eos=True)
    # picked on the host: picked on a GPU (tgt_out[tgt_out != PAD_ID]), the host would wait for the device
    # to count them, every step
    positions = (tgt_out.view(-1) != PAD_ID).nonzero().squeeze(1)  # n_tgt_tokens
    return Batch(
        src=src,
        src_lengths=src_lengths,
        tgt_in=_pad(tgt_seqs, bos=True),
        tgt_out=tgt_out,
        indices=torch.tensor(indices, dtype=torch.long),
        n_tgt_tokens=target_tokens(tgt_seqs),
        target_positions=positions,
        targets=tgt_out.view(-1)[positions],
    )


class TokenBatchSampler:
    """Epochs of index batches: each pair once, similar lengths together, padded size within budget.

    `src_lengths` / `tgt_lengths` are token counts without EOS/BOS; a batch's padded size is
    len(batch) * max(max src len + 1, max tgt len + 1) <= batch_tokens, except that a single
    pair longer than the budget forms a batch on its own. Under DDP, `shard` drops an epoch's last
    len(batches) % world_size batches (each epoch others, in its own order), so that every rank takes as many.
    """

    def __init__(
        self, src_lengths: list[int], tgt_lengths: list[int], batch_tokens: int, seed: int, shuffle: bool = True
    ) -> None:
        self.sizes = [max(s, t) + 1 for s, t in zip(src_lengths, tgt_lengths, strict=True)]
        self.batch_tokens = batch_tokens
        self.seed = seed
        self.shuffle = shuffle
        mean = sum(self.sizes) / len(self.sizes) if self.sizes else 1.0  # at least 1: every size counts EOS
        self.pool_size = max(1, int(POOL_BATCHES * batch_tokens / mean))

    def _cut(self, ordered: list[int]) -> list[list[int]]:
        """Greedily cut indices (sorted by size) into batches within the token budget: as the sizes grow,
        the pair added last is a batch's longest."""
        batches: list[list[int]] = []
        for i in ordered:
            if batches and self.sizes[i] * (len(batches[-1]) + 1) <= self.batch_tokens:
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    def epoch(self, epoch: int) -> list[list[int]]:
        """The batches of `epoch`: the same for the same (seed, epoch), a new order otherwise."""
        order = list(range(len(self.sizes)))
        if not self.shuffle:
            return self._cut(sorted(order, key=lambda i: self.sizes[i]))
        rng = random.Random(f"{self.seed}:{epoch}")  # string seeds hash the same on every platform
        rng.shuffle(order)
        batches = []
        for start in range(0, len(order), self.pool_size):
            pool = sorted(order[start : start + self.pool_size], key=lambda i: self.sizes[i])
            batches.extend(self._cut(pool))
        rng.shuffle(batches)
        return batches


def padding_fraction(batches: list[list[int]], src_lengths: list[int], tgt_lengths: list[int]) -> float:
    """Share of padding in the source and target tensors of `batches` (lengths without EOS/BOS)."""
    real = padded = 0
    for batch in batches:
        src = [src_lengths[i] + 1 for i in batch]
        tgt = [tgt_lengths[i] + 1 for i in batch]
        real += sum(src) + sum(tgt)
        padded += len(batch) * (max(src) + max(tgt))
    return 1.0 - real / padded if padded else 0.0


def shard(batches: list[list[int]], rank: int, world_size: int) -> list[list[int]]:
    """Every world_size-th batch from `rank`, tail dropped so that every rank gets the same count."""
    usable = len(batches) - len(batches) % world_size
    return batches[rank:usable:world_size]
