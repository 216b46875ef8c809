"""The analytic FLOP count (nmt/flops.py) against torch's FlopCounterMode on the real models.

FlopCounterMode counts matrix products (mm, addmm, bmm, ...) as 2 m k n, like nmt.flops, with two
known differences, both accounted for below rather than hidden in a tolerance:
- additive attention's v^T tanh(.) runs as a matrix-vector product (aten.mv), which FlopCounterMode
  does not count (forward: 2 S a per step; backward: its weight gradient is another mv);
- the backward skips the gradient product of the encoder RNN's zero initial state (nothing to
  differentiate), one (batch x G) by (G x n) product per direction and layer: 1/S of that RNN's
  recurrent backward.
Elementwise work (gates, tanh, softmax, maxout, loss) is in neither count.
The batches have no padding: nmt.flops counts the useful work at real lengths, and the products a
model spends on padded positions are exactly what MFU leaves out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from nmt.config import ModelConfig
from nmt.data.batching import Batch, make_batch, make_source_batch
from nmt.decoding.search import beam_search, greedy_search
from nmt.flops import (
    SearchFlopCounter,
    decode_state_flops,
    decode_step_flops,
    decoder_training_flops,
    encoder_flops,
    forward_flops,
    search_encode_flops,
    training_flops,
)
from nmt.models import build_model
from nmt.special import PAD_ID

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
