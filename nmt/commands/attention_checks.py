"""`nmt attention-checks`: what a run's attention weights do and do not tell (nmt/compare/attention_checks.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from nmt.commands import arguments
from nmt.errors import NMTError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`nmt attention-checks RUN_DIR... [--split S | --src F --ref F] [--steps 300,600] [--out DIR]`."""
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="runs with attention to check")
    parser.add_argument("--split", choices=["valid", "test"],
                        help="prepared split to check on (default: the first run's evaluation.split)")
    parser.add_argument("--src", type=Path, help="source file instead of a split (with --ref)")
    parser.add_argument("--ref", type=Path, help="reference file, one line per --src line")
    parser.add_argument("--out", type=arguments.folder, help="output folder (default: as nmt evaluate's)")
    parser.add_argument("--checkpoint", help=arguments.CHECKPOINT_HELP)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--steps", type=arguments.steps, metavar="N,N",
                       help="periodic checkpoints whose alignment agreement is measured too (default: every kept step_*.pt)")
    which.add_argument("--no-steps", action="store_true", help="measure the evaluated checkpoint only")
    parser.add_argument("--sentences-per-bucket", type=int, metavar="N",
                        help="the learning curve's sample: N sentences per length bucket, 0 = all "
                        "(default: evaluation.curve_sentences_per_bucket)")
    parser.add_argument("--seed", type=int, help="seed of the permutations (default 1)")
    parser.add_argument("--symmetrise", choices=["grow-diag-final-and", "intersection"],
                        help="how eflomal's two directions are combined (default grow-diag-final-and)")
    parser.add_argument("--only", choices=["perturbation", "alignment"],
                        help="run one of the two checks only")
    parser.add_argument("--batch-size", type=arguments.positive, default=64, help="sentences per batch (default 64)")
    arguments.add_device(parser)
    arguments.add_threads(parser)


def run(args: argparse.Namespace) -> None:
    """`nmt attention-checks` from parsed arguments."""
    from nmt.compare.attention_checks import attention_checks  # the library: only now
    from nmt.evaluation.report_folder import refuse_experiment_folder

    # each check's own flags, refused with --only the other: left without a word, they would do nothing
    own = {"perturbation": {"--seed": args.seed},
           "alignment": {"--steps": args.steps, "--no-steps": args.no_steps or None, "--symmetrise": args.symmetrise}}
    for check, flags in own.items():
        given = [flag for flag, value in flags.items() if value is not None]
        if args.only not in (None, check) and given:
            raise NMTError(f"{given[0]} is a setting of the {check} check, which --only {args.only} leaves out.",
                           f"Drop {given[0]}, or --only.")
    if args.src is not None and args.split is not None:  # as nmt evaluate: --src would win, --split go unread
        raise NMTError("give either --split or --src/--ref, not both.")
    if args.out is not None:
        refuse_experiment_folder(args.out, "nmt attention-checks", "attention_checks.json, .md and .png")
    chosen = {"seed": args.seed, "symmetrisation": args.symmetrise}  # None: not given, the library's default
    arguments.use_threads(args.threads, args.run_dirs[0])
    attention_checks(
        args.run_dirs, out_dir=args.out, split=args.split, src_path=args.src, ref_path=args.ref,
        checkpoint=args.checkpoint, steps=[] if args.no_steps else args.steps, per_bucket=args.sentences_per_bucket,
        **{key: value for key, value in chosen.items() if value is not None},
        checks=(args.only,) if args.only else ("perturbation", "alignment"), device=args.device,
        batch_size=args.batch_size, option="--checkpoint ",
    )
