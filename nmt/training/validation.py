"""Validation: loss and perplexity by teacher forcing, and greedy-decoded sacrebleu BLEU (evaluation.tokenize
and evaluation.lowercase, as `nmt evaluate` scores: best.pt and early stopping choose by the reported metric)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from sacrebleu.metrics import BLEU

from nmt.config import Config
from nmt.config_sections import EvaluationConfig
from nmt.data.batching import Batch, TokenBatchSampler, make_batch
from nmt.data.subwords import Tokenizer
from nmt.decoding.search import greedy_search, max_output_lengths
from nmt.evaluation.metrics import sacrebleu_bleu
from nmt.models.interface import TranslationModel
from nmt.training.precision import autocast


@dataclass
class ValidSet:
    """The encoded validation sentences and their raw references (up to valid_max_sentences, spread over the
    split), and the BLEU that scores them."""

    src: list[list[int]]
    tgt: list[list[int]]
    references: list[str]
    bleu: BLEU


@dataclass
class ValidationResult:
    """Scores of one validation pass."""

    loss: float
    ppl: float
    bleu: float
    signature: str
    sentences: int

    def score(self, metric: str) -> float:
        """The early-stopping metric's value."""
        return self.bleu if metric == "bleu" else self.loss


def batch_loss_sum(model: torch.nn.Module, batch: Batch, label_smoothing: float = 0.0) -> torch.Tensor:
    """Teacher-forced summed cross-entropy of `batch` over its real target tokens -> scalar.

    The deep output, vocabulary projection and softmax run on those positions only (padding is
    never projected onto the vocabulary), a chunk of positions at a time (`linear_cross_entropy`).
    """
    return model(batch.src, batch.src_lengths, batch.tgt_in, target_positions=batch.target_positions,
                 targets=batch.targets, label_smoothing=label_smoothing)


def safe_exp(value: float) -> float:
    """exp that reports overflow as inf instead of raising."""
    try:
        return math.exp(value)
    except OverflowError:
        return math.inf


def build_valid_set(
    pairs: list[tuple[str, str]], tokenizer: Tokenizer, max_sentences: int, evaluation: EvaluationConfig
) -> ValidSet:
    """Encode at most `max_sentences` validation pairs (0 = all), spread through the split; BLEU with
    `evaluation`'s tokenize and lowercase (built now: a tokenizer that cannot run here is refused before training).

    Spread rather than the first N: a corpus in document order (the Bible: Genesis, Exodus, ...) would
    otherwise be validated on one book's style and vocabulary. From 2N pairs on, every (len // N)th pair
    (kept: the committed results were validated on it and reproduce bit for bit); below 2N, where that stride would be 1 and take
    the first N, pair i * len // N.
    """
    n = len(pairs)
    if 0 < max_sentences < n:
        stride = n // max_sentences
        rows = range(0, stride * max_sentences, stride) if stride >= 2 else (i * n // max_sentences for i in range(max_sentences))
        pairs = [pairs[row] for row in rows]
    return ValidSet([tokenizer.encode_src(s) for s, _ in pairs], [tokenizer.encode_tgt(t) for _, t in pairs],
                    [t for _, t in pairs], sacrebleu_bleu(evaluation.tokenize, evaluation.lowercase))


def validate(
    model: TranslationModel, valid: ValidSet, tokenizer: Tokenizer, config: Config, device: torch.device,
    amp_dtype: torch.dtype | None, stop: Callable[[], bool] = lambda: False,
    advance: Callable[[int], None] = lambda sentences: None,
) -> ValidationResult | None:
    """Teacher-forced loss/perplexity and greedy BLEU of `model` (the bare model, not a DDP wrapper),
    its forward passes under the training's autocast to `amp_dtype` (None: fp32; see precision.py). The batches are
    fixed, so the score is reproducible; under bf16 a Transformer's greedy output of a sentence may differ from
    `nmt translate`'s (fp32, any batch) where bf16's rounding flips a near tie.
    `stop` is asked before each batch: True ends the pass, which returns None (a part of the set is no
    score). `advance(n)` is told of each batch's n sentences once they are done (a progress bar)."""
    batches = TokenBatchSampler([len(s) for s in valid.src], [len(t) for t in valid.tgt], config.training.batch_tokens,
                                seed=0, shuffle=False).epoch(0)
    decoding = config.decoding
    hypotheses: dict[int, str] = {}
    loss_sum, tokens = 0.0, 0
    was_training = model.training
    model.eval()
    try:
        for indices in batches:
            if stop():
                return None
            batch = make_batch([valid.src[i] for i in indices], [valid.tgt[i] for i in indices], indices).to(device)
            with torch.no_grad(), autocast(amp_dtype):
                loss_sum += float(batch_loss_sum(model, batch))
            tokens += batch.n_tgt_tokens
            max_lengths = max_output_lengths(batch.src_lengths, decoding.max_length_ratio, decoding.max_length_offset)
            with autocast(amp_dtype):
                outputs = greedy_search(model, batch.src, batch.src_lengths, max_lengths, decoding.min_length)
            for index, ids in zip(indices, outputs, strict=True):
                hypotheses[index] = tokenizer.decode_tgt(ids)
            advance(len(indices))
    finally:
        model.train(was_training)
    ordered = [hypotheses[i] for i in range(len(valid.references))]
    bleu = valid.bleu.corpus_score(ordered, [valid.references])
    loss = loss_sum / max(tokens, 1)
    return ValidationResult(loss, safe_exp(loss), float(bleu.score), str(valid.bleu.get_signature()), len(ordered))

