"""How the analyses reach a model's attention: torch forward hooks on the modules its `attention_points` name
(nmt/models/interface.py), registered for the duration of a `with` block and removed after. The model's own
path has no analysis state to check: without hooks it computes exactly what it computes in training.

- `perturbed`: every decoder step's weights replaced (uniform, permuted or one-hot at the argmax,
  `perturb_weights`): a forward hook's replacement output of the attention's softmax.
- `ablated`: a layer of multi-head attention with heads silenced (a forward pre-hook scales the heads'
  outputs, side by side at the input of the output projection) or uniform (a pre-hook gives the softmax
  zero scores).
- `recorded`: each call's scores (gradient kept), mask and weights.

On these rest what the commands ask of a model: `attention_views` (`nmt attention-checks`' agreement with an
aligner), `attention_switches` (its perturbations, or a multi-head model's ablations) and
`attention_score_steps` (`nmt attention-scaling`'s scores and their gradients).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor, nn

from nmt.errors import NMTError
from nmt.models.interface import MAIN_VIEW, AttentionPoint, TranslationModel
from nmt.special import PAD_ID

Perturbation = Literal["none", "uniform", "permute", "argmax"]
PERTURBATIONS: tuple[Perturbation, ...] = ("none", "uniform", "permute", "argmax")

# attention_score_steps' steps: (the groups each counts in, (scores, their gradients, source mask, alive rows))
ScoreSteps = list[tuple[tuple[str, ...], tuple[Tensor, ...]]]


def _unknown_perturbation(kind: object) -> ValueError:
    """The one error for a perturbation outside PERTURBATIONS (perturb_weights, perturbed)."""
    return ValueError(f"unknown attention perturbation {kind!r}: expected one of {', '.join(PERTURBATIONS)}")


def perturb_weights(
    weights: Tensor, mask: Tensor, kind: Perturbation, generator: torch.Generator | None = None
) -> Tensor:
    """Replace attention weights, keeping zero weight on padding and rows that sum to 1.

    weights: batch x src_len (the softmax), mask: batch x src_len (bool, True at real positions)
    -> batch x src_len. `uniform`: 1/len over the real positions; `permute`: the row's own weights moved
    by a random permutation of its real positions (one per row, drawn from `generator`); `argmax`: all
    mass on the row's largest weight; `none`: `weights` itself.
    """
    if kind == "none":
        return weights
    if kind == "uniform":
        real = mask.to(weights.dtype)
        return real / real.sum(dim=-1, keepdim=True).clamp_min(1.0)
    if kind == "argmax":
        best = weights.masked_fill(~mask, -1.0).argmax(dim=-1, keepdim=True)  # batch x 1
        return torch.zeros_like(weights).scatter_(1, best, 1.0)
    if kind == "permute":
        keys = torch.rand(weights.shape, generator=generator).to(weights.device)  # drawn on the CPU
        keys = keys.masked_fill(~mask, 2.0)  # padding sorts after every real position
        shuffled = keys.argsort(dim=-1)  # real positions in random order, then the padding
        # real positions in increasing order, then the padding (a stable sort of "is padding")
        slots = (~mask).to(torch.uint8).sort(dim=-1, stable=True).indices
        return torch.zeros_like(weights).scatter_(1, slots, weights.gather(1, shuffled))
    raise _unknown_perturbation(kind)


@contextlib.contextmanager
def _hooked(*hooks: tuple[nn.Module, str, Callable[..., Any]]) -> Iterator[None]:
    """Within the block, each (module, "pre" or "post", hook) registered as a forward pre-hook or hook."""
    with contextlib.ExitStack() as stack:
        for module, when, hook in hooks:
            register = module.register_forward_pre_hook if when == "pre" else module.register_forward_hook
            stack.callback(register(hook).remove)
        yield


def _single(model: TranslationModel) -> list[AttentionPoint]:
    """The model's attentions that are not multi-head layers (an RNN's one attention)."""
    return [point for point in model.attention_points().values() if point.heads_out is None]


@contextlib.contextmanager
def perturbed(model: TranslationModel, kind: Perturbation, seed: int = 0) -> Iterator[None]:
    """Within the block, the weights of every call of the model's single attentions replaced by
    `perturb_weights` (`permute` draws from a generator seeded with `seed` on entry, on the CPU, one key
    per row and position of each call: a sentence's permutations depend on the batches it is decoded in, so
    the same seed repeats a result at the same batch size, not at another); "none" registers nothing."""
    if kind not in PERTURBATIONS:  # refused here, before any step, rather than in the first call
        raise _unknown_perturbation(kind)
    points = _single(model)
    if not points:
        raise ValueError("the fixed-context model (attention: none) has no attention weights to perturb")
    if kind == "none":
        yield
        return
    generator = torch.Generator().manual_seed(seed) if kind == "permute" else None

    def replace(_: nn.Module, args: tuple[Tensor, ...], weights: Tensor) -> Tensor:
        return perturb_weights(weights, args[1], kind, generator)

    with _hooked(*((point.weights, "post", replace) for point in points)):
        yield


@contextlib.contextmanager
def ablated(point: AttentionPoint, head_mask: Tensor | None = None, uniform: bool = False) -> Iterator[None]:
    """Within the block, the multi-head attention `point` has each head's output multiplied by `head_mask`
    (heads; 0 silences a head) or, with `uniform`, every head's weights uniform over the positions its mask
    allows (zero scores)."""
    assert point.heads_out is not None, "ablated: a multi-head attention"
    hooks: list[tuple[nn.Module, str, Callable[..., Any]]] = []
    if head_mask is not None:
        mask = head_mask

        def silence(_: nn.Module, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
            heads = args[0]  # batch x t x heads * d_k: each head's output, side by side
            columns = mask.repeat_interleave(heads.size(-1) // point.heads).to(heads.device, heads.dtype)
            return (heads * columns, *args[1:])

        hooks.append((point.heads_out, "pre", silence))
    if uniform:
        def flatten(_: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
            return (torch.zeros_like(args[0]), *args[1:])

        hooks.append((point.weights, "pre", flatten))
    with _hooked(*hooks):
        yield


class Call(NamedTuple):
    """One recorded call of an attention: scores before the mask (their gradient kept where they have one),
    the mask, the weights."""

    scores: Tensor
    mask: Tensor | None
    weights: Tensor


@contextlib.contextmanager
def recorded(model: TranslationModel) -> Iterator[dict[str, list[Call]]]:
    """Within the block, every call of each of the model's attention points, by point."""
    records: dict[str, list[Call]] = {}
    hooks: list[tuple[nn.Module, str, Callable[..., Any]]] = []
    for name, point in model.attention_points().items():
        calls = records.setdefault(name, [])

        def keep(_: nn.Module, args: tuple[Any, ...], weights: Tensor, calls: list[Call] = calls) -> None:
            if args[0].requires_grad:  # under no_grad there is no gradient to keep
                args[0].retain_grad()  # nmt attention-scaling reads the gradient that reaches the scores
            calls.append(Call(args[0], args[1], weights))

        hooks.append((point.weights, "post", keep))
    with _hooked(*hooks):
        yield records


