"""Command line: `nmt prepare|train|translate|evaluate|score|average|curve|experiment`.

Each subcommand parses its arguments and calls one function, which is also the Python API.
User mistakes (NMTError) become one paragraph on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nmt import __version__
from nmt.config import load_config
from nmt.errors import NMTError

# What `nmt translate --help` says about the checkpoint it uses by default.
CHECKPOINT_HELP = (
    "checkpoint: a bare file name is looked up in RUN_DIR/checkpoints/ (e.g. step_00000600.pt, averaged.pt), "
    "a path with a folder is taken as it is (default: RUN_DIR/checkpoints/best.pt, the validation with the best "
    "training.early_stopping_metric: greedy BLEU on the valid split by default, or loss; with a tiny "
    "valid set BLEU is noise and loss chooses better. A run without best.pt uses its latest step_*.pt. "
    "`nmt evaluate` reports the step and score of the checkpoint it used)"
)
DEVICE_HELP = "where the model runs: auto (CUDA when present, else CPU), cpu or cuda"
# The one rule for the torch CPU threads of every command that runs a model.
THREADS_HELP = (
    "torch CPU threads. Without --threads, every command that runs a model uses the run's "
    "training.threads (0 there: torch's default, one per core). On a machine busy with other work, "
    "1 can be several times faster.{}"
)


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", type=Path, help="YAML config, e.g. configs/quick.yaml")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config key (repeatable), value parsed as YAML: --set training.max_steps=200. The "
        "command line wins over the file, runs: entries included: section.key=value changes the top level "
        "and every run; runs.NAME.section.key=value changes run NAME only and wins over section.key=value "
        "whatever their order",
    )


def _add_threads_arg(parser: argparse.ArgumentParser, detail: str = "") -> None:
    """--threads, for every command that runs a model; `detail` adds to THREADS_HELP's rule."""
    parser.add_argument("--threads", type=int, default=None, metavar="N", help=THREADS_HELP.format(detail))


