"""The flags several commands share, for their `add_arguments` (nmt/cli.py's convention): --set and its
shorthands (one route to a setting: the later on the command line wins), --threads, --device, and the
types of comma-separated lists. A library module of its own, so that command modules at any layer can
use it without importing the command line.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from nmt.config import load_saved_config
from nmt.config_sections import MAX_THREADS, BucketBy
from nmt.errors import NMTError
from nmt.overrides import FlagOverride

# What `nmt translate --help` says about the checkpoint it uses by default.
CHECKPOINT_HELP = (
    "checkpoint: a bare file name is looked up in RUN_DIR/checkpoints/ (e.g. step_00000600.pt, averaged.pt), "
    "a path with a folder (./NAME.pt in the current one) is taken as it is (default: RUN_DIR/checkpoints/best.pt, "
    "the validation with the best training.early_stopping_metric: greedy BLEU on the valid split by default, or "
    "loss; with a tiny valid set BLEU is noise and loss chooses better. A run without best.pt uses its latest step_*.pt. "
    "`nmt evaluate` reports the step and score of the checkpoint it used)"
)
DEVICE_HELP = "where the model runs: auto (CUDA when present, else CPU), cpu or cuda"
# The one rule for the torch CPU threads of every command that runs a model.
THREADS_HELP = (
    "torch CPU threads. Without --threads, every command that runs a model uses the run's "
    "training.threads (0 there: torch's default, one per core). On a machine busy with other work, "
    "1 can be several times faster.{}"
)
TRAINING_SET_HELP = (
    "override a config key (repeatable), value parsed as YAML: --set training.max_steps=200. The "
    "command line wins over the file, runs: entries included: section.key=value changes the top level "
    "and every run; runs.NAME.section.key=value changes run NAME (one the config defines) only and "
    "wins over section.key=value whatever their order"
)


class SetKey(argparse.Action):
    """The action of `add_setting`'s shorthands: appends KEY=VALUE to --set's list (dest "overrides"); KEY
    is the action's `const`."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, value: Any, option: str | None = None) -> None:
        overrides = getattr(namespace, self.dest) or []
        given = ",".join(map(str, value)) if isinstance(value, list) else str(value)  # as typed: --buckets 10,20
        override = FlagOverride(f"{self.const}={json.dumps(value)}", f"{option} {given}")  # JSON is YAML
        setattr(namespace, self.dest, [*overrides, override])


def add_set(parser: argparse.ArgumentParser, help: str, metavar: str = "SECTION.KEY=VALUE") -> None:
    """--set, the list of config overrides (args.overrides) that the shorthands of `add_setting` join."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar=metavar, help=help)


def add_setting(parser: argparse.ArgumentParser, flag: str, key: str, help: str, **kwargs: Any) -> None:
    """`flag VALUE`, a shorthand for `--set key=VALUE` (add_set first)."""
    if "choices" not in kwargs:  # else argparse would name the value after the shared dest, OVERRIDES
        kwargs.setdefault("metavar", flag.lstrip("-").upper().replace("-", "_"))
    written = f"{flag} {kwargs.get('metavar') or '{' + ','.join(kwargs['choices']) + '}'}"
    help = f"{help} (short for --set {key}={kwargs.get('metavar', 'VALUE')})"
    parser.add_argument(flag, dest="overrides", action=SetKey, const=key, default=[], help=help, **kwargs)
    # key -> how this command's shorthand is written, for the hint of an error in that key (nmt/cli.py)
    parser.set_defaults(shorthands={**(parser.get_default("shorthands") or {}), key: written})


def add_config(parser: argparse.ArgumentParser) -> None:
    """The CONFIG argument and --set of a command that reads a config file (prepare, train, experiment)."""
    parser.add_argument("config", type=Path, help="YAML config, e.g. configs/quick.yaml")
    add_set(parser, TRAINING_SET_HELP)


def add_decoding_set(parser: argparse.ArgumentParser, sections: str) -> None:
    """--set for the decode-time settings of a trained run (translate, evaluate)."""
    add_set(
        parser,
        f"change a {sections} setting of the run for this command only (repeatable, value parsed "
        "as YAML): --set decoding.beam_size=10 --set decoding.length_penalty=none; model, data and "
        "training settings are fixed by the trained weights",
    )


def add_threads(parser: argparse.ArgumentParser, detail: str = "") -> None:
    """--threads for a command that runs a trained model; `detail` adds to THREADS_HELP's rule."""
    parser.add_argument("--threads", type=int, metavar="N", help=THREADS_HELP.format(detail))


