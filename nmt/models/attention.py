"""Context providers: where each decoder step's context vector comes from.

Every provider turns the encoder states into an `EncoderOutput` once per batch (the attention keys,
or the fixed vector), then hands the decoder one context per step: attention by an additive, dot,
scaled dot or general (Luong) score, or none, Cho et al.'s one fixed vector (each class gives its formula).
The query projection W (or W_q) is exposed as `query_weight` so that the decoder can fuse it with
its recurrent matmul: one matmul of s_{i-1} per step gives both.

For the analyses (`nmt attention-checks`, `nmt attention-scaling`), `analysed_attention` makes `attend`
replace the softmax weights (uniform, permuted or one-hot at the argmax) or record the scores, for the
duration of a `with` block; outside one, `attend` runs exactly as before.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Literal

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from nmt.models.encoder import EncoderOutput, EncoderStates
from nmt.registry import ATTENTIONS, resolve  # ATTENTIONS: model.attention's names, also read from here


class ContextProvider(nn.Module):
    """Interface of the decoder's context source (attention or fixed vector)."""

    context_size: int  # width of c_i
    init_size: int  # width of the vector s_0 is computed from
    query_size: int  # rows of `query_weight` (0: the raw state is the query, or there is none)
    has_attention: bool

    def prepare(self, states: EncoderStates) -> EncoderOutput:
        """Everything that does not depend on the decoder step, computed once per batch."""
        raise NotImplementedError

    def query_weight(self) -> Tensor | None:
        """query_size x n matrix applied to s_{i-1} (fused into the decoder's recurrent matmul)."""
        return None

    def attend(self, query: Tensor, enc: EncoderOutput) -> tuple[Tensor, Tensor]:
        """query: batch x q -> context batch x context_size, weights batch x src_len."""
        raise NotImplementedError


Perturbation = Literal["none", "uniform", "permute", "argmax"]
PERTURBATIONS: tuple[Perturbation, ...] = ("none", "uniform", "permute", "argmax")


def _unknown_perturbation(kind: object) -> ValueError:
    """The one error for a perturbation outside PERTURBATIONS (perturb_weights, analysed_attention)."""
    return ValueError(f"unknown attention perturbation {kind!r}: expected one of {', '.join(PERTURBATIONS)}")


def perturb_weights(
    weights: Tensor, mask: Tensor, kind: Perturbation, generator: torch.Generator | None = None
) -> Tensor:
    """Replace attention weights, keeping zero weight on padding and rows that sum to 1.

    weights: batch x src_len (the softmax), mask: batch x src_len (bool, True at real positions)
    -> batch x src_len. `uniform`: 1/len over the real positions; `permute`: the row's own weights moved
    by a random permutation of its real positions (one per row, drawn from `generator`); `argmax`: all
    mass on the row's largest weight; `none`: `weights` itself.
    """
    if kind == "none":
        return weights
    if kind == "uniform":
        real = mask.to(weights.dtype)
        return real / real.sum(dim=-1, keepdim=True).clamp_min(1.0)
    if kind == "argmax":
        best = weights.masked_fill(~mask, -1.0).argmax(dim=-1, keepdim=True)  # batch x 1
        return torch.zeros_like(weights).scatter_(1, best, 1.0)
    if kind == "permute":
        keys = torch.rand(weights.shape, generator=generator).to(weights.device)  # drawn on the CPU
        keys = keys.masked_fill(~mask, 2.0)  # padding sorts after every real position
        shuffled = keys.argsort(dim=-1)  # real positions in random order, then the padding
        # real positions in increasing order, then the padding (a stable sort of "is padding")
        slots = (~mask).to(torch.uint8).sort(dim=-1, stable=True).indices
        return torch.zeros_like(weights).scatter_(1, slots, weights.gather(1, shuffled))
    raise _unknown_perturbation(kind)


