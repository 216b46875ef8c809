"""The Python API of translation with a trained run: `Translator` and `Translation`.

    t = Translator.from_run("runs/x")
    t.translate(["In the beginning God created the heaven and the earth."])

Text goes through the run's own sentencepiece models on the way in and out. Sentences are sorted by
length and batched; since search gives a sentence the same output whatever its batch, the output
does not depend on the batch size or on which other lines share the input.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from nmt.config import DecodingConfig
from nmt.data.batching import make_source_batch
from nmt.data.sources import corpus_source
from nmt.data.subwords import Tokenizer
from nmt.decoding import search
from nmt.decoding.search import Hypothesis
from nmt.errors import NMTError
from nmt.models.interface import TranslationModel
from nmt.rundir.loading import load_run

# Bytes of one input line kept (the rest is skipped, with a warning), so that one endless line cannot fill
# memory; far more than decoding.max_input_tokens pieces ever need.
MAX_LINE_BYTES = 1 << 16
# How both sentencepiece models name EOS_ID (nmt/data/subwords.py keeps sentencepiece's default).
EOS_PIECE = "</s>"


def _sentence_list(sentences: Any) -> list[str]:
    """A copy of `sentences` as a list of str; TypeError for a str (iterating it would translate each of its
    characters), a non-iterable, or an item that is no str (else sentencepiece's or len()'s error, or bytes taken
    as text)."""
    if isinstance(sentences, str):
        raise TypeError(
            "Translator.translate takes a list of sentences, not a str: "
            f"wrap one sentence in a list, translate([{sentences[:30]!r}])."
        )
    try:
        sentences = list(sentences)
    except TypeError:
        raise TypeError(f"Translator.translate takes a list of sentences (str), not {type(sentences).__name__}.") from None
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            decode = " (decode bytes first: .decode('utf-8'))" if isinstance(sentence, bytes) else ""
            raise TypeError(
                f"Translator.translate: sentence {i} is {type(sentence).__name__} {sentence!r:.40}, not a str{decode}."
            )
    return sentences


def _positive_int(value: object) -> bool:
    """Whether `value` is an int >= 1 (not a bool, a float or a str, which would fail later or mid-search)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


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


def warn(message: str) -> None:
    """A warning on stderr: translation goes on."""
    print(f"warning: {message}", file=sys.stderr)  # also shown by nmt evaluate and nmt experiment


