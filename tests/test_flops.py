"""The analytic FLOP count (nmt/flops.py) against torch's FlopCounterMode on the real models.

FlopCounterMode counts matrix products (mm, addmm, bmm, ...) as 2 m k n, like nmt.flops, with two
known differences, both accounted for below rather than hidden in a tolerance:
- additive attention's v^T tanh(.) runs as a matrix-vector product (aten.mv), which FlopCounterMode
  does not count (forward: 2 S a per step; backward: its weight gradient is another mv);
- the backward skips the gradient product of the encoder RNN's zero initial state (nothing to
  differentiate), one (batch x G) by (G x n) product per direction and layer: 1/S of that RNN's
  recurrent backward.
Elementwise work (gates, tanh, softmax, maxout, loss) is in neither count.
The Transformer's attention runs through F.scaled_dot_product_attention, whose fused CPU kernel
(aten._scaled_dot_product_flash_attention_for_cpu) FlopCounterMode has no formula for: it counts 0. Its
comparisons run on the math backend, which computes the same products (Q Kᵀ over every key, masked
after, and weights . V, per head) as counted bmm's; the fused kernel's 0 is checked too.
The batches have no padding: nmt.flops counts the useful work at real lengths, and the products a
model spends on padded positions are exactly what MFU leaves out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from nmt.config import ModelConfig
from nmt.data.batching import Batch, make_batch, make_source_batch
from nmt.decoding.search import beam_search, greedy_search
from nmt.models import build_model
from nmt.special import PAD_ID

from flops import (  # scripts/flops.py (pyproject.toml puts scripts/ on the tests' path)
    SearchFlopCounter,
    decode_state_flops,
    decode_step_flops,
    decoder_training_flops,
    encoder_flops,
    forward_flops,
    search_encode_flops,
    training_flops,
)

SRC_VOCAB, TGT_VOCAB = 53, 61


def small_config(
    attention: str, cell: str = "gru", layers: int = 1, maxout: int = 6, fixed_context: str = "last_state"
) -> ModelConfig:
    """Widths that are all different, so that a term with the wrong width cannot match by chance."""
    return ModelConfig(
        attention=attention,  # type: ignore[arg-type]
        fixed_context=fixed_context,  # type: ignore[arg-type]
        cell=cell,  # type: ignore[arg-type]
        embedding_size=8,
        hidden_size=16,
        attention_size=12,
        maxout_size=maxout,
        encoder_layers=layers,
    )


def transformer_config(positions: str = "sinusoidal") -> ModelConfig:
    """d_model 12 in 3 heads, feed-forward 20, 2 layers a side, distances clipped at 2 (5 of them)."""
    return ModelConfig(
        architecture="transformer", embedding_size=12, hidden_size=12, heads=3, feedforward_size=20, layers=2,
        positions=positions, relative_clip=2,  # type: ignore[arg-type]
    )


def small_batch() -> Batch:
    """Three pairs, no padding: padded positions are work the analytic count leaves out on purpose
    (it counts useful work), and how much of it a model does is an implementation choice."""
    src = [[5, 6, 7, 8, 9, 10, 11], [5, 6, 7, 9, 9, 9, 9], [12, 13, 14, 15, 16, 17, 18]]
    tgt = [[20, 21, 22, 23, 24], [25, 26, 27, 28, 29], [32, 33, 34, 35, 36]]
    return make_batch(src, tgt, [0, 1, 2])


def batch_forward_flops(cfg: ModelConfig, batch: Batch) -> float:
    """nmt.flops' forward count of every pair of `batch`."""
    src_len, tgt_len = batch.src.size(1), batch.tgt_in.size(1)
    return batch.src.size(0) * sum(forward_flops(cfg, TGT_VOCAB, src_len, tgt_len).values())


def v_product_flops(cfg: ModelConfig, batch: Batch) -> float:
    """The additive score's v^T product over the batch (an aten.mv, uncounted by FlopCounterMode)."""
    if cfg.attention != "additive":
        return 0.0
    return batch.src.size(0) * batch.tgt_in.size(1) * 2.0 * batch.src.size(1) * cfg.attention_size


def zero_state_gradient_flops(cfg: ModelConfig, batch: Batch) -> float:
    """The encoder's skipped d(h_0) products: one (batch x G) by (G x n) per layer and direction."""
    gates = (4 if cfg.cell == "lstm" else 3) * cfg.hidden_size
    directions = 2 if cfg.bidirectional_encoder else 1
    return cfg.encoder_layers * directions * 2.0 * batch.src.size(0) * gates * cfg.hidden_size


