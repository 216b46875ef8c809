"""Analytic FLOP counts of the models (the RNNs and the Transformer), term by term, for model FLOP utilisation (MFU).

Only matrix products are counted (2 FLOPs per multiply-add), as in every MFU figure: they are the
work a matmul peak measures, and what `torch.utils.flop_counter.FlopCounterMode` counts. Elementwise
work is left out, each part well under 1% at the bench sizes (hidden 512, 8k vocabulary, ~40 tokens):
gates and state update (~10n per step), attention's tanh and softmax (~2 S a + 5 S per step), the
maxout, the output softmax and loss (~4V per step), bias adds, Adam (~10 per parameter and step) and
the clip. Embedding lookups are no products, which is why the source vocabulary does not appear below.

Notation: m = embedding_size, n = hidden_size, G = gates x n (3n GRU, 4n LSTM), a = attention_size,
d = encoder directions (2, or 1 for the paper's forward-only RNNencdec), C = d n (annotation / context
width), R = readout width (2 x maxout_size, or m for the tanh layer), D = width entering the output
layer (maxout_size or m), V = target vocabulary, S = source tokens (incl. EOS), T = target tokens
(incl. EOS). A product of (rows x k) by (k x cols) costs 2 rows k cols.

Training counts one forward, as the implementation runs it (the recurrent update of the last target
step is never computed; RNNencdec's input-gate and readout products of its fixed context are one
product each per sentence), and a backward of twice the forward: each product has one gradient
product for its input and one for its weight.

The Transformer (`architecture: transformer`): d = d_model (hidden_size; heads x d_k), F = feedforward_size,
L = layers on each side, P = 2 relative_clip + 1 distances with relative positions (else 0). Per layer and
query position: Q, K and V, and output projections (8 d^2), the feed-forward's two products (4 d F), the
relative term q . a_r against P distances (2 d P, the heads' d_k adding up to d), and per key position
Q Kᵀ and weights . V (2 d each, summed over the heads). The encoder's S queries read S keys; the decoder's
T queries in training read all T keys: the causal mask hides half of Q Kᵀ, but the fused kernel (given a
boolean mask, not is_causal) computes the whole T x T product, so that is what is counted. Each decoder layer adds the
cross-attention's Q and output projections (4 d^2 per target position) and its products with the S source
positions (4 d S); the source's cross-attention keys and values (4 d^2 per source position and decoder
layer) are computed once, by `encode`. Search's step t (the t-th output token) reads the t keys of the
steps so far (t - 1 from the cache, and its own): O(t) per step. The cache starts empty: no product for
`init_state`. Elementwise work (softmax, layer norms, ReLU, positions, residuals) is left out as above.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from nmt.config_sections import ModelConfig

BACKWARD_FACTOR = 2.0  # d(input) and d(weight): two products of the forward product's size


def _sizes(cfg: ModelConfig) -> dict[str, int]:
    """The widths of the notation above."""
    n, m = cfg.hidden_size, cfg.embedding_size
    directions = 2 if cfg.bidirectional_encoder else 1
    return {
        "n": n,
        "m": m,
        "d": directions,
        "G": (4 if cfg.cell == "lstm" else 3) * n,
        "C": directions * n,
        "R": 2 * cfg.maxout_size if cfg.maxout_size > 0 else m,
        "D": cfg.maxout_size if cfg.maxout_size > 0 else m,
        # key width: the attention size, except Luong's general score, whose keys W h_j live in state space
        "K": n if cfg.attention == "general" else cfg.attention_size,
        # query projection rows (0 for general: the raw state is the query; 0 for none: no query)
        "Q": cfg.attention_size if cfg.attention in ("additive", "dot", "scaled_dot") else 0,
    }


def _transformer_layers(cfg: ModelConfig, side: str, queries: int, keys: int, src_len: int = 0) -> dict[str, float]:
    """Forward FLOPs of one side's `cfg.layers` layers for `queries` positions, each of whose self-attention
    reads `keys` positions (and, on the decoder side, whose cross-attention reads `src_len` positions)."""
    d, L = cfg.hidden_size, cfg.layers
    terms = {
        f"{side}_self_projections": L * 2.0 * queries * d * 4 * d,  # Q, K and V, output: 4 (d x d)
        f"{side}_self_scores": L * 2.0 * queries * keys * d,  # Q Kᵀ: heads x d_k = d
        f"{side}_self_context": L * 2.0 * queries * keys * d,  # weights . V
        f"{side}_feedforward": L * 2.0 * queries * 2 * d * cfg.feedforward_size,
    }
    if cfg.positions == "relative":  # q . a_r for each of the 2k+1 clipped distances, every head
        terms[f"{side}_relative"] = L * 2.0 * queries * d * (2 * cfg.relative_clip + 1)
    if side == "decoder":
        terms["cross_projections"] = L * 2.0 * queries * d * 2 * d  # Q, output (K and V: `encode`)
        terms["cross_scores"] = terms["cross_context"] = L * 2.0 * queries * src_len * d
    return terms


def encoder_flops(cfg: ModelConfig, src_len: int) -> dict[str, float]:
    """Forward FLOPs of encoding one sentence of `src_len` tokens, and of what the decoder computes
    once per sentence from it (attention keys or the fixed context, and s_0; the Transformer's
    cross-attention keys and values). At the real length: the padded steps the encoder runs (masked)
    are not useful work and are left out of MFU on purpose."""
    if cfg.architecture == "transformer":
        S, d = src_len, cfg.hidden_size
        return {**_transformer_layers(cfg, "encoder", S, S), "cross_keys_values": cfg.layers * 2.0 * S * d * 2 * d}
    z = _sizes(cfg)
    n, d, G, C, R, S = z["n"], z["d"], z["G"], z["C"], z["R"], src_len
    terms: dict[str, float] = {}
    for layer in range(cfg.encoder_layers):
        width = cfg.embedding_size if layer == 0 else C
        # each direction: input projection and recurrent product at every source token
        terms[f"encoder_l{layer}_input"] = d * 2.0 * S * width * G
        terms[f"encoder_l{layer}_recurrent"] = d * 2.0 * S * n * G
    if cfg.attention == "none":
        terms["fixed_context"] = 2.0 * C * C  # c = tanh(V h_T) or tanh(V [fwd_T ; bwd_1]), V: C x C
        terms["context_gates"] = 2.0 * C * G  # W_ctx c, the same at every decoder step
        terms["context_readout"] = 2.0 * C * R  # C_o c, likewise
        terms["init_state"] = 2.0 * C * n  # s_0 = tanh(W_s c)
    else:
        terms["attention_keys"] = 2.0 * S * C * z["K"]  # U h_j, once per sentence
        terms["init_state"] = 2.0 * n * n  # s_0 = tanh(W_s bwd_1)
    return terms


def _attention_step(cfg: ModelConfig, src_len: int) -> dict[str, float]:
    """One query's products against S keys: the scores and the weighted sum of annotations."""
    if cfg.attention == "none":
        return {}
    z = _sizes(cfg)
    # additive: v^T over the tanh'd S x a hidden; dot / general: the S keys times the query
    return {"attention_scores": 2.0 * src_len * z["K"], "attention_context": 2.0 * src_len * z["C"]}


