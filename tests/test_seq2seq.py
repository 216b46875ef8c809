"""The whole model: build_model, padding invariance, teacher forcing == search steps, sizes, init, learning."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

from nmt.config import ModelConfig
from nmt.errors import NMTError
from nmt.models import Seq2Seq, build_model, count_parameters
from nmt.models.rnn.attention import ATTENTIONS
from nmt.special import BOS_ID, EOS_ID, PAD_ID
from nmt.training.precision import autocast, resolve_precision
from tests.helpers import TINY_TRANSFORMER, needs_cuda, positions_of

ALL_ATTENTION = list(ATTENTIONS)


def _tiny(attention: str = "additive", cell: str = "gru", **overrides: int | bool) -> Seq2Seq:
    torch.manual_seed(0)
    sizes = {"embedding_size": 8, "hidden_size": 10, "attention_size": 9, "maxout_size": 6, **overrides}
    return build_model(ModelConfig(attention=attention, cell=cell, **sizes), 20, 17).eval()


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """src (lengths 3, 7, 5, EOS-terminated, PAD-padded) and BOS-started padded targets."""
    gen = torch.Generator().manual_seed(3)
    src_lengths = torch.tensor([3, 7, 5])
    src = torch.randint(4, 20, (3, 7), generator=gen)
    tgt = torch.randint(4, 17, (3, 6), generator=gen)
    tgt[:, 0] = BOS_ID
    for row, (n, m) in enumerate(zip(src_lengths.tolist(), [4, 6, 2], strict=True)):
        src[row, n - 1] = EOS_ID
        src[row, n:] = PAD_ID
        tgt[row, m:] = PAD_ID
    return src, src_lengths, tgt


@pytest.mark.parametrize("attention", ALL_ATTENTION)
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_a_sentence_scores_the_same_alone_and_in_a_padded_batch(attention: str, cell: str) -> None:
    model = _tiny(attention, cell, encoder_layers=2)
    src, lengths, tgt = _batch()
    batch_lp = model(src, lengths, tgt).log_softmax(-1)
    for row, (n, m) in enumerate(zip(lengths.tolist(), [4, 6, 2], strict=True)):
        alone = model(src[row : row + 1, :n], lengths[row : row + 1], tgt[row : row + 1, :m]).log_softmax(-1)
        torch.testing.assert_close(batch_lp[row, :m], alone[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("attention", ALL_ATTENTION)
def test_forward_equals_step_by_step_decoding(attention: str) -> None:
    model = _tiny(attention)
    src, lengths, tgt = _batch()
    if attention == "none":
        logits, attention_weights = model(src, lengths, tgt), None
        with pytest.raises(ValueError, match="no attention"):
            model(src, lengths, tgt, return_attention=True)
    else:
        logits, attention_weights = model(src, lengths, tgt, return_attention=True)
        assert attention_weights.shape == (3, 6, 7)
    enc = model.encode(src, lengths)
    state = model.init_state(enc)
    for i in range(tgt.size(1)):
        log_probs, state, weights = model.decode_step(tgt[:, i], state, enc)
        assert log_probs.dtype == torch.float32
        torch.testing.assert_close(log_probs, logits[:, i].log_softmax(-1), atol=1e-5, rtol=0)
        if attention_weights is None:
            assert weights is None
        else:
            torch.testing.assert_close(weights, attention_weights[:, i], atol=1e-6, rtol=0)


def test_beam_style_expansion_reuses_the_encoder_output() -> None:
    model = _tiny("additive", "lstm")
    src, lengths, tgt = _batch()
    enc = model.encode(src, lengths)
    state = model.init_state(enc)
    expand = torch.tensor([2, 2, 0, 1, 1])  # rows in any order, repeated like beams
    log_probs, _, weights = model.decode_step(tgt[expand, 0], state.index_select(expand),
                                              enc.index_select(expand))
    reference, _, ref_weights = model.decode_step(tgt[:, 0], state, enc)
    torch.testing.assert_close(log_probs, reference[expand])
    torch.testing.assert_close(weights, ref_weights[expand])


@pytest.mark.parametrize("attention", ALL_ATTENTION)
def test_target_positions_give_the_logits_of_those_positions_only(attention: str) -> None:
    model = _tiny(attention)
    src, lengths, tgt = _batch()
    real = tgt != PAD_ID
    full = model(src, lengths, tgt)
    picked = model(src, lengths, tgt, target_positions=positions_of(real))
    assert picked.shape == (int(real.sum()), 17)
    torch.testing.assert_close(picked, full[real], atol=1e-6, rtol=0)
    # any positions, in any order: the last target step of the second sentence, then the first of the first
    width = tgt.size(1)
    some = model(src, lengths, tgt, target_positions=torch.tensor([2 * width - 1, 0]))
    torch.testing.assert_close(some, full[[1, 0], [width - 1, 0]], atol=1e-6, rtol=0)


@pytest.mark.parametrize("attention", ["none", "additive"])
@pytest.mark.parametrize("tied", [False, True])
def test_training_loss_equals_cross_entropy_of_the_logits(attention: str, tied: bool) -> None:
    """The loss `forward` returns with `targets` (the chunked output layer) has the value and every
    gradient of F.cross_entropy over the logits path, tied target embeddings included."""
    sizes = {"maxout_size": 8, "tie_target_embeddings": True} if tied else {}
    model = _tiny(attention, **sizes).double().train()
    src, lengths, tgt = _batch()
    real = tgt != PAD_ID
    targets = torch.roll(tgt, -1, dims=1)[real]  # any tokens will do; the reference only has to match
    results = []
    for chunked in (False, True):
        model.zero_grad()
        if chunked:
            loss = model(src, lengths, tgt, target_positions=positions_of(real), targets=targets, label_smoothing=0.1)
        else:
            logits = model(src, lengths, tgt, target_positions=positions_of(real))
            loss = F.cross_entropy(logits, targets, label_smoothing=0.1, reduction="sum")
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    torch.testing.assert_close(loss_a, loss_b, atol=1e-10, rtol=0)
    assert grads_a.keys() == grads_b.keys() and "decoder.output.bias" in grads_a  # tied: output.weight is the embedding
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=1e-10, rtol=0, msg=name)


def _loss_and_saved_bytes(model: Seq2Seq) -> tuple[list[torch.Tensor], int]:
    """Gradients of a teacher-forced loss, and the bytes of the distinct storages autograd kept for
    the backward pass (a tensor saved twice, such as the keys at every step, counts once)."""
    src, lengths, tgt = _batch()
    storages: dict[int, int] = {}

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    model.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        logits = model(src, lengths, tgt)
    F.cross_entropy(logits.flatten(0, 1), tgt.roll(-1, 1).flatten(), ignore_index=PAD_ID).backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None], sum(storages.values())


def test_recomputed_attention_gives_bitwise_equal_gradients_and_keeps_less() -> None:
    model = _tiny("additive", attention_size=64).train()
    stored, stored_bytes = _loss_and_saved_bytes(model)
    model.recompute_attention(True)
    recomputed, recomputed_bytes = _loss_and_saved_bytes(model)
    assert len(stored) == len(recomputed) == len(list(model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(stored, recomputed, strict=True))
    tanh_bytes = 3 * 7 * 64 * 4 * 6  # batch x src_len x att floats, one per target step
    # what it keeps instead, the query of each step (batch x att), is a small fraction of that
    assert stored_bytes - recomputed_bytes >= 0.75 * tanh_bytes


def test_fixed_model_sees_the_source_only_through_c() -> None:
    src, lengths, tgt = _batch()
    other_src = torch.randint(4, 20, (3, 4))
    other_lengths = torch.tensor([4, 2, 3])
    for attention, should_match in (("none", True), ("additive", False)):
        model = _tiny(attention)
        enc = model.encode(src, lengths)
        other = model.encode(other_src, other_lengths)
        # force the second source's encoding to the first one's c (and s_0 source)
        forced = type(other)(mask=other.mask, lengths=other.lengths, init_input=enc.init_input,
                             annotations=other.annotations, keys=other.keys, context=enc.context,
                             context_gates=enc.context_gates, context_readout=enc.context_readout)
        same = torch.allclose(model.decoder(tgt, enc)[0], model.decoder(tgt, forced)[0])
        assert same is should_match


def test_paper_sizes_give_the_parameter_count_of_appendix_a() -> None:
    v, m, n, n_att, l = 30000, 620, 1000, 1000, 500  # noqa: E741 -- the paper's names
    config = ModelConfig(attention="additive", embedding_size=m, hidden_size=n, attention_size=n_att,
                         maxout_size=l)
    with torch.device("meta"):  # count without allocating 90M weights
        model = build_model(config, v, v)
    gru = lambda inp: 3 * n * inp + 3 * n * n + 2 * 3 * n  # noqa: E731 -- W, U and PyTorch's two biases
    encoder = v * m + 2 * gru(m)
    decoder = (
        v * m  # target embeddings E
        + gru(m + 2 * n)  # s_i = GRU(s_{i-1}, [E y_{i-1}; c_i])
        + n * n + n  # W_s (s_0 = tanh(W_s bwd_1))
        + n_att * n + n_att * 2 * n + n_att  # W_a, U_a, v_a
        + 2 * l * n + 2 * l  # U_o and the deep-output bias
        + 2 * l * m  # V_o
        + 2 * l * 2 * n  # C_o
        + v * l + v  # W_o and the output bias
    )
    assert count_parameters(model) == encoder + decoder == 80_451_000
    with torch.device("meta"):
        fixed = build_model(ModelConfig(attention="none", embedding_size=m, hidden_size=n, maxout_size=l), v, v)
        both_ends = build_model(
            ModelConfig(attention="none", fixed_context="both_ends", embedding_size=m, hidden_size=n, maxout_size=l),
            v, v,
        )
    # The paper's RNNencdec: ONE forward RNN of n units, c = tanh(V h_T) n wide, so every matrix that
    # reads c is n (not 2n) columns wide, and there is no alignment model.
    paper_encdec = (
        v * m + gru(m)  # source embeddings, forward GRU
        + n * n + n  # V
        + v * m + gru(m + n)  # E; s_i = GRU(s_{i-1}, [E y_{i-1}; c])
        + n * n + n  # W_s (s_0 = tanh(W_s c))
        + 2 * l * n + 2 * l + 2 * l * m + 2 * l * n  # U_o (+ bias), V_o, C_o
        + v * l + v  # W_o and the output bias
    )
    assert count_parameters(fixed) == paper_encdec == 69_585_000
    # the both-ends ablation: RNNsearch's encoder and widths, c = tanh(V [fwd_T; bwd_1]) instead of attention
    alignment = n_att * n + n_att * 2 * n + n_att
    assert count_parameters(both_ends) == encoder + decoder - alignment + (2 * n * 2 * n + 2 * n) + n * n
    assert "forward encoder" in fixed.describe() and "c from last_state" in fixed.describe()
    assert "80,451,000 parameters" in model.describe() and model.describe().startswith("RNNsearch")


def test_tied_embeddings_count_once_and_mismatch_is_a_config_error() -> None:
    untied = _tiny(maxout_size=8)
    tied = _tiny(maxout_size=8, tie_target_embeddings=True)
    assert tied.decoder.output.weight is tied.decoder.embedding.weight
    assert count_parameters(untied) - count_parameters(tied) == 17 * 8  # one vocab x embedding matrix
    tied_tanh = _tiny(maxout_size=0, tie_target_embeddings=True)  # the tanh readout is embedding-wide
    assert tied_tanh.decoder.output.weight is tied_tanh.decoder.embedding.weight
    with pytest.raises(NMTError, match="maxout_size"):
        build_model(ModelConfig(maxout_size=100, embedding_size=64, tie_target_embeddings=True), 20, 17)
    with pytest.raises(NMTError, match="vocabulary has 4 entries"):
        build_model(ModelConfig(), 4, 17)


def test_dropout_acts_in_training_only() -> None:
    src, lengths, tgt = _batch()
    plain = _tiny("additive", encoder_layers=2)
    dropped = _tiny("additive", encoder_layers=2, dropout=0.5)
    dropped.load_state_dict(plain.state_dict())
    torch.testing.assert_close(dropped(src, lengths, tgt), plain(src, lengths, tgt))
    dropped.train()
    first, second = dropped(src, lengths, tgt), dropped(src, lengths, tgt)
    assert not torch.allclose(first, second)
    assert _describe_kind(dropped) == "RNNsearch" and _describe_kind(_tiny("none")) == "RNNencdec"


def _describe_kind(model: Seq2Seq) -> str:
    return model.describe().split(" ", 1)[0]


def test_bahdanau_init() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(init="bahdanau", embedding_size=200, hidden_size=100, attention_size=150,
                                    maxout_size=50), 300, 300)
    w_hh = model.decoder.rnn.weight_hh_l0
    for block in w_hh.detach().split(100):
        torch.testing.assert_close(block @ block.t(), torch.eye(100), atol=1e-5, rtol=0)
    attention = model.decoder.provider
    for weight in (attention.query_proj.weight, attention.key_proj.weight):
        assert 0.0008 < weight.std().item() < 0.0012
    assert torch.all(attention.v == 0)
    for name, param in model.named_parameters():
        if "bias" in name:
            assert torch.all(param == 0), name
    for weight in (model.encoder.embedding.weight, model.decoder.rnn.weight_ih_l0, model.decoder.output.weight):
        assert 0.009 < weight[1:].std().item() < 0.011
    assert torch.all(model.encoder.embedding.weight[PAD_ID] == 0)


def _reverse_data(n: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`n` sequences of `length` tokens in 4..13, EOS-terminated, and their reversals (BOS-in / EOS-out)."""
    gen = torch.Generator().manual_seed(seed)
    body = torch.randint(4, 14, (n, length), generator=gen)
    eos = torch.full((n, 1), EOS_ID)
    src = torch.cat([body, eos], 1)
    tgt_in = torch.cat([torch.full((n, 1), BOS_ID), body.flip(1)], 1)
    tgt_out = torch.cat([body.flip(1), eos], 1)
    return src, torch.full((n,), length + 1), tgt_in, tgt_out


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny matrices gain nothing from threads, and spinning threads crawl on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("attention", ["additive", "none"])
def test_a_tiny_model_learns_to_reverse_sequences(attention: str, one_thread: None) -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(attention=attention, embedding_size=16, hidden_size=32, attention_size=32,
                                    maxout_size=16), 14, 14)
    src, lengths, tgt_in, tgt_out = _reverse_data(8, 5, seed=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    model.train()
    for _ in range(120):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(src, lengths, tgt_in).flatten(0, 1), tgt_out.flatten())
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():  # greedy decoding from BOS must reproduce every reversal
        enc = model.encode(src, lengths)
        state = model.init_state(enc)
        tokens = torch.full((8,), BOS_ID)
        output = []
        for _ in range(tgt_out.size(1)):
            log_probs, state, _ = model.decode_step(tokens, state, enc)
            tokens = log_probs.argmax(-1)
            output.append(tokens)
    assert loss.item() < 0.05
    assert torch.equal(torch.stack(output, 1), tgt_out)