def counted(fn: Callable[[], object]) -> int:
    """FLOPs FlopCounterMode sees while `fn()` runs."""
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def counted_unfused(fn: Callable[[], object]) -> int:
    """FLOPs FlopCounterMode sees while `fn()` runs with attention on the math backend (see above)."""
    with sdpa_kernel(SDPBackend.MATH):
        return counted(fn)


CASES = [
    ("none", "gru", 1),
    ("additive", "gru", 1),
    ("additive", "gru", 2),
    ("none", "lstm", 2),
    ("dot", "gru", 1),
    ("general", "gru", 1),
    ("additive", "lstm", 1),
]


@pytest.mark.parametrize(("attention", "cell", "layers", "fixed_context"),
                         [(*case, "last_state") for case in CASES] + [("none", "gru", 2, "both_ends")])
def test_forward_count_matches_flop_counter(attention: str, cell: str, layers: int, fixed_context: str) -> None:
    torch.manual_seed(0)
    cfg = small_config(attention, cell, layers, fixed_context=fixed_context)
    model = build_model(cfg, SRC_VOCAB, TGT_VOCAB)
    batch = small_batch()
    measured = counted(lambda: model(batch.src, batch.src_lengths, batch.tgt_in))
    assert measured == batch_forward_flops(cfg, batch) - v_product_flops(cfg, batch)


@pytest.mark.parametrize(("attention", "cell", "layers"), CASES[:4])
def test_training_count_matches_flop_counter(attention: str, cell: str, layers: int) -> None:
    torch.manual_seed(0)
    cfg = small_config(attention, cell, layers)
    model = build_model(cfg, SRC_VOCAB, TGT_VOCAB)
    batch = small_batch()

    def step() -> None:
        logits = model(batch.src, batch.src_lengths, batch.tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, TGT_VOCAB), batch.tgt_out.reshape(-1), ignore_index=PAD_ID)
        loss.backward()

    measured = counted(step)
    analytic = 3.0 * batch_forward_flops(cfg, batch)
    explained = 3.0 * v_product_flops(cfg, batch) + zero_state_gradient_flops(cfg, batch)
    assert measured == analytic - explained
    # what the two differences amount to even at these tiny sizes (at the bench sizes: < 0.5%)
    assert abs(measured / analytic - 1.0) < 0.03


@pytest.mark.parametrize("attention", ["none", "additive"])
def test_search_counts_match_flop_counter(attention: str) -> None:
    torch.manual_seed(0)
    cfg = small_config(attention)
    model = build_model(cfg, SRC_VOCAB, TGT_VOCAB).eval()
    batch = small_batch()
    rows, src_len = batch.src.size(0), batch.src.size(1)
    with torch.inference_mode():
        holder: dict[str, Any] = {}
        encode = counted(lambda: holder.update(enc=model.encode(batch.src, batch.src_lengths)))
        enc = holder["enc"]
        init = counted(lambda: holder.update(state=model.init_state(enc)))
        prev = torch.tensor([20, 21, 22])
        step = counted(lambda: model.decode_step(prev, holder["state"], enc))
    assert encode == rows * search_encode_flops(cfg, src_len)
    assert init == rows * decode_state_flops(cfg)
    v_mv = rows * 2.0 * src_len * cfg.attention_size if attention == "additive" else 0.0
    assert step == rows * decode_step_flops(cfg, TGT_VOCAB, src_len) - v_mv


@pytest.mark.parametrize(("attention", "beam"), [("none", 1), ("additive", 1), ("additive", 3)])
def test_search_counter_counts_every_row_search_computes(attention: str, beam: int) -> None:
    """Through real greedy / beam search (rows leave as sentences finish): the counter's sum equals
    FlopCounterMode's, up to the uncounted v^T mv, which the counter's own numbers give back."""
    torch.manual_seed(0)
    cfg = small_config(attention)
    model = build_model(cfg, SRC_VOCAB, TGT_VOCAB)
    src, lengths = make_source_batch([[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]])  # no padding
    limits = torch.tensor([3, 9, 6])  # different limits: rows drop out at different steps
    counter = SearchFlopCounter(model, cfg, TGT_VOCAB)
    if beam == 1:
        measured = counted(lambda: greedy_search(counter, src, lengths, limits))
    else:
        measured = counted(lambda: beam_search(counter, src, lengths, beam, limits))
    src_len = src.size(1)
    rows_stepped = 0.0
    if attention == "additive":
        per_row = counter.step_base + src_len * counter.step_per_src_token
        encode_and_init = 3 * search_encode_flops(cfg, src_len) + 3 * beam * decode_state_flops(cfg)
        rows_stepped = (counter.flops - encode_and_init) / per_row
        assert (
            rows_stepped == int(rows_stepped) and rows_stepped >= 3 * beam
        )  # whole rows, each one step at least
    assert measured == counter.flops - rows_stepped * 2.0 * src_len * cfg.attention_size
    assert counter.flops > 0