def decoder_training_flops(cfg: ModelConfig, tgt_vocab: int, src_len: int, tgt_len: int) -> dict[str, float]:
    """Forward FLOPs of the teacher-forced decoder over `tgt_len` steps attending to `src_len` tokens."""
    if cfg.architecture == "transformer":
        output = 2.0 * tgt_len * cfg.hidden_size * tgt_vocab
        return {**_transformer_layers(cfg, "decoder", tgt_len, tgt_len, src_len), "output": output}
    z = _sizes(cfg)
    n, m, G, C, R, D = z["n"], z["m"], z["G"], z["C"], z["R"], z["D"]
    T = tgt_len
    updates = max(T - 1, 0)  # s_1 .. s_{T-1}: s_T would never be read
    terms: dict[str, float] = {}
    if cfg.attention == "none":
        # E y for T-1 steps; W_ctx c and C_o c are once per sentence (encoder_flops)
        terms["decoder_input"] = 2.0 * updates * m * G
        terms["decoder_recurrent"] = 2.0 * updates * n * G
        terms["readout"] = 2.0 * T * (n + m) * R
    else:
        # E y: all steps at once; c_i: per update
        terms["decoder_input"] = 2.0 * T * m * G + 2.0 * updates * C * G
        # s_{i-1} times [W_hh ; W_query] at every step (the query of step T is needed, its update is not)
        terms["decoder_recurrent"] = 2.0 * T * n * (G + z["Q"])
        for name, value in _attention_step(cfg, src_len).items():
            terms[name] = T * value
        terms["readout"] = 2.0 * T * (n + m + C) * R
    terms["output"] = 2.0 * T * D * tgt_vocab
    return terms


def forward_flops(cfg: ModelConfig, tgt_vocab: int, src_len: int, tgt_len: int) -> dict[str, float]:
    """Every forward term of one sentence pair in training (encoder + decoder)."""
    return {**encoder_flops(cfg, src_len), **decoder_training_flops(cfg, tgt_vocab, src_len, tgt_len)}