@needs_cuda
@pytest.mark.parametrize("architecture", ["rnnsearch", "rnnencdec", "transformer"])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_on_cuda_mixed_precision_keeps_the_loss_and_the_gradients_direction(architecture: str, precision: str) -> None:
    """training.precision bf16 / fp16 on a GPU (autocast; cuDNN's RNN kept in fp32): the loss within 2% of
    fp32's on the CPU and the gradient, all parameters as one vector, at a cosine above 0.99 to it."""
    rnn = {"embedding_size": 8, "hidden_size": 10, "attention_size": 9, "maxout_size": 6}
    keys = {"rnnsearch": {**rnn, "attention": "additive"}, "rnnencdec": {**rnn, "attention": "none"}}.get(
        architecture, TINY_TRANSFORMER
    )
    torch.manual_seed(0)
    model = build_model(ModelConfig(**{**keys, "dropout": 0.0}), 20, 17).train()  # cuDNN's RNN: no backward in eval
    src, lengths, tgt = _batch()
    real = tgt != PAD_ID
    targets = torch.roll(tgt, -1, dims=1)[real]
    results = []
    for device, dtype in (("cpu", None), ("cuda", resolve_precision(precision, torch.device("cuda")))):
        model.to(device).zero_grad()
        with autocast(dtype):
            loss = model(src.to(device), lengths.to(device), tgt.to(device), target_positions=positions_of(real).to(device),
                         targets=targets.to(device))
        loss.backward()
        grads = torch.cat([p.grad.float().flatten().cpu() for p in model.parameters() if p.grad is not None])
        results.append((loss.item(), grads))
    (loss_fp32, grads_fp32), (loss_mixed, grads_mixed) = results
    assert loss_mixed == pytest.approx(loss_fp32, rel=0.02)
    assert torch.isfinite(grads_mixed).all()
    assert F.cosine_similarity(grads_mixed, grads_fp32, dim=0) > 0.99


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("attention", ["additive", "none"])
def test_under_bf16_autocast_the_rnn_decoder_carries_its_state_in_fp32(cell: str, attention: str) -> None:
    """Autocast runs the decoder's products in bf16 (CPU autocast stands in for a GPU's here); its state, from
    s_0 on, and the LSTM memory stay fp32, as the fused RNN paths keep theirs, in training and in search."""
    config = ModelConfig(embedding_size=8, hidden_size=10, attention_size=9, maxout_size=6, cell=cell, attention=attention)
    model = build_model(config, 20, 17).eval()
    src, lengths, tgt = _batch()
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        enc = model.encode(src, lengths)
        state = model.init_state(enc)
        states = [state]
        for prev in tgt.unbind(1)[:3]:
            log_probs, state, _ = model.decode_step(prev, state, enc)
            states.append(state)
    assert log_probs.dtype == torch.float32
    assert {s.hidden.dtype for s in states} == {torch.float32}
    assert {s.cell.dtype for s in states if s.cell is not None} == ({torch.float32} if cell == "lstm" else set())


