"""Encoder: packed bidirectional RNN whose annotations do not depend on padding."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from nmt.models.rnn.encoder import Encoder, EncoderOutput, gated_update
from nmt.special import PAD_ID
from tests.helpers import needs_cuda


def _padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three sentences of lengths 4, 7, 2, right-padded with PAD."""
    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([4, 7, 2])
    src = torch.randint(4, 30, (3, 7), generator=gen)
    for row, length in enumerate(lengths.tolist()):
        src[row, length:] = PAD_ID
    return src, lengths


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("layers", [1, 2])
def test_annotations_do_not_depend_on_padding(cell: str, layers: int) -> None:
    torch.manual_seed(0)
    encoder = Encoder(30, 8, 6, num_layers=layers, cell=cell).eval()
    src, lengths = _padded_batch()
    batch = encoder(src, lengths)
    for row, length in enumerate(lengths.tolist()):
        alone = encoder(src[row : row + 1, :length], lengths[row : row + 1])
        torch.testing.assert_close(batch.annotations[row, :length], alone.annotations[0], atol=1e-6, rtol=0)
        torch.testing.assert_close(batch.fwd_last[row], alone.fwd_last[0], atol=1e-6, rtol=0)
        torch.testing.assert_close(batch.bwd_first[row], alone.bwd_first[0], atol=1e-6, rtol=0)
        assert torch.all(batch.annotations[row, length:] == 0)


def test_final_states_are_the_annotation_halves_at_the_sentence_ends() -> None:
    torch.manual_seed(0)
    encoder = Encoder(30, 8, 6, num_layers=2).eval()
    src, lengths = _padded_batch()
    out = encoder(src, lengths)
    assert out.annotations.shape == (3, 7, 12)
    for row, length in enumerate(lengths.tolist()):
        torch.testing.assert_close(out.fwd_last[row], out.annotations[row, length - 1, :6])
        torch.testing.assert_close(out.bwd_first[row], out.annotations[row, 0, 6:])
    assert out.mask.tolist() == [[j < n for j in range(7)] for n in (4, 7, 2)]
    assert out.lengths.tolist() == [4, 7, 2]


def test_backward_direction_reads_the_sentence_right_to_left() -> None:
    torch.manual_seed(0)
    encoder = Encoder(30, 8, 6).eval()
    src = torch.tensor([[5, 6, 7, 8]])
    out = encoder(src, torch.tensor([4]))
    # the backward half at position 3 has seen only the last token; so has the forward half of [8] alone
    alone = encoder(torch.tensor([[8]]), torch.tensor([1]))
    torch.testing.assert_close(out.annotations[0, 3, 6:], alone.annotations[0, 0, 6:])
    assert not torch.allclose(out.annotations[0, 0, 6:], alone.annotations[0, 0, 6:])


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_layers_match_torch_bidirectional_rnn_on_unpadded_input(cell: str) -> None:
    torch.manual_seed(0)
    encoder = Encoder(30, 8, 6, num_layers=2, cell=cell).eval()
    reference = (nn.GRU if cell == "gru" else nn.LSTM)(8, 6, num_layers=2, bidirectional=True, batch_first=True)
    with torch.no_grad():
        for k, layer in enumerate(encoder.layers):
            for direction, suffix in enumerate(("", "_reverse")):
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    target = getattr(reference, f"{name}_l{k}{suffix}")
                    target.copy_(getattr(layer, name)[direction].reshape(target.shape))
    src = torch.randint(4, 30, (2, 5))
    out = encoder(src, torch.tensor([5, 5]))
    expected, final = reference(encoder.embedding(src))
    final_h = final[0] if cell == "lstm" else final
    torch.testing.assert_close(out.annotations, expected)
    torch.testing.assert_close(out.fwd_last, final_h[-2])
    torch.testing.assert_close(out.bwd_first, final_h[-1])


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_forward_only_encoder_matches_torch_rnn_and_ignores_padding(cell: str) -> None:
    """The paper's RNNencdec encoder: one forward RNN, h_T = its state after each sentence's last token."""
    torch.manual_seed(0)
    encoder = Encoder(30, 8, 6, cell=cell, bidirectional=False).eval()
    assert encoder.output_size == 6 and encoder.layers[0].weight_ih.shape[0] == 1
    reference = (nn.GRU if cell == "gru" else nn.LSTM)(8, 6, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            target = getattr(reference, f"{name}_l0")
            target.copy_(getattr(encoder.layers[0], name)[0].reshape(target.shape))
    src, lengths = _padded_batch()
    out = encoder(src, lengths)
    assert out.bwd_first is None and out.annotations.shape == (3, 7, 6)
    for row, length in enumerate(lengths.tolist()):
        expected, _ = reference(encoder.embedding(src[row : row + 1, :length]))
        torch.testing.assert_close(out.annotations[row, :length], expected[0], atol=1e-6, rtol=0)
        torch.testing.assert_close(out.fwd_last[row], expected[0, -1], atol=1e-6, rtol=0)
        assert torch.all(out.annotations[row, length:] == 0)


def test_bad_lengths_are_refused() -> None:
    encoder = Encoder(30, 8, 6)
    src, _ = _padded_batch()
    with pytest.raises(ValueError, match="src_lengths"):
        encoder(src, torch.tensor([4, 8, 2]))
    with pytest.raises(ValueError, match="src_lengths"):
        encoder(src, torch.tensor([4, 0, 2]))


def test_encoder_output_index_select_reorders_rows_and_keeps_missing_fields() -> None:
    mask = torch.tensor([[True, False], [True, True]])
    out = EncoderOutput(mask=mask, lengths=torch.tensor([1, 2]), init_input=torch.tensor([[1.0], [2.0]]),
                        context=torch.tensor([[10.0], [20.0]]))
    picked = out.index_select(torch.tensor([1, 1, 0]))
    assert picked.mask.tolist() == [[True, True], [True, True], [True, False]]
    assert picked.lengths.tolist() == [2, 2, 1]
    assert picked.context is not None and picked.context[:, 0].tolist() == [20.0, 20.0, 10.0]
    assert picked.annotations is None and picked.keys is None


def _outputs_and_grads(
    encoder: Encoder, src: torch.Tensor, lengths: torch.Tensor, weights: torch.Tensor
) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """Annotations and final states (on the CPU), and the parameters' gradients of a weighted sum of them."""
    encoder.zero_grad()
    states = encoder(src, lengths)
    finals = [states.fwd_last] + ([states.bwd_first] if states.bwd_first is not None else [])
    loss = (states.annotations * weights).sum() + sum(f.sum() for f in finals)
    loss.backward()
    grads = {name: p.grad.to("cpu", copy=True) for name, p in encoder.named_parameters()}  # .cuda() moves grads
    return [states.annotations.detach().cpu(), *(f.detach().cpu() for f in finals)], grads


def _assert_same_outputs_and_grads(a: tuple[list[torch.Tensor], dict], b: tuple[list[torch.Tensor], dict]) -> None:
    (outputs_a, grads_a), (outputs_b, grads_b) = a, b
    for x, y in zip(outputs_a, outputs_b, strict=True):
        torch.testing.assert_close(x, y, atol=1e-10, rtol=0)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=1e-10, rtol=0, msg=lambda m, n=name: f"{n}: {m}")


