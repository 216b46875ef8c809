"""Command line: `nmt COMMAND ...`, one module per command in nmt/commands/, listed in COMMANDS.

A command module has `add_arguments(parser: argparse.ArgumentParser) -> None`, which declares its
arguments with the shared flags of nmt/commands/arguments.py, and `run(args: argparse.Namespace) -> None`,
which calls the library; register it with one line in COMMANDS (name -> module, one-line help). `main`
imports only the module of the command that argv names, and a command module imports the library only in
`run`, so `nmt --help` and `nmt COMMAND --help` stay fast.
User mistakes (NMTError) become one paragraph on stderr and exit status 2, never a traceback; Ctrl-C, and
SIGTERM the same way (nmt/interrupts.py), one line and exit status 130.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import signal
import sys
from collections.abc import Sequence

from nmt import __version__
from nmt.errors import RUNS_MEMORY, TRAINING_MEMORY, NMTError, first_line, out_of_memory
from nmt.interrupts import as_ctrl_c
from nmt.torchrun import torchrun_place

# name -> (module with add_arguments and run, the line `nmt --help` shows)
COMMANDS: dict[str, tuple[str, str]] = {
    "prepare": ("nmt.commands.prepare", "get the corpus, split it, train sentencepiece models"),
    "train": ("nmt.commands.train", "train one model (use torchrun for several GPUs)"),
    "translate": ("nmt.commands.translate", "translate text with a trained run"),
    "evaluate": ("nmt.commands.evaluate", "BLEU and chrF overall and by sentence length, with significance"),
    "score": (
        "nmt.commands.score",
        "BLEU and chrF by sentence length of any system's translations (files), with significance",
    ),
    "average": (
        "nmt.commands.average",
        "average a run's last periodic checkpoints into one (for translate/evaluate --checkpoint)",
    ),
    "curve": ("nmt.commands.curve", "greedy BLEU by sentence length of every kept checkpoint, against step"),
    "experiment": ("nmt.commands.experiment", "prepare, train every run, evaluate them together, report"),
    "attention-checks": (
        "nmt.commands.attention_checks",
        "BLEU by length with attention made uniform, permuted or one-hot; attention vs a word aligner",
    ),
    "attention-scaling": (
        "nmt.commands.attention_scaling",
        "why scaled dot-product attention divides by sqrt(d): score statistics at initialisation and trained",
    ),
}

class CommandLine(argparse.ArgumentParser):
    """`nmt`'s parser. An argument the command does not take is refused with that command's usage and name
    (`nmt translate: error: unrecognized arguments: in.txt`), where argparse would show nmt's own usage."""

    commands: dict[str, argparse.ArgumentParser]

    def parse_args(self, args: Sequence[str] | None = None, namespace: None = None) -> argparse.Namespace:  # type: ignore[override]
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            self.commands[parsed.command].error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed


def build_parser(command: str | None = None) -> CommandLine:
    """The parser of every command (by default), or one in which only `command` has its arguments (none
    for "": enough for `nmt --help` and to refuse an unknown command)."""
    parser = CommandLine(
        prog="nmt",
        description="Neural machine translation: RNNencdec (one fixed vector), RNNsearch (additive attention) and "
        "the Transformer, trained on a public parallel corpus and compared by sentence length.",
        epilog="`nmt COMMAND --help` lists a command's options; docs/usage.md is the guide.",
    )
    parser.add_argument("--version", action="version", version=f"nmt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = {}
    for name, (module, help) in COMMANDS.items():
        subparser = parser.commands[name] = sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".")
        if command is None or name == command:
            importlib.import_module(module).add_arguments(subparser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `nmt` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    named = next((word for word in argv if not word.startswith("-")), None)  # `nmt` itself takes only flags
    args = build_parser(named if named in COMMANDS else "").parse_args(argv)
    previous = signal.signal(signal.SIGTERM, as_ctrl_c)
    try:
        place = torchrun_place()
        if args.command != "train" and place.world_size > 1:
            # every process would do the whole command, writing its output and files once each; said once
            if place.rank == 0:
                print(f"nmt {args.command}: error: torchrun started it in {place.world_size} processes "
                      f"(WORLD_SIZE={place.world_size}), and each would run the whole command: only nmt train "
                      "shares its work between processes.", file=sys.stderr)
                print(f"Run it without torchrun: nmt {args.command} ...; torchrun --nproc_per_node=N -m nmt train "
                      "CONFIG --run-name NAME trains one run in N processes.", file=sys.stderr)
            return 2
        importlib.import_module(COMMANDS[args.command][0]).run(args)
        if sys.stdout is not None:
            sys.stdout.flush()  # here, where a reader that left (below) is told from a failed write
    except NMTError as error:
        if error.on_every_rank and torchrun_place().rank > 0:  # rank 0 says it, once
            return 2
        print(f"nmt {args.command}: error: {error.message}", file=sys.stderr)
        # a key refused where this command has a shorthand for it: named, unless the mistake came through it
        flag = getattr(args, "shorthands", {}).get(error.key, "")
        hint = f"{error.hint} {flag} sets it too." if flag and flag.split()[0] not in error.hint else error.hint
        if hint:
            print(hint, file=sys.stderr)
        return 2
    except OSError as error:  # a path the user gave that cannot be read or written
        if isinstance(error, BrokenPipeError) and _reader_left_stdout():
            # `nmt score ... | head`: stop quietly, as a filter killed by SIGPIPE does (its status, 128 + 13);
            # stdout goes to devnull so that the interpreter's last flush does not fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        where = f" {error.filename}:" if error.filename else ""
        what, hint = _os_error_words(error)
        print(f"nmt {args.command}: error:{where} {what}", file=sys.stderr)
        print(hint, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if torchrun_place().rank == 0:  # every process of a torchrun job was interrupted: said once
            print(f"nmt {args.command}: interrupted.{AFTER_INTERRUPT.get(args.command, '')}", file=sys.stderr)
        return 130
    except (MemoryError, RuntimeError) as error:  # torch.OutOfMemoryError is a RuntimeError
        if _peer_gone(error):  # another process of the torchrun job ended, and said why itself
            place = torchrun_place()
            print(f"nmt {args.command}: error: rank {place.rank}: another process of the job ended, which said why "
                  f"above ({first_line(error)}).", file=sys.stderr)
            return 1
        if not out_of_memory(error):
            raise
        print(f"nmt {args.command}: error: out of memory ({first_line(error)}).", file=sys.stderr)
        print(OUT_OF_MEMORY.get(args.command, DECODING_MEMORY), file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _peer_gone(error: BaseException) -> bool:
    """Whether `error` is a torchrun process's collective failing because another process of the job has gone
    (gloo's "Connection reset by peer"): that process tells its own error; a traceback here would hide it."""
    gone = ("Connection reset by peer", "Connection closed by peer", "Broken pipe")
    return torchrun_place().world_size > 1 and isinstance(error, RuntimeError) and any(
        text in str(error) for text in gone)


def _reader_left_stdout() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll reports an error on its write end), rather
    than a broken pipe of another file the command wrote."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no stdout, or none with a file descriptor
        return False


# what the same command does when run again (train says so itself: it saved a checkpoint to --resume from)
_STARTS_OVER = " Nothing half-written was kept; the same command starts over, re-using the translations of the"
AFTER_INTERRUPT = {
    "experiment": " Run the same command again to continue: finished runs are kept, an interrupted one resumes.",
    "evaluate": f"{_STARTS_OVER} runs it finished.",
    "curve": f"{_STARTS_OVER} checkpoints it finished.",
}


# What sizes the memory a command takes, where it runs out (on a CPU or on a GPU)
OUT_OF_MEMORY = {"train": TRAINING_MEMORY, "experiment": RUNS_MEMORY}
DECODING_MEMORY = ("Decode fewer sentences at once (--batch-size where the command has it, else --set "
                   "decoding.batch_size=N) or with a smaller --beam.")


def _os_error_words(error: OSError) -> tuple[str, str]:
    """What went wrong with an OSError's path and what to do: a file where a folder is wanted (--out FILE,
    -o FILE/x) or a folder where a file is (-o DIR) in words, since the system's "File exists" or "Not a
    directory" does not say which of the two the command wanted."""
    if isinstance(error, FileExistsError) and error.filename and not os.path.isdir(error.filename):
        return "this is a file, and a folder is needed there.", "Give a folder's path (or one not there yet)."
    if isinstance(error, NotADirectoryError):
        return "a part of this path is a file, and a folder is needed there.", "Give a path through folders."
    if isinstance(error, IsADirectoryError):
        return "this is a folder, and a file is needed there.", "Give a file's path."
    if isinstance(error, PermissionError):
        return "permission denied.", "Check who may read and write it, and its folder (ls -ld PATH), or give another path."
    return error.strerror or str(error), "Check that the path exists, is writable and that the disk has space."