def test_a_model_cast_to_bf16_without_autocast_decodes_in_bf16() -> None:
    """The state is carried in the weights' precision: fp32 under autocast (above), bf16 in a model cast to it."""
    config = ModelConfig(embedding_size=8, hidden_size=10, attention_size=9, maxout_size=6)
    model = build_model(config, 20, 17).eval().to(torch.bfloat16)
    src, lengths, tgt = _batch()
    with torch.no_grad():
        enc = model.encode(src, lengths)
        state = model.init_state(enc)
        log_probs, state, _ = model.decode_step(tgt[:, 0], state, enc)
    assert state.hidden.dtype == torch.bfloat16 and torch.isfinite(log_probs).all()


def test_the_summary_names_the_attention_width_only_where_a_layer_has_it() -> None:
    """model.attention_size is the additive alignment model's hidden size and dot attention's projection width;
    general attention and the fixed vector have no layer of that width, and the training log's first line says
    none (it said "attention 48" for a general model)."""
    sizes = {"embedding_size": 16, "hidden_size": 32, "attention_size": 48, "maxout_size": 16}
    for attention, shown in (("additive", True), ("dot", True), ("scaled_dot", True), ("general", False), ("none", False)):
        line = build_model(ModelConfig(attention=attention, **sizes), 20, 20).describe()
        assert (", hidden 32, attention 48, maxout 16," in line) == shown, line
        assert shown or ", hidden 32, maxout 16," in line