class Attention(ContextProvider):
    """Shared part of the attention types: keys once per batch, masked softmax, weighted sum."""

    has_attention = True

    def __init__(self, state_size: int, annotation_size: int, key_size: int, query_size: int) -> None:
        super().__init__()
        self.context_size = annotation_size
        self.init_size = state_size  # s_0 = tanh(W_s bwd_1), bwd_1 is n wide
        self.key_proj = nn.Linear(annotation_size, key_size, bias=False)
        self.query_size = query_size
        if query_size:
            self.query_proj = nn.Linear(state_size, query_size, bias=False)
        # the analysis settings: set only within `analysed_attention` (never in training)
        self.perturbation: Perturbation = "none"
        self.perturb_generator: torch.Generator | None = None
        self.recorded: list[tuple[Tensor, Tensor]] | None = None

    def query_weight(self) -> Tensor | None:
        return self.query_proj.weight if self.query_size else None

    def prepare(self, states: EncoderStates) -> EncoderOutput:
        """Precompute the keys (U h_j): batch x src_len x key_size."""
        assert states.bwd_first is not None, "attention reads a bidirectional encoder"
        keys = self.key_proj(states.annotations)
        return EncoderOutput(states.mask, states.lengths, states.bwd_first, annotations=states.annotations, keys=keys)

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        """query: batch x q, keys: batch x src_len x k -> unmasked scores batch x src_len: q . k here."""
        return torch.bmm(keys, query.unsqueeze(2).to(keys.dtype)).squeeze(2)

    def attend(self, query: Tensor, enc: EncoderOutput) -> tuple[Tensor, Tensor]:
        """Masked softmax over real source positions; padded positions get exactly zero weight."""
        assert enc.keys is not None and enc.annotations is not None
        scores = self.scores(query, enc.keys)  # batch x src_len
        if self.recorded is not None:
            if scores.requires_grad:  # under no_grad there is no gradient to keep
                scores.retain_grad()
            self.recorded.append((scores, enc.mask))
        # the most negative finite value, not -inf: exp() of it is still exactly 0 next to any real
        # score, and a row with no real position cannot turn into NaN
        scores = scores.masked_fill(~enc.mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1)
        if self.perturbation != "none":
            weights = perturb_weights(weights, enc.mask, self.perturbation, self.perturb_generator)
        context = torch.bmm(weights.unsqueeze(1).to(enc.annotations.dtype), enc.annotations).squeeze(1)
        return context, weights


class AdditiveAttention(Attention):
    """Bahdanau: e_ij = v^T tanh(W s_{i-1} + U h_j).

    With `recompute` set (training.recompute_attention), training keeps no tanh output per step
    (batch x src_len x att, the largest activation of the model) and recomputes it in the backward
    pass: the same operations on the same inputs, so the gradients are bitwise the same.
    """

    def __init__(self, state_size: int, annotation_size: int, attention_size: int) -> None:
        super().__init__(state_size, annotation_size, attention_size, attention_size)
        self.v = nn.Parameter(torch.empty(attention_size))
        nn.init.uniform_(self.v, -1.0 / math.sqrt(attention_size), 1.0 / math.sqrt(attention_size))
        self.recompute = False

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        if self.recompute and torch.is_grad_enabled():
            scores = checkpoint(self._scores, query, keys, use_reentrant=False)
            assert isinstance(scores, Tensor)
            return scores
        return self._scores(query, keys)

    def _scores(self, query: Tensor, keys: Tensor) -> Tensor:
        hidden = torch.tanh_(keys + query.unsqueeze(1))  # batch x src_len x att, in the sum's own memory
        return torch.matmul(hidden, self.v.to(hidden.dtype))


class DotAttention(Attention):
    """(W_q s) . (W_k h) over d = attention_size dims (Vaswani-style: both projected, since the annotations
    are 2n wide and the decoder state n wide), divided by sqrt(d) when `scaled`."""

    def __init__(self, state_size: int, annotation_size: int, attention_size: int, scaled: bool) -> None:
        super().__init__(state_size, annotation_size, attention_size, attention_size)
        self.scale = 1.0 / math.sqrt(attention_size) if scaled else 1.0

    def scores(self, query: Tensor, keys: Tensor) -> Tensor:
        raw = super().scores(query, keys)  # batch x src_len
        return raw * self.scale if self.scale != 1.0 else raw


class GeneralAttention(Attention):
    """Luong's general score s^T W h: W h_j is the precomputed key, the raw state the query."""

    def __init__(self, state_size: int, annotation_size: int) -> None:
        super().__init__(state_size, annotation_size, state_size, query_size=0)


