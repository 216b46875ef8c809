"""Decoder: the appendix-A equations, the cell math, fused vs step-by-step paths."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from nmt.models.rnn.attention import ATTENTIONS, AdditiveAttention, FixedContext, build_context_provider
from nmt.models.rnn.decoder import Decoder, DecoderState, rnn_cell
from nmt.models.rnn.encoder import EncoderStates
from tests.helpers import needs_cuda

M, N, ATT, L, VOCAB = 6, 5, 7, 4, 11  # embedding, hidden, attention, maxout, vocabulary


def _states() -> EncoderStates:
    gen = torch.Generator().manual_seed(2)
    lengths = torch.tensor([3, 5])
    mask = torch.arange(5).unsqueeze(0) < lengths.unsqueeze(1)
    annotations = torch.randn(2, 5, 2 * N, generator=gen) * mask.unsqueeze(2)
    return EncoderStates(annotations, mask, lengths, torch.randn(2, N, generator=gen),
                         torch.randn(2, N, generator=gen))


def _decoder(kind: str = "additive", cell: str = "gru", maxout: int = L) -> Decoder:
    torch.manual_seed(0)
    return Decoder(VOCAB, M, N, build_context_provider(kind, N, 2 * N, ATT), cell=cell, maxout_size=maxout).eval()


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_rnn_cell_matches_torch_cells(cell: str) -> None:
    torch.manual_seed(0)
    reference = nn.GRUCell(4, N) if cell == "gru" else nn.LSTMCell(4, N)
    x, h = torch.randn(3, 4), torch.randn(3, N)
    gi = x @ reference.weight_ih.t() + reference.bias_ih
    gh = h @ reference.weight_hh.t() + reference.bias_hh
    if cell == "gru":
        torch.testing.assert_close(rnn_cell(gi, gh, DecoderState(h)).hidden, reference(x, h))
    else:
        c = torch.randn(3, N)
        new = rnn_cell(gi, gh, DecoderState(h, c))
        ref_h, ref_c = reference(x, (h, c))
        torch.testing.assert_close(new.hidden, ref_h)
        torch.testing.assert_close(new.cell, ref_c)


def test_first_step_follows_appendix_a_by_hand() -> None:
    decoder = _decoder()
    provider = decoder.provider
    assert isinstance(provider, AdditiveAttention)
    states = _states()
    enc = provider.prepare(states)
    y0 = torch.tensor([2, 7])
    log_probs, new_state, weights = decoder.decode_step(y0, decoder.init_state(enc), enc)
    for b, length in enumerate(states.lengths.tolist()):
        h = states.annotations[b, :length]
        s0 = torch.tanh(decoder.init_proj.weight @ states.bwd_first[b] + decoder.init_proj.bias)
        e = torch.stack([provider.v @ torch.tanh(provider.query_proj.weight @ s0 + provider.key_proj.weight @ hj)
                         for hj in h])
        alpha = torch.softmax(e, 0)
        c = alpha @ h
        ey = decoder.embedding.weight[y0[b]]
        t = decoder.readout_state(s0) + decoder.readout_embedding.weight @ ey + decoder.readout_context.weight @ c
        t = torch.maximum(t[0::2], t[1::2])  # maxout over adjacent pairs
        expected = torch.log_softmax(decoder.output(t), 0)
        torch.testing.assert_close(log_probs[b], expected)
        torch.testing.assert_close(weights[b, :length], alpha)
        s1 = nn.GRUCell(M + 2 * N, N)
        s1.load_state_dict({k.removesuffix("_l0"): v for k, v in decoder.rnn.state_dict().items()})
        torch.testing.assert_close(new_state.hidden[b], s1(torch.cat([ey, c])[None], s0[None])[0])


def test_the_fixed_vector_s_first_step_by_hand() -> None:
    """Cho et al.'s RNNencdec: c = tanh(V h_T) of the forward encoder, s_0 = tanh(W_s c), the deep output
    t = U_o s_0 + V_o E y_0 + C_o c (maxout), and s_1 = GRU([E y_0 ; c], s_0): c at every step, no attention."""
    decoder = _decoder("none")
    provider = decoder.provider
    assert isinstance(provider, FixedContext)
    states = _states()
    enc = decoder.precompute(provider.prepare(states))
    y0 = torch.tensor([2, 7])
    log_probs, new_state, weights = decoder.decode_step(y0, decoder.init_state(enc), enc)
    assert weights is None
    for b in range(2):
        c = torch.tanh(provider.summary.weight @ states.fwd_last[b] + provider.summary.bias)
        s0 = torch.tanh(decoder.init_proj.weight @ c + decoder.init_proj.bias)
        ey = decoder.embedding.weight[y0[b]]
        t = decoder.readout_state(s0) + decoder.readout_embedding.weight @ ey + decoder.readout_context.weight @ c
        t = torch.maximum(t[0::2], t[1::2])  # maxout over adjacent pairs
        torch.testing.assert_close(log_probs[b], torch.log_softmax(decoder.output(t), 0))
        s1 = nn.GRUCell(M + c.numel(), N)
        s1.load_state_dict({k.removesuffix("_l0"): v for k, v in decoder.rnn.state_dict().items()})
        torch.testing.assert_close(new_state.hidden[b], s1(torch.cat([ey, c])[None], s0[None])[0])


@pytest.mark.parametrize("kind", list(ATTENTIONS))
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_teacher_forcing_equals_step_by_step(kind: str, cell: str) -> None:
    decoder = _decoder(kind, cell)
    enc = decoder.precompute(decoder.provider.prepare(_states()))
    tgt = torch.tensor([[2, 5, 6, 7, 0], [2, 9, 4, 10, 8]])
    logits, attention = decoder(tgt, enc, return_attention=kind != "none")
    state = decoder.init_state(enc)
    for i in range(tgt.size(1)):
        log_probs, state, weights = decoder.decode_step(tgt[:, i], state, enc)
        torch.testing.assert_close(log_probs, torch.log_softmax(logits[:, i], -1), atol=1e-5, rtol=0)
        if kind == "none":
            assert weights is None and attention is None
        else:
            torch.testing.assert_close(weights, attention[:, i], atol=1e-6, rtol=0)


def test_single_step_target() -> None:
    for kind in ("none", "additive"):
        decoder = _decoder(kind)
        enc = decoder.precompute(decoder.provider.prepare(_states()))
        logits, _ = decoder(torch.tensor([[2], [2]]), enc)
        log_probs, _, _ = decoder.decode_step(torch.tensor([2, 2]), decoder.init_state(enc), enc)
        torch.testing.assert_close(log_probs, torch.log_softmax(logits[:, 0], -1))


def test_tanh_readout_without_maxout() -> None:
    decoder = _decoder(maxout=0)
    assert decoder.output.in_features == M
    enc = decoder.precompute(decoder.provider.prepare(_states()))
    state = decoder.init_state(enc)
    context, _ = decoder.provider.attend(state.hidden @ decoder.provider.query_weight().t(), enc)
    ey = decoder.embedding(torch.tensor([2, 2]))
    pre = decoder.readout_state(state.hidden) + decoder.readout_embedding(ey) + decoder.readout_context(context)
    log_probs, _, _ = decoder.decode_step(torch.tensor([2, 2]), state, enc)
    torch.testing.assert_close(log_probs, torch.log_softmax(decoder.output(torch.tanh(pre)), -1))


def test_fixed_context_decoder_has_no_attention_and_starts_from_c() -> None:
    decoder = _decoder("none", "lstm")
    assert isinstance(decoder.provider, FixedContext)
    enc = decoder.precompute(decoder.provider.prepare(_states()))
    state = decoder.init_state(enc)
    torch.testing.assert_close(state.hidden, torch.tanh(decoder.init_proj(enc.context)))
    assert torch.all(state.cell == 0)
    with pytest.raises(ValueError, match="no attention"):
        decoder(torch.tensor([[2, 5]]).expand(2, 2), enc, return_attention=True)


def _fixed_logits_and_grads(decoder: Decoder, device: str) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The float64 fixed-vector decoder's teacher-forced logits on `device`, and the gradients (on the CPU)
    of a weighted sum of them with respect to c's source h_T and to the parameters."""
    decoder.zero_grad()
    tgt = torch.tensor([[2, 5, 6, 7, 0], [2, 9, 4, 10, 8]], device=device)
    weights = torch.randn(2, 5, VOCAB, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    states = _states()
    fwd_last = states.fwd_last.double().to(device).requires_grad_()
    states.fwd_last, states.annotations = fwd_last, states.annotations.double().to(device)
    states.mask, states.lengths, states.bwd_first = (t.to(device) for t in (states.mask, states.lengths, states.bwd_first))
    logits, _ = decoder(tgt, decoder.precompute(decoder.provider.prepare(states)))
    (logits * weights.to(device)).sum().backward()
    grads = {name: p.grad.to("cpu", copy=True) for name, p in decoder.named_parameters() if p.grad is not None}
    assert fwd_last.grad is not None
    return logits.detach().cpu(), fwd_last.grad.cpu(), grads


def _assert_same_logits_and_grads(a: tuple, b: tuple) -> None:
    (logits_a, input_grad_a, grads_a), (logits_b, input_grad_b, grads_b) = a, b
    torch.testing.assert_close(logits_a, logits_b, atol=1e-10, rtol=0)
    torch.testing.assert_close(input_grad_a, input_grad_b, atol=1e-10, rtol=0)
    assert grads_a.keys() == grads_b.keys() and "rnn.weight_ih_l0" in grads_a
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=1e-10, rtol=0, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_fixed_context_precomputed_steps_equal_the_fused_rnn(cell: str) -> None:
    """W_ctx c and C_o c computed once per sentence give the logits and gradients of the fused nn.GRU
    over [E y ; c], which recomputes c's products at every step."""
    decoder = _decoder("none", cell).double()
    decoder.fused_fixed_steps = False
    stepped = _fixed_logits_and_grads(decoder, "cpu")
    decoder.fused_fixed_steps = True
    _assert_same_logits_and_grads(stepped, _fixed_logits_and_grads(decoder, "cpu"))


@needs_cuda
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_on_cuda_the_fixed_vector_decoder_runs_cudnn_and_equals_the_cpu_steps(cell: str) -> None:
    """On a GPU the fixed-vector decoder's default (`fused_fixed_steps` None) is one cuDNN call over
    [E y ; c]; in float64 it gives the CPU's precomputed steps' logits and gradients. In training mode, as
    cuDNN's RNN has no backward in eval mode (the decoder has no dropout here)."""
    decoder = _decoder("none", cell).double().train()
    decoder.fused_fixed_steps = False
    stepped = _fixed_logits_and_grads(decoder, "cpu")
    decoder.fused_fixed_steps = None
    _assert_same_logits_and_grads(stepped, _fixed_logits_and_grads(decoder.cuda(), "cuda"))


def test_tied_output_shares_the_embedding_matrix() -> None:
    decoder = Decoder(VOCAB, M, N, AdditiveAttention(N, 2 * N, ATT), maxout_size=M, tie_embeddings=True)
    assert decoder.output.weight is decoder.embedding.weight


def test_decoder_state_index_select() -> None:
    state = DecoderState(torch.tensor([[1.0], [2.0]]), torch.tensor([[3.0], [4.0]]))
    picked = state.index_select(torch.tensor([1, 0, 1]))
    assert picked.hidden[:, 0].tolist() == [2.0, 1.0, 2.0]
    assert picked.cell is not None and picked.cell[:, 0].tolist() == [4.0, 3.0, 4.0]
    assert DecoderState(torch.zeros(2, 1)).index_select(torch.tensor([0])).cell is None


def test_decode_step_gradients_match_finite_differences() -> None:
    decoder = Decoder(7, 3, 2, AdditiveAttention(2, 4, 3), maxout_size=2).double()
    mask = torch.tensor([[True, True, False], [True, True, True]])
    tokens = torch.tensor([2, 5])

    def step(hidden: torch.Tensor, annotations: torch.Tensor) -> torch.Tensor:
        states = EncoderStates(annotations, mask, mask.sum(1), hidden, hidden)
        log_probs, new_state, _ = decoder.decode_step(tokens, DecoderState(hidden), decoder.provider.prepare(states))
        return torch.cat([log_probs, new_state.hidden], dim=1)

    torch.manual_seed(0)
    hidden = torch.randn(2, 2, dtype=torch.float64, requires_grad=True)
    annotations = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(step, (hidden, annotations))