def training_flops(
    cfg: ModelConfig, tgt_vocab: int, src_lengths: Sequence[int], tgt_lengths: Sequence[int]
) -> float:
    """Forward + backward FLOPs of a set of sentence pairs at their real lengths (S and T, no padding)."""
    pairs = zip(src_lengths, tgt_lengths, strict=True)  # ValueError when the counts differ
    forward = sum(sum(forward_flops(cfg, tgt_vocab, s, t).values()) for s, t in pairs)
    return (1.0 + BACKWARD_FACTOR) * forward


def decode_step_flops(cfg: ModelConfig, tgt_vocab: int, src_len: int, step: int = 1) -> float:
    """FLOPs of search step `step` (`decode_step`, 1 for the first token) for one hypothesis attending to
    `src_len` tokens.

    Unlike training, every product runs each step, the state update included; RNNencdec's products of
    its fixed c come from `encode` (`search_encode_flops`). An RNN step costs the same at every `step`;
    the Transformer's self-attention reads `step` keys."""
    if cfg.architecture == "transformer":
        layers = _transformer_layers(cfg, "decoder", 1, step, src_len)
        return sum(layers.values()) + 2.0 * cfg.hidden_size * tgt_vocab
    z = _sizes(cfg)
    n, m, G, C, R, D = z["n"], z["m"], z["G"], z["C"], z["R"], z["D"]
    context = 0 if cfg.attention == "none" else C  # c_i's input-gate and readout products
    flops = 2.0 * (m + context) * G + 2.0 * n * (G + z["Q"]) + 2.0 * (n + m + context) * R + 2.0 * D * tgt_vocab
    return flops + sum(_attention_step(cfg, src_len).values())


def decode_state_flops(cfg: ModelConfig) -> float:
    """FLOPs of s_0 for one hypothesis (`init_state`; beam search computes it for every beam); none for
    the Transformer, whose cache starts empty."""
    return encoder_flops(cfg, 0).get("init_state", 0.0)


def search_encode_flops(cfg: ModelConfig, src_len: int) -> float:
    """FLOPs of `encode` for one sentence in search (the encoder and keys, or c and its products; s_0
    is counted per hypothesis by `decode_state_flops`)."""
    terms = encoder_flops(cfg, src_len)
    return sum(terms.values()) - terms.get("init_state", 0.0)


class SearchFlopCounter(nn.Module):
    """A model seen through search's interface (`encode`, `init_state`, `decode_step`), adding up the
    analytic FLOPs of every row it computes into `flops`: each beam hypothesis counts, padding does not
    (attention is counted at each row's real source length; the Transformer's self-attention at the
    number of steps since `init_state`, its cache's length plus the step's own)."""

    def __init__(self, model: Any, cfg: ModelConfig, tgt_vocab: int) -> None:
        super().__init__()
        self.model, self.cfg = model, cfg  # a submodule, so that search's eval()/train() reach it
        self.step_base = decode_step_flops(cfg, tgt_vocab, 0)
        self.step_per_src_token = decode_step_flops(cfg, tgt_vocab, 1) - self.step_base
        self.step_per_key = decode_step_flops(cfg, tgt_vocab, 0, 2) - self.step_base  # 0 for an RNN
        self.flops = 0.0
        self.steps = 0  # decode_step calls since init_state

    @property
    def flops(self) -> float:
        """The FLOPs counted since it was last set (reading it waits for the device, once)."""
        src_tokens = 0 if self._step_src_tokens is None else int(self._step_src_tokens)
        return self._flops + self.step_per_src_token * src_tokens

    @flops.setter
    def flops(self, value: float) -> None:
        # the steps' rows' source lengths add up on the device: a step's count waits for nothing (search's own
        # waits are what is timed)
        self._flops, self._step_src_tokens = value, None

    def encode(self, src: Tensor, src_lengths: Tensor) -> Any:
        """The model's `encode`, counted per sentence at its real length."""
        self._flops += sum(search_encode_flops(self.cfg, int(n)) for n in src_lengths.tolist())
        return self.model.encode(src, src_lengths)

    def init_state(self, enc: Any) -> Any:
        """The model's `init_state`, counted per row."""
        self._flops += enc.lengths.numel() * decode_state_flops(self.cfg)
        self.steps = 0
        return self.model.init_state(enc)

    def decode_step(self, prev_tokens: Tensor, state: Any, enc: Any) -> Any:
        """The model's `decode_step`, counted per row at the row's source length."""
        self.steps += 1
        self._flops += prev_tokens.numel() * (self.step_base + self.step_per_key * (self.steps - 1))
        step_tokens = enc.lengths.sum()
        self._step_src_tokens = step_tokens if self._step_src_tokens is None else self._step_src_tokens + step_tokens
        return self.model.decode_step(prev_tokens, state, enc)
