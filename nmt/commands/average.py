"""`nmt average`: the mean of a run's last periodic checkpoints (nmt/rundir/averaging.py)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from nmt.commands import arguments
from nmt.errors import NMTError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`nmt average RUN_DIR (--last N | --steps A,B,...) [-o FILE]`."""
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a folder written by `nmt train`")
    choice = parser.add_mutually_exclusive_group(required=True)
    choice.add_argument("--last", type=int, metavar="N", help="average the newest N step_*.pt")
    choice.add_argument(
        "--steps", type=arguments.steps, metavar="A,B,...", help="average the checkpoints of these steps"
    )
    parser.add_argument(
        "-o", "--output", type=Path, help="output file (default RUN_DIR/checkpoints/averaged.pt)"
    )


def run(args: argparse.Namespace) -> None:
    from nmt.rundir.averaging import average_checkpoints  # the library: only now
    from nmt.rundir.checkpoints import describe_checkpoint

    if str(args.output) == "-":  # stdout in every other command's -o; a file named "-" here would be a surprise
        raise NMTError("-o -: a checkpoint is not written to stdout.", "Give a file's path (e.g. -o averaged.pt).")
    path = average_checkpoints(args.run_dir, last=args.last, steps=args.steps, output=args.output)
    print(f"wrote {path}: {describe_checkpoint(path)}")
    # --checkpoint looks a bare name up in RUN_DIR/checkpoints/: a file of the current folder is ./NAME there
    given = path if path.parent != Path(".") else f"./{path}"
    print(f"use it with: nmt translate {shlex.quote(str(args.run_dir))} --checkpoint {shlex.quote(str(given))}")
