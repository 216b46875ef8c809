"""The names `model.architecture` and `model.attention` may take, and where each one's code is.

Design: each registry maps a name to a reference "module:attribute" (the form of Python's entry points)
that is imported only when a model is built or asked about, so this module imports nothing of nmt's and
the config layer (nmt/config_sections.py) checks the names and an architecture's keys when the YAML is
read without importing nmt.models or torch.

- `ARCHITECTURES`: model.architecture -> `Architecture`: its model class (a subclass of
  nmt/models/interface.py's `TranslationModel`, built as cls(model config, source vocabulary size,
  target vocabulary size)) and the model.* keys only it reads (another architecture refuses them unless
  left at their defaults). Training, search, checkpoints and the comparing commands (nmt/compare/) ask the
  model class, never the architecture's name.
- `ATTENTIONS`: model.attention (the RNN's context provider) -> the function in nmt/models/rnn/attention.py
  that builds it from (state_size, annotation_size, attention_size, fixed_context).

A new architecture is its module under nmt/models/ and one line in ARCHITECTURES; a new attention type its
class and builder in nmt/models/rnn/attention.py and one line in ATTENTIONS (docs/extending.md).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


def resolve(reference: str) -> Any:
    """The object a "module:attribute" reference names (importing the module)."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class Architecture:
    """One value of model.architecture: "module:Class" of its model, and the model.* keys only it reads."""

    model: str
    keys: tuple[str, ...] = ()

    def model_class(self) -> Any:
        """The architecture's TranslationModel subclass (its module imported now)."""
        return resolve(self.model)


# model.architecture's values, in the order error messages list them
ARCHITECTURES: dict[str, Architecture] = {
    "rnn": Architecture("nmt.models.rnn.model:Seq2Seq", keys=(
        "attention", "fixed_context", "cell", "attention_size", "maxout_size", "encoder_layers", "init")),
    "transformer": Architecture("nmt.models.transformer.model:Transformer", keys=(
        "layers", "heads", "feedforward_size", "relative_clip", "positions", "norm", "scaled_attention",
        "share_embeddings")),
}

# model.attention's values (architecture rnn): each name's builder in nmt/models/rnn/attention.py
ATTENTIONS: dict[str, str] = {
    "none": "nmt.models.rnn.attention:build_fixed_context",
    "additive": "nmt.models.rnn.attention:build_additive",
    "dot": "nmt.models.rnn.attention:build_dot",
    "scaled_dot": "nmt.models.rnn.attention:build_scaled_dot",
    "general": "nmt.models.rnn.attention:build_general",
}


def architecture(name: str) -> Architecture:
    """The registry entry of model.architecture `name` (ValueError naming the known ones; the config's
    validation refuses an unknown name first, with the key it came from)."""
    if name not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {name!r}: expected one of {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[name]
