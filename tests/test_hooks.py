"""nmt/analysis/hooks.py: the perturbations, ablations and recording the analyses hook into a model's attention,
and the model's own path left bitwise as it was, with no hook and after one."""

from __future__ import annotations

from typing import cast

import pytest
import torch

from nmt.analysis.hooks import (
    PERTURBATIONS,
    Perturbation,
    ablated,
    attention_switches,
    perturb_weights,
    perturbed,
    recorded,
)
from nmt.config_sections import ModelConfig
from nmt.data.batching import make_batch
from nmt.models import build_model
from nmt.models.interface import MAIN_VIEW
from nmt.models.rnn.model import Seq2Seq
from nmt.models.transformer.model import Transformer
from nmt.models.transformer.multihead import MultiHeadAttention
from tests.helpers import positions_of

TINY = {"embedding_size": 16, "hidden_size": 16, "maxout_size": 8, "attention_size": 8}


def _weights(lengths: list[int], width: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax weights over the real positions of rows of `lengths`, and their mask (batch x width)."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    scores = torch.randn(len(lengths), width, generator=generator).masked_fill(~mask, torch.finfo().min)
    return torch.softmax(scores, dim=-1), mask


def test_permute_is_a_permutation_of_the_real_positions_only() -> None:
    weights, mask = _weights([7, 3, 12, 1], 12)
    permuted = perturb_weights(weights, mask, "permute", torch.Generator().manual_seed(5))
    assert torch.equal(permuted[~mask], torch.zeros_like(permuted[~mask]))
    torch.testing.assert_close(permuted.sum(-1), torch.ones(4))
    for row in range(4):
        real = mask[row]
        assert torch.equal(permuted[row, real].sort().values, weights[row, real].sort().values)
    assert not torch.equal(permuted, weights)  # 12 random positions: moved for sure
    again = perturb_weights(weights, mask, "permute", torch.Generator().manual_seed(5))
    assert torch.equal(again, permuted)  # seeded


def test_argmax_and_uniform_stay_on_real_positions() -> None:
    weights, mask = _weights([5, 2, 9], 9, seed=1)
    hard = perturb_weights(weights, mask, "argmax")
    assert torch.equal(hard.sum(-1), torch.ones(3)) and torch.equal((hard > 0).sum(-1), torch.ones(3, dtype=torch.long))
    assert torch.equal(hard.argmax(-1), weights.argmax(-1)) and bool(mask.gather(1, hard.argmax(-1, keepdim=True)).all())
    uniform = perturb_weights(weights, mask, "uniform")
    torch.testing.assert_close(uniform, mask.float() / mask.sum(-1, keepdim=True))
    assert perturb_weights(weights, mask, "none") is weights


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A fixed batch of 4 pairs of lengths 3-9: src, src_lengths, tgt_in, tgt_out."""
    gen = torch.Generator().manual_seed(0)
    pairs = [([int(x) for x in torch.randint(4, 30, (n,), generator=gen)],
              [int(x) for x in torch.randint(4, 30, (n + 1,), generator=gen)]) for n in (3, 7, 5, 9)]
    batch = make_batch([s for s, _ in pairs], [t for _, t in pairs], list(range(4)))
    return batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out


def _rnnsearch(attention: str = "additive") -> Seq2Seq:
    torch.manual_seed(1)
    return cast(Seq2Seq, build_model(ModelConfig(attention=attention, **TINY), 40, 40))


def _loss_and_grads(model: torch.nn.Module) -> list[torch.Tensor]:
    """Training's summed loss of the fixed batch and every parameter's gradient (the loss first)."""
    src, lengths, tgt_in, tgt_out = _batch()
    model.zero_grad(set_to_none=True)
    real = tgt_out != 0
    loss = model(src, lengths, tgt_in, target_positions=positions_of(real), targets=tgt_out[real])
    loss.backward()
    return [loss.detach(), *(p.grad.clone() for p in model.parameters() if p.grad is not None)]


@pytest.mark.parametrize("attention", ["additive", "scaled_dot", "general"])
def test_rnn_training_is_bitwise_the_same_without_hooks_with_a_no_op_one_and_after(attention: str) -> None:
    model = _rnnsearch(attention)
    plain = _loss_and_grads(model)
    assert plain[0] > 0 and len(plain) == 1 + sum(1 for _ in model.parameters())
    with perturbed(model, "none"), recorded(model) as records:  # recording: a hook on every step
        inside = _loss_and_grads(model)
    assert len(records[MAIN_VIEW]) == _batch()[2].size(1) and records[MAIN_VIEW][0].scores.grad is not None
    with perturbed(model, "uniform"):
        pass
    after = _loss_and_grads(model)
    assert not model.decoder.provider.softmax.observed  # every hook removed
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(plain, inside, after, strict=True))
    with perturbed(model, "uniform"):
        changed = _loss_and_grads(model)
    assert not torch.equal(plain[0], changed[0])  # the hook took effect in training's path too


@pytest.mark.parametrize("kind", [k for k in PERTURBATIONS if k != "none"])
def test_each_perturbation_replaces_the_weights_the_decoder_reads(kind: Perturbation) -> None:
    model = _rnnsearch().eval()
    src, lengths, tgt_in, _ = _batch()
    mask = src != 0
    with torch.no_grad():
        logits, plain = model(src, lengths, tgt_in, return_attention=True)  # batch x T x S
        with perturbed(model, kind, seed=3) as _, recorded(model) as records:
            changed_logits, changed = model(src, lengths, tgt_in, return_attention=True)
    steps = mask.unsqueeze(1).expand_as(plain)
    torch.testing.assert_close(changed.sum(-1), torch.ones(changed.shape[:2]))
    assert torch.equal(changed[~steps], torch.zeros_like(changed[~steps]))  # padding: still no weight
    assert not torch.equal(logits, changed_logits)  # the decoder read the replaced weights
    if kind == "uniform":
        torch.testing.assert_close(changed, steps.float() / steps.sum(-1, keepdim=True))
    elif kind == "argmax":
        assert torch.equal(changed.argmax(-1)[:, 0], plain.argmax(-1)[:, 0])  # the first step's input is unchanged
        assert torch.equal((changed > 0).sum(-1), torch.ones(changed.shape[:2], dtype=torch.long))
    else:  # permute: each first step's weights are the model's own, moved
        assert torch.equal(changed[:, 0].sort(-1).values, plain[:, 0].sort(-1).values)
    # recording sees the model's own scores; the hook's output is what the step used
    assert len(records[MAIN_VIEW]) == tgt_in.size(1)
    assert torch.equal(records[MAIN_VIEW][0].weights, changed[:, 0])


def test_switches_are_the_perturbations_of_an_rnn_and_nothing_is_offered_without_attention() -> None:
    switched = attention_switches(_rnnsearch(), seed=1, heads=None)
    assert (switched.what, list(switched.switches), switched.compared) == ("attention", list(PERTURBATIONS), False)
    fixed = build_model(ModelConfig(attention="none", **TINY), 40, 40)
    assert fixed.attention_points() == {}
    with pytest.raises(ValueError, match="no attention weights to perturb"), perturbed(fixed, "uniform"):
        pass


def test_an_unknown_perturbation_is_refused_alike_before_and_during_search() -> None:
    message = "unknown attention perturbation 'shuffle': expected one of none, uniform, permute, argmax"
    kind, mask = cast(Perturbation, "shuffle"), torch.ones(1, 2) > 0
    with pytest.raises(ValueError) as early, perturbed(_rnnsearch(), kind):
        pass
    with pytest.raises(ValueError) as late:
        perturb_weights(torch.ones(1, 2), mask, kind)
    assert str(early.value) == str(late.value) == message


def _transformer() -> Transformer:
    torch.manual_seed(2)
    config = ModelConfig(architecture="transformer", embedding_size=32, hidden_size=32, heads=4, layers=2,
                         feedforward_size=16, dropout=0.0)
    return cast(Transformer, build_model(config, 40, 40))


def test_masking_a_head_removes_exactly_its_share_of_the_output() -> None:
    model = _transformer()
    point = model.attention_points()["layer 1"]
    attention = model.decoder_layers[0].cross_attention
    assert isinstance(attention, MultiHeadAttention) and point.weights is attention.softmax
    states, memory = torch.randn(2, 3, 32), torch.randn(2, 5, 32)
    keys_values = attention.keys_values(memory)
    with torch.no_grad(), recorded(model) as records:
        full, _ = attention(states, keys_values, None)
    (call,) = records["layer 1"]
    head_context = call.weights[:, 1] @ keys_values[:, 1, 1]  # batch x t x d_k: head 1's context
    with torch.no_grad(), ablated(point, torch.tensor([1.0, 0.0, 1.0, 1.0])):
        masked, _ = attention(states, keys_values, None)
    removed = head_context @ attention.out.weight[:, 8:16].t()  # head 1's columns of W_o
    torch.testing.assert_close(full - masked, removed)
    mask = torch.tensor([True, True, False, True, True]).view(1, 1, 1, 5)
    with torch.no_grad(), ablated(point, uniform=True), recorded(model) as records:
        attention(states, keys_values, mask)
    uniform = records["layer 1"][0].weights
    torch.testing.assert_close(uniform[..., 2], torch.zeros(2, 4, 3))
    torch.testing.assert_close(uniform[..., 0], torch.full((2, 4, 3), 0.25))
    assert not attention.softmax.observed


def test_the_switches_silence_the_head_they_name_and_keep_the_best_aligning_head_alone() -> None:
    """attention_switches' masks, through the switches `nmt attention-checks` runs: "head 2 silenced" removes head 2's
    share of the output (W_o's columns of its context); "only head 3", head 3 agreeing most with the aligner in
    the agreement given, leaves its share alone (plus W_o's bias)."""
    model = _transformer()
    attention = model.decoder_layers[0].cross_attention
    states, memory = torch.randn(2, 3, 32), torch.randn(2, 5, 32)
    keys_values = attention.keys_values(memory)
    with torch.no_grad(), recorded(model) as records:
        full, _ = attention(states, keys_values, None)
    (call,) = records["layer 1"]

    def share(head: int) -> torch.Tensor:  # head (1-based)'s context through its 8 columns of W_o
        context = call.weights[:, head - 1] @ keys_values[:, 1, head - 1]
        return context @ attention.out.weight[:, 8 * (head - 1) : 8 * head].t()

    agreement = {f"{layer} head {h}": {"all": {"agreement": a}} for layer in ("layer 1", "layer 2")
                 for h, a in zip(range(1, 5), [0.1, 0.2, 0.9, 0.3], strict=True)}
    switches = attention_switches(model, seed=1, heads=agreement).switches
    assert [name for name in switches if "only" in name] == ["layer 1 only head 3", "layer 2 only head 3"]
    with torch.no_grad(), switches["layer 1 head 2 silenced"]:
        silenced, _ = attention(states, keys_values, None)
    torch.testing.assert_close(full - silenced, share(2))
    with torch.no_grad(), switches["layer 1 only head 3"]:
        alone, _ = attention(states, keys_values, None)
    torch.testing.assert_close(alone - attention.out.bias, share(3))


def test_transformer_training_is_bitwise_the_same_after_the_hooks_and_silencing_no_head_changes_nothing() -> None:
    model = _transformer()
    plain = _loss_and_grads(model)
    with recorded(model):
        _loss_and_grads(model)
    switched = attention_switches(model, seed=1, heads=None)
    assert switched.compared and list(switched.switches)[:6] == [
        "none", *(f"layer 1 head {h} silenced" for h in range(1, 5)), "layer 1 uniform"]
    for switch in switched.switches.values():
        with switch:
            pass
    assert all(torch.equal(a, b) for a, b in zip(plain, _loss_and_grads(model), strict=True))
    with ablated(model.attention_points()["layer 2"], torch.ones(4)):  # every head kept: the fused path, x 1
        kept = _loss_and_grads(model)
    assert all(torch.equal(a, b) for a, b in zip(plain, kept, strict=True))
