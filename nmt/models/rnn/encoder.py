"""Source embeddings + RNN -> one annotation per source token.

Bidirectional (RNNsearch, and RNNencdec's `both_ends` summary): h_j = [fwd_j ; bwd_j], 2n wide.
Forward only (the paper's RNNencdec): h_j = fwd_j, n wide; its last state h_T becomes the fixed c.
Each layer runs either as a Python loop over time steps with the cell math written out (`stepped`) or
as one call of the library's fused RNN over a packed sequence (`fused`: cuDNN on CUDA); both are
padding-exact and give the same annotations and gradients (tests/test_encoder.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import torch
import torch.nn.functional as F
from torch import _VF, Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from nmt.special import PAD_ID
from nmt.transfer import to_device


@dataclass
class EncoderOutput:
    """What the decoder may read of a source batch; every tensor has the batch as its first dim."""

    mask: Tensor  # batch x src_len, True at real tokens
    lengths: Tensor  # batch (long, on the model's device)
    init_input: Tensor  # batch x d: what s_0 is computed from (bwd_1, or the fixed context c)
    annotations: Tensor | None = None  # batch x src_len x 2n; None for RNNencdec: only c reaches its decoder
    keys: Tensor | None = None  # batch x src_len x k: the attention keys (U h_j), computed once
    context: Tensor | None = None  # batch x ctx: RNNencdec's fixed context vector c
    # RNNencdec only: c's products with the decoder's input-gate and readout weights (and their
    # biases), the same at every target step, so computed once per sentence (Decoder.precompute)
    context_gates: Tensor | None = None  # batch x gates
    context_readout: Tensor | None = None  # batch x readout

    def index_select(self, index: Tensor) -> EncoderOutput:
        """Rows `index` of every tensor (search: each sentence copied to its beams, finished sentences dropped)."""
        tensors = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(self, **{name: t.index_select(0, index) for name, t in tensors.items() if t is not None})


@dataclass
class EncoderStates:
    """The raw encoder result, before the decoder's context provider has seen it."""

    annotations: Tensor  # batch x src_len x 2n (n forward only), zero at padding
    mask: Tensor  # batch x src_len, True at real tokens
    lengths: Tensor  # batch (long, on the model's device)
    fwd_last: Tensor  # batch x n: forward state at the last real token (fwd_T)
    bwd_first: Tensor | None  # batch x n: backward state at the first token (bwd_1); None forward only