def add_training_threads(parser: argparse.ArgumentParser, detail: str = "") -> None:
    """--threads N of train and experiment: the setting training.threads, which the run records."""
    add_setting(parser, "--threads", "training.threads", THREADS_HELP.format(" The run records it." + detail),
                type=int, metavar="N")


def add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help=DEVICE_HELP)


def add_beam(parser: argparse.ArgumentParser) -> None:
    """--beam K, short for --set decoding.beam_size=K (translate, evaluate)."""
    add_setting(parser, "--beam", "decoding.beam_size", "beam size, 1 = greedy (default: the run's decoding.beam_size)",
                type=int, metavar="K")


def add_bucketing(parser: argparse.ArgumentParser, buckets_default: str, by_default: str, auto: str = "") -> None:
    """--buckets and --by, short for --set evaluation.buckets / evaluation.by (evaluate, score), each with the
    default the command takes; `auto` says what --buckets auto does (score). Every command's --buckets reads
    `auto`, as its --set does: where it is not taken, the config refuses it, saying so."""
    cutoffs = f"length cutoffs (default: {buckets_default})" + (f"; or auto: {auto}" if auto else "")
    add_setting(parser, "--buckets", "evaluation.buckets", cutoffs, type=buckets_or_auto)
    add_setting(parser, "--by", "evaluation.by", f"bucket by source or reference length (default: {by_default})",
                choices=get_args(BucketBy))


def names(text: str) -> list[str]:
    """Type of a comma-separated list of names."""
    return [name.strip() for name in text.split(",")]


def integers(malformed: str, empty: str, minimum: int | None = None) -> Callable[[str], list[int]]:
    """The argparse type of a comma-separated list of at least one integer (each at least `minimum`, if given);
    its refusals worded per list. An empty item (20,,40 or 20,40,) is refused: a number was likely lost."""

    def parse(text: str) -> list[int]:
        items = [item.strip() for item in text.split(",")]
        if not any(items):
            raise argparse.ArgumentTypeError(f"expected {empty}")
        if "" in items:
            raise argparse.ArgumentTypeError(f"expected {malformed}, got '{text}' (an empty item between commas)")
        try:
            numbers = [int(item) for item in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {malformed}, got '{text}'") from None
        if minimum is not None and min(numbers) < minimum:
            raise argparse.ArgumentTypeError(f"expected {malformed} of {minimum} or more, got '{text}'")
        return numbers

    return parse


steps = integers("comma-separated step numbers", "step numbers, e.g. 600,900", minimum=1)
buckets = integers("comma-separated integers", "at least one length cutoff, e.g. 10,20,30,40,50,60")


def buckets_or_auto(text: str) -> list[int] | str:
    """Type of --buckets: `auto` (sized from the data, where a command takes it), or `buckets`."""
    return "auto" if text.strip() == "auto" else buckets(text)


def positive(text: str) -> int:
    """Type of a count that must be at least 1 (a batch's sentences)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: it must be >= 1")
    return value


def folder(text: str) -> Path:
    """Type of an output folder (--out, --run-dir): refused at once where it, or the nearest part of it that
    exists, is a file, rather than after the command's work, when it would write there."""
    path = Path(text)
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        where = "is a file" if existing == path else f"is inside the file {existing}"
        raise argparse.ArgumentTypeError(f"'{text}' {where}: give a folder (one that does not exist yet is made)")
    return path


def use_threads(threads: int | None, run_dir: Path) -> None:
    """Set torch's CPU threads to --threads, else to the training.threads of the run in `run_dir` (none
    if it has no config.yaml: the command then says what is missing)."""
    if threads is None:
        config_path = run_dir / "config.yaml"
        threads = load_saved_config(config_path).training.threads if config_path.is_file() else 0
    set_threads(threads)


def set_threads(threads: int) -> None:
    """torch's CPU threads for this process; 0 leaves torch's default, one per core."""
    if not 0 <= threads <= MAX_THREADS:
        raise NMTError(f"--threads {threads}: give 0 (torch's default, one per core) or a count up to {MAX_THREADS}.")
    if threads > 0:
        import torch

        torch.set_num_threads(threads)
