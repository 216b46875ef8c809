"""training.compile: the training step's teacher-forced forward through torch.compile (fewer kernel
launches per step on a GPU, where these models are bound by one small launch after another).

What is compiled: the model's `forward` as the training step calls it (targets, label smoothing), for a model
whose forward compiles (`TranslationModel.compilable`: the Transformer). Its output layer and loss stay eager
(`Transformer._output`, the graph's one break). An RNN's Python loop over the steps would be traced again for
every new length, each trace unrolling it whole (a tiny RNNsearch on the CPU, torch 2.13: 12 graphs for one
batch, new ones at each new length), so for an RNN it is the loop's body that is compiled instead
(`TranslationModel.steps_compilable`, `compile_steps`): one function per target step, the products with
s_{i-1}, the attention and the GRU/LSTM gate update (nmt/models/rnn/decoder.py), called from the eager loop in the
training step only. RNNsearch's decoder steps so on every device; RNNencdec's only where its decoder is not one
fused cuDNN call (the CPU). A model with neither (RNNencdec on CUDA) trains eagerly, with a warning, as an
explicit precision that cannot apply does (precision.py), so that one setting can serve an experiment of all
kinds. The encoders' loops stay eager (one fused cuDNN call on CUDA).

Shapes: `dynamic=True`, one graph for the batches of every size. Token-budget batches differ in sentences as well
as in lengths, so padding the lengths to a few sizes would still leave one shape per sentence count, and graphs
of fixed shapes would soon pass torch's recompile limit (8 per function), past which it runs eagerly. With
dynamic shapes a batch is traced again only where it breaks an assumption of the graph: two sizes the first
batch happened to share (torch's duck sizing took them as one), or a size of 1 (a tiny Transformer on the CPU:
a second graph at its second batch, none after). Batches are not padded: the graph computes what the eager
forward does, to float rounding. A step function is traced likewise once for every batch size and source length
(a tiny RNNsearch on the CPU: one graph, one more for a batch of one sentence, an LSTM's twice as many since its
first step's zero memory has no gradient; tests/test_compiling.py), its last step (s_T, never read) attending
eagerly.

The compiled module wraps the model and shares its parameters: the optimiser, gradient clipping, checkpoints
(state_dict keys without `_orig_mod.`), validation and search use the model itself, eagerly. An RNN's compiled
steps are its own methods, called by the model itself in the training step (training mode, gradients on) only;
validation (eval, no_grad) and search (`decode_step`) run its eager steps. Under torchrun,
DistributedDataParallel wraps the compiled module (PyTorch's advice for DDP: compile the inner module; dynamo
still splits the graph at DDP's gradient buckets).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from nmt.models.interface import TranslationModel

_F = TypeVar("_F", bound=Callable[..., Any])


def compiles(enabled: bool, model: TranslationModel) -> bool:
    """Whether the training step runs `model` compiled: training.compile is `enabled` and the model's forward
    compiles, or its step loop's body does (on the device it is on)."""
    return enabled and (model.compilable or model.steps_compilable)


def compile_step(step: _F) -> _F:
    """A model's step function through torch.compile with dynamic shapes (a `StepCompiler`)."""
    return cast(_F, torch.compile(step, dynamic=True))


def training_module(model: TranslationModel, enabled: bool, ddp: bool = False) -> nn.Module:
    """What the training step calls: `model` (on its device already), through torch.compile where its forward
    compiles, or with its training steps compiled (`compile_steps`) where they do, when training.compile is
    `enabled` (tracing waits for the first call); in DistributedDataParallel around that where `ddp` (torchrun)."""
    module: nn.Module = model
    if compiles(enabled, model):
        if model.compilable:
            module = torch.compile(model, dynamic=True)
        else:
            model.compile_steps(compile_step)
    if ddp:
        # no device_ids: the batch is on the device already, and with them DDP would move the source lengths the
        # batch keeps on the host (Batch.to) to the device too, where the models read them back with a wait
        module = DistributedDataParallel(module)
    return module


def compile_fallback(enabled: bool, model: TranslationModel) -> str | None:
    """The warning for training.compile asked for a model that has nothing to compile; None otherwise."""
    if not enabled or compiles(enabled, model):
        return None
    return (f"warning: training.compile applies to a forward without a loop over the steps (the Transformer) "
            f"and to an RNN decoder that steps through the target in Python; {model.name} has neither on this "
            "device (RNNencdec on CUDA runs its RNNs as fused cuDNN calls), so this run trains eagerly "
            "(summary.json: compile false).")
