"""`nmt attention-scaling`: why scaled dot-product attention divides by sqrt(d), measured on trained runs.

The explainer's mechanism: with unit-variance query and key components a dot product over d dimensions
has variance d; large scores push the softmax towards one-hot weights, where its slope, and so the
gradient that reaches the scores, goes flat. Dividing by sqrt(d) keeps the variance near one.

`attention_statistics` teacher-forces pairs through a model (nmt/compare/attention_scaling.py: each run
at initialisation, its config and seed before any step, and at its checkpoint, on a fixed sample of the
test split, the learning curve's rule) and averages ScoreStats' statistics of the scores, weights and
score gradients over all decoder steps. The report is nmt/analysis/attention_report.py's.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from nmt.analysis.attention_stats import row_entropy, uniform_entropy
from nmt.analysis.hooks import ScoreSteps, attention_score_steps
from nmt.data.batching import make_batch
from nmt.models.interface import MAIN_VIEW, TranslationModel
from nmt.special import PAD_ID

SATURATED = 0.9  # a step whose largest weight is above this counts as saturated
SENTENCES_PER_BATCH = 32


@dataclass
class ScoreStats:
    """Means over decoder steps (each over the real source positions of its sentence)."""

    steps: int = 0
    score_variance: float = 0.0  # variance of the pre-softmax scores across source positions
    max_weight: float = 0.0  # largest attention weight
    saturated_share: float = 0.0  # share of steps whose largest weight exceeds SATURATED
    entropy_ratio: float = 0.0  # entropy / log(source length): 0 one-hot, 1 uniform
    score_grad_norm: float = 0.0  # || d(summed cross-entropy) / d(the softmax's input: q.k / sqrt(d) when scaled) ||_2
    loss_per_token: float = 0.0  # teacher-forced cross-entropy, nats per target token


def step_statistics(scores: Tensor, grads: Tensor, mask: Tensor, alive: Tensor) -> dict[str, Tensor]:
    """Per-step statistics of one decoder step. scores, grads, mask: batch x src_len; alive: batch (bool,
    the rows whose target is still running) -> name: values of the alive rows (1-D)."""
    scores, grads, mask = scores[alive].double(), grads[alive].double(), mask[alive]
    count = mask.sum(dim=-1).double()  # real source positions per row
    real = mask.double()
    mean = (scores * real).sum(dim=-1) / count
    variance = (((scores - mean.unsqueeze(-1)) ** 2) * real).sum(dim=-1) / count
    weights = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1)
    uniform = torch.tensor([uniform_entropy(int(n)) for n in count.tolist()], dtype=torch.float64)
    largest = weights.max(dim=-1).values
    return {
        "score_variance": variance,
        "max_weight": largest,
        "saturated_share": (largest > SATURATED).double(),
        "entropy_ratio": row_entropy(weights, mask) / uniform,  # `nmt experiment`'s rule (attention_stats)
        "score_grad_norm": (grads * real).norm(dim=-1),
    }


def attention_statistics(model: TranslationModel, pairs: Sequence[tuple[list[int], list[int]]]) -> dict[str, ScoreStats]:
    """ScoreStats of `model` (left in eval mode) teacher-forced on `pairs` of (source ids, target ids),
    SENTENCES_PER_BATCH at a time: MAIN ("attention") of an RNN's one attention; for a Transformer, of each
    decoder layer's cross-attention head ("layer 2 head 3"), each layer's heads together ("layer 2") and
    all of them (MAIN)."""
    model.eval()
    sums: defaultdict[str, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))  # group -> statistic -> its sum over the group's steps
    steps: Counter[str] = Counter()
    # each group's enclosing group (the next in a step's tuple, e.g. a head's layer), for the report's order
    enclosing: dict[str, str | None] = {}
    loss_sum, tokens = 0.0, 0
    for start in range(0, len(pairs), SENTENCES_PER_BATCH):
        chunk = pairs[start : start + SENTENCES_PER_BATCH]
        batch = make_batch([s for s, _ in chunk], [t for _, t in chunk], list(range(len(chunk))))
        real = batch.tgt_out != PAD_ID  # batch x tgt_len
        loss, recorded = _backpropagated(model, batch, real)
        for groups, (scores, grads, mask, alive) in recorded:
            for name, values in step_statistics(scores, grads, mask, alive).items():
                for group in groups:
                    sums[group][name] += float(values.sum())
            for group, outer in zip(groups, (*groups[1:], None), strict=True):
                steps[group] += int(alive.sum())
                enclosing.setdefault(group, outer)
        loss_sum += float(loss)
        tokens += batch.n_tgt_tokens
    return {
        group: ScoreStats(steps=steps[group], loss_per_token=loss_sum / max(tokens, 1),
                          **{name: total / max(steps[group], 1) for name, total in sums[group].items()})
        for group in _enclosed_first(enclosing)
    }


def _enclosed_first(enclosing: dict[str, str | None]) -> list[str]:
    """The groups in the order first measured, except that each comes after the groups it encloses (a
    layer after its heads, as the mean column closes attention-checks' per-head rows): first-measured
    order alone would put a layer between its first and second head."""
    order: list[str] = []

    def place(group: str) -> None:
        for inner in (g for g, outer in enclosing.items() if outer == group):
            place(inner)
        order.append(group)

    for group, outer in enclosing.items():
        if outer is None:
            place(group)
    return order


MAIN = MAIN_VIEW  # the group of every attention step of a run


def _backpropagated(model: TranslationModel, batch: Any, real: Tensor) -> tuple[float, ScoreSteps]:
    """Teacher-force one batch and backpropagate its summed loss -> the loss, and the attention's decoder
    steps: (the groups they count in, (scores, their gradients, source mask, alive rows)), each rows x
    src_len (alive: rows, the steps whose target is real; `attention_score_steps`, nmt/analysis/hooks.py)."""
    def backward() -> float:
        loss = model(batch.src, batch.src_lengths, batch.tgt_in, target_positions=batch.target_positions,
                     targets=batch.targets)
        loss.backward()
        model.zero_grad(set_to_none=True)
        return float(loss.detach())

    return attention_score_steps(model, backward, batch.src, real)
