"""Loading a run directory for translation or evaluation (`load_run`), on the device `resolve_device` picks."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nmt.config import Config, load_saved_config
from nmt.data.subwords import Tokenizer
from nmt.errors import NMTError, counted
from nmt.models.interface import TranslationModel, build_model
from nmt.rundir.checkpoints import CHECKPOINT_DIR, Checkpoint, load_checkpoint, resolve_checkpoint
from nmt.rundir.folders import experiment_runs
from nmt.typed_yaml import config_diff

RUN_DIR_HINT = ("Give as RUN_DIR a folder that `nmt train` wrote (runs/NAME by default) or one of the runs of "
                "`nmt experiment` (OUT/runs/NAME).")


def resolve_device(name: str) -> torch.device:
    """'auto' -> CUDA when available, else CPU; 'cuda' without a GPU is a user mistake."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise NMTError(
            f"device '{name}' was asked for but torch sees no CUDA GPU (torch {torch.__version__}).",
            "Run on the CPU (--device cpu where the command has it; nmt train and nmt experiment: --set "
            "training.device=cpu), or install a CUDA build of torch.",
        )
    try:
        return torch.device(name)  # the config and the CLI accept auto, cpu and cuda only; Python callers any string
    except RuntimeError:  # torch's message lists twenty device types and no fix
        raise NMTError(f"device '{name}' is not a device torch knows.", "Use auto, cpu, cuda or cuda:N.") from None


@dataclass
class LoadedRun:
    """A trained run ready to translate: its config, tokenizer and model (eval mode, on `device`)."""

    run_dir: Path
    config: Config
    model: TranslationModel
    tokenizer: Tokenizer
    checkpoint: Path
    step: int


def check_run_dir(run_dir: Path, option: str = "checkpoint=") -> None:
    """Refuse a RUN_DIR argument that is not a training run, saying what it is instead (a checkpoint: give
    its run and its name to `option`, as `resolve_checkpoint`'s; "" for a command that takes no checkpoint)."""
    if run_dir.is_file() and run_dir.suffix in (".yaml", ".yml"):
        raise NMTError(
            f"{run_dir} is a config file, not a run directory.",
            f"Train a run from it first (`nmt train {run_dir} --run-name NAME`, or `nmt experiment {run_dir}` for "
            "all its runs), then give the folder it writes (runs/NAME, or OUT/runs/NAME).",
        )
    if run_dir.is_file():  # e.g. a run's checkpoint: "does not exist" would send the user looking for a typo
        hint = RUN_DIR_HINT
        if run_dir.suffix == ".pt" and run_dir.parent.name == CHECKPOINT_DIR:
            hint = f"Give its run folder, {run_dir.parent.parent}" + (
                f", and the checkpoint's name with {option}{run_dir.name}." if option else ".")
        raise NMTError(f"{run_dir} is a file, not a run directory.", hint)
    if not run_dir.is_dir():
        raise NMTError(f"{run_dir} does not exist.", RUN_DIR_HINT)
    runs = experiment_runs(run_dir)
    if runs is not None:
        raise NMTError(f"{run_dir} is an experiment's folder, not a training run.",
                       f"Pass its runs, {run_dir}/runs/NAME ({', '.join(runs) or 'none trained yet'}).")
    if not (run_dir / "config.yaml").is_file():
        held = sorted(path.name for path in run_dir.glob("*") if (path / "config.yaml").is_file())
        hint = f"It holds runs: pass them, {run_dir}/NAME ({', '.join(held)})." if held else ""
        if run_dir.name in (CHECKPOINT_DIR, "tokenizer") and (run_dir.parent / "config.yaml").is_file():
            hint = f"It is the {run_dir.name}/ folder of a run: give the run's folder, {run_dir.parent}."
        raise NMTError(f"{run_dir} is not a training run (no config.yaml).", hint or "Pass the folders `nmt train` wrote.")


