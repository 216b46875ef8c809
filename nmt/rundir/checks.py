"""What a run folder must (not) hold before training writes it: a new run refuses another run's folder, a resume
one trained otherwise (its config's learning keys, its schedule, its validation BLEU, its tokenizer, its prepared
splits). `claim` (nmt/rundir/writing.py) runs them before anything is written."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, get_args

from nmt.config import Config, EvaluationConfig, TrainingConfig, load_saved_config
from nmt.config_sections import Tokenize
from nmt.data.sources import absolute, prepared_dir
from nmt.errors import NMTError, counted
from nmt.fileio import sha256_file
from nmt.rundir.checkpoints import BEST_NAME, CHECKPOINT_DIR, checkpoint_step, latest_step_checkpoint
from nmt.rundir.folders import SUMMARY, experiment_runs, is_run, read_summary, run_files, runs_below
from nmt.rundir.lock import RunLock
from nmt.typed_yaml import config_diff


def with_absolute_paths(config: Config) -> Config:
    """A copy of `config` whose data paths are absolute and data.dir filled in (nmt/data/sources: absolute)."""
    return dataclasses.replace(config, data=absolute(config.data))


# Keys that may change between a run and its --resume: they do not change what is learned.
# (Validation decodes greedily within the length limits, so the other decoding keys do not matter.)
_RESUMABLE_TRAINING = (
    "max_steps", "max_minutes", "patience", "validate_every", "checkpoint_every", "log_every", "threads", "device",
    "tensorboard", "keep_last", "recompute_attention", "compile",
)
RESUMABLE_KEYS = frozenset([
    *(f"training.{key}" for key in _RESUMABLE_TRAINING),
    *(f"decoding.{key}" for key in ("beam_size", "length_penalty", "alpha", "batch_size", "nbest", "max_input_tokens")),
    "training.lr_decay_factor", "training.lr_decay_metric",
    # scoring; validation's BLEU (evaluation.tokenize, lowercase) is kept as its log records it: check_validation_bleu_kept
    *(f"evaluation.{f.name}" for f in dataclasses.fields(EvaluationConfig)),
    "data.dir", "data.cache_dir",
])
# Resumable keys that change the learning-rate halvings where validations halve it (training.lr_patience): by
# how much and on which score, and when validations come.
_HALVING_KEYS = ("training.lr_decay_factor", "training.lr_decay_metric", "training.validate_every")


def config_differences(old: Config, new: Config) -> list[str]:
    """Dotted keys whose values differ between two configs (`runs` names experiment runs, not this one);
    data paths are compared as absolute paths, as write_config records them."""
    a, b = ({k: v for k, v in with_absolute_paths(c).to_dict().items() if k != "runs"} for c in (old, new))
    return config_diff(a, b)


def learning_differences(old: Config, new: Config) -> list[str]:
    """The differing keys that change what a run learns: all but RESUMABLE_KEYS, and _HALVING_KEYS too where
    validations halve the learning rate (training.lr_patience): there they move the halvings."""
    differing = config_differences(old, new)
    halving_at_validations = bool(new.training.lr_patience)
    return [key for key in differing
            if key not in RESUMABLE_KEYS or (key in _HALVING_KEYS and halving_at_validations)]


def check_run_dir(run_dir: Path, config: Config, resume: bool) -> Path | None:
    """Refuse unusable run directories; return the checkpoint to resume from (None: start at step 0)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise NMTError(f"--run-dir {run_dir} exists and is not a directory.", "Choose another --run-dir.")
    absolute = Path(os.path.abspath(run_dir))
    data_dir = prepared_dir(config.data)
    if Path(os.path.abspath(data_dir)) in (absolute, *absolute.parents):
        raise NMTError(
            f"--run-dir {run_dir} lies in data.dir {data_dir}, which nmt prepare replaces whole when it "
            "rebuilds the data: the run would be deleted.",
            "Choose a --run-dir outside the prepared data folder.",
        )
    if run := next((folder for folder in Path(os.path.realpath(run_dir)).parents if is_run(folder)), None):
        raise NMTError(  # its files would mix with the run's (tokenizer/ holds its models: resuming it then fails)
            f"--run-dir {run_dir} lies in the run {run}, which it would damage. Nothing was written.",
            "Give the run a folder of its own, beside the other run rather than inside it.",
        )
    runs = experiment_runs(run_dir)
    if runs is None and not is_run(run_dir) and (inner := runs_below(run_dir)):
        them, they = ("it", "it") if len(inner) == 1 else ("them", "they")
        raise NMTError(  # inside this run, each would be refused by the check above: never resumed again
            f"--run-dir {run_dir} holds {counted(len(inner), 'run')} ({', '.join(str(path) for path in inner[:3])}"
            f"{', ...' if len(inner) > 3 else ''}): a run trained there would hold {them} inside its own folder, "
            f"where {they} could no longer be resumed. Nothing was written.",
            f"Give the run a folder of its own, beside the other {'run' if len(inner) == 1 else 'runs'} "
            f"(e.g. {run_dir / 'NEW'}).",
        )
    if runs is not None:  # its config.yaml would pass for this run's, and be replaced by it
        listed = f" ({', '.join(runs)})" if runs else ""
        raise NMTError(
            f"--run-dir {run_dir} is an experiment's folder: a run trained there would write its own config.yaml "
            "over the experiment's. Nothing was written.",
            f"Give the run a folder of its own; an experiment's runs are in {run_dir}/runs/NAME{listed}, and running "
            "the experiment again continues them.",
        )
    if resume:
        return _resumable(run_dir, config)
    _refuse_run_there(run_dir, config)
    return None