class FixedContext(ContextProvider):
    """Cho et al.'s RNNencdec: one c per sentence, nothing else.

    `last_state` (the paper's form): c = tanh(V h_T), h_T the forward encoder's state after the last
    source token; c is n wide (annotation_size is n: the encoder is forward only).
    `both_ends`: c = tanh(V [fwd_T ; bwd_1]) from the bidirectional encoder, 2n wide; bwd_1 has just
    read the first source words, so the decoder gets the start of the sentence fresh (a stronger model).
    """

    has_attention = False

    def __init__(self, state_size: int, annotation_size: int, summary: str = "last_state") -> None:
        super().__init__()
        self.context_size = annotation_size  # c sits exactly where RNNsearch's c_i sits
        self.init_size = annotation_size  # s_0 = tanh(W_s c)
        self.query_size = 0
        self.both_ends = summary == "both_ends"
        self.summary = nn.Linear((2 if self.both_ends else 1) * state_size, annotation_size)  # V

    def prepare(self, states: EncoderStates) -> EncoderOutput:
        """c: batch x ctx. The annotations are dropped so that they cannot reach the decoder."""
        if self.both_ends:
            assert states.bwd_first is not None, "both_ends needs the bidirectional encoder"
            summary_input = torch.cat([states.fwd_last, states.bwd_first], dim=-1)
        else:
            summary_input = states.fwd_last
        context = torch.tanh(self.summary(summary_input))
        return EncoderOutput(mask=states.mask, lengths=states.lengths, init_input=context, context=context)

    def attend(self, query: Tensor, enc: EncoderOutput) -> tuple[Tensor, Tensor]:
        raise ValueError("the fixed-context model (attention: none) has no attention weights")


@contextlib.contextmanager
def analysed_attention(
    provider: ContextProvider, perturbation: Perturbation = "none", seed: int = 0, record: bool = False
) -> Iterator[list[tuple[Tensor, Tensor]]]:
    """Within the block, `provider.attend` perturbs its weights (`perturb_weights`; `permute` draws from
    a generator seeded with `seed`, on the CPU) and, with `record`, appends each step's scores
    (batch x src_len, gradient kept) and mask (batch x src_len) to the list it yields; the provider's own
    settings are restored after."""
    if not isinstance(provider, Attention):
        raise ValueError("the fixed-context model (attention: none) has no attention weights to perturb")
    if perturbation not in PERTURBATIONS:  # refused here, before any step, rather than in the first attend
        raise _unknown_perturbation(perturbation)
    saved = provider.perturbation, provider.perturb_generator, provider.recorded
    provider.perturbation = perturbation
    provider.perturb_generator = torch.Generator().manual_seed(seed) if perturbation == "permute" else None
    recorded: list[tuple[Tensor, Tensor]] = []
    provider.recorded = recorded if record else None
    try:
        yield recorded
    finally:
        provider.perturbation, provider.perturb_generator, provider.recorded = saved


# model.attention's builders, each named by its line of nmt/registry.py's ATTENTIONS (where the config checks
# model.attention): a new attention type is its class above, its builder here and that one line; the tests
# run every one of them. Each takes (state_size, annotation_size, attention_size, fixed_context).
def build_fixed_context(state: int, annotation: int, _: int, summary: str) -> ContextProvider:
    return FixedContext(state, annotation, summary)


def build_additive(state: int, annotation: int, size: int, _: str) -> ContextProvider:
    return AdditiveAttention(state, annotation, size)


def build_dot(state: int, annotation: int, size: int, _: str) -> ContextProvider:
    return DotAttention(state, annotation, size, scaled=False)


def build_scaled_dot(state: int, annotation: int, size: int, _: str) -> ContextProvider:
    return DotAttention(state, annotation, size, scaled=True)


def build_general(state: int, annotation: int, _: int, __: str) -> ContextProvider:
    return GeneralAttention(state, annotation)


def build_context_provider(
    attention: str,
    state_size: int,
    annotation_size: int,
    attention_size: int,
    fixed_context: str = "last_state",
) -> ContextProvider:
    """The provider for `model.attention` (a name of ATTENTIONS); `fixed_context` (last_state | both_ends) is
    the summary of attention none."""
    if attention not in ATTENTIONS:
        raise ValueError(f"unknown attention type {attention!r}: expected one of {', '.join(ATTENTIONS)}")
    build: Callable[[int, int, int, str], ContextProvider] = resolve(ATTENTIONS[attention])
    return build(state_size, annotation_size, attention_size, fixed_context)
