"""`nmt score`: BLEU and chrF by length of any system's translation files (nmt/evaluation/score_files.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from nmt.commands import arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`nmt score HYP... --ref REF [--src SRC] [--names A,B] [--baseline A | --config CONFIG] ...`."""
    parser.add_argument(
        "hyps", type=Path, nargs="+", metavar="HYP", help="translation files, one line per reference line"
    )
    parser.add_argument("--ref", type=Path, required=True, help="reference file, one sentence a line")
    parser.add_argument("--src", type=Path, help="source file (needed to bucket by source length, and shown in the examples)")
    parser.add_argument(
        "--names",
        type=arguments.names,
        help="system names, comma-separated, one per HYP (default: what differs between the file names, e.g. "
        "OnlineB for generaltest2022.de-en.hyp.OnlineB.en beside other systems' files of that pattern; NAME for "
        "a report's NAME.hyp.txt)",
    )
    compared = parser.add_mutually_exclusive_group()
    compared.add_argument(
        "--baseline",
        metavar="NAME",
        help="the fixed-vector (no attention) system, by name, file name or file stem: check the long-sentence effect against every other system",
    )
    compared.add_argument(
        "--config",
        type=Path,
        help="a config whose runs: the systems are, by name (e.g. configs/quick.yaml, or an experiment's "
        "config.yaml): their checks pair them as nmt evaluate does (fixed vector with attention, across "
        "training ceilings, Transformers against what should hold) and the plot groups them; the "
        "evaluation settings stay this command's",
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
    comparisons = None
    if args.config:  # what a run is comes from its model's class: torch is loaded for --config only
        from nmt.compare.evaluate import config_comparisons

        comparisons = config_comparisons(args.config)
    score_files(args.ref, args.hyps, args.src, args.names, args.out, args.baseline, args.overrides, comparisons)