def _refuse_run_there(run_dir: Path, config: Config) -> None:
    """A new run: refuse a folder that holds a run already (another one, or this one, which --resume continues)."""
    config_path = run_dir / "config.yaml"
    if config_path.is_file():
        try:
            differing = config_differences(load_saved_config(config_path), config)
        except NMTError as error:  # no run's config.yaml: a file of the user's, which a run would replace
            raise NMTError(
                f"{run_dir} holds a config.yaml that is no run's ({error.message.rstrip('.')}): a run trained there would "
                "write its own over it.",
                "Give the run a folder of its own (a new or an empty one); nothing was overwritten.",
            ) from None
        if differing:
            raise NMTError(
                f"{run_dir} holds another run (its config.yaml differs in: {', '.join(differing[:10])}).",
                "Use another --run-dir; nothing was overwritten.",
            )
    present = run_files(run_dir)
    if present:
        RunLock(run_dir).refuse_if_held()  # "add --resume" would only meet the lock
        state = "a finished run" if (run_dir / SUMMARY).exists() else "a partial run"
        raise NMTError(
            f"{run_dir} already holds {state} ({', '.join(present)}).",
            "Add --resume to continue it, or use another --run-dir; nothing was overwritten.",
        )


def _resumable(run_dir: Path, config: Config) -> Path | None:
    """--resume: the newest checkpoint of the run in `run_dir`, or NMTError if `config` may not continue it."""
    config_path = run_dir / "config.yaml"
    if not config_path.is_file():
        present = run_files(run_dir)
        if present:  # a new run there is refused too (_refuse_run_there): say so, rather than send the user round in a loop
            raise NMTError(
                f"--resume: {config_path} does not exist, so the run in {run_dir} ({', '.join(present)}) cannot be "
                "resumed: what it was trained with is lost.",
                "Train it again in another --run-dir (or remove those files to train one there); nothing was changed.",
            )
        raise NMTError(
            f"--resume: {config_path} does not exist, so there is no run to resume in {run_dir}.",
            "Drop --resume to start a new run there, or point --run-dir at an existing run.",
        )
    previous = load_saved_config(config_path)
    differing = learning_differences(previous, config)
    if differing:
        raise NMTError(
            f"--resume: the config differs from the one {run_dir} was trained with in: {', '.join(differing)}.",
            f"Only {', '.join(sorted(RESUMABLE_KEYS))} may change on resume ({', '.join(_HALVING_KEYS)} only "
            "without training.lr_patience, whose halvings come at validations; evaluation.tokenize and lowercase "
            "only to what the run's log says its validations used); restore the other keys or start a new run in "
            "another --run-dir.",
        )
    check_validation_bleu_kept(run_dir, config, f"--resume: {run_dir}")
    check_schedule_kept(run_dir, previous.training, config.training, str(run_dir),
                        f"Resume it with training.max_steps {previous.training.max_steps}, or train a new run for "
                        f"{counted(config.training.max_steps, 'step')} in another --run-dir.")
    latest = check_not_past(run_dir, config.training.max_steps, f"--resume: {run_dir}",
                            "Give training.max_steps at least that step, or train a new run in another --run-dir.")
    trained = [str(name) for name in (Path(CHECKPOINT_DIR) / BEST_NAME, Path(SUMMARY)) if (run_dir / name).exists()]
    if latest is None and trained:  # a run killed before its first checkpoint has none of them: it starts over
        raise NMTError(
            f"--resume: the run in {run_dir} has trained ({' and '.join(trained)}), but no checkpoint to resume from "
            "is left (checkpoints/step_*.pt, interrupted_*.pt): it would start again from step 0 and replace its "
            "log and best.pt. Nothing was changed.",
            "Put its step checkpoints back, or train a new run in another --run-dir.",
        )
    return latest