class Translator:
    """A trained model, its tokenizer and search settings; translates lists of sentences."""

    def __init__(
        self, model: TranslationModel, tokenizer: Tokenizer, decoding: DecodingConfig, beam_size: int | None = None,
        batch_size: int | None = None, clean_input: Callable[[str], str] | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        # each sentence cleaned as the training corpus was (Source.clean_input); as it is without one
        self.clean_input = clean_input or (lambda text: text)
        self.decoding = decoding
        self.beam_size = decoding.beam_size if beam_size is None else beam_size
        self.batch_size = decoding.batch_size if batch_size is None else batch_size
        self.device = next(model.parameters()).device

    @classmethod
    def from_run(
        cls, run_dir: str | Path, checkpoint: str | Path | None = None, device: str = "auto",
        beam_size: int | None = None, batch_size: int | None = None, decoding: DecodingConfig | None = None,
    ) -> Translator:
        """Load a run directory (its default checkpoint unless `checkpoint` is given).

        Search settings come from `decoding` (default: the run's `decoding` config); `beam_size` and
        `batch_size` override it.
        """
        if beam_size is not None and not _positive_int(beam_size):
            raise NMTError(f"beam_size={beam_size!r}: it must be an int >= 1.", "Pass beam_size=1 for greedy search.")
        if batch_size is not None and not _positive_int(batch_size):
            raise NMTError(f"batch_size={batch_size!r}: it must be an int >= 1.", "Pass e.g. batch_size=64.")
        run = load_run(Path(run_dir), checkpoint, device)  # as given: Path() would make ./NAME.pt a bare name
        return cls(run.model, run.tokenizer, decoding or run.config.decoding, beam_size, batch_size,
                   corpus_source(run.config.data).clean_input)

    @property
    def has_attention(self) -> bool:
        """False for RNNencdec (attention: none): there are no weights to return or plot."""
        return self.model.has_attention

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
        return [r[0] for r in results] if return_attention else [r[0].text for r in results]

    def translate_nbest(
        self, sentences: list[str], nbest: int = 1, return_attention: bool = False, first_line: int = 1
    ) -> list[list[Translation]]:
        """Up to `nbest` Translations per sentence, best first. Warnings name sentence i as line
        `first_line + i`: a sentence longer than `decoding.max_input_tokens` pieces is cut to that."""
        self._check_nbest(nbest)
        sentences = _sentence_list(sentences)  # the caller's list stays as it was
        limit, tokenizer = self.decoding.max_input_tokens, self.tokenizer
        encoded = self._encode(sentences, first_line)
        # an empty line gets `nbest` empty translations, so that every output line has as many fields
        results = [[Translation("", 0.0, [], []) for _ in range(nbest)] for _ in sentences]
        # Longest first, so that each batch holds similar lengths and little padding.
        order = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: -len(encoded[i]))
        want_attention = return_attention and self.has_attention
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            hypotheses = self._search([encoded[i] for i in batch], nbest, want_attention)
            for i, hyps in zip(batch, hypotheses, strict=True):
                if not hyps:  # no hypothesis reached EOS with a finite score
                    raise NMTError(
                        f"line {first_line + i}: the model's log-probabilities are not finite: no translation.",
                        "Its weights or its arithmetic overflowed; translate with an earlier checkpoint.",
                    )
                src_pieces = [*tokenizer.src_pieces(sentences[i])[:limit], EOS_PIECE]
                # rstrip: a hypothesis cut at its length limit may end in the lone word-boundary piece "▁"
                # (a word the limit left out), which sentencepiece decodes to a trailing space; a finished
                # one never ends so, since training targets are encoded without trailing whitespace.
                results[i] = [
                    Translation(tokenizer.decode_tgt(h.tokens).rstrip(), h.score, src_pieces,
                                [*tokenizer.tgt_id_to_piece(h.tokens), EOS_PIECE], h.attention)
                    for h in hyps
                ]
        return results

    def _check_nbest(self, nbest: int) -> None:
        """NMTError unless 1 <= nbest <= the beam size."""
        if not _positive_int(nbest):
            raise NMTError(
                f"nbest={nbest!r}: the number of translations per sentence must be at least 1.",
                "Pass nbest=1 for the best translation only, or nbest=K (up to the beam size) for the K best.",
            )
        if nbest > self.beam_size:
            raise NMTError(
                f"nbest={nbest} needs 1 <= nbest <= the beam size ({self.beam_size}).",
                f"Make the Translator with beam_size={nbest} or more (Translator.from_run(..., "
                f"beam_size={nbest})), or pass a smaller nbest.",
            )

    def _encode(self, sentences: list[str], first_line: int) -> list[list[int]]:
        """Each sentence's source ids, after the source's cleaning and cut to `decoding.max_input_tokens` (with a
        warning naming line `first_line + i`); `sentences` takes the cleaned text (the attention's source labels
        are its pieces)."""
        limit, encoded = self.decoding.max_input_tokens, []
        for i, sentence in enumerate(sentences):
            if len(sentence) > MAX_LINE_BYTES:  # a huge line is cut before encoding: its pieces would be cut
                warn(f"line {first_line + i}: {len(sentence):,} characters, cut to the first {MAX_LINE_BYTES:,}.")
                sentence = sentence[:MAX_LINE_BYTES]
            sentence = sentences[i] = self.clean_input(sentence)
            ids = self.tokenizer.encode_src(sentence)
            if len(ids) > limit:
                warn(f"line {first_line + i}: {len(ids)} source pieces, cut to the first {limit} (decoding.max_input_tokens).")
                ids = ids[:limit]
            encoded.append(ids)
        return encoded

    def _search(self, src_ids: list[list[int]], nbest: int, return_attention: bool) -> list[list[Hypothesis]]:
        """Search one batch of encoded sentences -> up to `nbest` Hypotheses each."""
        src, lengths = make_source_batch(src_ids)
        cfg = self.decoding
        max_lengths = search.max_output_lengths(lengths, cfg.max_length_ratio, cfg.max_length_offset)
        src = src.to(self.device)  # lengths stay on the CPU: the encoder and the search move what they need
        if self.beam_size == 1:
            # Greedy is what beam 1 computes, at less cost; its score gets the same normalisation.
            found = search.greedy_hypotheses(self.model, src, lengths, max_lengths, return_attention, cfg.min_length)
            for h in found:
                h.score = h.log_prob / search.length_penalty_divisor(len(h.tokens) + 1, cfg.length_penalty, cfg.alpha)
            return [[h] if math.isfinite(h.log_prob) else [] for h in found]  # none: as beam search's
        return search.beam_search(
            self.model, src, lengths, self.beam_size, max_lengths,
            length_penalty=cfg.length_penalty, alpha=cfg.alpha, nbest=nbest, return_attention=return_attention,
            min_length=cfg.min_length,
        )
