"""The data a run trains on: the encoded training pairs, their token-budget batches (a pure function of
(seed, epoch), each process taking its own shard of every epoch's list), and the validation set.

Because every process can compute the whole epoch's list, each also knows how many target tokens a step
trains on over all processes (the loss's denominator) without asking the others."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from nmt.config import Config
from nmt.data.batching import TokenBatchSampler, shard, target_tokens
from nmt.data.pairs import within_words
from nmt.data.prepare import prepare
from nmt.data.prepared import load_prepared
from nmt.data.sources import prepared_dir
from nmt.data.subwords import Tokenizer
from nmt.errors import NMTError, counted
from nmt.training.distributed import DistContext
from nmt.training.validation import ValidSet, build_valid_set


class StepBatch(NamedTuple):
    """This process's part of a training step."""

    indices: list[int]  # the training pairs of its batch
    step_tokens: int  # the real target tokens (EOS included) of the step's batches on all processes


@dataclass
class TrainingData:
    """The training split encoded (pairs of at most training.max_words words), its sampler, and the
    validation set."""

    tokenizer: Tokenizer
    src: list[list[int]]
    tgt: list[list[int]]
    sampler: TokenBatchSampler
    valid: ValidSet

    def epoch_batches(self, epoch: int, ctx: DistContext) -> list[StepBatch]:
        """This process's batches of `epoch`, in training order."""
        everyone = self.sampler.epoch(epoch)
        shards = [shard(everyone, rank, ctx.world_size) for rank in range(ctx.world_size)]  # one: all of them
        batches = shards[ctx.rank]
        if not batches:
            raise NMTError(
                f"an epoch has no batches for {ctx.world_size} process(es) ({len(self.src)} training pairs).",
                "Use more training data, a smaller training.batch_tokens, or fewer processes.",
            )
        step_tokens = [sum(target_tokens(self.tgt[i] for i in batch) for batch in step) for step in zip(*shards, strict=True)]
        return [StepBatch(batch, tokens) for batch, tokens in zip(batches, step_tokens, strict=True)]


def load_training_data(config: Config, ctx: DistContext) -> TrainingData:
    """Prepare the data if needed (rank 0 alone: the others would race it on the same folder) and encode it."""
    if ctx.enabled:
        ctx.agreed(lambda: prepare(config.data))
    data = load_prepared(config.data)
    tokenizer, tc = data.tokenizer, config.training
    pairs = within_words(data.pairs("train"), tc.max_words)
    if not pairs:
        error = NMTError(
            f"the training split of {prepared_dir(config.data)} has no pairs"
            + (f" of at most {counted(tc.max_words, 'word')} (training.max_words)." if tc.max_words else "."),
            "Raise training.max_words, or check data.* and re-run nmt prepare.",
        )
        error.on_every_rank = ctx.enabled  # every rank reads the same split: said once
        raise error
    src = [tokenizer.encode_src(s) for s, _ in pairs]
    tgt = [tokenizer.encode_tgt(t) for _, t in pairs]
    sampler = TokenBatchSampler([len(s) for s in src], [len(t) for t in tgt], tc.batch_tokens, seed=tc.seed)
    valid = build_valid_set(data.pairs("valid"), tokenizer, tc.valid_max_sentences, config.evaluation)
    return TrainingData(tokenizer, src, tgt, sampler, valid)
