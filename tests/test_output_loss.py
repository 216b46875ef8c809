"""linear_cross_entropy: the output layer and loss without the whole batch's logits."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nmt.models.output_loss import linear_cross_entropy

N, D, VOCAB = 37, 6, 11


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(N, D, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(VOCAB, D, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(VOCAB, generator=gen, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, VOCAB, (N,), generator=gen)
    return hidden, weight, bias, targets


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("chunk_rows", [5, 1024])
def test_equals_cross_entropy_of_the_linear_layer_in_value_and_gradients(
    label_smoothing: float, chunk_rows: int
) -> None:
    hidden, weight, bias, targets = _inputs()
    scale = 0.7  # backward must scale the stored gradients by the incoming one
    expected = F.cross_entropy(F.linear(hidden, weight, bias), targets, label_smoothing=label_smoothing, reduction="sum")
    (scale * expected).backward()
    reference = [t.grad.clone() for t in (hidden, weight, bias)]
    for t in (hidden, weight, bias):
        t.grad = None
    loss = linear_cross_entropy(hidden, weight, bias, targets, label_smoothing, chunk_rows)
    (scale * loss).backward()
    torch.testing.assert_close(loss, expected.detach(), atol=1e-10, rtol=0)
    for got, want in zip((hidden.grad, weight.grad, bias.grad), reference, strict=True):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=0)


def test_half_precision_products_keep_an_fp32_loss() -> None:
    hidden, weight, bias, targets = _inputs()
    loss = linear_cross_entropy(hidden.detach().bfloat16().requires_grad_(), weight.float(), bias.float(), targets)
    expected = F.cross_entropy(F.linear(hidden, weight, bias), targets, reduction="sum")
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss.double(), expected.detach(), atol=0.05 * N, rtol=0)


def test_without_gradients_it_scores_in_chunks() -> None:
    hidden, weight, bias, targets = _inputs()
    with torch.no_grad():
        loss = linear_cross_entropy(hidden, weight, bias, targets, 0.0, chunk_rows=4)
        expected = F.cross_entropy(F.linear(hidden, weight, bias), targets, reduction="sum")
    torch.testing.assert_close(loss, expected, atol=1e-10, rtol=0)


def test_fp16_gradients_are_scaled_before_they_are_rounded() -> None:
    """A loss scaler multiplies the loss by a large factor so that small fp16 gradients survive: the
    stored gradients must be scaled before they are rounded to fp16, as autograd does."""
    hidden, weight, _, _ = _inputs()
    weight = (20 * weight).detach().requires_grad_()  # confident predictions: tiny gradients
    bias = torch.zeros(VOCAB, dtype=torch.float64, requires_grad=True)
    targets = (hidden @ weight.t()).argmax(dim=1).detach()
    half = hidden.detach().half().requires_grad_()
    factor = 2.0**11  # the largest gradient (about 17) times it still fits fp16
    (factor * linear_cross_entropy(half, weight.float(), bias.float(), targets)).backward()
    # the reference: autograd in fp32 (the precision of the softmax here), unscaled
    as_fp32 = half.detach().float().requires_grad_()
    reference = torch.autograd.grad(
        F.cross_entropy(F.linear(as_fp32, weight.float(), bias.float()), targets, reduction="sum"), as_fp32
    )[0].double()
    assert reference.abs().median() < 1e-6  # most far below fp16's normal range (6e-5) unscaled
    assert half.grad is not None and half.grad.dtype == torch.float16
    torch.testing.assert_close(half.grad.double() / factor, reference, atol=1e-10, rtol=5e-3)