def _double_encoder(cell: str, bidirectional: bool) -> tuple[Encoder, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    encoder = Encoder(30, 8, 6, num_layers=2, cell=cell, bidirectional=bidirectional).double()
    src, lengths = _padded_batch()
    weights = torch.randn(3, 7, encoder.output_size, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return encoder, src, lengths, weights


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_fused_rnn_equals_the_step_loop(cell: str, bidirectional: bool) -> None:
    """The packed library RNN and the written-out step loop give the same annotations, final states
    and gradients on a padded batch (float64, so only summation order can differ)."""
    encoder, src, lengths, weights = _double_encoder(cell, bidirectional)
    encoder.fused = False
    stepped = _outputs_and_grads(encoder, src, lengths, weights)
    encoder.fused = True
    fused = _outputs_and_grads(encoder, src, lengths, weights)
    assert (len(fused[0]) == 3) == bidirectional
    _assert_same_outputs_and_grads(stepped, fused)
    annotations = fused[0][0]
    assert torch.all(annotations[0, 4:] == 0) and torch.all(annotations[2, 2:] == 0)


@needs_cuda
@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_on_cuda_the_default_cudnn_rnn_equals_the_cpu_step_loop(cell: str, bidirectional: bool) -> None:
    """On a GPU the encoder runs cuDNN's RNN by default (`fused` None); in float64 it gives the CPU step
    loop's annotations, final states and gradients."""
    encoder, src, lengths, weights = _double_encoder(cell, bidirectional)
    encoder.fused = False
    stepped = _outputs_and_grads(encoder, src, lengths, weights)
    encoder.fused = None
    on_gpu = _outputs_and_grads(encoder.cuda(), src.cuda(), lengths.cuda(), weights.cuda())
    _assert_same_outputs_and_grads(stepped, on_gpu)


def test_a_gru_update_gate_near_1_under_bf16_products_still_moves_an_fp32_state() -> None:
    """The gates are computed in the state's precision: with bf16 pre-activations (autocast's products)
    and an fp32 state, an update gate of sigmoid(7) = 0.99909 lets the state leak towards its candidate -1,
    as in fp32 throughout; in bf16 the gate rounds to 1 and the unit would never move."""
    gi = torch.tensor([[0.0, 7.0, -20.0]], dtype=torch.bfloat16)  # reset, update, candidate pre-activations
    gh = torch.zeros(1, 3, dtype=torch.bfloat16)
    h = torch.ones(1, 1)
    for _ in range(50):
        h, _ = gated_update(gi, gh, h, None)
    exact = torch.ones(1, 1, dtype=torch.float64)
    for _ in range(50):
        exact, _ = gated_update(gi.double(), gh.double(), exact, None)
    assert h.dtype == torch.float32
    assert h.item() == pytest.approx(exact.item(), abs=1e-3) and h.item() < 0.95
