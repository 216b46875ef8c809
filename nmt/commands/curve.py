"""`nmt curve`: greedy BLEU by length of every kept checkpoint (nmt/compare/curve.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from nmt.commands import arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`nmt curve RUN_DIR... [--split S] [--sentences-per-bucket N] [--out DIR]`."""
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR",
                        help="run directories whose step_*.pt checkpoints to score")
    parser.add_argument("--split", choices=["valid", "test"],
                        help="default: the first run's evaluation.split")
    parser.add_argument("--sentences-per-bucket", type=int, metavar="N",
                        help="sample size per bucket, 0 = all (default: evaluation.curve_sentences_per_bucket)")
    parser.add_argument("--out", type=arguments.folder, help="output folder (default as for evaluate)")
    arguments.add_device(parser)
    arguments.add_threads(parser, " Here the run is the first RUN_DIR.")


def run(args: argparse.Namespace) -> None:
    from nmt.compare.curve import learning_curves  # the library: only now
    from nmt.evaluation.report_folder import refuse_experiment_folder

    if args.out is not None:
        refuse_experiment_folder(args.out, "nmt curve", "learning_curve.json, .md and .png")
    arguments.use_threads(args.threads, args.run_dirs[0])
    learning_curves(args.run_dirs, args.out, args.split, args.sentences_per_bucket, args.device)
