"""Optimisers, the learning-rate schedule (linear warm-up x optional cosine or inverse-square-root decay x
reduce-on-plateau)
and the patience that early stopping and the plateau decay both count.

The schedule is one small object rather than two torch schedulers, because LambdaLR would overwrite
every plateau decay on its next step; its state is a few numbers, saved in each step checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from nmt.config import TrainingConfig

# What training.learning_rate: 0 stands for: Adam's usual 0.001, and Adadelta's 1.0 as in Bahdanau et al.
DEFAULT_LEARNING_RATES = {"adam": 0.001, "adadelta": 1.0}


def base_learning_rate(config: TrainingConfig) -> float:
    """training.learning_rate, or the optimiser's default when it is 0."""
    return config.learning_rate if config.learning_rate > 0 else DEFAULT_LEARNING_RATES[config.optimizer]


def schedule_warnings(config: TrainingConfig) -> list[str]:
    """Warnings about a schedule that cannot do what its settings say: a warm-up that takes the whole run
    (training.warmup_steps >= max_steps, as in a short smoke run of a recipe: the rate reaches
    training.learning_rate at the last step at best, and cosine never decays), or a decay on plateaus that early
    stopping ends the run by (lr_patience >= patience, on the same score)."""
    warnings = []
    if config.warmup_steps >= config.max_steps:
        never = ", and cosine never decays" if config.lr_schedule == "cosine" else ""
        warnings.append(f"warning: training.warmup_steps ({config.warmup_steps:,}) >= training.max_steps "
                        f"({config.max_steps:,}): the warm-up takes the whole run, the rate climbing towards "
                        f"training.learning_rate{never}. For a run this short, lower training.warmup_steps.")
    same_score = config.lr_decay_metric in ("", config.early_stopping_metric)
    if 0 < config.patience <= config.lr_patience and same_score:
        warnings.append(f"warning: training.lr_patience ({config.lr_patience}) >= training.patience "
                        f"({config.patience}): early stopping ends the run by the validation that first decays the "
                        "rate, so no step trains at a decayed rate. Give training.lr_patience a count under "
                        "training.patience.")
    return warnings


def build_optimizer(parameters: Iterable[torch.nn.Parameter], config: TrainingConfig) -> torch.optim.Optimizer:
    """Adam, or Adadelta with Bahdanau et al.'s rho 0.95 and eps 1e-6; the parameters must already be on
    their device.

    On CUDA, Adam is fused: one kernel does the whole update of all the parameters, where torch's default
    launches one for each of the update's several operations (over lists of tensors, or tensor by tensor);
    these models' steps are bound by kernel launches. Elsewhere it is torch's default Adam (no fused or
    foreach flag), whose CPU results are the reference every CPU test and result holds to.
    """
    params = list(parameters)
    lr = base_learning_rate(config)
    if config.optimizer == "adadelta":
        return torch.optim.Adadelta(params, lr=lr, rho=0.95, eps=1e-6)
    on_cuda = bool(params) and all(p.device.type == "cuda" for p in params)
    adam = torch.optim.Adam(params, lr=lr, **({"fused": True} if on_cuda else {}))
    adam.register_load_state_dict_pre_hook(_keep_own_fused_flag)
    return adam


