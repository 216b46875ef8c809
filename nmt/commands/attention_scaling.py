"""`nmt attention-scaling`: why scaled dot-product attention divides by sqrt(d) (nmt/compare/attention_scaling.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from nmt.commands import arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`nmt attention-scaling RUN_DIR... [--split S] [--sentences-per-bucket N] [--out DIR] ...`."""
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="runs with attention (dot, scaled_dot, ...)")
    parser.add_argument("--split", choices=["valid", "test"], help="default: the first run's evaluation.split")
    parser.add_argument("--sentences-per-bucket", type=int, metavar="N",
                        help="sample size per length bucket, 0 = all (default: evaluation.curve_sentences_per_bucket)")
    parser.add_argument("--checkpoint", help=arguments.CHECKPOINT_HELP)
    parser.add_argument("--out", type=arguments.folder, help="output folder (default as for evaluate)")
    arguments.add_threads(parser, " Here the run is the first RUN_DIR.")


def run(args: argparse.Namespace) -> None:
    """Run `nmt attention-scaling` from parsed arguments."""
    from nmt.compare.attention_scaling import scaling_statistics  # the library: only now

    arguments.use_threads(args.threads, args.run_dirs[0])
    scaling_statistics(args.run_dirs, args.out, args.split, args.sentences_per_bucket, args.checkpoint,
                       option="--checkpoint ")
