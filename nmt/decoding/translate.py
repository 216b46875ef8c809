"""`nmt translate` (`translate_file`): a file or stdin, streamed through a `Translator` (translator.py)
in bounded chunks, to a file or stdout; n-best lists, scores and attention plots on request."""

from __future__ import annotations

import codecs
import dataclasses
import itertools
import os
import select
import sys
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import IO, Literal

from nmt.config import DecodingConfig, load_saved_config, override_sections
from nmt.decoding.plots import plot_attention
from nmt.decoding.translator import MAX_LINE_BYTES, Translation, Translator, warn
from nmt.errors import NMTError, counted
from nmt.fileio import atomic_open, errors_naming, own_descriptor, refuse_unwritable, same_file, staged_files
from nmt.overrides import sets_key
from nmt.rundir.checkpoints import resolve_checkpoint
from nmt.rundir.folders import refuse_folder_of_run, refuse_run_file
from nmt.rundir.loading import check_run_dir
from nmt.text_encoding import refuse_foreign_encoding

# The name of stdin as -i, and of stdout as -o (fairseq-interactive's --input -, sacrebleu's).
STDIO = "-"
# Lines read, translated and written at a time at most (at least one batch, decoding.batch_size): bounds
# memory whatever the input size.
CHUNK_LINES = 1000


