"""Command line: `nmt COMMAND ...`, one module per command, listed in COMMANDS.

A command module has `add_arguments(parser: argparse.ArgumentParser) -> None`, which declares its
arguments with the helpers below, and `run(args: argparse.Namespace) -> None`, which does the work;
register it with one line in COMMANDS (name -> module, one-line help). `main` imports only the module
of the command that argv names, so `nmt --help` and `nmt COMMAND --help` stay fast: keep torch and other
heavy imports out of a command module's top level where its --help should be fast.
User mistakes (NMTError) become one paragraph on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nmt import __version__
from nmt.config import load_config
from nmt.errors import NMTError

# name -> (module with add_arguments and run, the line `nmt --help` shows)
COMMANDS: dict[str, tuple[str, str]] = {
    "prepare": ("nmt.data.prepare", "get the corpus, split it, train sentencepiece models"),
    "train": ("nmt.training.train_command", "train one model (use torchrun for several GPUs)"),
    "translate": ("nmt.decoding.translate", "translate text with a trained run"),
    "evaluate": ("nmt.compare.evaluate", "BLEU and chrF overall and by sentence length, with significance"),
    "score": (
        "nmt.evaluation.score_files",
        "BLEU and chrF by sentence length of any system's translations (files), with significance",
    ),
    "average": (
        "nmt.rundir.averaging",
        "average a run's last periodic checkpoints into one (for translate/evaluate --checkpoint)",
    ),
    "curve": ("nmt.compare.curve", "greedy BLEU by sentence length of every kept checkpoint, against step"),
    "experiment": ("nmt.compare.experiment", "prepare, train every run, evaluate them together, report"),
    "attention-checks": (
        "nmt.compare.attention_checks",
        "BLEU by length with attention made uniform, permuted or one-hot; attention vs a word aligner",
    ),
    "attention-scaling": (
        "nmt.compare.attention_scaling",
        "why scaled dot-product attention divides by sqrt(d): score statistics at initialisation and trained",
    ),
}

# What `nmt translate --help` says about the checkpoint it uses by default.
CHECKPOINT_HELP = (
    "checkpoint: a bare file name is looked up in RUN_DIR/checkpoints/ (e.g. step_00000600.pt, averaged.pt), "
    "a path with a folder is taken as it is (default: RUN_DIR/checkpoints/best.pt, the validation with the best "
    "training.early_stopping_metric: greedy BLEU on the valid split by default, or loss; with a tiny "
    "valid set BLEU is noise and loss chooses better. A run without best.pt uses its latest step_*.pt. "
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
    "and every run; runs.NAME.section.key=value changes run NAME only and wins over section.key=value "
    "whatever their order"
)


class SetKey(argparse.Action):
    """A shorthand for `--set KEY=VALUE`: appends to the same list (dest "overrides") as --set, so
    that of a shorthand and a --set of one key the later on the command line wins."""

    def __init__(self, option_strings: Sequence[str], dest: str, key: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.key = key

    def __call__(self, parser: Any, namespace: argparse.Namespace, value: Any, option: str | None = None) -> None:
        overrides = list(getattr(namespace, self.dest) or [])
        setattr(namespace, self.dest, [*overrides, f"{self.key}={json.dumps(value)}"])  # JSON is YAML


def add_set(parser: argparse.ArgumentParser, help: str, metavar: str = "SECTION.KEY=VALUE") -> None:
    """--set, the list of config overrides (args.overrides) that the shorthands of `add_setting` join."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar=metavar, help=help)


def add_setting(parser: argparse.ArgumentParser, flag: str, key: str, help: str, **kwargs: Any) -> None:
    """`flag VALUE`, a shorthand for `--set key=VALUE` (add_set first)."""
    value = kwargs.get("metavar", "VALUE")
    parser.add_argument(
        flag, dest="overrides", action=SetKey, key=key, default=[], help=f"{help} (short for --set {key}={value})",
        **kwargs,
    )


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
    parser.add_argument("--threads", type=int, default=None, metavar="N", help=THREADS_HELP.format(detail))


def add_training_threads(parser: argparse.ArgumentParser, detail: str = "") -> None:
    """--threads N of train and experiment: the setting training.threads, which the run records."""
    help = THREADS_HELP.format(" Here --threads N is --set training.threads=N: the run records it." + detail)
    parser.add_argument(
        "--threads", dest="overrides", action=SetKey, key="training.threads", type=int, default=[], metavar="N",
        help=help,
    )


def add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help=DEVICE_HELP)


def names(text: str) -> list[str]:
    """Type of a comma-separated list of names."""
    return [name.strip() for name in text.split(",")]


def steps(text: str) -> list[int]:
    """Type of a comma-separated list of step numbers."""
    try:
        numbers = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated step numbers, got '{text}'") from None
    if not numbers:
        raise argparse.ArgumentTypeError("expected step numbers, e.g. 600,900")
    return numbers


def buckets(text: str) -> list[int]:
    """Type of comma-separated length cutoffs."""
    try:
        cutoffs = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'") from None
    if not cutoffs:
        raise argparse.ArgumentTypeError("expected at least one length cutoff, e.g. 10,20,30,40,50,60")
    return cutoffs


def use_threads(threads: int | None, run_dir: Path) -> None:
    """Set torch's CPU threads to --threads, else to the training.threads of the run in `run_dir` (none
    if it has no config.yaml: the command then says what is missing)."""
    if threads is None:
        config_path = run_dir / "config.yaml"
        threads = load_config(config_path).training.threads if config_path.is_file() else 0
    set_threads(threads)


def set_threads(threads: int) -> None:
    """torch's CPU threads for this process; 0 leaves torch's default, one per core."""
    if threads < 0:
        raise NMTError(f"--threads {threads}: give 0 (torch's default, one per core) or a positive count.")
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command (by default), or one in which only `command` has its arguments (none
    for "": enough for `nmt --help` and to refuse an unknown command)."""
    parser = argparse.ArgumentParser(
        prog="nmt",
        description="RNN encoder-decoders with and without attention, compared by sentence length.",
    )
    parser.add_argument("--version", action="version", version=f"nmt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help) in COMMANDS.items():
        subparser = sub.add_parser(name, help=help)
        if command is None or name == command:
            importlib.import_module(module).add_arguments(subparser)
    return parser


def run_command(args: argparse.Namespace) -> None:
    """Hand parsed arguments to their command's `run`."""
    importlib.import_module(COMMANDS[args.command][0]).run(args)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `nmt` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    named = next((word for word in argv if not word.startswith("-")), None)  # `nmt` itself takes only flags
    args = build_parser(named if named in COMMANDS else "").parse_args(argv)
    try:
        run_command(args)
    except NMTError as error:
        print(f"nmt {args.command}: error: {error.message}", file=sys.stderr)
        if error.hint:
            print(error.hint, file=sys.stderr)
        return 2
    except OSError as error:  # a path the user gave that cannot be read or written
        where = f" {error.filename}:" if error.filename else ""
        print(f"nmt {args.command}: error:{where} {error.strerror or error}", file=sys.stderr)
        print("Check that the path exists, is writable and that the disk has space.", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"nmt {args.command}: interrupted.", file=sys.stderr)
        return 130
    return 0
