"""`nmt train`: its arguments, and the run of a config it trains (nmt/training/trainer.py trains it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nmt.commands.arguments import add_config, add_training_threads, folder
from nmt.config import Config
from nmt.data.sources import load_checked_config
from nmt.errors import NMTError
from nmt.fileio import same_file
from nmt.torchrun import torchrun_place


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`nmt train CONFIG [--run-name NAME] [--run-dir DIR] [--resume]`."""
    add_config(parser)
    parser.add_argument(
        "--run-dir", type=folder, help="where the run is written (default runs/<run name>, or runs/<config name> without --run-name)"
    )
    # --run-name first: torchrun reads `--run` as an abbreviation of its own --run-path and stops
    parser.add_argument(
        "--run-name", "--run", dest="run", metavar="NAME",
        help="train one of the config's experiment runs (its `runs:` entry); under torchrun spell it --run-name",
    )
    parser.add_argument("--resume", action="store_true", help="continue from the run directory's latest checkpoint")
    add_training_threads(parser)


def run(args: argparse.Namespace) -> None:
    """Train the run the arguments name (the config's top level if none, with a note when it has runs)."""
    try:
        config, run_dir = _run_to_train(args)
    except NMTError as error:  # every process of a torchrun job reads the same files and arguments: said once
        error.on_every_rank = True
        raise
    from nmt.training.trainer import train  # torch: only once there is something to train

    try:
        train(config, run_dir, resume=args.resume)
    except KeyboardInterrupt:
        if torchrun_place().rank == 0:  # said once under torchrun
            claimed = (run_dir / "config.yaml").is_file()  # the run's folder is written: there is a run to resume
            print(f"{run_dir}: the same command with --resume continues it from its last checkpoint." if claimed else
                  f"{run_dir}: stopped before the run was written; the same command starts it again.", file=sys.stderr)
        raise


def _run_to_train(args: argparse.Namespace) -> tuple[Config, Path]:
    """The run's config and folder, as the arguments name them; NMTError for a refused config, an unknown run
    name, or a --run-dir whose config.yaml is the config given."""
    config = load_checked_config(args.config, args.overrides)
    run_dir = args.run_dir or Path("runs") / (args.run or args.config.stem)
    if args.run is not None:
        config = config.for_run(args.run)
    elif config.runs and torchrun_place().rank == 0:  # the top level is often none of the runs
        print(
            f"note: {args.config} defines runs {', '.join(config.runs)}, and none was named: this trains "
            f"its top-level settings (model.attention {config.model.attention}, training.max_words "
            f"{config.training.max_words}) into {run_dir}. To train one of the runs: "
            f"nmt train {args.config} --run-name {next(iter(config.runs))}",
            file=sys.stderr,
        )
    from nmt.rundir.folders import run_files

    # a folder whose config.yaml is the user's (no run beside it): the run writes its resolved settings there
    if same_file(args.config, run_dir / "config.yaml") and run_files(run_dir) == ["config.yaml"]:
        raise NMTError(
            f"{args.config} is the config.yaml of --run-dir {run_dir}, where the run writes its own (the settings "
            "it resolves): your config would be replaced.",
            "Give the run a folder of its own (by default runs/NAME), or copy the config out of that folder first; "
            "nothing was written.",
        )
    return config, run_dir
