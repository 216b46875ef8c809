"""`nmt experiment CONFIG`: prepare, train every run, evaluate, report (nmt/compare/experiment.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from nmt.commands import arguments
from nmt.config import load_config
from nmt.errors import NMTError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`nmt experiment CONFIG [--out DIR] [--force] [--runs RUN ...] [--jobs N]`."""
    arguments.add_config(parser)
    parser.add_argument("--out", type=arguments.folder, help="output folder (default experiments/<config name>)")
    parser.add_argument("--force", action="store_true",
                        help="delete the --out folder and redo every step; with --runs, delete only those runs and train "
                        "them afresh (the others stay trained)")
    parser.add_argument("--runs", nargs="+", metavar="RUN", default=[],
                        help="only these runs of the config (default: all of them)")
    parser.add_argument("--jobs", type=int, default=0, metavar="N",
                        help="runs trained at once, each in its own process, which then translates what the report "
                        "scores; 1: one after another in this process (default 0: one per CPU core, at most one "
                        "per run, each with cores/jobs torch threads unless training.threads is set; on CUDA, "
                        "min(runs, 4) sharing the one GPU (four side by side worked on one H200); with several GPUs visible, 4 per GPU and at most one per core, each run on the one with the fewest runs)")
    arguments.add_training_threads(parser, " Where that is 0, parallel trainings (--jobs) share the cores.")


def run(args: argparse.Namespace) -> None:
    from nmt.compare.experiment import run_experiment  # the library: only now

    out_dir = args.out or Path("experiments") / args.config.stem
    if args.jobs < 0:
        raise NMTError(f"--jobs {args.jobs}: give 0 (one per core) or a positive count.")
    # what follows the training runs in this process: the scoring, and any translation no run's process made
    arguments.set_threads(load_config(args.config, args.overrides).training.threads)
    run_experiment(args.config, args.overrides, out_dir, force=args.force, jobs=args.jobs, runs=args.runs)
