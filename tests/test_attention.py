"""Context providers: masked softmax, the four scores, the fixed vector, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from nmt.models.rnn.attention import (
    ATTENTIONS,
    AdditiveAttention,
    Attention,
    DotAttention,
    FixedContext,
    GeneralAttention,
    build_context_provider,
)
from nmt.models.rnn.encoder import EncoderStates

N, ANN, ATT = 5, 10, 7  # decoder state, annotation (2n), attention sizes
ATTENTION_TYPES = [name for name in ATTENTIONS if name != "none"]


def _states(dtype: torch.dtype = torch.float32) -> EncoderStates:
    """Batch of 3 with lengths 4, 6, 1; padded annotations hold large junk that must be ignored."""
    gen = torch.Generator().manual_seed(1)
    lengths = torch.tensor([4, 6, 1])
    mask = torch.arange(6).unsqueeze(0) < lengths.unsqueeze(1)
    annotations = torch.randn(3, 6, ANN, generator=gen, dtype=dtype)
    annotations = torch.where(mask.unsqueeze(2), annotations, torch.full_like(annotations, 50.0))
    return EncoderStates(annotations, mask, lengths, torch.randn(3, N, generator=gen, dtype=dtype),
                         torch.randn(3, N, generator=gen, dtype=dtype))


def _query(provider: Attention, state: torch.Tensor) -> torch.Tensor:
    weight = provider.query_weight()
    return state if weight is None else state @ weight.t()


@pytest.mark.parametrize("kind", ATTENTION_TYPES)
def test_weights_are_a_distribution_over_real_positions_only(kind: str) -> None:
    torch.manual_seed(0)
    provider = build_context_provider(kind, N, ANN, ATT)
    assert isinstance(provider, Attention)
    with torch.no_grad():  # large weights: scores far apart, as after training
        for p in provider.parameters():
            p.mul_(20)
    states = _states()
    enc = provider.prepare(states)
    context, weights = provider.attend(_query(provider, 3 * torch.randn(3, N)), enc)
    assert torch.all(weights >= 0)
    torch.testing.assert_close(weights.sum(1), torch.ones(3))
    assert torch.all(weights[~states.mask] == 0)
    assert weights[2, 0] == 1.0  # a one-token sentence puts all weight on it
    torch.testing.assert_close(context, torch.einsum("bs,bsd->bd", weights, states.annotations * states.mask[..., None]))


def test_additive_scores_follow_the_paper_formula() -> None:
    torch.manual_seed(0)
    provider = AdditiveAttention(N, ANN, ATT)
    states = _states()
    enc = provider.prepare(states)
    s = torch.randn(3, N)
    scores = provider.scores(_query(provider, s), enc.keys)
    w, u, v = provider.query_proj.weight, provider.key_proj.weight, provider.v
    for b in range(3):
        for j in range(6):
            expected = v @ torch.tanh(w @ s[b] + u @ states.annotations[b, j])
            torch.testing.assert_close(scores[b, j], expected)


def test_scaled_dot_is_dot_divided_by_sqrt_d() -> None:
    torch.manual_seed(0)
    dot = DotAttention(N, ANN, ATT, scaled=False)
    scaled = DotAttention(N, ANN, ATT, scaled=True)
    scaled.load_state_dict(dot.state_dict())
    states = _states()
    s = torch.randn(3, N)
    dot_scores = dot.scores(_query(dot, s), dot.prepare(states).keys)
    torch.testing.assert_close(scaled.scores(_query(scaled, s), scaled.prepare(states).keys),
                               dot_scores / math.sqrt(ATT))
    # and the dot score is (W_q s) . (W_k h)
    expected = (s @ dot.query_proj.weight.t()) @ (states.annotations[1] @ dot.key_proj.weight.t()).t()
    torch.testing.assert_close(dot_scores[1], expected[1])


def test_general_score_is_the_bilinear_form_on_the_raw_state() -> None:
    torch.manual_seed(0)
    provider = GeneralAttention(N, ANN)
    assert provider.query_weight() is None and provider.query_size == 0
    states = _states()
    s = torch.randn(3, N)
    scores = provider.scores(s, provider.prepare(states).keys)
    expected = torch.einsum("bn,nk,bsk->bs", s, provider.key_proj.weight, states.annotations)
    torch.testing.assert_close(scores, expected)


def test_fixed_context_is_tanh_of_the_last_forward_state_and_hides_the_annotations() -> None:
    torch.manual_seed(0)
    provider = FixedContext(N, N)  # the paper's form: c = tanh(V h_T), n wide
    states = _states()
    states.bwd_first = None  # a forward-only encoder has no backward state
    enc = provider.prepare(states)
    expected = torch.tanh(states.fwd_last @ provider.summary.weight.t() + provider.summary.bias)
    torch.testing.assert_close(enc.context, expected)
    assert provider.summary.in_features == N
    assert enc.context.shape == (3, N) and enc.init_input is enc.context
    assert enc.annotations is None and enc.keys is None
    with pytest.raises(ValueError, match="no attention"):
        provider.attend(torch.zeros(3, N), enc)


def test_both_ends_fixed_context_reads_the_last_forward_and_first_backward_states() -> None:
    torch.manual_seed(0)
    provider = FixedContext(N, ANN, "both_ends")
    states = _states()
    enc = provider.prepare(states)
    expected = torch.tanh(provider.summary(torch.cat([states.fwd_last, states.bwd_first], 1)))
    torch.testing.assert_close(enc.context, expected)
    assert enc.context.shape == (3, ANN) and enc.annotations is None


def test_unknown_attention_type_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown attention"):
        build_context_provider("multihead", N, ANN, ATT)


@pytest.mark.parametrize("kind", ATTENTION_TYPES)
def test_attention_gradients_match_finite_differences(kind: str) -> None:
    torch.manual_seed(0)
    provider = build_context_provider(kind, 3, 4, 3).double()
    assert isinstance(provider, Attention)
    base = _states()
    mask = base.mask[:2, :4]
    lengths = mask.sum(1)

    def step(state: torch.Tensor, annotations: torch.Tensor) -> torch.Tensor:
        states = EncoderStates(annotations, mask, lengths, state, state)
        context, weights = provider.attend(_query(provider, state), provider.prepare(states))
        return torch.cat([context, weights], dim=1)

    state = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    annotations = torch.randn(2, 4, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(step, (state, annotations))
