"""What every architecture's model offers (`TranslationModel`), and `build_model`, which builds the one
model.architecture names through nmt/registry.py.

Training and search use `encode`, `init_state`, `decode_step` and the `index_select` of what the first two
return (`Reorderable`), and `forward` (teacher forcing, and the summed loss that training backpropagates);
the run's log and the commands use `describe`, `name`, `has_attention` and `attention_shown`. The commands
that compare runs (nmt/compare/) read a run's `kind` from its config alone (how the reports name it and
which role it plays in the long-sentence study), and the attention analyses (nmt/analysis/) ask a loaded
model for its `attention_points`, where they hook its attention: none of them asks which architecture it
is. The defaults below are those of a model whose attention the analyses cannot reach; an architecture
overrides what it has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from torch import Tensor, nn

from nmt.config_sections import ModelConfig
from nmt.errors import NMTError
from nmt.registry import architecture
from nmt.special import EOS_ID, PAD_ID

MAIN_VIEW = "attention"  # the weights the model returns (an RNN's one attention, a Transformer's last layer mean)


_R = TypeVar("_R", bound="Reorderable")
_F = TypeVar("_F", bound=Callable[..., Any])


class StepCompiler(Protocol):
    """What `TranslationModel.compile_steps` is given (training.compile, nmt/training/compiling.py): a function of
    the model's in, a function of the same signature out (torch.compile with dynamic shapes)."""

    def __call__(self, step: _F) -> _F: ...


class Reorderable(Protocol):
    """What `encode` and `init_state` return: search keeps, drops and repeats its rows (dimension 0)."""

    def index_select(self: _R, index: Tensor) -> _R: ...


@dataclass(frozen=True)
class ModelKind:
    """How the reports of nmt/compare/ name a run of a model config, and the part it plays there.

    `length_kind` is its role in `nmt evaluate`'s long-sentence checks (nmt/evaluation/effect.py):
    "fixed vector" (a baseline expected to fall), "rnn attention" (its attention partner, expected to
    hold), "absolute" (a model with absolute positions, expected to fall against "rnn attention" and
    "relative" runs); any other value takes part in none of them."""

    name: str  # the model in the BLEU-by-length plot's legend: "RNNsearch", "Transformer (relative positions)"
    attention: str  # `nmt experiment`'s parameter table: "additive", "4 x scaled dot-product, ..."
    curve_attention: str  # learning_curve.json's "attention"
    scaling_attention: str  # attention_scaling.json's "attention"
    scaling_size: int  # attention_scaling.json's "attention_size": the width d of the scored vectors
    length_kind: str = "other"
    without_attention: str = ""  # why it has no attention weights ("attention: none, RNNencdec"); "" if it has


class AttentionWeights(nn.Module):
    """The analyses' hook point: the module through which an attention turns its scores (the first argument of
    `forward`, ... x src_len) and source mask (the second) into weights. nmt/analysis/hooks.py records, or
    replaces, its inputs and output with torch forward hooks for the duration of a `with` block; nothing on
    the model's path checks for an analysis. `observed` (a hook is registered) tells a model whose fast path
    computes no weights (a fused kernel) to write them out through this module."""

    @property
    def observed(self) -> bool:
        return bool(self._forward_hooks or self._forward_pre_hooks)


@dataclass(frozen=True)
class AttentionPoint:
    """One attention of a model as nmt/analysis reaches it. `weights`: where its weights are computed (each
    call: one decoder step's scores batch x src_len for a single attention; batch x heads x T x S for one
    layer of multi-head attention); `what` it is, for the analyses' log; for multi-head attention, `heads`
    and `heads_out`, the module whose input holds the heads' outputs side by side (batch x T x heads * d_k),
    where the analyses silence a head."""

    weights: AttentionWeights
    what: str = "attention"
    heads: int = 1
    heads_out: nn.Module | None = None


