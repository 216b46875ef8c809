"""Translation with a trained run: the Python API (`Translator`) and `nmt translate` (`translate_file`).

    t = Translator.from_run("runs/x")
    t.translate(["In the beginning God created the heaven and the earth."])

Text goes through the run's own sentencepiece models on the way in and out. Sentences are sorted by
length and batched; since search gives a sentence the same output whatever its batch, the output
does not depend on the batch size or on which other lines share the input.
"""

from __future__ import annotations

import argparse
import codecs
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from nmt import arguments
from nmt.config import DecodingConfig, load_config, override_sections
from nmt.errors import NMTError
from nmt.fileio import atomic_open, same_file

if TYPE_CHECKING:
    from torch import Tensor

    from nmt.decoding.search import Hypothesis
# torch and the model code load with the first Translator, not with this module: `nmt translate --help`
# stays fast.

# Lines read, translated and written at a time: bounds memory whatever the input size.
CHUNK_LINES = 1000
# Bytes of one input line kept (the rest is skipped, with a warning), so that one endless line cannot fill
# memory; far more than decoding.max_input_tokens pieces ever need.
MAX_LINE_BYTES = 1 << 16
# How both sentencepiece models name EOS_ID (nmt/data/subwords.py keeps sentencepiece's default).
EOS_PIECE = "</s>"


@dataclass
class Translation:
    """One translation of one sentence.

    `score` is the length-normalised log-probability search ranked by. `src_pieces` and `tgt_pieces`
    are the sentencepiece pieces the model read and wrote, each ending with the EOS piece "</s>" (empty
    for an empty input line). `attention` is len(tgt_pieces) x len(src_pieces): row t holds the weights
    over the source pieces when target piece t was written. It is None unless asked for, and always
    None for a model without attention.
    """

    text: str
    score: float
    src_pieces: list[str]
    tgt_pieces: list[str]
    attention: Tensor | None = None


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)  # also shown by nmt evaluate and nmt experiment