def test_training_terms_by_hand() -> None:
    """The bench-like sizes, written out: a drift in any term shows up here with its name."""
    cfg = ModelConfig(
        attention="additive", embedding_size=256, hidden_size=512, attention_size=512, maxout_size=256
    )
    terms = decoder_training_flops(cfg, 8000, src_len=30, tgt_len=40)
    assert terms["output"] == 2 * 40 * 256 * 8000
    assert terms["readout"] == 2 * 40 * (512 + 256 + 1024) * 512
    assert terms["decoder_recurrent"] == 2 * 40 * 512 * (1536 + 512)
    assert terms["decoder_input"] == 2 * 40 * 256 * 1536 + 2 * 39 * 1024 * 1536
    assert terms["attention_scores"] == 40 * 2 * 30 * 512
    assert terms["attention_context"] == 40 * 2 * 30 * 1024
    enc = encoder_flops(cfg, 30)
    assert enc["encoder_l0_input"] == 2 * 2 * 30 * 256 * 1536
    assert enc["attention_keys"] == 2 * 30 * 1024 * 512
    # the paper's form: forward encoder, c n wide (512 pinned: the numbers below are for it)
    fixed_cfg = ModelConfig(attention="none", hidden_size=512, attention_size=512, maxout_size=256)
    fixed = decoder_training_flops(fixed_cfg, 8000, 30, 40)
    assert fixed["readout"] == 2 * 40 * (512 + 256) * 512
    assert fixed["decoder_input"] == 2 * 39 * 256 * 1536  # E y only: W_ctx c is once per sentence
    assert "attention_scores" not in fixed
    fixed_enc = encoder_flops(fixed_cfg, 30)
    assert fixed_enc["encoder_l0_input"] == 2 * 30 * 256 * 1536  # one direction
    assert fixed_enc["fixed_context"] == 2 * 512 * 512
    assert fixed_enc["context_gates"] == 2 * 512 * 1536 and fixed_enc["context_readout"] == 2 * 512 * 512
    both_cfg = ModelConfig(attention="none", hidden_size=512, maxout_size=256, fixed_context="both_ends")
    both = encoder_flops(both_cfg, 30)
    assert both["encoder_l0_input"] == 2 * 2 * 30 * 256 * 1536 and both["fixed_context"] == 2 * 1024 * 1024


def test_pairs_add_up() -> None:
    cfg = small_config("additive")
    one = training_flops(cfg, TGT_VOCAB, [7], [4])
    two = training_flops(cfg, TGT_VOCAB, [3], [9])
    assert training_flops(cfg, TGT_VOCAB, [7, 3], [4, 9]) == pytest.approx(one + two)
    # attention reads every source position at every target step; the fixed vector's decoder never does
    # (the encoder's cost grows with the source either way, so only the decoder's terms can tell)
    def decoder(cfg: ModelConfig, src_len: int) -> float:
        return sum(decoder_training_flops(cfg, TGT_VOCAB, src_len, 10).values())

    assert decoder(cfg, 40) > decoder(cfg, 5)
    assert decoder(small_config("none"), 40) == decoder(small_config("none"), 5)
    with pytest.raises(ValueError):
        training_flops(cfg, TGT_VOCAB, [1, 2], [3])


@pytest.mark.parametrize(("positions", "weights"), [("sinusoidal", False), ("relative", True), ("learned", True)])
def test_transformer_forward_count_matches_flop_counter(positions: str, weights: bool) -> None:
    """`weights`: the last layer's cross-attention written out (return_attention), the others fused."""
    torch.manual_seed(0)
    cfg = transformer_config(positions)
    model = build_model(cfg, SRC_VOCAB, TGT_VOCAB)
    batch = small_batch()
    analytic = batch_forward_flops(cfg, batch)
    assert counted_unfused(lambda: model(batch.src, batch.src_lengths, batch.tgt_in, weights)) == analytic
    # the default kernels (torch's choice; a relative bias is a float mask): only attention products go
    # uncounted, and all of them when every attention is fused (boolean masks, no weights asked)
    terms = forward_flops(cfg, TGT_VOCAB, batch.src.size(1), batch.tgt_in.size(1))
    attention = batch.src.size(0) * sum(v for k, v in terms.items() if k.endswith(("_scores", "_context")))
    measured = counted(lambda: model(batch.src, batch.src_lengths, batch.tgt_in, weights))
    assert analytic - attention <= measured < analytic
    if positions != "relative" and not weights:
        assert measured == analytic - attention


