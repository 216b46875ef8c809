"""The one decoder of both models; its context comes from a pluggable `ContextProvider`.

Step i (Bahdanau et al. 2014, appendix A), with c_i from attention or the fixed vector c:
    c_i = context(s_{i-1})
    t_i = U_o s_{i-1} + V_o E y_{i-1} + C_o c_i ; maxout over pairs ; logits = W_o t_i
    s_i = RNN(s_{i-1}, [E y_{i-1} ; c_i])      (c_i enters every gate)
The RNN is an nn.GRU / nn.LSTM whose weights both models share. The attention model steps it with
the cell math written out. The fixed-vector model's c is the same at every step, so its products with
the input-gate and readout weights are computed once per sentence (`precompute`); on a CPU its steps
then run with the cell math written out too, on CUDA as one fused (cuDNN) call over [E y ; c].

training.compile (`compile_steps`): the body of a training loop that runs step by step (the attention model's,
and the fixed-vector model's where it is not fused) goes through torch.compile, one function per step: the
products with s_{i-1}, the attention and the gate update, so that inductor fuses the elementwise work between
the matrix products. The loop itself stays in Python (traced whole, it would unroll and be traced again for
every length); validation and search run the same step eagerly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.models.interface import StepCompiler, pick_positions
from nmt.models.output_loss import linear_cross_entropy
from nmt.models.rnn.attention import ContextProvider
from nmt.models.rnn.encoder import EncoderOutput, gated_update
from nmt.special import PAD_ID


@dataclass
class DecoderState:
    """s_{i-1} (and the LSTM memory) for a batch of hypotheses."""

    hidden: Tensor  # batch x n
    cell: Tensor | None = None  # batch x n, LSTM only

    def index_select(self, index: Tensor) -> DecoderState:
        """Rows `index` of the state (beam search expansion and back-pointers)."""
        cell = None if self.cell is None else self.cell.index_select(0, index)
        return DecoderState(self.hidden.index_select(0, index), cell)


# (s_{i-1}, LSTM memory, E y's gate inputs, [W_hh ; W_q]^T, [b_hh ; 0], W_ctx^T, enc) -> (c_i, weights, s_i, memory)
AttentionStep = Callable[
    [Tensor, Tensor | None, Tensor, Tensor, Tensor, Tensor, EncoderOutput], tuple[Tensor, Tensor, Tensor, Tensor | None]
]
# (s_{i-1}, LSTM memory, the step's gate inputs, W_hh^T, b_hh) -> (s_i, memory)
FixedStep = Callable[[Tensor, Tensor | None, Tensor, Tensor, Tensor], tuple[Tensor, Tensor | None]]


def rnn_cell(gi: Tensor, gh: Tensor, state: DecoderState) -> DecoderState:
    """One GRU/LSTM update of the decoder state. gi, gh: batch x (3n | 4n), including their biases."""
    return DecoderState(*gated_update(gi, gh, state.hidden, state.cell))


class Decoder(nn.Module):
    """Conditional RNN decoder with Bahdanau's deep output (maxout, or a tanh layer if maxout_size=0)."""

    def __init__(
        self, vocab_size: int, embedding_size: int, hidden_size: int, provider: ContextProvider, cell: str = "gru",
        maxout_size: int = 0, dropout: float = 0.0, tie_embeddings: bool = False,
    ) -> None:
        super().__init__()
        self.embedding_size = embedding_size
        self.maxout_size = maxout_size
        self.is_lstm = cell == "lstm"
        self.provider = provider
        self.embedding = nn.Embedding(vocab_size, embedding_size, padding_idx=PAD_ID)
        self.dropout = nn.Dropout(dropout)
        rnn_class = nn.LSTM if self.is_lstm else nn.GRU
        self.rnn = rnn_class(embedding_size + provider.context_size, hidden_size, batch_first=True)
        # 3n | 4n; the step functions read no attribute of self.rnn (dynamo cannot trace an nn.GRU / nn.LSTM)
        self.gate_size = self.rnn.weight_hh_l0.size(0)
        self.init_proj = nn.Linear(provider.init_size, hidden_size)  # W_s
        # the tanh variant is embedding_size wide, so it can always be tied to the embeddings
        readout_size = 2 * maxout_size if maxout_size > 0 else embedding_size
        output_input_size = maxout_size if maxout_size > 0 else embedding_size
        self.readout_state = nn.Linear(hidden_size, readout_size)  # U_o (+ bias)
        self.readout_embedding = nn.Linear(embedding_size, readout_size, bias=False)  # V_o
        self.readout_context = nn.Linear(provider.context_size, readout_size, bias=False)  # C_o
        self.output = nn.Linear(output_input_size, vocab_size)  # W_o
        # fixed-vector training: None = the fused nn.GRU on CUDA, the precomputed steps elsewhere
        self.fused_fixed_steps: bool | None = None
        # training.compile: the training steps' compiled versions of `_attention_step` and `_fixed_step`
        self.compiled_attention_step: AttentionStep | None = None
        self.compiled_fixed_step: FixedStep | None = None
        if tie_embeddings:
            self.output.weight = self.embedding.weight

    def fixed_steps_fused(self, device: torch.device) -> bool:
        """Whether the fixed-vector model's training forward on `device` is one fused RNN call, not a step loop."""
        return device.type == "cuda" if self.fused_fixed_steps is None else self.fused_fixed_steps

    def compile_steps(self, compiler: StepCompiler) -> None:
        """training.compile: the training forward's steps run `compiler(step)` (see the module's docstring)."""
        self.compiled_attention_step = compiler(self._attention_step)
        self.compiled_fixed_step = compiler(self._fixed_step)

    def _training_step(self) -> bool:
        """Whether this forward is a training step (training mode, gradients on), which runs compiled steps
        where they are set: validation (eval, no_grad) and the analyses run the eager ones."""
        return self.training and torch.is_grad_enabled()

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        """s_0 = tanh(W_s x), x = bwd_1 (attention) or c (fixed vector); LSTM memory starts at zero. In the
        weights' precision under autocast too (fp32 while the products run in bf16): the state is carried in it
        (`gated_update`)."""
        projected = self.init_proj(enc.init_input)  # batch x n
        hidden = torch.tanh(projected.to(self.init_proj.weight.dtype))
        return DecoderState(hidden, torch.zeros_like(hidden) if self.is_lstm else None)

    def precompute(self, enc: EncoderOutput) -> EncoderOutput:
        """The fixed context's products with the input-gate and readout weights, once per sentence
        (the attention model's contexts change every step: nothing to do)."""
        if enc.context is None:
            return enc
        _, w_ctx, b_ih = self._input_weights()
        return replace(
            enc,
            context_gates=F.linear(enc.context, w_ctx, b_ih),  # batch x gates
            context_readout=self.readout_context(enc.context),  # batch x readout
        )

    def _deep_output(self, states: Tensor, embedded: Tensor, context_readout: Tensor) -> Tensor:
        """t_i, what W_o projects onto the vocabulary: (... x n, ... x m, ... x readout broadcastable,
        C_o c_i) -> ... x output_input_size, dropout applied."""
        pre = self.readout_state(states) + self.readout_embedding(embedded) + context_readout
        if self.maxout_size > 0:
            hidden = pre.unflatten(-1, (self.maxout_size, 2)).amax(dim=-1)
        else:
            hidden = torch.tanh(pre)
        return self.dropout(hidden)

    def _input_weights(self) -> tuple[Tensor, Tensor, Tensor]:
        """The RNN input weight split into its embedding and context columns, and the input bias."""
        weight = self.rnn.weight_ih_l0  # gates x (m + ctx)
        return weight[:, : self.embedding_size], weight[:, self.embedding_size :], self.rnn.bias_ih_l0

    def forward(
        self, tgt_in: Tensor, enc: EncoderOutput, return_attention: bool = False, target_positions: Tensor | None = None,
        targets: Tensor | None = None, label_smoothing: float = 0.0,
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing. tgt_in: batch x tgt_len -> logits batch x tgt_len x vocab, and the
        attention weights batch x tgt_len x src_len when asked.

        With `target_positions` (n, long: b * tgt_len + t, `pick_positions`) the logits are n x vocab, for
        those positions only: training skips the output layer on padding. With `targets` too (n, the
        reference tokens there) the result is instead their summed cross-entropy (fp32), computed without
        holding every position's logits (`linear_cross_entropy`).
        """
        if return_attention and not self.provider.has_attention:
            raise ValueError("return_attention: the fixed-context model (attention: none) has no attention")
        if targets is not None and target_positions is None:
            raise ValueError("targets need the target_positions they stand at")
        embedded = self.dropout(self.embedding(tgt_in))  # batch x tgt_len x m
        state = self.init_state(enc)
        weights: Tensor | None = None
        if self.provider.has_attention:
            states, contexts, weights = self._attention_states(embedded, enc, state, return_attention)
            if target_positions is not None:
                contexts = pick_positions(contexts, target_positions)
            readout = self.readout_context(contexts)  # batch x tgt_len x readout, or n x readout (picked)
        else:
            assert enc.context_readout is not None, "call precompute(enc) first (Seq2Seq.encode does)"
            states = self._fixed_states(embedded, enc, state, self.fixed_steps_fused(embedded.device))
            readout = enc.context_readout.unsqueeze(1)  # batch x 1 x readout, the same C_o c at every step
            if target_positions is not None:
                # expanded, not indexed by sentence: the gradient then sums over the steps as a reduction does,
                # the sum the committed results were trained with, which they reproduce by (index_add_'s one
                # position at a time rounds otherwise)
                readout = pick_positions(readout.expand(-1, tgt_in.size(1), -1), target_positions)
        if target_positions is not None:
            states, embedded = pick_positions(states, target_positions), pick_positions(embedded, target_positions)
        hidden = self._deep_output(states, embedded, readout)
        if targets is not None:
            loss = linear_cross_entropy(hidden, self.output.weight, self.output.bias, targets, label_smoothing)
            return loss, weights
        return self.output(hidden), weights

    def _fixed_states(self, embedded: Tensor, enc: EncoderOutput, state: DecoderState, fused: bool) -> Tensor:
        """s_0..s_{T-1} (batch x T x n) of the fixed-vector model. Stepped: E y's gate inputs in one matmul
        plus `precompute`'s W_ctx c + b_ih, then one recurrent product per step. `fused`: ONE RNN call over
        [E y ; c] (recomputing c's input product costs less on CUDA than a launch per step), in fp32 (or
        fp64) with autocast off like the encoder's fused path (autocast would run cuDNN's RNN in fp16)."""
        if embedded.size(1) == 1:  # s_0 alone: the RNN's update at the last step is never read
            return state.hidden.unsqueeze(1)
        if fused:
            assert enc.context is not None
            batch, steps, _ = embedded.shape
            context = enc.context.unsqueeze(1).expand(batch, steps - 1, enc.context.size(-1))
            exact = torch.promote_types(embedded.dtype, torch.float32)
            with torch.autocast(embedded.device.type, enabled=False):
                inputs = torch.cat([embedded[:, :-1].to(exact), context.to(exact)], dim=-1)
                h0 = state.hidden.to(exact).unsqueeze(0).contiguous()  # 1 x batch x n
                hx = (h0, torch.zeros_like(h0)) if self.is_lstm else h0
                outputs, _ = self.rnn(inputs, hx)  # batch x (T-1) x n
            return torch.cat([h0[0].unsqueeze(1), outputs], dim=1)
        assert enc.context_gates is not None
        w_emb, _, _ = self._input_weights()
        inputs = F.linear(embedded[:, :-1], w_emb) + enc.context_gates.unsqueeze(1)  # batch x (T-1) x gates
        w_hh_t, b_hh = self.rnn.weight_hh_l0.t(), self.rnn.bias_hh_l0
        compiled = self.compiled_fixed_step
        step = compiled if compiled is not None and self._training_step() else self._fixed_step
        hidden, cell = state.hidden, state.cell
        states = [hidden]
        for step_inputs in inputs.unbind(1):
            hidden, cell = step(hidden, cell, step_inputs, w_hh_t, b_hh)
            states.append(hidden)
        return torch.stack(states, dim=1)

    def _fixed_step(
        self, hidden: Tensor, cell: Tensor | None, step_inputs: Tensor, w_hh_t: Tensor, b_hh: Tensor
    ) -> tuple[Tensor, Tensor | None]:
        """One step of `_fixed_states`' loop (a `FixedStep`): s_i and the LSTM memory from s_{i-1}."""
        return gated_update(step_inputs, torch.addmm(b_hh, hidden, w_hh_t), hidden, cell)

    def _attention_states(
        self, embedded: Tensor, enc: EncoderOutput, state: DecoderState, keep_weights: bool
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """The step loop: s_{i-1} (batch x T x n), c_i (batch x T x ctx), weights (batch x T x src_len).
        Steps 1..T-1 are `_attention_step` (compiled in training under training.compile); step T attends
        only (`_attend`, eager), since s_T is never read."""
        w_emb, w_ctx, b_ih = self._input_weights()
        inputs = F.linear(embedded, w_emb, b_ih)  # batch x T x gates: all steps in one matmul
        w_ctx_t = w_ctx.t()
        w_query = self.provider.query_weight()
        if w_query is None:
            fused_w, fused_b = self.rnn.weight_hh_l0, self.rnn.bias_hh_l0
        else:  # one matmul of s_{i-1} per step gives the recurrent gates and the query
            fused_w = torch.cat([self.rnn.weight_hh_l0, w_query], dim=0)
            fused_b = torch.cat([self.rnn.bias_hh_l0, self.rnn.bias_hh_l0.new_zeros(w_query.size(0))])
        fused_w_t = fused_w.t()
        compiled = self.compiled_attention_step
        step = compiled if compiled is not None and self._training_step() else self._attention_step
        hidden, cell = state.hidden, state.cell
        states, contexts, weights = [], [], []
        # unbind/split rather than indexing: one gradient concatenation instead of a zero-filled copy of
        # the whole tensor per step
        *updating, _ = inputs.unbind(1)  # the last step's inputs would only give s_T
        for step_inputs in updating:
            states.append(hidden)
            context, alpha, hidden, cell = step(hidden, cell, step_inputs, fused_w_t, fused_b, w_ctx_t, enc)
            contexts.append(context)
            if keep_weights:
                weights.append(alpha)
        states.append(hidden)
        context, alpha, _ = self._attend(hidden, fused_w_t, fused_b, enc)
        contexts.append(context)
        if keep_weights:
            weights.append(alpha)
        attention = torch.stack(weights, dim=1) if keep_weights else None
        return torch.stack(states, dim=1), torch.stack(contexts, dim=1), attention

    def _attend(self, hidden: Tensor, fused_w_t: Tensor, fused_b: Tensor, enc: EncoderOutput) -> tuple[Tensor, Tensor, Tensor]:
        """c_i, its weights, and the recurrent gates W_hh s_{i-1} + b_hh, from one matmul of s_{i-1} (batch x n)
        by [W_hh ; W_q]^T, which gives the query too (or W_hh^T alone: the raw state is the query)."""
        projected = torch.addmm(fused_b, hidden, fused_w_t)  # batch x (gates + q)
        query_size = self.provider.query_size
        if query_size:
            recurrent, query = projected.split([self.gate_size, query_size], dim=1)
        else:
            recurrent, query = projected, hidden
        context, alpha = self.provider.attend(query, enc)
        return context, alpha, recurrent

    def _attention_step(
        self, hidden: Tensor, cell: Tensor | None, step_inputs: Tensor, fused_w_t: Tensor, fused_b: Tensor,
        w_ctx_t: Tensor, enc: EncoderOutput,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """One step of `_attention_states`' loop (an `AttentionStep`): c_i and its weights from s_{i-1}, then
        s_i (and the LSTM memory) from s_{i-1}, c_i and the step's E y gate inputs (batch x gates, b_ih in)."""
        context, alpha, recurrent = self._attend(hidden, fused_w_t, fused_b, enc)
        gi = torch.addmm(step_inputs, context.to(step_inputs.dtype), w_ctx_t)
        new_hidden, new_cell = gated_update(gi, recurrent, hidden, cell)
        return context, alpha, new_hidden, new_cell

    def decode_step(
        self, prev_tokens: Tensor, state: DecoderState, enc: EncoderOutput
    ) -> tuple[Tensor, DecoderState, Tensor | None]:
        """prev_tokens: batch -> log-probs batch x vocab (fp32+), s_i, weights batch x src_len | None."""
        embedded = self.dropout(self.embedding(prev_tokens))  # batch x m
        hidden = state.hidden
        recurrent = F.linear(hidden, self.rnn.weight_hh_l0, self.rnn.bias_hh_l0)  # batch x gates
        alpha: Tensor | None = None
        w_emb, w_ctx, b_ih = self._input_weights()
        if self.provider.has_attention:
            w_query = self.provider.query_weight()
            query = hidden if w_query is None else F.linear(hidden, w_query)
            context, alpha = self.provider.attend(query, enc)
            context_readout = self.readout_context(context)
            gi = F.linear(embedded, w_emb, b_ih) + F.linear(context.to(embedded.dtype), w_ctx)
        else:
            assert enc.context_gates is not None and enc.context_readout is not None
            context_readout, gi = enc.context_readout, F.linear(embedded, w_emb) + enc.context_gates
        logits = self.output(self._deep_output(hidden, embedded, context_readout))
        # float32 at least: half-precision log-probs would make beam scores tie and drift
        log_probs = F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
        return log_probs, rnn_cell(gi, recurrent, state), alpha