@dataclass(frozen=True)
class AttentionSwitches:
    """`nmt attention-checks`' ways of changing a model's attention (each a context manager that changes it
    for the duration of a `with` block; "none" changes nothing), `what` they change (for the log), and
    whether each is compared with "none" by paired bootstrap (a multi-head model's ablations) or only scored."""

    what: str
    switches: dict[str, AbstractContextManager[Any]]
    compared: bool


def attention_switches(model: TranslationModel, seed: int, heads: dict[str, Any] | None) -> AttentionSwitches:
    """`nmt attention-checks`' changes of the model's attention (`seed`: of the permutations; `heads`: the
    per-head agreement of `agreement_by_bucket`, when measured). A single attention (RNNsearch): its weights
    replaced by each of PERTURBATIONS. Multi-head layers (the Transformer's cross-attention), one layer at a
    time: each head silenced in turn, all heads uniform, and (with `heads`) all but the head whose argmax
    agrees most with the aligner silenced."""
    points = model.attention_points()
    if not points:
        raise NMTError(f"{model.name} offers no way to change its attention for nmt attention-checks.",
                       "Give runs of an architecture that does (RNNsearch, the Transformer).")
    layers = {name: point for name, point in points.items() if point.heads_out is not None}
    if not layers:
        what = next(iter(points.values())).what
        return AttentionSwitches(what, {kind: perturbed(model, kind, seed) for kind in PERTURBATIONS}, compared=False)
    switches: dict[str, AbstractContextManager[Any]] = {"none": contextlib.nullcontext()}
    for layer, point in layers.items():
        count = point.heads
        for head in range(1, count + 1):
            switches[f"{layer} head {head} silenced"] = ablated(point, 1.0 - torch.eye(count)[head - 1])
        switches[f"{layer} uniform"] = ablated(point, uniform=True)
        if heads is not None:  # the head whose argmax agrees most with the aligner, alone
            best = max(range(1, count + 1), key=lambda h: heads[f"{layer} head {h}"]["all"]["agreement"] or 0)
            switches[f"{layer} only head {best}"] = ablated(point, torch.eye(count)[best - 1])
    return AttentionSwitches(next(iter(layers.values())).what, switches, compared=True)


