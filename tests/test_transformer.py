"""The Transformer: attention values by hand (with and without √d_k), the causal mask, padding, relative
positions, the key/value cache, batch-invariant beam search, its config rules, and that it learns."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

import pytest
import torch

from nmt.config_sections import ModelConfig
from nmt.data.batching import make_source_batch
from nmt.decoding.search import beam_search, greedy_search, max_output_lengths
from nmt.errors import NMTError
from nmt.models import build_model
from nmt.models.transformer.model import Transformer, sinusoids
from nmt.models.transformer.multihead import HeadSoftmax, MultiHeadAttention
from nmt.special import BOS_ID, EOS_ID, PAD_ID
from tests.helpers import positions_of

POSITIONS = ["sinusoidal", "learned", "relative"]


def tiny(positions: str = "sinusoidal", norm: str = "post", seed: int = 0, **keys: object) -> Transformer:
    torch.manual_seed(seed)
    config = ModelConfig(
        architecture="transformer", embedding_size=16, hidden_size=16, heads=4, feedforward_size=32, layers=2,
        positions=positions, norm=norm, relative_clip=3, **keys,  # type: ignore[arg-type]
    )
    model = build_model(config, 30, 40)
    assert isinstance(model, Transformer)
    return model.eval()


def padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids (EOS appended, right-padded) and lengths."""
    return make_source_batch(rows)