def check_validation_bleu_kept(run_dir: Path, config: Config, run: str) -> None:
    """Refuse to continue the run in `run_dir` with another validation BLEU than its log's last validation used
    (`config`'s evaluation.tokenize and lowercase, as `nmt evaluate` scores): best.pt and early stopping would
    compare its best score with scores of another scale. The log is the record: config.yaml takes the evaluation
    settings a finished run is scored anew with (nmt experiment). `run` names the run in the message."""
    signature = None
    if (run_dir / "log.jsonl").is_file():
        for line in (run_dir / "log.jsonl").read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and event.get("event") == "valid" and event.get("bleu_signature"):
                    signature = str(event["bleu_signature"])
    if signature is None:
        return
    used = dict(part.split(":", 1) for part in signature.split("|") if ":" in part)
    if not {"tok", "case"} <= used.keys():  # not a signature that names them (an older sacrebleu's)
        return
    # sacrebleu names ja-mecab with its dictionary's version (tok:ja-mecab-0.996-IPA)
    logged = next((name for name in get_args(Tokenize) if used["tok"] == name or used["tok"].startswith(f"{name}-")),
                  used["tok"])
    evaluation = config.evaluation
    if (logged, used["case"] == "lc") != (evaluation.tokenize, evaluation.lowercase):
        raise NMTError(
            f"{run}: the run was validated with BLEU {signature}, and evaluation.tokenize {evaluation.tokenize} / "
            f"evaluation.lowercase {str(evaluation.lowercase).lower()} would score its next validations otherwise: "
            "its best score would be compared with scores of another scale.",
            f"Continue it with evaluation.tokenize {logged} and evaluation.lowercase "
            f"{str(used['case'] == 'lc').lower()}; nmt evaluate --set evaluation.KEY=VALUE scores it otherwise.",
        )


def check_not_past(run_dir: Path, max_steps: int, run: str, hint: str) -> Path | None:
    """The newest checkpoint of the run in `run_dir` (None: none yet), or NMTError where it is past `max_steps`:
    a run cannot go back. `run` names the run in the message; `hint` says what the command can do instead."""
    latest = latest_step_checkpoint(run_dir)
    reached = checkpoint_step(latest) if latest is not None else 0
    if reached > max_steps:
        raise NMTError(
            f"{run} is already at step {reached}, past training.max_steps {max_steps}; a run cannot go back, "
            "and nothing was changed.",
            hint,
        )
    return latest


def check_schedule_kept(run_dir: Path, saved: TrainingConfig, new: TrainingConfig, run: str, hint: str) -> None:
    """The one rule of `nmt train --resume` and `nmt experiment` for a changed training.max_steps under the
    cosine schedule, which is laid over max_steps: refused once the run has trained (a checkpoint to resume
    from), since its learning rate would leave the path it took (near 0 at a finished run's end, it would rise
    again) and the result would be no run trained straight through for either count. `run` names the run in
    the message; `hint` says what the command can do instead. The constant and inverse_sqrt schedules read no
    max_steps: their runs may be extended."""
    old = saved.max_steps
    if new.lr_schedule != "cosine" or new.max_steps == old:
        return
    latest = latest_step_checkpoint(run_dir)
    reached = checkpoint_step(latest) if latest is not None else 0
    if new.max_steps < reached:  # check_not_past's to refuse: the run is past it whatever the schedule
        return
    if reached >= old or (read_summary(run_dir) or {}).get("stopped_by") == "max_steps":
        raise NMTError(
            f"{run} finished at training.max_steps {old}; continuing it to {new.max_steps} would stretch its "
            f"cosine schedule, so the learning rate, near 0 at step {old}, would rise again: not a run trained "
            f"for {counted(new.max_steps, 'step')}. Nothing was written.",
            hint,
        )
    if reached > 0:
        raise NMTError(
            f"{run} trained {counted(reached, 'step')} of a cosine schedule laid over training.max_steps {old}; continuing "
            f"it with {new.max_steps} would lay the rest over {new.max_steps}, so its learning rate would jump at "
            f"step {reached}: not a run trained straight through for either. Nothing was written.",
            hint,
        )


