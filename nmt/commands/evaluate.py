"""`nmt evaluate`: runs translated and scored together by length (nmt/compare/evaluate.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from nmt.commands import arguments
from nmt.errors import NMTError
from nmt.overrides import sets_key


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`nmt evaluate RUN_DIR... [--split S | --src F --ref F] [--beam K] [--out DIR] ...`."""
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR",
                        help="folders written by `nmt train`, scored together")
    parser.add_argument("--names", type=arguments.names,
                        help="the runs' names in the report, comma-separated, one per RUN_DIR (default: each run "
                        "folder's name, NAME-2 for a second folder of the same name)")
    parser.add_argument("--src", type=Path, help="source file to translate instead of a split")
    parser.add_argument("--ref", type=Path, help="reference file for --src")
    arguments.add_decoding_set(parser, "decoding.* or evaluation.*")
    arguments.add_setting(parser, "--split", "evaluation.split",
                          "split of the runs' data (default: the first run's evaluation.split)", choices=["valid", "test"])
    arguments.add_bucketing(parser, "the first run's evaluation.buckets, 10,20,30,40,50,60 unless set",
                            "the first run's evaluation.by, source unless set")
    arguments.add_beam(parser)
    parser.add_argument("--out", type=arguments.folder,
                        help="output folder (default: RUN_DIR/evaluation for one run, the runs' common parent/evaluation for several)")
    parser.add_argument("--checkpoint", metavar="CHECKPOINT",
                        help="checkpoint file name in each RUN_DIR/checkpoints/ (e.g. averaged.pt), or a path for one run "
                        "(default: each run's best.pt, else its latest step_*.pt)")
    arguments.add_threads(parser, " Here the run is the first RUN_DIR.")
    arguments.add_device(parser)


def run(args: argparse.Namespace) -> None:
    from nmt.compare.evaluate import evaluate_runs  # the library: only now
    from nmt.evaluation.report_folder import refuse_experiment_folder

    if args.src is not None and sets_key(args.overrides, "evaluation.split"):
        raise NMTError("give either --split (evaluation.split) or --src/--ref, not both.")
    if args.out is not None:
        refuse_experiment_folder(args.out, "nmt evaluate")
    arguments.use_threads(args.threads, args.run_dirs[0])
    evaluate_runs(args.run_dirs, src_path=args.src, ref_path=args.ref, out_dir=args.out, device=args.device,
                  overrides=args.overrides, checkpoint=args.checkpoint, option="--checkpoint ", names=args.names)