def assert_attention_by_hand(
    attention: MultiHeadAttention, states: torch.Tensor, memory: torch.Tensor, out: torch.Tensor,
    weights: torch.Tensor | None, scores_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    """Two heads of size 2 over one sentence, written out: head h reads columns 2h, 2h+1 of the queries, keys and
    values; `scores_of(q_h, k_h)` its scores (3 x 5), their softmax its weights, and the heads side by side go
    through the output projection."""
    q = states[0] @ attention.query.weight.t() + attention.query.bias  # 3 x 4
    kv = memory[0] @ attention.key_value.weight.t() + attention.key_value.bias  # 5 x 8: keys, then values
    heads = []
    for h in range(2):
        qh, kh, vh = q[:, 2 * h : 2 * h + 2], kv[:, 2 * h : 2 * h + 2], kv[:, 4 + 2 * h : 4 + 2 * h + 2]
        alpha = torch.softmax(scores_of(qh, kh), dim=-1)
        if weights is not None:
            torch.testing.assert_close(weights[0, h], alpha)
        heads.append(alpha @ vh)
    expected = torch.cat(heads, dim=-1) @ attention.out.weight.t() + attention.out.bias
    torch.testing.assert_close(out[0], expected)


@pytest.mark.parametrize("scaled", [True, False])
@pytest.mark.parametrize("need_weights", [True, False])
def test_attention_values_by_hand(scaled: bool, need_weights: bool) -> None:
    torch.manual_seed(1)
    attention = MultiHeadAttention(size=4, heads=2)
    attention.scaled = scaled
    states, memory = torch.randn(1, 3, 4), torch.randn(1, 5, 4)
    mask = torch.tensor([True, True, True, False, True]).view(1, 1, 1, 5)
    out, weights = attention(states, attention.keys_values(memory), mask, need_weights=need_weights)

    def scores_of(qh: torch.Tensor, kh: torch.Tensor) -> torch.Tensor:
        scores = (qh @ kh.t()) / (math.sqrt(2) if scaled else 1.0)
        scores[:, 3] = -math.inf  # the masked key
        return scores

    assert_attention_by_hand(attention, states, memory, out, weights, scores_of)


@pytest.mark.parametrize("need_weights", [True, False])
def test_relative_attention_values_by_hand(need_weights: bool) -> None:
    """Shaw et al.'s scores, (q_i . k_j + q_i . a_clip(j - i)) / sqrt(d_k), with a_d the relative table's row
    d + clip; queries at positions 2..4 (offset 2, as a cached decoder step sees them) over 5 keys."""
    torch.manual_seed(3)
    attention = MultiHeadAttention(size=4, heads=2, relative_clip=2)
    states, memory = torch.randn(1, 3, 4), torch.randn(1, 5, 4)
    out, weights = attention(states, attention.keys_values(memory), None, offset=2, need_weights=need_weights)
    table = attention.relative.weight  # 5 x 2: distances -2..2

    def scores_of(qh: torch.Tensor, kh: torch.Tensor) -> torch.Tensor:
        scores = torch.empty(3, 5)
        for t in range(3):
            for j in range(5):
                relative = table[max(-2, min(2, j - (t + 2))) + 2]
                scores[t, j] = (qh[t] @ kh[j] + qh[t] @ relative) / math.sqrt(2)
        return scores

    assert_attention_by_hand(attention, states, memory, out, weights, scores_of)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_a_layer_adds_each_sublayer_to_its_input_and_normalises_as_its_norm_says(norm: str) -> None:
    """post (the paper's): x <- LN(x + sublayer(x)), so each position leaves the layer with mean 0 and variance 1
    (LayerNorm's initial gain 1, bias 0); pre: x <- x + sublayer(LN(x)), its output the residual sum, by hand."""
    torch.manual_seed(4)
    layer = tiny(norm=norm).encoder_layers[0].eval()
    x = torch.randn(2, 5, 16) * 3 + 1
    out, _ = layer(x, None)
    if norm == "post":
        torch.testing.assert_close(out.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
        torch.testing.assert_close(out.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-3, rtol=0)
        return
    h = layer.norms[0](x)
    x = x + layer.self_attention(h, layer.self_attention.keys_values(h), None)[0]
    torch.testing.assert_close(out, x + layer.feedforward(layer.norms[-1](x)))


def test_embeddings_are_scaled_by_the_root_of_d_model_before_the_positions() -> None:
    """The paper's √d_model E y + PE(p): offset 0 and, as a cached step sees it, offset 3."""
    model = tiny()
    tokens = torch.tensor([[5, 6, 7]])
    for offset in (0, 3):
        expected = model.tgt_embedding(tokens) * 4.0 + sinusoids(torch.arange(offset, offset + 3), 16)  # √16
        torch.testing.assert_close(model._embed(tokens, model.tgt_embedding, offset), expected)


def test_a_search_step_s_attention_is_the_last_layer_s_cross_attention_averaged_over_its_heads() -> None:
    model = tiny()
    src, lengths = padded([[4, 5, 6, 7], [8, 9]])
    enc = model.encode(src, lengths)
    seen: list[torch.Tensor] = []
    hook = model.decoder_layers[-1].cross_attention.register_forward_hook(lambda m, i, out: seen.append(out[1]))
    try:
        _, _, weights = model.decode_step(torch.full((2,), BOS_ID), model.init_state(enc), enc)
    finally:
        hook.remove()
    (heads,) = seen  # batch x heads x 1 x s: the four heads' own weights
    assert heads.shape == (2, 4, 1, 5) and not torch.allclose(heads[:, 0], heads[:, 1])
    torch.testing.assert_close(weights, heads.mean(dim=1)[:, 0])


def test_head_softmax_is_float32_at_least_and_keeps_float64() -> None:
    scores = torch.tensor([[[[1e-9, 0.0, -1.0]]]], dtype=torch.float64)
    weights = HeadSoftmax()(scores, None, torch.float64)
    assert torch.equal(weights, torch.softmax(scores, dim=-1))  # not through float32, which loses the 1e-9
    half = HeadSoftmax()(scores.to(torch.bfloat16), torch.tensor([True, True, False]), torch.bfloat16)
    assert half.dtype == torch.bfloat16 and half[..., 2].item() == 0.0


def test_relative_scores_depend_on_the_distance_only_and_are_clipped() -> None:
    torch.manual_seed(2)
    attention = MultiHeadAttention(size=8, heads=2, relative_clip=2)
    query = torch.randn(1, 2, 1, 4).expand(1, 2, 7, 4)  # the same query at 7 positions
    bias = attention._relative_bias(query, keys=7, offset=0)[0, 0]  # 7 x 7: bias[i, j] for distance j - i
    for i in range(6):
        for j in range(6):
            assert torch.equal(bias[i, j], bias[i + 1, j + 1])  # shift invariance
    assert torch.equal(bias[0, 2], bias[0, 6]) and torch.equal(bias[6, 0], bias[4, 0])  # beyond ±2: clipped
    assert not torch.equal(bias[0, 1], bias[0, 2])
    # a query at offset 3 sees keys as the query at position 3 of the full sequence does (the cache's case)
    torch.testing.assert_close(attention._relative_bias(query[:, :, :1], keys=7, offset=3)[0, 0, 0], bias[3])


@pytest.mark.parametrize("positions", POSITIONS)
def test_the_future_changes_nothing_before_it(positions: str) -> None:
    model = tiny(positions)
    src, lengths = padded([[5, 6, 7]])
    tgt = torch.tensor([[BOS_ID, 8, 9, 10, 11, 12]])
    changed = tgt.clone()
    changed[0, 4] = 20
    a, b = model(src, lengths, tgt), model(src, lengths, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4], rtol=0, atol=0)
    assert not torch.allclose(a[:, 4:], b[:, 4:])


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_a_padded_batch_equals_its_rows_one_at_a_time(positions: str, norm: str) -> None:
    model = tiny(positions, norm)
    rows = [[5, 6, 7, 8, 9], [10, 11], [12]]
    targets = [[BOS_ID, 3, 4, 5], [BOS_ID, 6], [BOS_ID, 7, 8]]
    src, lengths = padded(rows)
    tgt = torch.full((3, 4), PAD_ID)
    for i, t in enumerate(targets):
        tgt[i, : len(t)] = torch.tensor(t)
    batch = model(src, lengths, tgt)
    for i, (row, t) in enumerate(zip(rows, targets, strict=True)):
        alone = model(*padded([row]), torch.tensor([t]))
        torch.testing.assert_close(batch[i, : len(t)], alone[0], atol=1e-5, rtol=1e-5)


def test_source_lengths_outside_the_padded_batch_are_refused() -> None:
    """encode refuses a length of 0 or past the padded source (it reads them where a batch keeps them, on the
    host, not after their copy to the device, which on a GPU would wait for the work queued before)."""
    model = tiny()
    src, lengths = padded([[5, 6, 7], [8]])
    for bad in ([4, 0], [5, 2]):
        with pytest.raises(ValueError, match=r"src_lengths must lie in \[1, 4\], got " + re.escape(str(bad))):
            model.encode(src, torch.tensor(bad))
    assert torch.equal(model.encode(src, lengths).lengths, torch.tensor([4, 2]))


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_cached_steps_equal_teacher_forcing(positions: str, norm: str) -> None:
    model = tiny(positions, norm)
    src, lengths = padded([[5, 6, 7, 8], [9, 10]])
    tgt = torch.tensor([[BOS_ID, 3, 4, 5, 6, 7, 8], [BOS_ID, 9, 10, 11, 12, 13, 14]])
    logits, attention = model(src, lengths, tgt, return_attention=True)
    enc = model.encode(src, lengths)
    state = model.init_state(enc)
    rooms = []
    for t in range(tgt.size(1)):
        log_probs, state, weights = model.decode_step(tgt[:, t], state, enc)
        assert state.steps == t + 1
        rooms.append(state.buffer.size(4))
        torch.testing.assert_close(log_probs, torch.log_softmax(logits[:, t], -1), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(weights, attention[:, t], atol=1e-6, rtol=1e-5)
    assert torch.all(attention[1, :, 3:] == 0)  # never on the padding
    torch.testing.assert_close(attention.sum(-1), torch.ones(2, tgt.size(1)))
    assert rooms == [1, 2, 4, 4, 8, 8, 8]  # copied when full, into twice the room: 4 buffers for 7 steps


@pytest.mark.parametrize("grad", [False, True])  # search runs without gradients; out= records none
def test_a_reordered_cache_is_filled_in_place_once_and_copied_for_a_second_step(grad: bool) -> None:
    model = tiny("relative")
    src, lengths = padded([[5, 6, 7], [9, 10]])
    tgt = torch.tensor([[BOS_ID, 3, 4, 5], [BOS_ID, 9, 10, 11]])
    logits = model(src, lengths, tgt).detach()
    swap = torch.tensor([1, 0])
    with torch.set_grad_enabled(grad):
        enc = model.encode(src, lengths)
        state = model.init_state(enc)
        for t in range(2):
            _, state, _ = model.decode_step(tgt[:, t], state, enc)
        enc, state = enc.index_select(swap), state.index_select(swap)  # rows swapped, room for one more step
        log_probs, first, _ = model.decode_step(tgt[swap, 2], state, enc)
        assert first.buffer.data_ptr() == state.buffer.data_ptr()  # this step's keys written into the room
        kept = first.keys_values.clone()
        _, second, _ = model.decode_step(torch.tensor([7, 8]), state, enc)  # another step from the same cache
        assert second.buffer.data_ptr() != state.buffer.data_ptr()
        assert torch.equal(first.keys_values, kept) and not torch.equal(second.keys_values[:, :, :, :, 2], kept[:, :, :, :, 2])
        torch.testing.assert_close(log_probs, torch.log_softmax(logits[swap, 2], -1), atol=1e-5, rtol=1e-5)
        log_probs, _, _ = model.decode_step(tgt[swap, 3], first, enc)  # and it goes on as teacher forcing does
        torch.testing.assert_close(log_probs, torch.log_softmax(logits[swap, 3], -1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", POSITIONS)
def test_beam_search_is_the_same_alone_and_in_a_batch_of_16(positions: str) -> None:
    model = tiny(positions, seed=3)
    generator = torch.Generator().manual_seed(4)
    rows = [torch.randint(4, 30, (int(n),), generator=generator).tolist() for n in torch.randint(1, 12, (16,), generator=generator)]
    src, lengths = padded(rows)
    limits = max_output_lengths(lengths, 1.5, 3)
    batch = beam_search(model, src, lengths, 5, limits, nbest=3)
    for i, row in enumerate(rows):
        alone = beam_search(model, *padded([row]), 5, limits[i : i + 1], nbest=3)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batch[i]]
        assert len(alone) == 3 and alone[0].score >= alone[1].score >= alone[2].score
    greedy = greedy_search(model, src, lengths, limits)
    assert greedy == [greedy_search(model, *padded([row]), limits[i : i + 1])[0] for i, row in enumerate(rows)]


def test_sinusoids_are_the_papers() -> None:
    table = sinusoids(torch.arange(50), 8)
    assert table.shape == (50, 8)
    torch.testing.assert_close(table[7, 2], torch.tensor(math.sin(7 / 10000 ** (2 / 8))))
    torch.testing.assert_close(table[7, 3], torch.tensor(math.cos(7 / 10000 ** (2 / 8))))


def test_tied_embeddings_share_one_tensor_and_the_loss_is_the_cross_entropy() -> None:
    model = tiny(tie_target_embeddings=True)
    assert model.output.weight is model.tgt_embedding.weight
    src, lengths = padded([[5, 6], [7]])
    tgt = torch.tensor([[BOS_ID, 3, 4], [BOS_ID, 5, PAD_ID]])
    mask, targets = tgt != PAD_ID, torch.tensor([3, 4, EOS_ID, 5, EOS_ID])
    loss = model(src, lengths, tgt, target_positions=positions_of(mask), targets=targets, label_smoothing=0.1)
    expected = torch.nn.functional.cross_entropy(
        model(src, lengths, tgt, target_positions=positions_of(mask)), targets, label_smoothing=0.1, reduction="sum"
    )
    torch.testing.assert_close(loss, expected)


def test_shared_embeddings_are_one_matrix_that_both_sides_train_and_a_checkpoint_keeps() -> None:
    torch.manual_seed(0)
    config = ModelConfig(architecture="transformer", embedding_size=16, hidden_size=16, heads=4, feedforward_size=32,
                         layers=2, share_embeddings=True, tie_target_embeddings=True)
    model = build_model(config, 30, 30)
    assert model.src_embedding.weight is model.tgt_embedding.weight is model.output.weight
    separate = build_model(dataclasses.replace(config, share_embeddings=False, tie_target_embeddings=False), 30, 30)
    assert sum(p.numel() for p in separate.parameters()) - sum(p.numel() for p in model.parameters()) == 2 * 30 * 16
    assert "vocab 30/30, source = target = output embeddings)" in model.describe()
    # ids 10-11 occur in the source only, 20-21 in the target only: the one matrix learns from both sides
    src, lengths = padded([[10, 11]])
    tgt, targets = torch.tensor([[BOS_ID, 20, 21]]), torch.tensor([20, 21, EOS_ID])
    model.train()(src, lengths, tgt, target_positions=positions_of(tgt != PAD_ID), targets=targets).backward()
    grad = model.src_embedding.weight.grad
    assert all(grad[i].abs().sum() > 0 for i in (10, 11, 20, 21))
    rebuilt = build_model(config, 30, 30)
    rebuilt.load_state_dict(model.state_dict())
    assert rebuilt.src_embedding.weight is rebuilt.tgt_embedding.weight
    torch.testing.assert_close(rebuilt.tgt_embedding.weight, model.src_embedding.weight)
    with pytest.raises(NMTError, match=r"model.share_embeddings needs one vocabulary for both sides, but the source "
                                       r"has 30 entries and the target 40"):
        build_model(config, 30, 40)


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ({"architecture": "transformer", "attention": "none"}, "model.attention"),
        ({"architecture": "transformer", "maxout_size": 128}, "model.maxout_size"),
        ({"architecture": "transformer", "init": "bahdanau"}, "model.init"),
        ({"heads": 8}, "model.heads"),
        ({"positions": "relative"}, "model.positions"),
        ({"architecture": "transformer", "embedding_size": 128}, "model.embedding_size"),
        ({"architecture": "transformer", "heads": 3}, "model.heads"),
    ],
)
def test_keys_of_the_other_architecture_and_bad_sizes_are_refused(keys: dict[str, object], named: str) -> None:
    with pytest.raises(NMTError, match=named):
        ModelConfig(**keys).validate()  # type: ignore[arg-type]


@pytest.mark.parametrize("positions", ["sinusoidal", "relative", "learned"])
def test_decoding_after_a_cache_in_chunks_of_several_steps_is_decoding_at_once(positions: str) -> None:
    model = tiny(positions)
    src, lengths = padded([[5, 6, 7, 8], [9, 10]])
    enc = model.encode(src, lengths)
    tgt_in = torch.tensor([[1, 7, 8, 9, 10], [1, 11, 12, 13, 14]])
    whole, _, _ = model._decode(tgt_in, enc, None, need_weights=False)
    first, cache, _ = model._decode(tgt_in[:, :2], enc, model.init_state(enc), need_weights=False)
    rest, _, _ = model._decode(tgt_in[:, 2:], enc, cache, need_weights=False)  # 3 steps after a cache of 2
    torch.testing.assert_close(torch.cat([first, rest], dim=1), whole)


def test_describe_names_the_form() -> None:
    text = tiny("relative", "pre").describe()
    assert text.startswith("Transformer (pre-norm, relative positions, 2+2 layers, d_model 16, 4 heads of 4")
    one_head = ModelConfig(architecture="transformer", embedding_size=16, hidden_size=16, heads=1, layers=1)
    assert ", 1 head of 16, feed-forward" in build_model(one_head, 10, 10).describe()
    # the name of summary.json and of messages is the kind's, as the reports give it
    assert tiny("relative", "pre").name == "Transformer (relative positions)"
    assert build_model(one_head, 10, 10).name == "Transformer"


@pytest.mark.slow
@pytest.mark.parametrize(("positions", "steps"), [("sinusoidal", 300), ("relative", 800)])
def test_a_tiny_transformer_learns_to_reverse_sequences(positions: str, steps: int) -> None:
    # relative positions only: the decoder learns where to read from the encoder's relative keys alone (slower)
    torch.manual_seed(0)
    config = ModelConfig(architecture="transformer", embedding_size=32, hidden_size=32, heads=4,
                         feedforward_size=64, layers=2, positions=positions)  # type: ignore[arg-type]
    model = build_model(config, 15, 15)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(5)
    for _ in range(steps):
        rows = [torch.randint(4, 15, (6,), generator=generator).tolist() for _ in range(32)]
        src, lengths = padded(rows)
        tgt = torch.tensor([[BOS_ID, *row[::-1]] for row in rows])
        out = torch.tensor([[*row[::-1], EOS_ID] for row in rows])
        loss = torch.nn.functional.cross_entropy(model(src, lengths, tgt).flatten(0, 1), out.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    rows = [torch.randint(4, 15, (6,), generator=generator).tolist() for _ in range(20)]
    src, lengths = padded(rows)
    decoded = greedy_search(model, src, lengths, max_output_lengths(lengths, 2.0, 2))
    assert sum(d == row[::-1] for d, row in zip(decoded, rows, strict=True)) >= 18
