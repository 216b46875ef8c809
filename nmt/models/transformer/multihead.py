"""Multi-head attention (Vaswani et al. 2017), the Transformer's one kind of attention:

    attention(Q, K, V) = softmax(Q Kᵀ / √d_k + bias) V   per head, d_k = size / heads

with, optionally, Shaw et al. 2018's relative-position keys as the bias: q_i · a_{clip(j - i, ±k)}. Without
weights to return (or a hook to feed) it runs torch's fused scaled_dot_product_attention; asked for them, or
hooked by an analysis (nmt/analysis/hooks.py through `softmax`, a `HeadSoftmax`), it writes the softmax out.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from nmt.models.interface import AttentionWeights

# On CUDA, the fused-attention kernels torch may pick, each with whether it is enabled now (by default, or by a
# caller's sdpa_kernel), all but cuDNN's: it builds a graph for every new shape (31 ms of host time a call on an
# H200, torch 2.11), length-bucketed batches keep bringing new shapes, and training ran 7x slower with it. Not
# on the CPU, which has no cuDNN kernel and where choosing costs as much as a decoding step's attention call.
FUSED_ATTENTION = {
    SDPBackend.FLASH_ATTENTION: torch.backends.cuda.flash_sdp_enabled,
    SDPBackend.EFFICIENT_ATTENTION: torch.backends.cuda.mem_efficient_sdp_enabled,
    SDPBackend.MATH: torch.backends.cuda.math_sdp_enabled,
}


class HeadSoftmax(AttentionWeights):
    """scores: batch x heads x t x s, mask: bool broadcastable to it (None: every position), dtype -> the
    weights, softmax in float32 at least over the positions the mask allows, in `dtype`."""

    def forward(self, scores: Tensor, mask: Tensor | None, dtype: torch.dtype) -> Tensor:
        if mask is not None:  # as masked_fill(~mask, -inf), in one kernel instead of three
            scores = torch.where(mask, scores, -math.inf)
        return torch.softmax(scores.to(torch.promote_types(scores.dtype, torch.float32)), dim=-1).to(dtype)


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention of several heads, with optional relative-position keys (Shaw et al.)."""

    def __init__(self, size: int, heads: int, relative_clip: int = 0, scaled: bool = True) -> None:
        super().__init__()
        self.heads, self.head_size = heads, size // heads
        self.query = nn.Linear(size, size)
        self.key_value = nn.Linear(size, 2 * size)
        self.out = nn.Linear(size, size)
        # a_{-k} .. a_{+k}: one vector per clipped distance j - i, shared by the heads (as Shaw et al.)
        self.relative = nn.Embedding(2 * relative_clip + 1, self.head_size) if relative_clip else None
        self.scaled = scaled  # divide the scores by √d_k (the explainer's point; model.scaled_attention)
        self.softmax = HeadSoftmax()  # the analyses' hook point (no parameters: checkpoints unchanged)

    def keys_values(self, states: Tensor) -> Tensor:
        """states: batch x len x size -> keys and values batch x 2 x heads x len x d_k."""
        batch, length, _ = states.shape
        return self.key_value(states).view(batch, length, 2, self.heads, self.head_size).permute(0, 2, 3, 1, 4)

    def _relative_bias(self, query: Tensor, keys: int, offset: int) -> Tensor:
        """q_i · a_{clip(j - i)}: query batch x heads x t x d_k (positions offset..offset+t-1) -> batch x heads x t x keys."""
        assert self.relative is not None
        clip = (self.relative.num_embeddings - 1) // 2
        positions = torch.arange(offset, offset + query.size(2), device=query.device)
        distance = torch.arange(keys, device=query.device).unsqueeze(0) - positions.unsqueeze(1)  # t x keys
        per_distance = query @ self.relative.weight.t()  # batch x heads x t x (2 clip + 1)
        index = (distance.clamp(-clip, clip) + clip).expand(*query.shape[:2], -1, -1)
        return per_distance.gather(-1, index)

    def forward(
        self, states: Tensor, keys_values: Tensor, mask: Tensor | None, offset: int = 0, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """states: batch x t x size (the queries, at positions offset..), keys_values: batch x 2 x heads x s x d_k,
        mask: bool, broadcastable to batch x heads x t x s, True where a query may look (None: everywhere)
        -> batch x t x size, and the weights batch x heads x t x s when asked."""
        batch, steps, _ = states.shape
        query = self.query(states).view(batch, steps, self.heads, self.head_size).transpose(1, 2)  # b x h x t x d_k
        keys, values = keys_values.unbind(1)  # each b x h x s x d_k
        scale = 1.0 / math.sqrt(self.head_size) if self.scaled else 1.0
        bias = None if self.relative is None else self._relative_bias(query, keys.size(2), offset) * scale
        weights = None
        if need_weights or self.softmax.observed:  # written out: the fused kernel returns no weights
            scores = (query @ keys.transpose(-1, -2)) * scale  # b x h x t x s
            scores = scores if bias is None else scores + bias
            weights = self.softmax(scores, mask, values.dtype)
            context = weights @ values
        else:
            if bias is not None:  # the relative term as an additive mask of the fused kernel
                mask = bias if mask is None else bias.masked_fill(~mask, -math.inf)
            kernels = contextlib.nullcontext()
            if query.is_cuda:
                kernels = sdpa_kernel([backend for backend, enabled in FUSED_ATTENTION.items() if enabled()])
            with kernels:
                context = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=scale)
        context = context.transpose(1, 2).reshape(batch, steps, -1)  # b x t x size: heads side by side
        return self.out(context), weights
