"""The architecture registry (nmt/registry.py) and the model interface (nmt/models/interface.py): a new
architecture is one module and one registry line, and the config layer knows the names without importing
a model."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.compare.attention_checks import attention_checks
from nmt.config import config_from_dict
from nmt.config_sections import ModelConfig
from nmt.decoding.translator import Translator
from nmt.errors import NMTError
from nmt.models.interface import ModelKind, TranslationModel, build_model, model_kind, pick_positions
from nmt.registry import ARCHITECTURES, ATTENTIONS, Architecture, architecture, resolve
from nmt.rundir.loading import load_run
from nmt.special import PAD_ID
from nmt.training.trainer import train
from tests.helpers import reverse_task_config

# ---- a throwaway architecture: what would be its module, nmt/models/toy.py ----


@dataclass
class ToyMemory:
    """The source as the mean of its embeddings."""

    mean: Tensor  # batch x size

    def index_select(self, index: Tensor) -> ToyMemory:
        return ToyMemory(self.mean.index_select(0, index))


@dataclass
class ToyState:
    hidden: Tensor  # batch x size

    def index_select(self, index: Tensor) -> ToyState:
        return ToyState(self.hidden.index_select(0, index))


class ToyModel(TranslationModel):
    """A mean-of-embeddings encoder and a GRU-cell decoder started from it, without attention: only the
    interface's required methods, every other one its default."""

    def __init__(self, config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> None:
        super().__init__()
        self.config, self.src_vocab_size, self.tgt_vocab_size = config, src_vocab_size, tgt_vocab_size
        size = config.hidden_size
        self.src_embedding = nn.Embedding(src_vocab_size, size, padding_idx=PAD_ID)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, size, padding_idx=PAD_ID)
        self.cell = nn.GRUCell(size, size)
        self.output = nn.Linear(size, tgt_vocab_size)

    @classmethod
    def kind(cls, config: ModelConfig) -> ModelKind:  # no attention weights: said once, for every command
        return dataclasses.replace(super().kind(config), without_attention="the toy model has none")

    def encode(self, src: Tensor, src_lengths: Tensor) -> ToyMemory:
        summed = (self.src_embedding(src) * (src != PAD_ID).unsqueeze(-1)).sum(dim=1)
        return ToyMemory(summed / src_lengths.to(src.device).unsqueeze(1))

    def init_state(self, enc: ToyMemory) -> ToyState:
        return ToyState(torch.tanh(enc.mean))

    def decode_step(self, prev_tokens: Tensor, state: ToyState, enc: ToyMemory) -> tuple[Tensor, ToyState, None]:
        hidden = self.cell(self.tgt_embedding(prev_tokens), state.hidden)
        return F.log_softmax(self.output(hidden).float(), dim=-1), ToyState(hidden), None

    def forward(
        self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor, return_attention: bool = False,
        target_positions: Tensor | None = None, targets: Tensor | None = None, label_smoothing: float = 0.0,
    ) -> Tensor:
        if return_attention:
            raise ValueError("the toy model has no attention")
        state, logits = self.init_state(self.encode(src, src_lengths)), []
        for t in range(tgt_in.size(1)):
            state = ToyState(self.cell(self.tgt_embedding(tgt_in[:, t]), state.hidden))
            logits.append(self.output(state.hidden))
        out = torch.stack(logits, dim=1)
        if target_positions is not None:
            out = pick_positions(out, target_positions)
        if targets is not None:
            return F.cross_entropy(out.float(), targets, reduction="sum", label_smoothing=label_smoothing)
        return out


# ---- its one registry line (in nmt/registry.py's ARCHITECTURES) ----
TOY = Architecture(f"{__name__}:ToyModel")


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ARCHITECTURES, "toy", TOY)


@pytest.mark.usefixtures("toy_registered")
def test_a_registered_architecture_trains_and_greedy_decodes_with_no_other_file_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = reverse_task_config(tmp_path / "data", n_train=200, model={"architecture": "toy", "hidden_size": 32},
                                 training={"max_steps": 6, "validate_every": 3, "checkpoint_every": 3})
    summary = train(config, tmp_path / "run")
    assert summary["final_step"] == 6
    assert "toy (vocab " in "".join(capsys.readouterr())  # the interface's default describe
    loaded = load_run(tmp_path / "run", device="cpu")  # config.yaml read back, the checkpoint into a ToyModel
    assert isinstance(loaded.model, ToyModel) and loaded.config.model.architecture == "toy"
    translator = Translator(loaded.model, loaded.tokenizer, loaded.config.decoding, beam_size=1, batch_size=8)
    hypotheses = translator.translate(["1 2 3", "4 5 6 7"])
    assert len(hypotheses) == 2 and all(isinstance(h, str) for h in hypotheses)
    beam = Translator(loaded.model, loaded.tokenizer, loaded.config.decoding, beam_size=2, batch_size=8)
    assert len(beam.translate(["1 2 3"])) == 1  # beam search reorders its state through index_select
    kind = model_kind(loaded.config.model)  # what the reports say of it, by default its name
    assert (kind.name, kind.attention, kind.length_kind) == ("toy", "toy", "other")
    # without attention, by its kind: the model says so, and the analyses refuse it by name, before any work
    assert not loaded.model.has_attention and not translator.has_attention
    with pytest.raises(NMTError, match=r"run has no attention \(the toy model has none\): there are no weights"):
        attention_checks([tmp_path / "run"], out_dir=tmp_path / "checks", device="cpu")
    assert not (tmp_path / "checks").exists()