def attention_views(model: TranslationModel, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> dict[str, Tensor]:
    """Teacher-forced attention weights, each batch x T x S, for `nmt attention-checks`' agreement with an
    aligner: MAIN_VIEW (what `forward` returns) and, for each multi-head layer, each head's ("layer 2 head 3")
    and their mean ("layer 2 mean")."""
    layers = [name for name, point in model.attention_points().items() if point.heads_out is not None]
    with recorded(model) as records:
        _, main = model(src, src_lengths, tgt_in, return_attention=True)
    views = {MAIN_VIEW: main}
    for layer in layers:
        (call,) = records[layer]  # weights: batch x heads x T x S
        views |= {f"{layer} head {head}": w for head, w in enumerate(call.weights.unbind(1), 1)}
        views[f"{layer} mean"] = call.weights.mean(dim=1)
    return views


def attention_score_steps(
    model: TranslationModel, backward: Callable[[], float], src: Tensor, real: Tensor
) -> tuple[float, ScoreSteps]:
    """Run `backward` (teacher-forces a batch of source `src`, backpropagates and returns its loss; `real`:
    batch x T, the steps whose target is real) while recording the attention scores -> the loss, and the
    scored steps of `nmt attention-scaling` (ScoreSteps), each rows x src_len: a single attention's every
    decoder step in its group (MAIN_VIEW); a multi-head layer's scores per head, counted in "layer L head H",
    "layer L" and MAIN_VIEW."""
    points = model.attention_points()
    if not points:
        if model.kind(model.config).without_attention:
            raise NMTError("attention-scaling measures attention scores, and this run has none (attention: none).",
                           "Give runs trained with model.attention dot, scaled_dot, additive or general.")
        raise NMTError(f"attention-scaling measures attention scores, and {model.name} does not record them.",
                       "Give runs of an architecture that does (RNNsearch, the Transformer).")
    with recorded(model) as records:
        loss = backward()
    steps: ScoreSteps = []
    source = src != PAD_ID  # batch x S
    rows, src_len = real.numel(), source.size(1)
    flat_mask = source.unsqueeze(1).expand(-1, real.size(1), -1).reshape(rows, src_len)
    for name, point in points.items():
        if point.heads_out is None:  # one call per decoder step: batch x S
            steps += [((name,), (call.scores.detach(), call.scores.grad, call.mask, real[:, step]))
                      for step, call in enumerate(records[name])]
            continue
        ((scores, _, _),) = records[name]  # batch x heads x T x S
        assert scores.grad is not None
        for head in range(scores.size(1)):
            flat = (scores[:, head].detach().reshape(rows, src_len), scores.grad[:, head].reshape(rows, src_len))
            steps.append(((f"{name} head {head + 1}", name, MAIN_VIEW), (*flat, flat_mask, real.reshape(rows))))
    return loss, steps