def _keep_own_fused_flag(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
    """`state` with this optimiser's `fused` flag in every group. torch's load_state_dict takes each group's
    settings from the saved state, so without this a CPU checkpoint would resume a CUDA Adam unfused, and a
    CUDA one would run a CPU Adam through torch's fused CPU kernel (whose rounding may differ). With the flag
    set, torch also puts each `step` on the parameter's device as the fused kernel needs; the saved state is
    the same either way (step, exp_avg, exp_avg_sq)."""
    fused = optimizer.defaults["fused"]
    return {**state, "param_groups": [{**group, "fused": fused} for group in state["param_groups"]]}


def is_better(score: float, best: float | None, metric: str) -> bool:
    """BLEU improves upwards, loss downwards; any number beats no score yet, NaN (a validation loss that
    overflowed) never improves: nothing would beat it after."""
    if math.isnan(score):
        return False
    if best is None:
        return True
    return score > best if metric == "bleu" else score < best


@dataclass
class Patience:
    """The best validation score so far (by `metric`), its step, and the periodic validations since the best
    of them improved; `patience` such validations in a row exhaust it (0: never): early stopping ends the
    run then."""

    metric: str
    patience: int
    best_score: float | None = None
    best_step: int = 0
    bad_validations: int = 0
    periodic_best: float | None = None  # the best of the validations that count

    def observe(self, score: float, step: int, counts: bool = True) -> bool:
        """Record the validation of `step`; True if its score is the best so far. Only validations that
        `count` (the periodic ones) move the patience counter, measured against the best of them: a closing
        validation (a last step off the grid) may win best.pt, but a run continued past it stops where one
        trained straight through does."""
        improved = is_better(score, self.best_score, self.metric)
        if improved:
            self.best_score, self.best_step = score, step
        if counts:
            periodic_improved = is_better(score, self.periodic_best, self.metric)
            if periodic_improved:
                self.periodic_best = score
            self.bad_validations = 0 if periodic_improved else self.bad_validations + 1
        return improved

    @property
    def exhausted(self) -> bool:
        return self.patience > 0 and self.bad_validations >= self.patience

    def last_step(self, step: int, validate_every: int) -> int | None:
        """The step at which early stopping ends the run if none of the validations still to come improves
        (every `validate_every` steps, from `step`'s own on, where `step` is on their grid and not yet
        validated: the training log comes first); None without early stopping."""
        if self.patience <= 0 or validate_every <= 0:
            return None
        next_validation = -(-step // validate_every) * validate_every  # the first multiple at or after `step`
        spent = self.bad_validations if self.best_score is not None else -1  # a first score is the best so far
        return next_validation + (self.patience - spent - 1) * validate_every


class LRSchedule:
    """lr(step) = base * min(1, step / warmup_steps) * decay(step) * plateau_scale.

    decay is 1 (`lr_schedule: constant`), or for `cosine` half a cosine from 1 after the warm-up to 0 at
    max_steps: a run ends at a small step size whatever its validation curve did, so where it ends does
    not hang on when a plateau decay happened to fire. For `inverse_sqrt` (Vaswani et al. 2017) it is
    sqrt(warmup_steps / step) from the end of the warm-up on, so that lr = base * min(step / warmup,
    sqrt(warmup / step)), whose peak is the base rate at the end of the warm-up: it does not read
    max_steps, so it suits a run whose length early stopping decides, and one continued to a higher cap
    takes the path it would have taken straight through.
    """

    def __init__(self, config: TrainingConfig) -> None:
        self.config = config
        self.base = base_learning_rate(config)
        self.scale = 1.0
        self.plateau = Patience(config.lr_decay_metric or config.early_stopping_metric, config.lr_patience)

    def lr(self, step: int) -> float:
        """Learning rate for update number `step` (1-based)."""
        warmup_steps = self.config.warmup_steps
        warm = min(1.0, step / warmup_steps) if warmup_steps > 0 else 1.0
        decay = 1.0
        if self.config.lr_schedule == "cosine":
            span = max(self.config.max_steps - warmup_steps, 1)
            progress = min(max((step - warmup_steps) / span, 0.0), 1.0)
            decay = 0.5 * (1.0 + math.cos(math.pi * progress))
        elif self.config.lr_schedule == "inverse_sqrt" and step > warmup_steps:
            decay = math.sqrt(warmup_steps / step)  # warmup_steps >= 1 (TrainingConfig.validate)
        return self.base * warm * decay * self.scale

    def apply(self, optimizer: torch.optim.Optimizer, step: int) -> float:
        """Set every parameter group's lr for update `step`; return it."""
        lr = self.lr(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr

    @property
    def metric(self) -> str:
        """The validation score `observe` takes: training.lr_decay_metric, else early_stopping_metric."""
        return self.plateau.metric

    def observe(self, score: float) -> bool:
        """Feed a validation score (of `metric`); decay the lr after `lr_patience` bad ones in a row (a NaN is
        a bad one, as for early stopping and torch's ReduceLROnPlateau). True on a decay."""
        if self.plateau.patience <= 0:
            return False
        self.plateau.observe(score, step=0)
        if not self.plateau.exhausted:
            return False
        self.scale *= self.config.lr_decay_factor
        self.plateau.bad_validations = 0
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"scale": self.scale, "best": self.plateau.best_score, "bad_validations": self.plateau.bad_validations}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scale = state["scale"]  # as state_dict wrote them (a float, and an int)
        self.plateau.best_score, self.plateau.bad_validations = state["best"], state["bad_validations"]
        self.plateau.periodic_best = self.plateau.best_score  # every validation the plateau sees counts