@pytest.mark.usefixtures("toy_registered")
def test_another_architectures_keys_are_refused_and_its_own_checks_stay() -> None:
    with pytest.raises(NMTError, match=r"'model.heads': is a setting of model.architecture transformer, not of toy"):
        ModelConfig(architecture="toy", heads=8).validate()
    with pytest.raises(NMTError, match=r"'model.attention_size': is a setting of model.architecture rnn, not of toy"):
        ModelConfig(architecture="toy", attention_size=64).validate()
    with pytest.raises(NMTError, match="model.hidden_size"):
        ModelConfig(architecture="toy", hidden_size=0).validate()
    ModelConfig(architecture="toy", tie_target_embeddings=True, embedding_size=64).validate()  # no maxout layer


def test_an_unknown_architecture_is_refused_naming_the_key_and_the_known_names() -> None:
    assert list(ARCHITECTURES)[:2] == ["rnn", "transformer"]  # a new one is added by a registry line only
    with pytest.raises(NMTError, match=r"invalid value for 'model.architecture': 'lstm' is not an architecture: "
                       rf"expected one of {', '.join(ARCHITECTURES)}\."):
        config_from_dict({"model": {"architecture": "lstm"}})
    with pytest.raises(NMTError, match=r"'runs.big.model.architecture': 'rnnsearch' is not an architecture"):
        config_from_dict({"runs": {"big": {"model": {"architecture": "rnnsearch"}}}})
    with pytest.raises(NMTError, match=r"wrong type for 'model.architecture': expected str"):
        config_from_dict({"model": {"architecture": 3}})
    with pytest.raises(NMTError, match=r"'model.architecture': 'lstm' is not an architecture"):
        build_model(ModelConfig(architecture="lstm"), 30, 30)  # a config built in code: build_model checks it
    with pytest.raises(ValueError, match="unknown architecture 'lstm': expected one of rnn, transformer"):
        architecture("lstm")


def test_every_registry_reference_resolves_to_a_model_class_or_a_provider_builder() -> None:
    for entry in ARCHITECTURES.values():
        assert issubclass(entry.model_class(), TranslationModel)
    for name, reference in ATTENTIONS.items():
        provider = resolve(reference)(8, 16, 4, "last_state")
        assert provider.has_attention == (name != "none")


def test_the_config_layer_checks_the_names_without_importing_a_model() -> None:
    # a fresh interpreter: the config is read and validated, and neither nmt.models nor torch is imported
    code = (
        "import sys\n"
        "from nmt.config import config_from_dict\n"
        "config_from_dict({'model': {'architecture': 'transformer', 'heads': 2}}).model.validate()\n"
        "config_from_dict({'model': {'attention': 'dot'}}).model.validate()\n"
        "print(sorted(m for m in sys.modules if m.startswith('nmt.models') or m == 'torch'))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(("attention", "width"), [("additive", 24), ("dot", 24), ("scaled_dot", 24), ("general", 16)])
def test_the_scaling_width_is_that_of_the_vectors_the_score_compares(attention: str, width: int) -> None:
    """attention-scaling plots each run against d: attention_size where the score reads it, the decoder's
    hidden size for Luong's general score s^T W h, which has no attention_size."""
    config = config_from_dict({"model": {"attention": attention, "hidden_size": 16, "attention_size": 24}}).model
    assert model_kind(config).scaling_size == width
    if attention == "general":  # the model built: its bilinear map W is hidden x annotation (2 x hidden)
        weights = [p.shape for n, p in build_model(config, 30, 30).named_parameters() if "provider" in n]
        assert weights and all(width in shape and 24 not in shape for shape in weights)


def test_an_architecture_with_heads_gets_the_d_model_checks_whatever_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """model.heads splits d_model: a heads count that does not divide it, or embeddings of another width, are
    refused naming the key, for the Transformer and for a new architecture that takes model.heads alike
    (keyed on the name, a Transformer registered under another crashed in its first reshape)."""
    monkeypatch.setitem(ARCHITECTURES, "tiny", dataclasses.replace(ARCHITECTURES["transformer"]))
    for name in ("transformer", "tiny"):
        with pytest.raises(NMTError, match=r"'model.heads': must divide model.hidden_size \(d_model\)"):
            ModelConfig(architecture=name, hidden_size=256, embedding_size=256, heads=3).validate()
        with pytest.raises(NMTError, match=rf"'model.embedding_size': must equal model.hidden_size \(d_model\) for a {name}"):
            ModelConfig(architecture=name, hidden_size=256, embedding_size=128, heads=4).validate()
        ModelConfig(architecture=name, hidden_size=96, embedding_size=96, heads=3).validate()
    ModelConfig(architecture="rnn", hidden_size=256, embedding_size=128).validate()  # an RNN's widths are its own

