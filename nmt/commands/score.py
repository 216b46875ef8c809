"""`nmt score`: BLEU and chrF by length of any system's translation files (nmt/evaluation/score_files.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from nmt.commands import arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`nmt score HYP... --ref REF [--src SRC] [--names A,B] [--baseline A] ...`."""
    parser.add_argument(
        "hyps", type=Path, nargs="+", metavar="HYP", help="translation files, one line per reference line"
    )
    parser.add_argument("--ref", type=Path, required=True, help="reference file, one sentence a line")
    parser.add_argument("--src", type=Path, help="source file (needed to bucket by source length, and shown in the examples)")
    parser.add_argument(
        "--names",
        type=arguments.names,
        help="system names, comma-separated, one per HYP (default: what differs between the file names, e.g. "
        "OnlineB for generaltest2022.de-en.hyp.OnlineB.en beside other systems' files of that pattern)",
    )
    parser.add_argument(
        "--baseline",
        metavar="NAME",
        help="the fixed-vector (no attention) system, by name, file name or file stem: check the long-sentence effect against every other system",
    )
    parser.add_argument("--out", type=arguments.folder, default=Path("evaluation"), help="output folder (default ./evaluation)")
    arguments.add_set(
        parser,
        "an evaluation setting (repeatable): --set evaluation.tokenize=intl --set evaluation.lowercase=true",
        metavar="evaluation.KEY=VALUE",
    )
    arguments.add_bucketing(
        parser,
        "10,20,30,40,50,60",
        "source with --src, else reference",
        auto="10-word buckets merged until each holds evaluation.min_bucket_sentences, the report says how",
    )


def run(args: argparse.Namespace) -> None:
    from nmt.evaluation.score_files import score_files  # the library: only now

    score_files(args.ref, args.hyps, args.src, args.names, args.out, args.baseline, args.overrides)