def _add_decoding_args(parser: argparse.ArgumentParser, sections: str) -> None:
    """--set for decode-time settings, shared by translate and evaluate."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help=f"change a {sections} setting of the run for this command only (repeatable, value parsed "
        "as YAML): --set decoding.beam_size=10 --set decoding.length_penalty=none; model, data and "
        "training settings are fixed by the trained weights",
    )


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",")]


def _steps(text: str) -> list[int]:
    try:
        steps = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated step numbers, got '{text}'") from None
    if not steps:
        raise argparse.ArgumentTypeError("expected step numbers, e.g. 600,900")
    return steps


def _buckets(text: str) -> list[int]:
    try:
        cutoffs = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'") from None
    if not cutoffs:
        raise argparse.ArgumentTypeError("expected at least one length cutoff, e.g. 10,20,30,40,50,60")
    return cutoffs


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="nmt",
        description="RNN encoder-decoders with and without attention, compared by sentence length.",
    )
    parser.add_argument("--version", action="version", version=f"nmt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    prepare = sub.add_parser("prepare", help="get the corpus, split it, train sentencepiece models")
    _add_config_args(prepare)

    train = sub.add_parser("train", help="train one model (use torchrun for several GPUs)")
    _add_config_args(train)
    train.add_argument(
        "--run-dir", type=Path, default=None, help="where the run is written (default runs/<config name>)"
    )
    # --run-name first: torchrun reads `--run` as an abbreviation of its own --run-path and stops
    train.add_argument(
        "--run-name",
        "--run",
        dest="run",
        default=None,
        metavar="NAME",
        help="train one of the config's experiment runs (its `runs:` entry); under torchrun spell it --run-name",
    )
    train.add_argument(
        "--resume", action="store_true", help="continue from the run directory's latest checkpoint"
    )
    _add_threads_arg(train, " Here --threads N is --set training.threads=N: the run records it.")

    translate = sub.add_parser("translate", help="translate text with a trained run")
    translate.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a folder written by `nmt train`")
    translate.add_argument("-i", "--input", type=Path, default=None, help="input file (default stdin)")
    translate.add_argument("-o", "--output", type=Path, default=None, help="output file (default stdout)")
    translate.add_argument(
        "--beam", type=int, default=None, help="beam size (1 = greedy; default from the run's config)"
    )
    translate.add_argument("--batch-size", type=int, default=None, help="sentences per batch")
    translate.add_argument(
        "--nbest",
        type=int,
        default=None,
        help="write the K best translations of each input line, best first, as --nbest-layout says "
        "(default: the run's decoding.nbest, at most the beam size)",
    )
    translate.add_argument(
        "--nbest-layout",
        choices=["lines", "tabs"],
        default="lines",
        help="lines (default, as OpenNMT-py's -n_best): K lines per input line, so that output line "
        "(i-1)*K+j is the j-th best of input line i; tabs: one line per input line, its K translations "
        "separated by tabs",
    )
    translate.add_argument(
        "--scores",
        action="store_true",
        help="follow each translation with a tab and its model score (log-probability / length penalty)",
    )
    translate.add_argument("--checkpoint", type=Path, default=None, help=CHECKPOINT_HELP)
    translate.add_argument(
        "--attention-plots",
        type=Path,
        default=None,
        metavar="DIR",
        help="write one attention heatmap PNG per sentence",
    )
    _add_decoding_args(translate, "decoding.*")
    _add_threads_arg(translate)
    translate.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help=DEVICE_HELP)

    evaluate = sub.add_parser(
        "evaluate", help="BLEU and chrF overall and by sentence length, with significance"
    )
    evaluate.add_argument(
        "run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="folders written by `nmt train`, scored together"
    )
    evaluate.add_argument(
        "--split",
        choices=["valid", "test"],
        default=None,
        help="split of the runs' data (default: the first run's evaluation.split)",
    )
    evaluate.add_argument(
        "--src", type=Path, default=None, help="source file to translate instead of a split"
    )
    evaluate.add_argument("--ref", type=Path, default=None, help="reference file for --src")
    evaluate.add_argument(
        "--buckets", type=_buckets, default=None, help="length cutoffs, default 10,20,30,40,50,60"
    )
    evaluate.add_argument(
        "--by",
        choices=["source", "reference"],
        default=None,
        help="bucket by source (default) or reference length",
    )
    evaluate.add_argument("--beam", type=int, default=None, help="beam size (default from the run's config)")
    evaluate.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: RUN_DIR/evaluation for one run, the runs' common parent/evaluation for several)",
    )
    evaluate.add_argument(
        "--checkpoint",
        default=None,
        metavar="NAME",
        help="checkpoint file name in each RUN_DIR/checkpoints/ (e.g. averaged.pt), or a path for one run "
        "(default: each run's best.pt, else its latest step_*.pt)",
    )
    _add_decoding_args(evaluate, "decoding.* or evaluation.*")
    _add_threads_arg(evaluate, " Here the run is the first RUN_DIR.")
    evaluate.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help=DEVICE_HELP)

    score = sub.add_parser(
        "score", help="BLEU and chrF by sentence length of any system's translations (files), with significance"
    )
    score.add_argument("hyps", type=Path, nargs="+", metavar="HYP", help="translation files, one line per reference line")
    score.add_argument("--ref", type=Path, required=True, help="reference file, one sentence a line")
    score.add_argument(
        "--src", type=Path, default=None, help="source file (needed to bucket by source length, and shown in the examples)"
    )
    score.add_argument(
        "--names", type=_names, default=None, help="system names, comma-separated, one per HYP (default: file names)"
    )
    score.add_argument(
        "--buckets", type=_buckets, default=None, help="length cutoffs, default 10,20,30,40,50,60"
    )
    score.add_argument(
        "--by",
        choices=["source", "reference"],
        default=None,
        help="bucket by source (default with --src) or reference length (default without)",
    )
    score.add_argument(
        "--baseline",
        default=None,
        metavar="NAME",
        help="the fixed-vector (no attention) system: check the long-sentence effect against every other system",
    )
    score.add_argument("--out", type=Path, default=Path("evaluation"), help="output folder (default ./evaluation)")
    score.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="evaluation.KEY=VALUE",
        help="an evaluation setting (repeatable): --set evaluation.tokenize=intl --set evaluation.lowercase=true",
    )

    average = sub.add_parser(
        "average", help="average a run's last periodic checkpoints into one (for translate/evaluate --checkpoint)"
    )
    average.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a folder written by `nmt train`")
    choice = average.add_mutually_exclusive_group(required=True)
    choice.add_argument("--last", type=int, default=None, metavar="N", help="average the newest N step_*.pt")
    choice.add_argument(
        "--steps", type=_steps, default=None, metavar="A,B,...", help="average the checkpoints of these steps"
    )
    average.add_argument(
        "-o", "--output", type=Path, default=None, help="output file (default RUN_DIR/checkpoints/averaged.pt)"
    )

    curve = sub.add_parser("curve", help="greedy BLEU by sentence length of every kept checkpoint, against step")
    curve.add_argument(
        "run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="run directories whose step_*.pt checkpoints to score"
    )
    curve.add_argument(
        "--split", choices=["valid", "test"], default=None, help="default: the first run's evaluation.split"
    )
    curve.add_argument(
        "--sentences-per-bucket",
        type=int,
        default=None,
        metavar="N",
        help="sample size per bucket, 0 = all (default: evaluation.curve_sentences_per_bucket)",
    )
    curve.add_argument("--out", type=Path, default=None, help="output folder (default as for evaluate)")
    curve.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help=DEVICE_HELP)
    _add_threads_arg(curve, " Here the run is the first RUN_DIR.")

    experiment = sub.add_parser("experiment", help="prepare, train every run, evaluate them together, report")
    _add_config_args(experiment)
    experiment.add_argument(
        "--out", type=Path, default=None, help="output folder (default experiments/<config name>)"
    )
    experiment.add_argument("--force", action="store_true", help="redo every step, even finished ones")
    experiment.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="runs trained at once, each in its own process (default 0: one per CPU core, each with "
        "cores/jobs torch threads unless training.threads is set; 1 on CUDA)",
    )
    _add_threads_arg(
        experiment,
        " Here --threads N is --set training.threads=N; where that is 0, parallel trainings (--jobs) share "
        "the cores.",
    )
    return parser


def run_command(args: argparse.Namespace) -> None:
    """Dispatch parsed arguments to the function that does the work."""
    if args.command == "prepare":
        config = load_config(args.config, args.overrides)
        from nmt.data.prepare import format_stats, prepare

        print(format_stats(prepare(config.data), config.data))
    elif args.command == "train":
        config = load_config(args.config, _with_threads(args.overrides, args.threads))
        run_dir = args.run_dir or Path("runs") / (args.run or args.config.stem)
        if args.run is not None:
            config = config.for_run(args.run)
        elif config.runs:  # the top level is often none of the runs (quick.yaml's trains on all lengths)
            print(
                f"note: {args.config} defines runs {', '.join(config.runs)}, and none was named: this trains "
                f"its top-level settings (model.attention {config.model.attention}, training.max_words "
                f"{config.training.max_words}) into {run_dir}. To train one of the runs: "
                f"nmt train {args.config} --run-name {next(iter(config.runs))}",
                file=sys.stderr,
            )
        from nmt.training.trainer import train

        train(config, run_dir, resume=args.resume)
    elif args.command == "translate":
        from nmt.decoding.translate import translate_file

        _set_threads(_run_threads(args.threads, args.run_dir))
        translate_file(
            args.run_dir,
            input_path=args.input,
            output_path=args.output,
            beam_size=args.beam,
            batch_size=args.batch_size,
            nbest=args.nbest,
            checkpoint=args.checkpoint,
            attention_plots=args.attention_plots,
            device=args.device,
            overrides=args.overrides,
            scores=args.scores,
            nbest_layout=args.nbest_layout,
        )
    elif args.command == "evaluate":
        if (args.src is None) != (args.ref is None):
            raise NMTError("--src and --ref go together: give both files, or neither to use --split.")
        if args.src is not None and args.split is not None:
            raise NMTError("give either --split or --src/--ref, not both.")
        from nmt.compare.evaluate import evaluate_runs

        _set_threads(_run_threads(args.threads, args.run_dirs[0]))
        evaluate_runs(
            args.run_dirs,
            split=args.split,
            src_path=args.src,
            ref_path=args.ref,
            buckets=args.buckets,
            by=args.by,
            beam_size=args.beam,
            out_dir=args.out,
            device=args.device,
            overrides=args.overrides,
            checkpoint=args.checkpoint,
        )
    elif args.command == "curve":
        from nmt.compare.curve import learning_curves

        _set_threads(_run_threads(args.threads, args.run_dirs[0]))
        learning_curves(
            args.run_dirs, out_dir=args.out, split=args.split, per_bucket=args.sentences_per_bucket, device=args.device
        )
    elif args.command == "score":
        from nmt.evaluation.score_files import score_files

        score_files(
            args.ref,
            args.hyps,
            src_path=args.src,
            names=args.names,
            buckets=args.buckets,
            by=args.by,
            out_dir=args.out,
            baseline=args.baseline,
            overrides=args.overrides,
        )
    elif args.command == "average":
        from nmt.rundir.averaging import average_checkpoints
        from nmt.rundir.checkpoints import describe_checkpoint

        path = average_checkpoints(args.run_dir, last=args.last, steps=args.steps, output=args.output)
        print(f"wrote {path}: {describe_checkpoint(path)}")
        print(f"use it with: nmt translate {args.run_dir} --checkpoint {path}")
    elif args.command == "experiment":
        from nmt.compare.experiment import run_experiment

        out_dir = args.out or Path("experiments") / args.config.stem
        if args.jobs < 0:
            raise NMTError(f"--jobs {args.jobs}: give 0 (one per core) or a positive count.")
        overrides = _with_threads(args.overrides, args.threads)
        # the evaluations after training run in this process
        _set_threads(load_config(args.config, overrides).training.threads)
        run_experiment(args.config, overrides, out_dir, force=args.force, jobs=args.jobs)


def _with_threads(overrides: list[str], threads: int | None) -> list[str]:
    """train and experiment: --threads N is the override training.threads=N, after the --set ones."""
    return overrides if threads is None else [*overrides, f"training.threads={threads}"]


def _run_threads(threads: int | None, run_dir: Path) -> int:
    """--threads, else the training.threads of the run in `run_dir` (0 if it has no config.yaml: the
    command then says what is missing)."""
    if threads is not None:
        return threads
    config_path = run_dir / "config.yaml"
    return load_config(config_path).training.threads if config_path.is_file() else 0


def _set_threads(threads: int) -> None:
    """torch's CPU threads for this process; 0 leaves torch's default, one per core."""
    if threads < 0:
        raise NMTError(f"--threads {threads}: give 0 (torch's default, one per core) or a positive count.")
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `nmt` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        run_command(args)
    except NMTError as error:
        print(f"nmt {args.command}: error: {error.message}", file=sys.stderr)
        if error.hint:
            print(error.hint, file=sys.stderr)
        return 2
    except OSError as error:  # a path the user gave that cannot be read or written
        where = f" {error.filename}:" if error.filename else ""
        print(f"nmt {args.command}: error:{where} {error.strerror or error}", file=sys.stderr)
        print("Check that the path exists, is writable and that the disk has space.", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"nmt {args.command}: interrupted.", file=sys.stderr)
        return 130
    return 0
