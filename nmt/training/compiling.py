"""training.compile: the training step's teacher-forced forward through torch.compile (issue 42: fewer kernel
launches per step on a GPU, where these models are bound by one small launch after another).

What is compiled: the model's `forward` as the training step calls it (targets, label smoothing), for a model
whose forward compiles (`TranslationModel.compilable`: the Transformer). Its output layer and loss stay eager
(`Transformer._output`, the graph's one break). An RNN's Python loop over the steps would be traced again for
every new length, each trace unrolling it whole (a tiny RNNsearch on the CPU, torch 2.13: 12 graphs for one
batch, new ones at each new length): such a model trains eagerly, with a warning, as an explicit precision that
cannot apply does (precision.py), so that one setting can serve an experiment of both kinds.

Shapes: `dynamic=True`, one graph for the batches of every size. Token-budget batches differ in sentences as well
as in lengths, so padding the lengths to a few sizes would still leave one shape per sentence count, and graphs
of fixed shapes would soon pass torch's recompile limit (8 per function), past which it runs eagerly. With
dynamic shapes a batch is traced again only where it breaks an assumption of the graph: two sizes the first
batch happened to share (torch's duck sizing took them as one), or a size of 1 (a tiny Transformer on the CPU:
a second graph at its second batch, none after). Batches are not padded: the graph computes what the eager
forward does, to float rounding.

The compiled module wraps the model and shares its parameters: the optimiser, gradient clipping, checkpoints
(state_dict keys without `_orig_mod.`), validation and search use the model itself, eagerly. Under torchrun,
DistributedDataParallel wraps the compiled module (PyTorch's advice for DDP: compile the inner module; dynamo
still splits the graph at DDP's gradient buckets).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from nmt.models.interface import TranslationModel


def compiles(enabled: bool, model: TranslationModel) -> bool:
    """Whether the training step runs `model` compiled: training.compile is `enabled` and the model compiles."""
    return enabled and model.compilable


def training_module(model: TranslationModel, enabled: bool, ddp: bool = False) -> nn.Module:
    """What the training step calls: `model` (on its device already), through torch.compile where `compiles`
    (training.compile `enabled`; tracing waits for the first call), and in DistributedDataParallel around that
    where `ddp` (torchrun)."""
    module: nn.Module = torch.compile(model, dynamic=True) if compiles(enabled, model) else model
    if ddp:
        device = next(model.parameters()).device
        module = DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)
    return module


def compile_fallback(enabled: bool, model: TranslationModel) -> str | None:
    """The warning for training.compile asked for a model whose forward does not compile; None otherwise."""
    if not enabled or model.compilable:
        return None
    return (f"warning: training.compile applies to models without a loop over the steps (the Transformer): "
            f"{model.name}'s would be traced again for every batch's length, so this run trains eagerly "
            "(summary.json: compile false).")
