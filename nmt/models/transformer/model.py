"""The Transformer (Vaswani et al. 2017): self-attention encoder and decoder, cross-attention between them.

    each sublayer: self-attention, cross-attention (decoder) or feed-forward, its attention multi-head
    (nmt/models/transformer/multihead.py: softmax(Q Kᵀ / √d_k + bias) V per head, d_k = d_model / heads)
    post-norm (the paper's): x = LN(x + Dropout(sublayer(x)))   pre-norm: x = x + Dropout(sublayer(LN(x)))

Positions (`model.positions`): sinusoidal (the paper's) or learned vectors added to the scaled embeddings,
or `relative`: Shaw et al. 2018's learned vectors a_{clip(j - i, ±k)} added to the keys of every
self-attention, with no absolute position anywhere, so that a distance unseen in training is clipped to one
that was seen. Search calls `decode_step` with a cache of every decoder layer's self-attention keys and
values, so step t costs O(t) rather than O(t²); the source's cross-attention keys and values are computed
once, by `encode`. The analyses (nmt/analysis/) reach each decoder layer's cross-attention through
`attention_points`: its `softmax` (a hook written out rather than fused while hooked) and its output projection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.config_sections import ModelConfig
from nmt.errors import NMTError
from nmt.models.interface import AttentionPoint, ModelKind, TranslationModel, count_parameters, pick_positions
from nmt.models.output_loss import linear_cross_entropy
from nmt.models.transformer.multihead import MultiHeadAttention
from nmt.special import PAD_ID
from nmt.transfer import to_device

MAX_LEARNED_POSITIONS = 1024  # learned positions: the table's size; later positions share its last row


@dataclass
class Memory:
    """The encoded source as the decoder reads it; every tensor has the batch first."""

    mask: Tensor  # batch x src_len, True at real tokens
    lengths: Tensor  # batch (long)
    cross: Tensor  # batch x layers x 2 x heads x src_len x d_k: each decoder layer's cross-attention keys, values

    def index_select(self, index: Tensor) -> Memory:
        """Rows `index` (beam search: expand to batch*beam, drop finished sentences)."""
        return replace(self, **{f.name: getattr(self, f.name).index_select(0, index) for f in fields(self)})


@dataclass
class Cache:
    """The decoder's self-attention keys and values of the steps decoded so far.

    They sit at the front of a buffer that may have room for more steps. Beam search's reordering copies
    them into a buffer with room for one more step, which the next `decode_step` fills in place: one copy
    of the cache a beam step rather than two (the copies grow with the steps and the beams: on a GPU, at
    large batches, they are the step's memory traffic). A step with no room left copies the cache into a
    buffer with room for as many steps again, so that greedy search copies it at steps 1, 2, 4, 8, ...
    rather than at every step (the attention reads the filled front of the buffer, a strided view). A
    cache's room is filled once; a second step from the same cache copies it instead, so that the first
    step's cache stays as it was.
    """

    buffer: Tensor  # batch x layers x 2 x heads x room x d_k, room >= steps
    steps: int
    room_taken: bool = field(default=False, repr=False)

    @property
    def keys_values(self) -> Tensor:
        """batch x layers x 2 x heads x steps x d_k"""
        return self.buffer[:, :, :, :, : self.steps]

    def index_select(self, index: Tensor) -> Cache:
        """Rows `index` (beam search's back-pointers), with room for one more step."""
        _, layers, _, heads, _, head_size = self.buffer.shape
        buffer = self.buffer.new_empty(index.numel(), layers, 2, heads, self.steps + 1, head_size)
        filled = buffer[:, :, :, :, : self.steps]
        if self.buffer.requires_grad:  # out= records no gradient
            filled.copy_(self.keys_values.index_select(0, index))
        else:  # gathered straight into the new buffer: the step's one copy
            torch.index_select(self.keys_values, 0, index, out=filled)
        return Cache(buffer, self.steps)

    def grown(self, steps: int) -> Cache:
        """A cache with room for `steps` more steps after these (uninitialised, for the layers to fill): this
        buffer where it has the room and no other step took it, else one copy into a new buffer with room to
        spare (twice the steps so far)."""
        total = self.steps + steps
        if total <= self.buffer.size(4) and not self.room_taken:
            self.room_taken = True
            return Cache(self.buffer, total)
        batch, layers, _, heads, _, head_size = self.buffer.shape
        buffer = self.buffer.new_empty(batch, layers, 2, heads, max(total, 2 * self.steps), head_size)
        buffer[:, :, :, :, : self.steps] = self.keys_values
        return Cache(buffer, total)


def sinusoids(positions: Tensor, size: int) -> Tensor:
    """The paper's encoding: PE(p, 2i) = sin(p / 10000^(2i/size)), PE(p, 2i+1) = cos(...). positions: t -> t x size."""
    rates = torch.exp(torch.arange(0, size, 2, device=positions.device) * (-math.log(10000.0) / size))
    angles = positions.float().unsqueeze(1) * rates  # t x size/2
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)[:, :size]  # interleaved: sin, cos, ...


class Layer(nn.Module):
    """One layer: self-attention, cross-attention to the source (decoder layers only) and a feed-forward
    network, each a residual sublayer with layer norm and dropout."""

    def __init__(self, config: ModelConfig, cross: bool) -> None:
        super().__init__()
        size, clip = config.hidden_size, config.relative_clip if config.positions == "relative" else 0
        scaled = config.scaled_attention
        self.self_attention = MultiHeadAttention(size, config.heads, clip, scaled)
        self.cross_attention = MultiHeadAttention(size, config.heads, scaled=scaled) if cross else None
        self.feedforward = nn.Sequential(
            nn.Linear(size, config.feedforward_size), nn.ReLU(), nn.Dropout(config.dropout),
            nn.Linear(config.feedforward_size, size),
        )
        self.norms = nn.ModuleList(nn.LayerNorm(size) for _ in range(3 if cross else 2))
        self.dropout = nn.Dropout(config.dropout)
        self.pre_norm = config.norm == "pre"

    def _input(self, x: Tensor, sublayer: int) -> Tensor:
        return self.norms[sublayer](x) if self.pre_norm else x

    def _add(self, x: Tensor, out: Tensor, sublayer: int) -> Tensor:
        out = self.dropout(out)
        return x + out if self.pre_norm else self.norms[sublayer](x + out)

    def forward(
        self, x: Tensor, mask: Tensor | None, cache: Tensor | None = None, memory: Tensor | None = None,
        memory_mask: Tensor | None = None, need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x: batch x t x size; cache (incremental decoding): batch x 2 x heads x (steps + t) x d_k, the keys
        and values of the earlier steps followed by room for this call's t, which are written into it;
        memory: batch x 2 x heads x s x d_k, the source's keys and values
        -> x, and the cross-attention weights batch x heads x t x s when asked."""
        h = self._input(x, 0)
        keys_values = self.self_attention.keys_values(h)
        offset = 0
        if cache is not None:
            offset = cache.size(3) - keys_values.size(3)
            cache[:, :, :, offset:] = keys_values
            keys_values = cache
        x = self._add(x, self.self_attention(h, keys_values, mask, offset)[0], 0)
        weights = None
        if self.cross_attention is not None:
            assert memory is not None
            out, weights = self.cross_attention(self._input(x, 1), memory, memory_mask, need_weights=need_weights)
            x = self._add(x, out, 1)
        return self._add(x, self.feedforward(self._input(x, -1)), -1), weights


class Transformer(TranslationModel):
    """The whole model, a `TranslationModel`: `forward` for teacher forcing, `encode`,
    `init_state` and `decode_step` for search."""

    def __init__(self, config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> None:
        super().__init__()
        self.config, self.src_vocab_size, self.tgt_vocab_size = config, src_vocab_size, tgt_vocab_size
        size = config.hidden_size
        self.src_embedding = nn.Embedding(src_vocab_size, size, padding_idx=PAD_ID)
        if config.share_embeddings and src_vocab_size != tgt_vocab_size:
            raise NMTError(
                f"model.share_embeddings needs one vocabulary for both sides, but the source has {src_vocab_size} "
                f"entries and the target {tgt_vocab_size}.",
                "Prepare the data with data.joint_vocab: true, or leave model.share_embeddings out.",
            )
        self.tgt_embedding = (
            self.src_embedding if config.share_embeddings else nn.Embedding(tgt_vocab_size, size, padding_idx=PAD_ID)
        )
        learned = config.positions == "learned"
        self.learned_positions = nn.Embedding(MAX_LEARNED_POSITIONS, size) if learned else None
        self.encoder_layers = nn.ModuleList(Layer(config, cross=False) for _ in range(config.layers))
        self.decoder_layers = nn.ModuleList(Layer(config, cross=True) for _ in range(config.layers))
        # pre-norm leaves each stack's output unnormalised: one last layer norm (post-norm ends in one)
        pre = config.norm == "pre"
        self.encoder_norm = nn.LayerNorm(size) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(size) if pre else nn.Identity()
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(size, tgt_vocab_size)
        for module in self.modules():  # Xavier (Glorot) uniform, as tensor2tensor and fairseq
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
        for embedding in dict.fromkeys((self.src_embedding, self.tgt_embedding)):  # once, where shared
            nn.init.normal_(embedding.weight, std=size**-0.5)  # x √d_model in `_embed`: unit variance
            embedding.weight.data[PAD_ID].zero_()
        if config.tie_target_embeddings:
            self.output.weight = self.tgt_embedding.weight

    @property
    def compilable(self) -> bool:
        """True: `forward` has no loop over the steps; its one graph break is `_output`, left eager."""
        return True

    @property
    def attention_shown(self) -> str:
        """What `decode_step`'s and `forward`'s attention weights are, for plot titles."""
        return (
            f"the last layer's cross-attention averaged over its {self.config.heads} heads: one mixing step "
            "of one layer, not an account of the translation"
        )

    @classmethod
    def kind(cls, config: ModelConfig) -> ModelKind:
        """"Transformer" (with its positions unless the paper's); absolute positions are expected to fall on
        long sentences, relative ones to hold (Neishi & Yoshinaga 2019)."""
        positions, dot = config.positions, "scaled dot" if config.scaled_attention else "dot"
        return ModelKind(
            name="Transformer" + ("" if positions == "sinusoidal" else f" ({positions} positions)"),
            attention=f"{config.heads} x {dot}-product, {positions} positions",
            curve_attention=f"multi-head (Transformer, {positions} positions)",
            scaling_attention=dot.replace(" ", "_") + " (Transformer)",
            scaling_size=config.hidden_size // config.heads,  # d_k
            length_kind="relative" if positions == "relative" else "absolute",
        )

    def attention_points(self) -> dict[str, AttentionPoint]:
        """Each decoder layer's cross-attention ("layer 1", ...): one call per teacher-forced batch or search step."""
        return {
            f"layer {i}": AttentionPoint(layer.cross_attention.softmax, "cross-attention", self.config.heads,
                                         layer.cross_attention.out)
            for i, layer in enumerate(self.decoder_layers, 1)
        }

    def _embed(self, tokens: Tensor, embedding: nn.Embedding, offset: int) -> Tensor:
        """tokens: batch x t at positions offset.. -> batch x t x size: √d_model E y (+ position), dropout."""
        x = embedding(tokens) * math.sqrt(embedding.embedding_dim)
        positions = torch.arange(offset, offset + tokens.size(1), device=tokens.device)
        if self.learned_positions is not None:
            x = x + self.learned_positions(positions.clamp(max=MAX_LEARNED_POSITIONS - 1))
        elif self.config.positions == "sinusoidal":
            x = x + sinusoids(positions, x.size(-1)).to(x.dtype)
        return self.dropout(x)

    def encode(self, src: Tensor, src_lengths: Tensor) -> Memory:
        """src: batch x src_len (ids + EOS, PAD right padding), src_lengths: batch -> the decoder's memory."""
        # the check reads the lengths where a batch keeps them, on the host (Batch.to): read after their copy
        # to a GPU, they would wait for the work queued before; left out of a compiled graph
        # (training.compile), whose batches make_batch builds
        if not torch.compiler.is_compiling():
            host = src_lengths.detach().cpu()
            if int(host.min()) < 1 or int(host.max()) > src.size(1):
                raise ValueError(f"src_lengths must lie in [1, {src.size(1)}], got {host.tolist()}")
        lengths = to_device(src_lengths.long(), src.device)
        mask = torch.arange(src.size(1), device=src.device).unsqueeze(0) < lengths.unsqueeze(1)  # b x s
        x = self._embed(src, self.src_embedding, 0)
        for layer in self.encoder_layers:
            x, _ = layer(x, mask[:, None, None, :])
        x = self.encoder_norm(x)
        cross = [layer.cross_attention.keys_values(x) for layer in self.decoder_layers]
        return Memory(mask, lengths, torch.stack(cross, dim=1))  # cross: b x layers x 2 x heads x s x d_k

    def init_state(self, enc: Memory) -> Cache:
        """An empty cache for every row of `enc`."""
        batch, layers, _, heads, _, head_size = enc.cross.shape
        return Cache(enc.cross.new_zeros(batch, layers, 2, heads, 0, head_size), 0)

    def _decode(
        self, tgt_in: Tensor, enc: Memory, cache: Cache | None, need_weights: bool
    ) -> tuple[Tensor, Cache | None, Tensor | None]:
        """tgt_in: batch x t, the steps after the cache's -> states batch x t x size, the cache grown by these
        t steps (None without one), the last layer's cross-attention averaged over heads (batch x t x s)
        when asked."""
        steps = 0 if cache is None else cache.steps
        x = self._embed(tgt_in, self.tgt_embedding, steps)
        t = tgt_in.size(1)
        # t x (steps + t): each new step sees the cached steps and the new ones up to itself
        causal = None if t == 1 else torch.ones(t, steps + t, dtype=torch.bool, device=x.device).tril(diagonal=steps)
        memory_mask = enc.mask[:, None, None, :]  # b x 1 x 1 x s
        last = len(self.decoder_layers) - 1
        grown = None if cache is None else cache.grown(t)
        weights = None
        for i, layer in enumerate(self.decoder_layers):
            layer_cache = None if grown is None else grown.keys_values[:, i]  # b x 2 x h x (steps + t) x d_k
            x, weights = layer(x, causal, layer_cache, enc.cross[:, i], memory_mask, need_weights and i == last)
        return self.decoder_norm(x), grown, None if weights is None else weights.mean(dim=1)

    def decode_step(self, prev_tokens: Tensor, state: Cache, enc: Memory) -> tuple[Tensor, Cache, Tensor]:
        """prev_tokens: batch (long) -> log-probs batch x tgt_vocab (float32 at least), the cache with this step,
        the last layer's cross-attention averaged over its heads, batch x src_len."""
        states, cache, weights = self._decode(prev_tokens.unsqueeze(1), enc, state, need_weights=True)
        logits = self.output(states[:, 0])
        log_probs = F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
        assert cache is not None and weights is not None
        return log_probs, cache, weights[:, 0]

    def forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, return_attention: bool = False,
        target_positions: Tensor | None = None, targets: Tensor | None = None, label_smoothing: float = 0.0,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Teacher forcing, as `Seq2Seq.forward`: logits batch x tgt_len x tgt_vocab (n x tgt_vocab with
        `target_positions`, the summed cross-entropy with `targets` too), plus the last layer's cross-attention
        averaged over heads, batch x tgt_len x src_len, when asked."""
        if targets is not None and target_positions is None:
            raise ValueError("targets need the target_positions they stand at")
        states, _, weights = self._decode(tgt_in, self.encode(src, src_lengths), None, return_attention)
        # kept out of a compiled forward (training.compile), see `_output`; disabled only there, since
        # torch.compiler.disable loads torch's compiler (1-2 s here) into every process that imports this module
        output = torch.compiler.disable(self._output) if torch.compiler.is_compiling() else self._output
        out = output(states, target_positions, targets, label_smoothing)
        if return_attention:
            assert weights is not None
            return out, weights
        return out

    def _output(
        self, states: Tensor, target_positions: Tensor | None, targets: Tensor | None, label_smoothing: float
    ) -> Tensor:
        """`forward`'s logits, or its loss, at `target_positions`. Kept out of a compiled forward
        (training.compile): linear_cross_entropy's chunk loop follows how many positions there are, so a graph
        through it would be traced again for nearly every batch; run eagerly, it is a few large products per
        1,024 positions."""
        if target_positions is not None:
            states = pick_positions(states, target_positions)
        if targets is not None:
            return linear_cross_entropy(states, self.output.weight, self.output.bias, targets, label_smoothing)
        return self.output(states)

    def describe(self) -> str:
        """One line: which model, its sizes, and its parameter count."""
        c = self.config
        return (
            f"Transformer ({c.norm}-norm, {c.positions} positions, {c.layers}+{c.layers} layers, d_model "
            f"{c.hidden_size}, {c.heads} head{'s' if c.heads > 1 else ''} of {c.hidden_size // c.heads}, feed-forward "
            f"{c.feedforward_size}, vocab {self.src_vocab_size}/{self.tgt_vocab_size}{self._sharing()}): "
            f"{count_parameters(self):,} parameters"
        )

    def _sharing(self) -> str:
        """What describe() says of the embeddings shared (model.share_embeddings, tie_target_embeddings)."""
        shared = ["source", "target"] if self.config.share_embeddings else ["target"]
        if self.config.tie_target_embeddings:
            shared.append("output")
        return f", {' = '.join(shared)} embeddings" if len(shared) > 1 else ""