@pytest.mark.parametrize("positions", ["sinusoidal", "relative"])
def test_transformer_training_count_matches_flop_counter(positions: str) -> None:
    torch.manual_seed(0)
    cfg = transformer_config(positions)
    model = build_model(cfg, SRC_VOCAB, TGT_VOCAB)
    batch = small_batch()

    def step() -> None:
        logits = model(batch.src, batch.src_lengths, batch.tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, TGT_VOCAB), batch.tgt_out.reshape(-1), ignore_index=PAD_ID)
        loss.backward()

    lengths = [batch.src.size(1)] * 3, [batch.tgt_in.size(1)] * 3
    assert counted_unfused(step) == training_flops(cfg, TGT_VOCAB, *lengths) == 3.0 * batch_forward_flops(cfg, batch)


def test_transformer_search_steps_match_flop_counter() -> None:
    """encode (the source's cross-attention keys and values included), no init_state product, and step t
    reading t keys."""
    torch.manual_seed(0)
    cfg = transformer_config("relative")
    model = build_model(cfg, SRC_VOCAB, TGT_VOCAB).eval()
    batch = small_batch()
    rows, src_len = batch.src.size(0), batch.src.size(1)
    with torch.inference_mode():
        holder: dict[str, Any] = {}
        encode = counted_unfused(lambda: holder.update(enc=model.encode(batch.src, batch.src_lengths)))
        enc = holder["enc"]
        init = counted_unfused(lambda: holder.update(state=model.init_state(enc)))
        for step, prev in enumerate((torch.tensor([20, 21, 22]), torch.tensor([23, 24, 25])), start=1):
            flops = counted_unfused(lambda p=prev: holder.update(state=model.decode_step(p, holder["state"], enc)[1]))
            assert flops == rows * decode_step_flops(cfg, TGT_VOCAB, src_len, step), step
    assert encode == rows * search_encode_flops(cfg, src_len) and init == decode_state_flops(cfg) == 0
    assert decode_step_flops(cfg, TGT_VOCAB, src_len, 9) > decode_step_flops(cfg, TGT_VOCAB, src_len, 2)


@pytest.mark.parametrize("beam", [1, 3])
def test_search_counter_counts_the_transformers_rows_and_steps(beam: int) -> None:
    torch.manual_seed(0)
    cfg = transformer_config()
    model = build_model(cfg, SRC_VOCAB, TGT_VOCAB)
    src, lengths = make_source_batch([[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]])  # no padding
    limits = torch.tensor([3, 9, 6])
    counter = SearchFlopCounter(model, cfg, TGT_VOCAB)
    if beam == 1:
        measured = counted_unfused(lambda: greedy_search(counter, src, lengths, limits))
    else:
        measured = counted_unfused(lambda: beam_search(counter, src, lengths, beam, limits))
    assert measured == counter.flops > 0 and counter.steps > 1


def test_transformer_terms_by_hand() -> None:
    """OpenNMT-py's small Transformer (the bench's), written out."""
    cfg = ModelConfig(architecture="transformer", embedding_size=256, hidden_size=256, positions="relative")
    enc = encoder_flops(cfg, 30)
    assert enc["encoder_self_projections"] == 3 * 2 * 30 * 256 * 4 * 256
    assert enc["encoder_self_scores"] == enc["encoder_self_context"] == 3 * 2 * 30 * 30 * 256
    assert enc["encoder_feedforward"] == 3 * 2 * 2 * 30 * 256 * 1024
    assert enc["encoder_relative"] == 3 * 2 * 30 * 256 * 33
    assert enc["cross_keys_values"] == 3 * 2 * 30 * 256 * 512
    dec = decoder_training_flops(cfg, 8000, src_len=30, tgt_len=40)
    assert dec["decoder_self_scores"] == 3 * 2 * 40 * 40 * 256  # the whole T x T, as the fused kernel
    assert dec["cross_projections"] == 3 * 2 * 40 * 256 * 512
    assert dec["cross_scores"] == dec["cross_context"] == 3 * 2 * 40 * 30 * 256
    assert dec["output"] == 2 * 40 * 256 * 8000
    assert "init_state" not in enc and decode_state_flops(cfg) == 0
    step_10 = sum(decoder_training_flops(cfg, 8000, 30, 1).values()) + 2 * 2 * 9 * 256 * 3
    assert decode_step_flops(cfg, 8000, 30, 10) == step_10  # 9 more keys than step 1, in 3 layers
