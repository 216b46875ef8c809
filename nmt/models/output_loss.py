"""The output layer and the training loss as one operation that never holds the whole batch's logits.

Training needs, per real target position, logits = W_o t + b over the vocabulary, their log-softmax
and the cross-entropy's gradient: three n x vocab tensors alive at once in the usual autograd graph
(at 3,000 target tokens and 8k words, ~290 MB). `linear_cross_entropy` goes through the positions a
chunk at a time and computes each chunk's gradient with respect to t, W_o and b during the forward
pass (softmax minus the target distribution, the same products autograd would run), so only one
chunk's logits exist at any moment and backward only scales the stored gradients. Same FLOPs, same
values as `F.cross_entropy(F.linear(t, W_o, b), y, label_smoothing=e, reduction="sum")`
(tests/test_output_loss.py); only the summation order of the weight gradient differs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

DEFAULT_CHUNK_ROWS = 1024  # 1024 x 8k fp32 logits = 32 MB per chunk


class _LinearCrossEntropy(torch.autograd.Function):
    """Forward: the loss and its gradients (hidden, weight, bias); backward: those times the incoming one."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, label_smoothing: float,
        chunk_rows: int,
    ) -> Tensor:
        # autocast off: the dtypes below are chosen explicitly (softmax and sums in fp32 at least:
        # half-precision sums over thousands of positions would drift)
        with torch.autocast(hidden.device.type, enabled=False):
            exact = torch.promote_types(hidden.dtype, torch.float32)
            # fp16 products would round the gradients before the loss scaler's factor reaches them
            # (autograd scales first): fp16 runs this layer in fp32; bf16 has fp32's range
            compute = exact if hidden.dtype == torch.float16 else hidden.dtype
            h_all, w, b = hidden.to(compute), weight.to(compute), bias.to(compute)
            vocab = w.size(0)
            loss = hidden.new_zeros((), dtype=exact)
            grad_hidden = torch.empty_like(h_all)
            grad_weight = torch.zeros_like(weight, dtype=exact)
            grad_bias = torch.zeros_like(bias, dtype=exact)
            for start in range(0, hidden.size(0), chunk_rows):
                h = h_all[start : start + chunk_rows]  # rows x d
                y = targets[start : start + chunk_rows].unsqueeze(1)  # rows x 1
                log_probs = F.log_softmax(torch.addmm(b, h, w.t()).to(exact), dim=-1)  # rows x vocab
                nll = -log_probs.gather(1, y)
                if label_smoothing > 0:
                    mean_nll = -log_probs.mean(dim=-1, keepdim=True)
                    loss += ((1 - label_smoothing) * nll + label_smoothing * mean_nll).sum()
                else:
                    loss += nll.sum()
                # d loss / d logits = softmax - ((1 - e) one_hot(y) + e / vocab), in place of log_probs
                grad_logits = log_probs.exp_()
                grad_logits.scatter_add_(1, y, grad_logits.new_full(y.shape, label_smoothing - 1))
                if label_smoothing > 0:
                    grad_logits -= label_smoothing / vocab
                g = grad_logits.to(compute)
                grad_hidden[start : start + chunk_rows] = g @ w
                grad_weight += (g.t() @ h).to(exact)
                grad_bias += g.sum(0).to(exact)
        ctx.dtypes = (hidden.dtype, weight.dtype, bias.dtype)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        # scaled in (at least) fp32, then cast to the inputs' dtypes: a loss scaler's factor may not fit fp16
        grads = [(g.to(grad_loss.dtype) * grad_loss).to(dtype) for g, dtype in zip(ctx.saved_tensors, ctx.dtypes, strict=True)]
        return (*grads, None, None, None)


def linear_cross_entropy(
    hidden: Tensor, weight: Tensor, bias: Tensor, targets: Tensor, label_smoothing: float = 0.0,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> Tensor:
    """Summed cross-entropy of logits = hidden @ weight^T + bias against `targets`, in fp32 (or fp64).

    hidden: n x d, weight: vocab x d, bias: vocab, targets: n (long, no padding) -> scalar.
    Without gradients (validation) it is plain chunked scoring; with them, see the module docstring.
    """
    if not (torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)):
        exact = torch.promote_types(hidden.dtype, torch.float32)
        total = hidden.new_zeros((), dtype=exact)
        for start in range(0, hidden.size(0), chunk_rows):
            logits = F.linear(hidden[start : start + chunk_rows], weight, bias).to(exact)
            total += F.cross_entropy(
                logits, targets[start : start + chunk_rows], label_smoothing=label_smoothing, reduction="sum"
            )
        return total
    return _LinearCrossEntropy.apply(hidden, weight, bias, targets, label_smoothing, chunk_rows)