class _ArrivingLines:
    """A byte stream read a line at a time (`readline`, as a file's) that can tell whether its next line has
    arrived (`arrived`): what has, up to a chunk, is translated together, and a line that comes alone (typed,
    or written by a program waiting for its answer) is answered before the next one, as fairseq-interactive
    answers with its default --buffer-size 1. A file, or a pipe that a fast writer keeps full, fills whole
    chunks. Reads the stream's file descriptor itself, so that nothing waits unseen in a buffer."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.pending = bytearray()  # read, not yet returned
        self.ended = False
        try:
            self.fd: int | None = handle.fileno()
        except (AttributeError, OSError, ValueError):  # an in-memory stream: all of it has arrived
            self.fd = None

    def readline(self, size: int) -> bytes:
        """The next line with its line end, or its first `size` bytes; b"" at the end."""
        while self.pending.find(b"\n", 0, size) < 0 and len(self.pending) < size and not self.ended:
            data = os.read(self.fd, 1 << 16) if self.fd is not None else self.handle.read(1 << 16)
            self.ended = not data
            self.pending += data
        end = self.pending.find(b"\n", 0, size) + 1 or min(size, len(self.pending))
        line = bytes(self.pending[:end])
        del self.pending[:end]
        return line

    def arrived(self) -> bool:
        """Whether the next line, or the end, can be read without waiting for the writer (a partial line
        whose stream has more to read counts: its rest is on its way)."""
        if self.fd is None or self.ended or b"\n" in self.pending:
            return True
        return bool(select.select([self.fd], [], [], 0)[0])


def _next_chunk(lines: Iterator[str], stream: _ArrivingLines, most: int) -> list[str]:
    """The next line (waiting for it) and up to `most` - 1 of those after it that have arrived; [] at the end."""
    chunk: list[str] = []
    while len(chunk) < most and (not chunk or stream.arrived()):
        line = next(lines, None)
        if line is None:
            break
        chunk.append(line)
    return chunk


def _read_lines(handle: IO[bytes] | _ArrivingLines, name: str, limit: int) -> Iterator[str]:
    """The lines of a binary stream, decoded, without their line ends, each cut to `limit` bytes.

    Decoding line by line lets a UTF-8 error name its line. A byte-order mark that opens the stream
    is not part of the first sentence: it is dropped.
    """
    for number in itertools.count(1):
        with errors_naming(name):  # a failed read (EIO) names no file; the output's name would be wrong
            raw, cut_from = _read_line(handle, limit)
        if not raw:
            return
        if cut_from:
            warn(f"{name}: line {number} has {cut_from:,} bytes: only its first {len(raw) - 1:,} are translated.")
        if number == 1:
            refuse_foreign_encoding(raw, name, name if name != "<stdin>" else None)
            raw = raw.removeprefix(codecs.BOM_UTF8)  # as nmt.data.corpus does (importing it loads numpy)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NMTError(
                f"{name}: line {number} is not valid UTF-8 (byte {exc.start + 1} of the line: "
                f"{raw[exc.start:exc.start + 1]!r}).",
                "Convert the input to UTF-8 (e.g. iconv -f latin1 -t utf-8), or fix that line.",
            ) from None
        if "\x00" in text:  # as a corpus file's (nmt.data.corpus.read_lines): sentencepiece would read it as a letter
            raise NMTError(
                f"{name}: line {number} holds a NUL character (a zero byte), which no sentence holds: the input is "
                "likely UTF-16 without a byte-order mark, or not text.",
                "Convert the input to UTF-8 (e.g. iconv -f UTF-16LE -t UTF-8), or fix that line.",
            )
        yield text.rstrip("\r\n")


def _read_line(handle: IO[bytes] | _ArrivingLines, limit: int) -> tuple[bytes, int]:
    """(the next line of `handle`, b"" at the end; its length in bytes, its line end not counted, if it was
    cut, else 0).

    At most `limit` bytes of a line are kept, cut back to a character boundary; the rest of a longer
    line is read in pieces and dropped, so memory stays bounded however long the line.
    """
    line = handle.readline(limit + 1)
    if len(line) <= limit or line.endswith(b"\n"):
        return line, 0
    length, rest, last_two = len(line), line, line[-2:]
    while rest and not rest.endswith(b"\n"):
        rest = handle.readline(limit)
        length += len(rest)
        last_two = (last_two + rest)[-2:]  # a CRLF may come in two pieces
    length -= 2 if last_two == b"\r\n" else 1 if last_two.endswith(b"\n") else 0
    if length <= limit:  # a line of `limit` bytes whose CRLF came in two pieces: whole
        return line[:length] + b"\n", 0
    kept = line[:limit]
    try:
        kept.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":  # a character cut in two; other errors are reported later
            kept = kept[: exc.start]
    return kept + b"\n", length


def translate_file(
    run_dir: str | Path, input_path: str | Path | None = None, output_path: str | Path | None = None,
    checkpoint: str | Path | None = None, attention_plots: str | Path | None = None, device: str = "auto",
    overrides: Sequence[str] = (), scores: bool = False, nbest_layout: Literal["lines", "tabs"] = "lines",
    option: str = "checkpoint=",
) -> None:
    """`nmt translate`: translate a file (default stdin) line by line into a file (default stdout).

    Streams the lines that have arrived, CHUNK_LINES at most, or one batch where decoding.batch_size is
    larger (so that a line typed, or written by a program waiting for its answer, is answered at once:
    _ArrivingLines), and keeps line order and count: an empty input line gives an empty output line.
    `overrides` are `--set decoding.KEY=VALUE` settings (beam_size, batch_size, nbest, ...); the run's
    other settings are fixed. With decoding.nbest K, each input line gives its K best translations, best
    first: on K lines (`nbest_layout` "lines", OpenNMT-py's layout: output line (i - 1) * K + j is the
    j-th best of input line i) or on one line, separated by tabs ("tabs"). With `scores`, each
    translation is followed by a tab and its model score (the log-probability search ranked by, divided
    by the length penalty). An output file is written atomically: after an error there is no (partial)
    file. `attention_plots` DIR receives one heatmap per non-empty line, named line-NNNNNN.png: with an output
    file, once it is written (after an error, none); on stdout, each as its line is translated. An input or
    output path "-" is stdin or stdout. Errors name `checkpoint` as `option` ("--checkpoint " for the
    command's flag).
    """
    input_path, output_path = (None if path is not None and str(path) == STDIO else path for path in (input_path, output_path))
    plots_dir = Path(attention_plots) if attention_plots is not None else None
    _check_paths(Path(run_dir), input_path, output_path, checkpoint, plots_dir, option)
    decoding = _decoding(Path(run_dir), list(overrides)) if overrides else None
    translator = Translator.from_run(run_dir, checkpoint, device, decoding=decoding)
    if plots_dir is not None and not translator.has_attention:
        why = translator.model.kind(translator.model.config).without_attention
        warn(f"{run_dir} is a model without attention ({why}): there is nothing to plot.")
        plots_dir = None
    name = str(input_path) if input_path is not None else "<stdin>"
    if input_path is None and sys.stdin.isatty():  # else a terminal would seem to hang on a forgotten -i
        print("nmt translate: reading sentences from the terminal, one a line; Ctrl-D ends (-i FILE reads a file).",
              file=sys.stderr)
    with (
        _plots_folder(plots_dir, staged=output_path is not None) as plots_into,
        open(input_path, "rb") if input_path is not None else nullcontext(sys.stdin.buffer) as source,
        _open_output(Path(output_path)) if output_path is not None else _utf8_stdout() as sink,
    ):
        stream, first, nbest, plotted = _ArrivingLines(source), 1, translator.decoding.nbest, set()
        source_lines, most = _read_lines(stream, name, MAX_LINE_BYTES), max(CHUNK_LINES, translator.decoding.batch_size)
        while lines := _next_chunk(source_lines, stream, most):
            results = translator.translate_nbest(lines, nbest, plots_into is not None, first_line=first)
            _write_chunk(sink, results, scores, nbest_layout, nbest)
            if plots_into is not None:
                plotted |= _plot_chunk(results, lines, first, plots_into, translator.model.attention_shown)
            sink.flush()
            first += len(lines)
    if plots_dir is not None:
        _note_earlier_plots(plots_dir, plotted)


def _plots_folder(plots_dir: Path | None, staged: bool) -> AbstractContextManager[Path | None]:
    """The folder the attention plots are written into (None: no plots): `plots_dir` itself, or where `staged`,
    a folder whose plots move into `plots_dir` only once the block has ended without error (`staged_files`)."""
    if plots_dir is None:
        return nullcontext(None)
    if staged:
        return staged_files(plots_dir)
    plots_dir.mkdir(parents=True, exist_ok=True)
    return nullcontext(plots_dir)


def _utf8_stdout() -> AbstractContextManager[IO[str]]:
    """stdout as UTF-8 whatever the locale (as -o's file and the input are): a C or latin-1 locale would
    fail on, or change, the characters of a translation; its write errors name it (`_device`). Left as it is
    where it has no byte stream under it (a test's capture)."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        return nullcontext(sys.stdout)
    sys.stdout.flush()  # what was printed before comes first
    # a writer that owns nothing: sys.stdout stays open
    return _device(Path("<stdout>"), lambda: nullcontext(codecs.getwriter("utf-8")(buffer)))


def _open_output(path: Path) -> AbstractContextManager[IO[str]]:
    """-o's file, written atomically (after an error there is no half file; through a symbolic link). A
    device or named pipe (/dev/null, a FIFO) is written to as it is: replacing it by a file would break
    it for every other program; and one of this process's descriptors (/dev/stdout, /dev/fd/3) as `-o -`
    writes stdout, through the descriptor: the file the shell opened behind it is neither replaced nor
    truncated (`>> all.fr` appends)."""
    descriptor = own_descriptor(path)
    if descriptor is not None:
        sys.stdout.flush()  # what was printed before comes first
        return _device(path, lambda: open(os.dup(descriptor), "w", encoding="utf-8"))
    if path.exists() and not path.is_file():  # both follow links; a folder was refused before
        return _device(path, lambda: open(path, "w", encoding="utf-8"))
    return atomic_open(path, "w")


@contextmanager
def _device(path: Path, opened: Callable[[], AbstractContextManager[IO[str]]]) -> Iterator[IO[str]]:
    """A device, named pipe or descriptor (`path`), `opened` for writing, whose write errors name it (a full
    disk's, /dev/full's, names no file); an error that names its file (the input's) is left as it is."""
    try:
        with opened() as handle:
            yield handle
    except OSError as error:
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror or str(error), str(path)) from error


def _decoding(run_dir: Path, overrides: list[str]) -> DecodingConfig:
    """The run's decoding settings with `overrides`; unless they set decoding.nbest, the run's nbest is
    cut to the beam size they ask for (--beam 1 on a run with nbest 2 writes the best translation)."""
    run_config = load_saved_config(run_dir / "config.yaml")
    # One pass: nbest=1 goes first so that the run's nbest cannot fail validation against a smaller beam
    # the overrides ask for; an nbest the overrides set comes later and wins (and is checked as given).
    asked = ["decoding.nbest=1", *overrides]
    decoding = override_sections(run_config, asked, ("decoding",), "nmt translate").decoding
    if sets_key(overrides, "decoding.nbest"):
        return decoding
    return dataclasses.replace(decoding, nbest=min(run_config.decoding.nbest, decoding.beam_size))


def _check_paths(
    run: Path, input_path: str | Path | None, output_path: str | Path | None, checkpoint: str | Path | None,
    plots_dir: Path | None, option: str,
) -> None:
    """Refuse a missing run, checkpoint or input, an input that is a folder, an output that is a folder or a
    file translation reads, a closed stdin or stdout it would use, and an output or plots folder that cannot
    be written: before the model is loaded, so that nothing was done. Errors name `checkpoint` as `option`."""
    check_run_dir(run, option)
    if plots_dir is not None:
        refuse_folder_of_run(plots_dir, f"--attention-plots {plots_dir}")
        refuse_unwritable(plots_dir, f"--attention-plots {plots_dir}", "Give --attention-plots a folder you can write")
        if output_path is not None and os.path.realpath(plots_dir) == os.path.realpath(output_path):
            raise NMTError(f"-o {output_path} is the --attention-plots folder too.",
                           "Give the translation and the plots each a path of its own; nothing was written.")
    # a job started with the stream closed (`<&-`, `>&-`, some daemons): Python's sys.stdin / stdout is None
    if input_path is None and sys.stdin is None:
        raise NMTError("stdin is closed, and without -i the input is read from it.", "Give the input file with -i FILE.")
    if output_path is None and sys.stdout is None:
        raise NMTError("stdout is closed, and without -o the translation is written to it.",
                       "Give the output file with -o FILE.")
    if input_path is not None and not Path(input_path).exists():  # a pipe (-i <(...)) is no file, but reads
        raise NMTError(f"input file not found: {input_path}", "Check the path, or omit -i to read stdin.")
    if input_path is not None and Path(input_path).is_dir():
        raise NMTError(f"-i {input_path} is a folder, not a file.",
                       "Give a text file, one sentence a line, or omit -i to read stdin.")
    # with or without -o: the checkpoint is refused here, as the argument or flag it was given with
    used = resolve_checkpoint(run, checkpoint, option) if checkpoint is not None else None
    if output_path is None:
        return
    if Path(output_path).is_dir():
        raise NMTError(f"output path {output_path} is a directory.", "Give a file name with -o.")
    refuse_unwritable(Path(output_path).parent, f"the folder of -o {output_path}",
                      "Give -o a file in a folder you can write")

    read = [input_path, used, run / "config.yaml", *run.glob("checkpoints/*.pt"), *run.glob("tokenizer/*")]
    clash = next((path for path in read if path is not None and same_file(path, output_path)), None)
    if clash is None and input_path is None and _stdin_is(Path(output_path)):  # `-o f.en < f.en`
        clash = "the file on stdin"
    if clash is not None:
        raise NMTError(
            f"-o {output_path} is {clash}, which nmt translate reads: the translation would replace it.",
            "Write the translation to another file; nothing was written.",
        )
    refuse_run_file(Path(output_path), f"-o {output_path}")
    if Path(output_path).is_file() and zipfile.is_zipfile(output_path):  # a checkpoint (torch.save writes zip archives), a document: never a translation
        raise NMTError(f"-o {output_path} is a zip archive (a checkpoint, say), no earlier translation: the translation "
                       "would replace it.", "Write the translation to another file; nothing was written.")


def _stdin_is(path: Path) -> bool:
    """Whether stdin reads the file at `path` (a shell's `< FILE`), which writing `path` would replace as it is read."""
    try:
        ours, theirs = os.fstat(sys.stdin.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):  # no file there, or a stdin with no descriptor (a test's, closed)
        return False
    return (ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino)


def _write_chunk(sink: IO[str], results: list[list[Translation]], scores: bool, layout: str, nbest: int) -> None:
    """Each line's `nbest` translations (with their scores if asked), on one line separated by tabs or on K lines."""
    for translations in results:
        # a line with nothing to translate (empty, spaces, a zero-width space: no source pieces) gets K empty
        # translations and K empty scores, the layout regular
        empty = not translations[0].src_pieces
        fields = [t.text + ("\t" + ("" if empty else f"{t.score:.4f}") if scores else "") for t in translations]
        # a search that found fewer than K (a vocabulary smaller than the beam) leaves the rest empty, so that
        # every input line still has its K fields or K lines
        fields += [("\t" if scores else "")] * (nbest - len(fields))
        sink.write("\t".join(fields) + "\n" if layout == "tabs" else "".join(f + "\n" for f in fields))


def _plot_chunk(
    results: list[list[Translation]], lines: list[str], first: int, plots_dir: Path, shown: str
) -> set[str]:
    """One heatmap of the best translation per line (none for an empty line), named by line number, titled
    with the line and what the weights are (`shown`); returns the names written."""
    written = set()
    for offset, (best, *_) in enumerate(results):
        if best.attention is not None:
            path = plots_dir / f"line-{first + offset:06d}.png"
            plot_attention(best.attention, best.src_pieces, best.tgt_pieces, path, title=f"{lines[offset]} [{shown}]")
            written.add(path.name)
    return written


def _note_earlier_plots(plots_dir: Path, plotted: set[str]) -> None:
    """Say on stderr which line-*.png in `plots_dir` this translation did not draw (`plotted`): an earlier
    input's (a longer one, or a line empty now), which would pass for this input's. They are left where they are."""
    earlier = sorted(path.name for path in plots_dir.glob("line-*.png") if path.name not in plotted)
    if earlier:
        shown = ", ".join(earlier[:3]) + (", ..." if len(earlier) > 3 else "")
        warn(f"{plots_dir} also holds {counted(len(earlier), 'plot')} that this translation did not draw ({shown}): "
             "an earlier input's. Remove them, or give --attention-plots a folder of its own.")