class Translator:
    """A trained model, its tokenizer and search settings; translates lists of sentences."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        decoding: DecodingConfig,
        beam_size: int | None = None,
        batch_size: int | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.decoding = decoding
        self.beam_size = decoding.beam_size if beam_size is None else beam_size
        self.batch_size = decoding.batch_size if batch_size is None else batch_size
        if self.beam_size < 1:
            raise NMTError(f"beam size must be >= 1, got {self.beam_size}.", "Use --beam 1 for greedy search.")
        if self.batch_size < 1:
            raise NMTError(f"batch size must be >= 1, got {self.batch_size}.", "Use e.g. --batch-size 64.")
        self.device = next(model.parameters()).device

    @classmethod
    def from_run(
        cls,
        run_dir: str | Path,
        checkpoint: str | Path | None = None,
        device: str = "auto",
        beam_size: int | None = None,
        batch_size: int | None = None,
        decoding: DecodingConfig | None = None,
    ) -> Translator:
        """Load a run directory (its default checkpoint unless `checkpoint` is given).

        Search settings come from `decoding` (default: the run's `decoding` config); `beam_size` and
        `batch_size` override it.
        """
        from nmt.rundir.loading import load_run

        run = load_run(Path(run_dir), Path(checkpoint) if checkpoint is not None else None, device)
        return cls(run.model, run.tokenizer, decoding or run.config.decoding, beam_size, batch_size)

    @property
    def has_attention(self) -> bool:
        """False for RNNencdec (attention: none): there are no weights to return or plot."""
        return bool(getattr(self.model, "has_attention", True))

    def translate(
        self, sentences: list[str], return_attention: bool = False, nbest: int = 1
    ) -> list[str] | list[Translation] | list[list[Translation]]:
        """Translate `sentences`, keeping their order.

        Returns plain strings by default; `Translation`s (score, pieces, attention) with
        `return_attention=True`; and with `nbest` > 1, a best-first list of `nbest` Translations per
        sentence (an empty sentence gets `nbest` empty ones). A plain string is refused (TypeError):
        iterating it would translate each of its characters.
        """
        results = self.translate_nbest(sentences, nbest=nbest, return_attention=return_attention)
        if nbest > 1:
            return results
        if return_attention:
            return [r[0] for r in results]
        return [r[0].text for r in results]

    def translate_nbest(
        self, sentences: list[str], nbest: int = 1, return_attention: bool = False, first_line: int = 1
    ) -> list[list[Translation]]:
        """Up to `nbest` Translations per sentence, best first. Warnings name sentence i as line
        `first_line + i`: a sentence longer than `decoding.max_input_tokens` pieces is cut to that."""
        if isinstance(sentences, str):
            raise TypeError(
                "Translator.translate takes a list of sentences, not a str: "
                f"wrap one sentence in a list, translate([{sentences[:30]!r}])."
            )
        if nbest < 1:
            raise NMTError(
                f"--nbest {nbest}: the number of translations written per line must be at least 1.",
                "Give --nbest 1 for the best translation only, or K (up to the beam size) for the K best.",
            )
        if nbest > self.beam_size:
            raise NMTError(
                f"--nbest {nbest} needs 1 <= nbest <= beam size ({self.beam_size}).",
                f"Use --beam {nbest} or more, or a smaller --nbest.",
            )
        limit = self.decoding.max_input_tokens
        sentences = list(sentences)  # the caller's list stays as it was
        encoded: list[list[int]] = []
        for i, sentence in enumerate(sentences):
            if len(sentence) > MAX_LINE_BYTES:  # a huge line is cut before encoding: its pieces would be cut
                _warn(f"line {first_line + i}: {len(sentence):,} characters, cut to the first {MAX_LINE_BYTES:,}.")
                sentence = sentences[i] = sentence[:MAX_LINE_BYTES]
            ids = self.tokenizer.encode_src(sentence)
            if len(ids) > limit:
                _warn(
                    f"line {first_line + i}: {len(ids)} source pieces, cut to the first {limit} "
                    "(decoding.max_input_tokens)."
                )
                ids = ids[:limit]
            encoded.append(ids)
        # an empty line gets `nbest` empty translations, so that every output line has as many fields
        results = [[Translation("", 0.0, [], []) for _ in range(nbest)] for _ in sentences]
        # Longest first, so that each batch holds similar lengths and little padding.
        order = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: -len(encoded[i]))
        want_attention = return_attention and self.has_attention
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            hypotheses = self._search([encoded[i] for i in batch], nbest, want_attention)
            for i, hyps in zip(batch, hypotheses, strict=True):
                src_pieces = [*self.tokenizer.src_pieces(sentences[i])[:limit], EOS_PIECE]
                # rstrip: a hypothesis cut at its length limit may end in the lone word-boundary piece "▁"
                # (a word the limit left out), which sentencepiece decodes to a trailing space; a finished
                # one never ends so, since training targets are encoded without trailing whitespace.
                results[i] = [
                    Translation(
                        self.tokenizer.decode_tgt(h.tokens).rstrip(),
                        h.score,
                        src_pieces,
                        [*self.tokenizer.tgt_id_to_piece(h.tokens), EOS_PIECE],
                        h.attention,
                    )
                    for h in hyps
                ]
        return results

    def _search(self, src_ids: list[list[int]], nbest: int, return_attention: bool) -> list[list[Hypothesis]]:
        """Search one batch of encoded sentences -> up to `nbest` Hypotheses each."""
        from nmt.data.batching import make_source_batch
        from nmt.decoding.search import (
            beam_search,
            greedy_hypotheses,
            length_penalty_divisor,
            max_output_lengths,
        )

        src, lengths = make_source_batch(src_ids)
        cfg = self.decoding
        max_lengths = max_output_lengths(lengths, cfg.max_length_ratio, cfg.max_length_offset)
        src, lengths, max_lengths = src.to(self.device), lengths.to(self.device), max_lengths.to(self.device)
        if self.beam_size == 1:
            # Greedy is what beam 1 computes, at less cost; its score gets the same normalisation.
            found = greedy_hypotheses(self.model, src, lengths, max_lengths, return_attention)
            for h in found:
                h.score = h.log_prob / length_penalty_divisor(len(h.tokens) + 1, cfg.length_penalty, cfg.alpha)
            return [[h] for h in found]
        return beam_search(
            self.model, src, lengths, self.beam_size, max_lengths,
            length_penalty=cfg.length_penalty, alpha=cfg.alpha, nbest=nbest, return_attention=return_attention,
        )


def _read_chunks(handle: IO[bytes], name: str, chunk_lines: int) -> Iterator[tuple[int, list[str]]]:
    """(first line number, up to `chunk_lines` decoded lines without their line ends) from a binary stream.

    Decoding line by line lets a UTF-8 error name its line. A byte-order mark that opens the stream
    is not part of the first sentence: it is dropped.
    """
    chunk: list[str] = []
    first = number = 1
    while True:
        raw, cut_from = _read_line(handle)
        if not raw:
            break
        if cut_from:
            _warn(f"{name}: line {number} has {cut_from:,} bytes: only its first {len(raw) - 1:,} are translated.")
        if number == 1:
            raw = raw.removeprefix(codecs.BOM_UTF8)  # as nmt.data.corpus does (importing it loads numpy)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise NMTError(
                f"{name}: line {number} is not valid UTF-8 (byte {exc.start + 1} of the line: "
                f"{raw[exc.start:exc.start + 1]!r}).",
                "Convert the input to UTF-8 (e.g. iconv -f latin1 -t utf-8), or fix that line.",
            ) from None
        chunk.append(text.rstrip("\r\n"))
        if len(chunk) == chunk_lines:
            yield first, chunk
            first, chunk = number + 1, []
        number += 1
    if chunk:
        yield first, chunk


def _read_line(handle: IO[bytes]) -> tuple[bytes, int]:
    """(the next line of `handle`, b"" at the end; its length in bytes if it was cut, else 0).

    At most MAX_LINE_BYTES of a line are kept, cut back to a character boundary; the rest of a longer
    line is read in pieces and dropped, so memory stays bounded however long the line.
    """
    line = handle.readline(MAX_LINE_BYTES + 1)
    if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
        return line, 0
    length = len(line)
    while True:
        rest = handle.readline(MAX_LINE_BYTES)
        length += len(rest)
        if not rest or rest.endswith(b"\n"):
            break
    kept = line[:MAX_LINE_BYTES]
    try:
        kept.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":  # a character cut in two; other errors are reported later
            kept = kept[: exc.start]
    return kept + b"\n", length


def translate_file(
    run_dir: str | Path,
    input_path: str | Path | None = None,
    output_path: str | Path | None = None,
    checkpoint: str | Path | None = None,
    attention_plots: str | Path | None = None,
    device: str = "auto",
    overrides: Sequence[str] = (),
    scores: bool = False,
    nbest_layout: Literal["lines", "tabs"] = "lines",
) -> None:
    """`nmt translate`: translate a file (default stdin) line by line into a file (default stdout).

    Streams CHUNK_LINES lines at a time (one at a time from a terminal, so that each typed line is
    answered at once) and keeps line order and count: an empty input line gives an empty output line.
    `overrides` are `--set decoding.KEY=VALUE` settings (beam_size, batch_size, nbest, ...); the run's
    other settings are fixed. With decoding.nbest K, each input line gives its K best translations, best
    first: on K lines (`nbest_layout` "lines", OpenNMT-py's layout: output line (i - 1) * K + j is the
    j-th best of input line i) or on one line, separated by tabs ("tabs"). With `scores`, each
    translation is followed by a tab and its model score (the log-probability search ranked by, divided
    by the length penalty). An output file is written atomically: after an error there is no (partial)
    file. `attention_plots` DIR receives one heatmap per non-empty line, named line-NNNNNN.png.
    """
    _check_paths(Path(run_dir), input_path, output_path, checkpoint)
    decoding = _decoding(Path(run_dir), list(overrides)) if overrides else None
    translator = Translator.from_run(run_dir, checkpoint, device, decoding=decoding)
    plots_dir = Path(attention_plots) if attention_plots is not None else None
    if plots_dir is not None and not translator.has_attention:
        _warn(f"{run_dir} is a model without attention (attention: none): there is nothing to plot.")
        plots_dir = None
    if plots_dir is not None:
        plots_dir.mkdir(parents=True, exist_ok=True)
    name = str(input_path) if input_path is not None else "<stdin>"
    try:
        with (
            open(input_path, "rb") if input_path is not None else nullcontext(sys.stdin.buffer) as source,
            atomic_open(output_path, "w") if output_path is not None else nullcontext(sys.stdout) as sink,
        ):
            chunk_lines = 1 if source.isatty() else CHUNK_LINES
            for first, lines in _read_chunks(source, name, chunk_lines):
                results = translator.translate_nbest(
                    lines, translator.decoding.nbest, plots_dir is not None, first_line=first
                )
                _write_chunk(sink, lines, results, scores, nbest_layout)
                if plots_dir is not None:
                    _plot_chunk(results, lines, first, plots_dir)
                sink.flush()
    except BrokenPipeError:
        if output_path is not None:
            raise
        # The reader of stdout left (`nmt translate ... | head`): stop quietly, like other filters;
        # stdout goes to devnull so that the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _decoding(run_dir: Path, overrides: list[str]) -> DecodingConfig:
    """The run's decoding settings with `overrides`; unless they set decoding.nbest, the run's nbest is
    cut to the beam size they ask for (--beam 1 on a run with nbest 2 writes the best translation)."""
    run_config = load_config(run_dir / "config.yaml")
    if not any(text.partition("=")[0].strip() == "decoding.nbest" for text in overrides):
        asked = override_sections(run_config, ["decoding.nbest=1", *overrides], ("decoding",), "nmt translate")
        overrides = [*overrides, f"decoding.nbest={min(run_config.decoding.nbest, asked.decoding.beam_size)}"]
    return override_sections(run_config, overrides, ("decoding",), "nmt translate").decoding


def _check_paths(
    run: Path, input_path: str | Path | None, output_path: str | Path | None, checkpoint: str | Path | None
) -> None:
    """Refuse a missing run or input, and an output that is a folder or a file translation reads."""
    if not run.is_dir():
        raise NMTError(
            f"run directory not found: {run}",
            "Give as RUN_DIR, the first argument, a folder that `nmt train` wrote (runs/NAME by default) "
            "or one of the runs of `nmt experiment` (OUT/runs/NAME).",
        )
    if input_path is not None and not Path(input_path).is_file():
        raise NMTError(f"input file not found: {input_path}", "Check the path, or omit -i to read stdin.")
    if output_path is None:
        return
    if Path(output_path).is_dir():
        raise NMTError(f"output path {output_path} is a directory.", "Give a file name with -o.")
    from nmt.rundir.checkpoints import resolve_checkpoint

    used = resolve_checkpoint(run, checkpoint) if checkpoint is not None else None  # a name: the run's file
    read = [input_path, used, run / "config.yaml", *run.glob("checkpoints/*.pt"), *run.glob("tokenizer/*")]
    clash = next((path for path in read if path is not None and same_file(path, output_path)), None)
    if clash is not None:
        raise NMTError(
            f"-o {output_path} is {clash}, which nmt translate reads: the translation would replace it.",
            "Write the translation to another file; nothing was written.",
        )


def _write_chunk(
    sink: IO[str], lines: list[str], results: list[list[Translation]], scores: bool, layout: str
) -> None:
    """Each line's translations (with their scores if asked), on one line separated by tabs or on K lines."""
    for line, translations in zip(lines, results, strict=True):
        # an empty line gets K empty translations (and K empty scores): the layout stays regular
        empty = not line.strip()
        fields = [t.text + ("\t" + ("" if empty else f"{t.score:.4f}") if scores else "") for t in translations]
        sink.write("\t".join(fields) + "\n" if layout == "tabs" else "".join(f + "\n" for f in fields))


def _plot_chunk(results: list[list[Translation]], lines: list[str], first: int, plots_dir: Path) -> None:
    """One heatmap of the best translation per line (none for an empty line), named by line number."""
    for offset, translations in enumerate(results):
        best = translations[0]
        if best.attention is not None:
            _plot(best, plots_dir / f"line-{first + offset:06d}.png", lines[offset])


def _plot(translation: Translation, path: Path, source: str) -> None:
    from nmt.decoding.plots import plot_attention  # matplotlib loads only when plots are asked for

    assert translation.attention is not None
    plot_attention(translation.attention, translation.src_pieces, translation.tgt_pieces, path, title=source)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`nmt translate RUN_DIR [-i IN] [-o OUT] [--beam K] [--nbest K] ...`."""
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a folder written by `nmt train`")
    parser.add_argument("-i", "--input", type=Path, default=None, help="input file (default stdin)")
    parser.add_argument("-o", "--output", type=Path, default=None, help="output file (default stdout)")
    arguments.add_decoding_set(parser, "decoding.*")
    arguments.add_setting(parser, "--beam", "decoding.beam_size", "beam size, 1 = greedy", type=int, metavar="K")
    arguments.add_setting(parser, "--batch-size", "decoding.batch_size", "sentences per batch", type=int, metavar="N")
    arguments.add_setting(
        parser, "--nbest", "decoding.nbest",
        "write the K best translations of each input line, best first, as --nbest-layout says (at most "
        "the beam size)", type=int, metavar="K",
    )
    parser.add_argument(
        "--nbest-layout",
        choices=["lines", "tabs"],
        default="lines",
        help="lines (default, as OpenNMT-py's -n_best): K lines per input line, so that output line "
        "(i-1)*K+j is the j-th best of input line i; tabs: one line per input line, its K translations "
        "separated by tabs",
    )
    parser.add_argument(
        "--scores",
        action="store_true",
        help="follow each translation with a tab and its model score (log-probability / length penalty)",
    )
    parser.add_argument("--checkpoint", type=Path, default=None, help=arguments.CHECKPOINT_HELP)
    parser.add_argument(
        "--attention-plots", type=Path, default=None, metavar="DIR", help="write one attention heatmap PNG per sentence"
    )
    arguments.add_threads(parser)
    arguments.add_device(parser)


def run(args: argparse.Namespace) -> None:
    arguments.use_threads(args.threads, args.run_dir)
    translate_file(
        args.run_dir,
        input_path=args.input,
        output_path=args.output,
        checkpoint=args.checkpoint,
        attention_plots=args.attention_plots,
        device=args.device,
        overrides=args.overrides,
        scores=args.scores,
        nbest_layout=args.nbest_layout,
    )