class TranslationModel(nn.Module):
    """The interface of a translation model (built as cls(config, src_vocab_size, tgt_vocab_size)), with
    the defaults of one that has nothing more to offer."""

    config: ModelConfig
    src_vocab_size: int
    tgt_vocab_size: int

    def encode(self, src: Tensor, src_lengths: Tensor) -> Reorderable:
        """src: batch x src_len (ids + EOS, PAD right padding), src_lengths: batch -> what the decoder reads
        of the source, computed once per batch (Reorderable)."""
        raise NotImplementedError

    def init_state(self, enc: Any) -> Reorderable:
        """The decoder state before the first step for every row of `enc` (Reorderable)."""
        raise NotImplementedError

    def decode_step(self, prev_tokens: Tensor, state: Any, enc: Any) -> tuple[Tensor, Any, Tensor | None]:
        """prev_tokens: batch (long) -> log-probs batch x tgt_vocab (float32 at least), the next state, and
        the attention weights batch x src_len (None for a model without attention). The log-probs are a tensor
        of their own: search overwrites some of them in place (PAD's, BOS's, all but EOS's at a length limit)."""
        raise NotImplementedError

    def forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, return_attention: bool = False,
        target_positions: Tensor | None = None, targets: Tensor | None = None, label_smoothing: float = 0.0,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Teacher forcing. tgt_in: batch x tgt_len (BOS + ids, padded) -> logits batch x tgt_len x tgt_vocab,
        plus the attention batch x tgt_len x src_len when asked. With `target_positions` (n, long, as
        `pick_positions` takes them): logits n x tgt_vocab of those positions; with `targets` (n) too: their
        summed cross-entropy with `label_smoothing` instead (training's loss)."""
        raise NotImplementedError

    @classmethod
    def kind(cls, config: ModelConfig) -> ModelKind:
        """How the reports name a run of `config` (a model of this class): by its architecture's name."""
        name = config.architecture
        return ModelKind(name, name, name, name, config.hidden_size)

    @property
    def name(self) -> str:
        """The model's name in the run's log and the benchmark: its kind's name."""
        return self.kind(self.config).name

    @property
    def has_attention(self) -> bool:
        """Whether `decode_step` and `forward` give attention weights (to plot, to check): unless its kind says why
        not (`ModelKind.without_attention`), which the commands that compare runs read from the config alone."""
        return not self.kind(self.config).without_attention

    @property
    def attention_shown(self) -> str:
        """What the attention weights are, for plot titles."""
        return f"{self.name}'s attention"

    def recompute_attention(self, enabled: bool) -> bool:
        """training.recompute_attention: trade time for memory in training where the model can; returns whether
        it can (False: the setting has no effect on this model)."""
        return False

    @property
    def compilable(self) -> bool:
        """Whether torch.compile can take the teacher-forced `forward` (training.compile): one graph for every
        batch's shape, where a Python loop over the steps would be traced again for each new length."""
        return False

    @property
    def steps_compilable(self) -> bool:
        """Whether training.compile can take, instead, the body of the training forward's Python loop over the
        steps (`compile_steps`), where that loop runs step by step on the model's current device."""
        return False

    def compile_steps(self, compiler: StepCompiler) -> None:
        """Run the training forward's step loop through `compiler(step)` (training.compile, where
        `steps_compilable`): one compiled function per step, traced once for every batch shape. Only the
        training step uses it, the model in training mode with gradients on: validation (eval, no_grad) and
        search (`decode_step`) stay eager."""
        raise NotImplementedError(f"{self.name} has no step loop to compile")

    def describe(self) -> str:
        """One line: which model, its sizes, and its parameter count."""
        return f"{self.name} (vocab {self.src_vocab_size}/{self.tgt_vocab_size}): {count_parameters(self):,} parameters"

    def attention_points(self) -> dict[str, AttentionPoint]:
        """The attentions the analyses (nmt/analysis/) may hook, by the group they count in: MAIN_VIEW for a
        model's one attention, "layer 2" for a decoder layer's multi-head attention; none by default (the
        analyses then refuse the run with a message naming the model)."""
        return {}




def pick_positions(x: Tensor, positions: Tensor) -> Tensor:
    """The rows of x at flat positions b * tgt_len + t: x batch x tgt_len x ..., positions n (long) -> n x ...

    Positions, not a mask: the rows a mask picks are counted from its values, which on a GPU makes the host
    wait for the device; training's positions are counted on the host (Batch.target_positions)."""
    return x.flatten(0, 1).index_select(0, positions)  # (batch * tgt_len) x ... -> n x ...


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters; a tied weight counts once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def model_class(config: ModelConfig) -> type[TranslationModel]:
    """The TranslationModel subclass of `config.architecture` (nmt/registry.py)."""
    return architecture(config.architecture).model_class()  # type: ignore[no-any-return]


def model_kind(config: ModelConfig) -> ModelKind:
    """How the reports name a run of model `config`, from the config alone (nothing is built)."""
    return model_class(config).kind(config)


def build_model(config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> TranslationModel:
    """The model `config` describes (model.architecture), for the given vocabulary sizes."""
    special = max(PAD_ID, EOS_ID) + 1
    for name, size in (("source", src_vocab_size), ("target", tgt_vocab_size)):
        if size <= special:
            raise NMTError(
                f"the {name} vocabulary has {size} entries, leaving no room beyond the {special} special ids.",
                "Raise data.vocab_size, or use a larger training corpus.",
            )
    config.validate()  # a ModelConfig built in code has not been through the YAML checks
    return model_class(config)(config, src_vocab_size, tgt_vocab_size)