def load_run(
    run_dir: Path, checkpoint: str | Path | None = None, device: str = "auto", option: str = "checkpoint="
) -> LoadedRun:
    """Load a run directory's config, tokenizer copy and model weights for translation or evaluation;
    `checkpoint` as `resolve_checkpoint` reads it (a bare name is a file of RUN_DIR/checkpoints/), errors
    naming it as `option` ("checkpoint=" in Python, "--checkpoint " for a command's flag)."""
    run_dir = Path(run_dir)
    check_run_dir(run_dir, option)
    config = load_saved_config(run_dir / "config.yaml")
    tokenizer_dir = run_dir / "tokenizer"
    try:
        tokenizer = Tokenizer.load(tokenizer_dir)
    except Exception as exc:  # the data layer's hint (re-run nmt prepare) is not what a run folder needs
        what = exc.message if isinstance(exc, NMTError) else f"cannot load {tokenizer_dir} ({type(exc).__name__}: {exc})."
        raise NMTError(
            what, "The run folder is incomplete: nmt train copies the prepared sentencepiece models into RUN_DIR/"
            "tokenizer/; copy that folder along with the run, or retrain it.",
        ) from None
    path = resolve_checkpoint(run_dir, checkpoint, option)
    target = resolve_device(device)
    checkpoint = load_checkpoint(path, map_location=target)
    if checkpoint.tokenizer_sha256 is not None and checkpoint.tokenizer_sha256 != tokenizer.model_sha256:
        raise NMTError(  # with the same vocabulary sizes its weights would load, and translate silently wrong
            f"{path} was trained with other sentencepiece models than those of {run_dir} ({tokenizer_dir}): its "
            "weights would read every piece as another.",
            f"Use it with the run it was trained in, or give a checkpoint of {run_dir}.",
        )
    if differing := model_differences(checkpoint, config):  # e.g. other heads: the same shapes, another function
        raise NMTError(
            f"{path} was trained as another model than {run_dir / 'config.yaml'} describes ({'; '.join(differing)}): "
            "its weights would load, and translate as the other model would not.",
            f"Use it with the run it was trained in, or give a checkpoint of {run_dir}.",
        )
    model = build_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    try:
        model.load_state_dict(checkpoint.model)
    except RuntimeError:
        raise NMTError(
            f"{path} does not fit the model described by {run_dir / 'config.yaml'}: "
            f"{'; '.join(mismatch(checkpoint, model.state_dict(), tokenizer))}.",
            "Use a checkpoint of this run, or the config it was trained with.",
        ) from None
    not_finite = [name for name, weights in model.state_dict().items() if not torch.isfinite(weights).all()]
    if not_finite:
        raise NMTError(
            f"{path}: NaN or infinite values in {counted(len(not_finite), 'weight tensor')} of the model "
            f"({_first(not_finite)}): it would translate nothing.",
            f"The run diverged before this checkpoint was saved: use an earlier one ({option}step_N.pt, "
            f"from `ls {path.parent}`).",
        )
    model.to(target).eval()
    return LoadedRun(run_dir, config, model, tokenizer, path, checkpoint.step)


# Model keys that shape training only: a checkpoint's weights translate the same whatever they were.
TRAINING_ONLY_MODEL_KEYS = frozenset({"dropout", "init"})


def model_differences(checkpoint: Checkpoint, config: Config) -> list[str]:
    """The model keys whose values differ between the config `checkpoint` records and `config`, in words, those that
    shape training only left out, and keys the checkpoint does not record (an earlier nmt's) too."""
    saved_model = (checkpoint.config or {}).get("model")
    if not isinstance(saved_model, dict):
        return []
    ours = dataclasses.asdict(config.model)
    return [f"model.{key} {saved_model[key]!r} in the checkpoint, {ours[key]!r} in the config"
            for key in config_diff(saved_model, ours)
            if key in saved_model and key in ours and key not in TRAINING_ONLY_MODEL_KEYS]


def mismatch(checkpoint: Checkpoint, expected: dict[str, Any], tokenizer: Tokenizer) -> list[str]:
    """Why `checkpoint`, whose model keys are the run's (load_run refuses others first), does not load into a model
    whose state dict is `expected`: the vocabulary sizes that differ, then the first weights whose shapes differ,
    and the weights one side lacks."""
    reasons = []
    for side in ("src", "tgt"):
        saved, now = getattr(checkpoint, f"{side}_vocab_size"), getattr(tokenizer, f"{side}_vocab_size")
        if saved is not None and saved != now:
            reasons.append(f"{side} vocabulary {saved} in the checkpoint, {now} in the run's tokenizer")
    weights = checkpoint.model
    shapes = [
        f"{name} {'x'.join(map(str, weights[name].shape))} in the checkpoint, "
        f"{'x'.join(map(str, tensor.shape))} for the config"
        for name, tensor in expected.items()
        if name in weights and weights[name].shape != tensor.shape
    ]
    shown = 1 if reasons else 3  # once the vocabulary sizes say why, one weight is example enough
    reasons += shapes[:shown] + ([f"{len(shapes) - shown} more weights of other sizes"] if len(shapes) > shown else [])
    missing = [name for name in expected if name not in weights]
    unexpected = [name for name in weights if name not in expected]
    if missing:
        reasons.append(f"the checkpoint lacks {len(missing)} weights of the config's model ({_first(missing)})")
    if unexpected:
        reasons.append(f"the config's model has none of {len(unexpected)} weights of the checkpoint ({_first(unexpected)})")
    return reasons or ["the weights do not load"]


def _first(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
