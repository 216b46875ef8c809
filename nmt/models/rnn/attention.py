"""Context providers: where each decoder step's context vector comes from.

Every provider turns the encoder states into an `EncoderOutput` once per batch (the attention keys,
or the fixed vector), then hands the decoder one context per step: attention by an additive, dot,
scaled dot or general (Luong) score, or none, Cho et al.'s one fixed vector (each class gives its formula).
The query projection W (or W_q) is exposed as `query_weight` so that the decoder can fuse it with
its recurrent matmul: one matmul of s_{i-1} per step gives both.

An attention's weights come from its `softmax` (a `MaskedSoftmax`), the hook point of the analyses
(`nmt attention-checks`, `nmt attention-scaling`): nmt/analysis/hooks.py records its scores or replaces
its weights with torch forward hooks; `attend` itself knows nothing of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from nmt.models.interface import AttentionWeights
from nmt.models.rnn.encoder import EncoderOutput, EncoderStates
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


class MaskedSoftmax(AttentionWeights):
    """scores, mask: batch x src_len (mask bool, True at real positions) -> the softmax over the real
    positions; padded positions get exactly zero weight."""

    def forward(self, scores: Tensor, mask: Tensor) -> Tensor:
        # the most negative finite value, not -inf: exp() of it is still exactly 0 next to any real
        # score, and a row with no real position cannot turn into NaN. `where` rather than
        # masked_fill(~mask): the same values in one kernel instead of three (not, copy, fill)
        return torch.softmax(torch.where(mask, scores, torch.finfo(scores.dtype).min), dim=-1)


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
        self.softmax = MaskedSoftmax()  # the analyses' hook point (no parameters: checkpoints unchanged)

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
        weights = self.softmax(self.scores(query, enc.keys), enc.mask)  # batch x src_len
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