def gated_update(gi: Tensor, gh: Tensor, h: Tensor, c: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """One GRU (c is None) or LSTM step in PyTorch's gate order, on the last dim.

    gi, gh: ... x 3n (GRU) or ... x 4n (LSTM), the input and recurrent pre-activations with their biases.
    The gates are computed in the state's precision: under bf16 autocast the products come in bf16, but the
    state (fp32 from s_0 on) stays fp32, as in the fused RNN paths; in bf16 an update gate above 1 - 2^-9
    would round to 1 and freeze its unit, and the state's small steps would round away.
    """
    gi, gh = gi.to(h.dtype), gh.to(h.dtype)  # no copy where they are of its dtype already (fp32 training)
    n = h.size(-1)
    if c is None:
        # split, not slicing: the backward of a split is one concatenation, not a zero-filled copy per slice
        gi_rz, gi_n = gi.split([2 * n, n], dim=-1)
        gh_rz, gh_n = gh.split([2 * n, n], dim=-1)
        reset, update = torch.sigmoid(gi_rz + gh_rz).chunk(2, dim=-1)
        candidate = torch.tanh(gi_n + reset * gh_n)
        return candidate + update * (h - candidate), None
    in_gate, forget, cand, out_gate = (gi + gh).chunk(4, dim=-1)
    c = torch.sigmoid(forget) * c + torch.sigmoid(in_gate) * torch.tanh(cand)
    return torch.sigmoid(out_gate) * torch.tanh(c), c


class RecurrentLayer(nn.Module):
    """One encoder layer: a forward RNN, or both directions stepped together (direction is a leading dim).

    A direction's state does not move while it reads padding, so the backward direction starts at each
    sentence's own last token, the forward state stops at it, and the result is the same alone or in a
    padded batch.
    """

    def __init__(self, input_size: int, hidden_size: int, cell: str, bidirectional: bool = True) -> None:
        super().__init__()
        gates = (4 if cell == "lstm" else 3) * hidden_size
        self.is_lstm = cell == "lstm"
        self.hidden_size = hidden_size
        self.directions = 2 if bidirectional else 1
        self.weight_ih = nn.Parameter(torch.empty(self.directions, gates, input_size))
        self.weight_hh = nn.Parameter(torch.empty(self.directions, gates, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(self.directions, 1, gates))
        self.bias_hh = nn.Parameter(torch.empty(self.directions, 1, gates))
        bound = 1.0 / math.sqrt(hidden_size)  # nn.GRU / nn.LSTM's default init
        for param in self.parameters():
            nn.init.uniform_(param, -bound, bound)

    def forward(
        self, inputs: Tensor, mask: Tensor, lengths_cpu: Tensor, fused: bool = False
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """inputs: batch x src_len x in, mask: batch x src_len, lengths_cpu: batch (on the CPU) ->
        annotations batch x src_len x (2n | n) (zero at padding), fwd_last batch x n, bwd_first
        batch x n (None forward only). `fused`: one packed call of the library's RNN instead of the
        step loop."""
        return self._fused(inputs, lengths_cpu) if fused else self._stepped(inputs, mask)

    def _stepped(self, inputs: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """The step loop: both directions' recurrent products in one batched matmul per time step."""
        batch, steps, _ = inputs.shape
        directions, gates = self.weight_ih.shape[:2]
        # every input projection of every direction in one matmul
        projected = F.linear(inputs, self.weight_ih.flatten(0, 1)).view(batch, steps, directions, gates)
        # time-major, the backward direction reversed: step t reads position t forwards, steps-1-t backwards
        per_direction = [projected[:, :, 0]] + ([projected[:, :, 1].flip(1)] if directions == 2 else [])
        per_step = torch.stack(per_direction)  # directions x batch x steps x gates
        per_step = (per_step + self.bias_ih.unsqueeze(2)).permute(2, 0, 1, 3).contiguous()  # steps x dirs x batch x gates
        step_mask = torch.stack([mask, mask.flip(1)][:directions]).permute(2, 0, 1).unsqueeze(-1)  # steps x dirs x batch x 1
        h = inputs.new_zeros(directions, batch, self.hidden_size)
        c = torch.zeros_like(h) if self.is_lstm else None
        w_hh_t = self.weight_hh.transpose(1, 2)
        outputs = []
        for gi, real in zip(per_step.unbind(0), step_mask.unbind(0), strict=True):
            gh = torch.baddbmm(self.bias_hh, h, w_hh_t)  # directions x batch x gates
            new_h, new_c = gated_update(gi, gh, h, c)
            h = torch.where(real, new_h, h)
            if c is not None and new_c is not None:
                c = torch.where(real, new_c, c)
            outputs.append(h)
        states = torch.stack(outputs, dim=2)  # directions x batch x steps x n
        if directions == 1:
            return states[0] * mask.unsqueeze(-1), h[0], None
        annotations = torch.cat([states[0], states[1].flip(1)], dim=-1) * mask.unsqueeze(-1)
        # the states held after the last step: fwd at the last real token, bwd at the first
        return annotations, h[0], h[1]

    def _fused(self, inputs: Tensor, lengths_cpu: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """The same RNN as one call of torch's fused GRU/LSTM (what nn.GRU runs) over a packed batch,
        which never reads padding; the parameters are this layer's own, so both paths share weights.

        It runs in fp32 (or fp64) with autocast off: autocast would run cuDNN's RNN in fp16 whatever its dtype
        (bf16 included), without a loss scaler. On CUDA, TF32 keeps fp32 fast.
        """
        batch, steps, _ = inputs.shape
        exact = torch.promote_types(inputs.dtype, torch.float32)
        # longest first, in an order sorted and inverted on the host, where the lengths are: torch's own packing
        # and unpacking copy their orders between host and device, each copy a wait for the device
        sorted_lengths, order = lengths_cpu.sort(descending=True)
        sorted_indices, unsorted_indices = to_device(order, inputs.device), to_device(order.argsort(), inputs.device)
        with torch.autocast(inputs.device.type, enabled=False):
            packed = pack_padded_sequence(inputs.to(exact).index_select(0, sorted_indices), sorted_lengths,
                                          batch_first=True)
            weights = [
                w.to(exact)
                for d in range(self.directions)
                for w in (self.weight_ih[d], self.weight_hh[d], self.bias_ih[d, 0], self.bias_hh[d, 0])
            ]
            h0 = packed.data.new_zeros(self.directions, batch, self.hidden_size)
            # torch's private binding of its fused RNN kernels, what nn.GRU / nn.LSTM call themselves: it runs
            # them with this layer's own parameters (tests/test_encoder.py checks the values)
            rnn, hx = (_VF.lstm, (h0, torch.zeros_like(h0))) if self.is_lstm else (_VF.gru, h0)
            bidirectional = self.directions == 2
            result = rnn(packed.data, packed.batch_sizes, hx, weights, True, 1, 0.0, self.training, bidirectional)
        padded, _ = pad_packed_sequence(PackedSequence(result[0], packed.batch_sizes), batch_first=True, total_length=steps)
        annotations = padded.index_select(0, unsorted_indices)  # batch x steps x directions * n, the batch's order
        # directions x batch x n, back in the batch's order: fwd after the last real token, bwd after the first
        last = result[1].index_select(1, unsorted_indices)
        return annotations, last[0], last[1] if bidirectional else None


class Encoder(nn.Module):
    """Embeddings and a stack of GRU/LSTM layers (bidirectional, or forward only) whose states never
    see padding."""

    def __init__(
        self, vocab_size: int, embedding_size: int, hidden_size: int, num_layers: int = 1, cell: str = "gru",
        dropout: float = 0.0, bidirectional: bool = True,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.directions = 2 if bidirectional else 1
        self.embedding = nn.Embedding(vocab_size, embedding_size, padding_idx=PAD_ID)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            RecurrentLayer(embedding_size if k == 0 else self.output_size, hidden_size, cell, bidirectional)
            for k in range(num_layers)
        )
        # None = the fused RNN on CUDA (cuDNN), the step loop elsewhere; True / False force one path
        self.fused: bool | None = None

    @property
    def output_size(self) -> int:
        """Width of one annotation (2n, or n forward only)."""
        return self.directions * self.hidden_size

    def forward(self, src: Tensor, src_lengths: Tensor) -> EncoderStates:
        """src: batch x src_len (PAD right padding), src_lengths: batch -> annotations and final states."""
        src_len = src.size(1)
        lengths_cpu = src_lengths.detach().to("cpu", torch.long)
        if int(lengths_cpu.min()) < 1 or int(lengths_cpu.max()) > src_len:
            raise ValueError(f"src_lengths must lie in [1, {src_len}], got {lengths_cpu.tolist()}")
        lengths = to_device(src_lengths.long(), src.device)
        mask = torch.arange(src_len, device=src.device).unsqueeze(0) < lengths.unsqueeze(1)
        hidden = self.dropout(self.embedding(src))  # batch x src_len x emb
        fused = src.is_cuda if self.fused is None else self.fused
        for k, layer in enumerate(self.layers):
            if k > 0:
                hidden = self.dropout(hidden)
            hidden, fwd_last, bwd_first = layer(hidden, mask, lengths_cpu, fused)
        return EncoderStates(hidden, mask, lengths, fwd_last, bwd_first)