def check_tokenizer(tokenizer: Any, run_dir: Path) -> None:
    """On resume: the data dir's tokenizer must be the one the run started with (RUN_DIR/tokenizer/)."""
    copy = run_dir / "tokenizer"
    if not copy.is_dir():
        return
    now = {name: hashlib.sha256(content).hexdigest() for name, content in tokenizer.contents().items()}
    # the copy's files of those names (tokenizer.json names the models: another set of models differs in it too);
    # other files there (.DS_Store, say) are no part of the tokenizer
    saved = {name: sha256_file(copy / name) for name in now if (copy / name).is_file()}
    changed = sorted(name for name in now if saved.get(name) != now[name])  # differing or missing
    if changed:
        raise NMTError(
            f"--resume: the tokenizer in {tokenizer.directory} differs from the copy in {copy} "
            f"that the run was trained with (differing files: {', '.join(changed)}).",
            "Re-run nmt prepare with the run's original data settings, or start a new run.",
        )


# The prepared splits a run trains and validates on, whose sha256 environment.json records and --resume checks
TRAINING_SPLITS = ("train.src", "train.tgt", "valid.src", "valid.tgt")


def training_data(directory: Path) -> dict[str, str]:
    """The sha256 of each of TRAINING_SPLITS in the prepared data folder `directory` (those it holds)."""
    return {name: sha256_file(directory / name) for name in TRAINING_SPLITS if (directory / name).is_file()}


def check_training_data(directory: Path, run_dir: Path) -> None:
    """On resume: the prepared splits must be those the run has trained on (environment.json's training_data; a run
    whose environment.json records none, an earlier nmt's, is not checked). The tokenizer's check misses data that
    changed but trains the same sentencepiece models: the same sentences in another order, say."""
    try:
        recorded = json.loads((run_dir / "environment.json").read_text(encoding="utf-8")).get("training_data")
    except (OSError, ValueError, AttributeError):
        return
    if not isinstance(recorded, dict):
        return
    if changed := [name for name, digest in training_data(directory).items() if recorded.get(name, digest) != digest]:
        raise NMTError(
            f"--resume: the prepared data in {directory} differs from what the run in {run_dir} has trained on "
            f"({', '.join(changed)}): it would go on with other sentences than a run trained straight through.",
            "Prepare the data the run started with again (the same input files and data settings), or start a new run.",
        )


def check_subword_settings(tokenizer: Any, config: Config) -> None:
    """The prepared tokenizer must have been trained with this config's data.* subword settings."""
    from nmt.data.subwords import MANIFEST, SUBWORD_KEYS

    manifest_path = tokenizer.directory / MANIFEST
    recorded = tokenizer.subword_settings
    differing = [
        f"data.{key} (tokenizer {recorded[key]!r}, config {getattr(config.data, key)!r})"
        for key in SUBWORD_KEYS
        if key in recorded and recorded[key] != getattr(config.data, key)
    ]
    too_big = [
        f"{side} vocabulary {size} > data.vocab_size {config.data.vocab_size}"
        for side, size in (("source", tokenizer.src_vocab_size), ("target", tokenizer.tgt_vocab_size))
        if size > config.data.vocab_size
    ]
    if differing or too_big:
        raise NMTError(
            f"the tokenizer in {manifest_path} does not match the config: {'; '.join(differing + too_big)}.",
            "Run `nmt prepare` with this config (or point data.dir at data prepared with it).",
        )
