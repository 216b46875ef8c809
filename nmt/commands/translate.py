"""`nmt translate`: a file or stdin through a trained run (nmt/decoding/translate.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from nmt.commands import arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`nmt translate RUN_DIR [-i IN] [-o OUT] [--beam K] [--nbest K] ...`."""
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a folder written by `nmt train`")
    parser.add_argument("-i", "--input", type=Path, help="input file, or - for stdin (default stdin)")
    parser.add_argument(
        "-o", "--output", type=Path,
        help="output file, written once translation succeeds (through a symbolic link to its file), or - for "
        "stdout (default stdout)",
    )
    arguments.add_decoding_set(parser, "decoding.*")
    arguments.add_beam(parser)
    arguments.add_setting(parser, "--batch-size", "decoding.batch_size", "sentences per batch", type=int, metavar="N")
    arguments.add_setting(
        parser, "--nbest", "decoding.nbest",
        "write the K best translations of each input line, best first, as --nbest-layout says (at most "
        "the beam size)", type=int, metavar="K",
    )
    parser.add_argument(
        "--nbest-layout", choices=["lines", "tabs"], default="lines",
        help="lines (default, as OpenNMT-py's -n_best): K lines per input line, so that output line "
        "(i-1)*K+j is the j-th best of input line i; tabs: one line per input line, its K translations "
        "separated by tabs",
    )
    parser.add_argument(
        "--scores", action="store_true",
        help="follow each translation with a tab and its model score (log-probability / length penalty)",
    )
    parser.add_argument("--checkpoint", help=arguments.CHECKPOINT_HELP)  # a str: Path would drop a "./"
    parser.add_argument(
        "--attention-plots", type=arguments.folder, metavar="DIR", help="write one attention heatmap PNG per sentence"
    )
    arguments.add_threads(parser)
    arguments.add_device(parser)


def run(args: argparse.Namespace) -> None:
    from nmt.decoding.translate import translate_file  # the library: only now

    arguments.use_threads(args.threads, args.run_dir)
    translate_file(
        args.run_dir, input_path=args.input, output_path=args.output, checkpoint=args.checkpoint,
        attention_plots=args.attention_plots, device=args.device, overrides=args.overrides, scores=args.scores,
        nbest_layout=args.nbest_layout, option="--checkpoint ",
    )
