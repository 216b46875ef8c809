"""Encoder + context provider + decoder, built from `ModelConfig`: RNNsearch or RNNencdec, model.architecture
rnn (nmt/registry.py). `build_model` (nmt/models/interface.py, also importable from here) builds any
architecture's model."""

from __future__ import annotations

from torch import Tensor, nn

from nmt.config_sections import ModelConfig
from nmt.models.interface import (
    MAIN_VIEW,
    AttentionPoint,
    ModelKind,
    StepCompiler,
    TranslationModel,
    count_parameters,
)
from nmt.models.rnn.attention import AdditiveAttention, Attention, build_context_provider
from nmt.models.rnn.decoder import Decoder, DecoderState
from nmt.models.rnn.encoder import Encoder, EncoderOutput
from nmt.special import PAD_ID


class Seq2Seq(TranslationModel):
    """The whole translation model: `forward` for teacher forcing, `encode`/`init_state`/`decode_step`
    for search. `forward` equals init_state + decode_step fed the reference tokens."""

    def __init__(self, config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> None:
        super().__init__()
        self.config = config
        self.src_vocab_size = src_vocab_size
        self.tgt_vocab_size = tgt_vocab_size
        self.encoder = Encoder(
            src_vocab_size, config.embedding_size, config.hidden_size, num_layers=config.encoder_layers,
            cell=config.cell, dropout=config.dropout, bidirectional=config.bidirectional_encoder,
        )
        provider = build_context_provider(
            config.attention, config.hidden_size, self.encoder.output_size, config.attention_size, config.fixed_context
        )
        self.decoder = Decoder(
            tgt_vocab_size, config.embedding_size, config.hidden_size, provider, cell=config.cell,
            maxout_size=config.maxout_size, dropout=config.dropout, tie_embeddings=config.tie_target_embeddings,
        )
        if config.init == "bahdanau":
            init_bahdanau(self)

    def recompute_attention(self, enabled: bool) -> bool:
        """Trade time for memory in training: see AdditiveAttention (other scores keep nothing large)."""
        if not isinstance(self.decoder.provider, AdditiveAttention):
            return False
        self.decoder.provider.recompute = enabled
        return True

    @property
    def steps_compilable(self) -> bool:
        """RNNsearch: its decoder steps through the target in Python on every device; RNNencdec: where its decoder
        does (not on CUDA, where it is one fused cuDNN call). The encoder's loops are left eager (one fused cuDNN
        call on CUDA; on the CPU compiling the gate update did not pay, docs/performance.md)."""
        return self.has_attention or not self.decoder.fixed_steps_fused(next(self.parameters()).device)

    def compile_steps(self, compiler: StepCompiler) -> None:
        """training.compile: the training forward's decoder steps through `compiler` (Decoder.compile_steps)."""
        if not self.steps_compilable:
            raise ValueError(f"{self.name} here runs its decoder as one fused RNN call: no step loop to compile")
        self.decoder.compile_steps(compiler)

    @property
    def attention_shown(self) -> str:
        """What the attention weights are, for plot titles: the one attention there is."""
        return f"{self.config.attention} attention"

    @classmethod
    def kind(cls, config: ModelConfig) -> ModelKind:
        """RNNencdec (attention none: the fixed-vector baseline), RNNsearch (additive), or the attention's name."""
        attention = config.attention
        return ModelKind(
            name={"none": "RNNencdec", "additive": "RNNsearch"}.get(attention, f"{attention} attention"),
            attention=attention, curve_attention=attention, scaling_attention=attention,
            # the scored vectors' width: Luong's general score s^T W h is over the decoder state, and reads
            # no attention_size
            scaling_size=config.hidden_size if attention == "general" else config.attention_size,
            length_kind="fixed vector" if attention == "none" else "rnn attention",
            without_attention="attention: none, RNNencdec" if attention == "none" else "",
        )

    def attention_points(self) -> dict[str, AttentionPoint]:
        """The one attention, MAIN_VIEW (none for attention none): its softmax, called once per decoder step."""
        provider = self.decoder.provider
        return {MAIN_VIEW: AttentionPoint(provider.softmax)} if isinstance(provider, Attention) else {}

    def encode(self, src: Tensor, src_lengths: Tensor) -> EncoderOutput:
        """src: batch x src_len (ids + EOS, PAD right padding), src_lengths: batch -> the encoder output
        with the attention keys (or the fixed context) precomputed."""
        return self.decoder.precompute(self.decoder.provider.prepare(self.encoder(src, src_lengths)))

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        """s_0 for every row of `enc`."""
        return self.decoder.init_state(enc)

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, enc: EncoderOutput
    ) -> tuple[Tensor, DecoderState, Tensor | None]:
        """prev_tokens: batch (long) -> log-probs batch x tgt_vocab (float32), the next state, and the
        attention weights batch x src_len (None for attention none)."""
        return self.decoder.decode_step(prev_tokens, state, enc)

    def forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, return_attention: bool = False,
        target_positions: Tensor | None = None, targets: Tensor | None = None, label_smoothing: float = 0.0,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Teacher forcing. tgt_in: batch x tgt_len (BOS + ids, padded) -> logits batch x tgt_len x
        tgt_vocab, plus attention batch x tgt_len x src_len when asked (ValueError for attention none).
        With `target_positions` (n, long: b * tgt_len + t): logits n x tgt_vocab of those positions; with
        `targets` (n) too: their summed cross-entropy instead (training's loss, in `forward` so that a
        DistributedDataParallel wrapper sees it)."""
        out, attention = self.decoder(
            tgt_in, self.encode(src, src_lengths), return_attention, target_positions, targets, label_smoothing
        )
        if return_attention:
            assert attention is not None
            return out, attention
        return out

    def describe(self) -> str:
        """One line: which model, its sizes, and its parameter count."""
        c = self.config
        encoder = "bidirectional" if c.bidirectional_encoder else "forward"
        summary = "" if self.has_attention else f", c from {c.fixed_context}"
        # the width model.attention_size sets: additive and dot attention project the state to it; general and
        # the fixed vector have no such layer
        projected = self.decoder.provider.query_size
        width = f", attention {projected}" if projected else ""
        return (
            f"{self.name} (attention {c.attention}{summary}, {c.cell.upper()}, {c.encoder_layers}-layer {encoder} encoder, "
            f"embeddings {c.embedding_size}, hidden {c.hidden_size}{width}, "
            f"maxout {c.maxout_size}, vocab {self.src_vocab_size}/{self.tgt_vocab_size}): "
            f"{count_parameters(self):,} parameters"
        )


def init_bahdanau(model: Seq2Seq) -> None:
    """Bahdanau et al.'s init: orthogonal recurrent matrices (per gate), N(0, 0.001^2) for the
    alignment projections, zero v and biases, N(0, 0.01^2) for every other weight."""
    provider = model.decoder.provider
    scored = provider.named_parameters() if isinstance(provider, Attention) else []
    alignment = {id(p) for name, p in scored if name != "v"}
    for name, param in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if leaf.startswith("weight_hh"):  # gates x n, or 2 x gates x n for both encoder directions
            hidden = param.size(-1)
            for block in param.data.view(-1, hidden).split(hidden, dim=0):
                nn.init.orthogonal_(block)
        elif leaf.startswith("bias") or leaf == "v":
            nn.init.zeros_(param)
        elif id(param) in alignment:
            nn.init.normal_(param, std=0.001)
        else:
            nn.init.normal_(param, std=0.01)
    for embedding in (model.encoder.embedding, model.decoder.embedding):
        embedding.weight.data[PAD_ID].zero_()

