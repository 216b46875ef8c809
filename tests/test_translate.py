"""`nmt translate` and the Translator API on a trained reverse-digits run: line order and count, correct
outputs, streaming, n-best, bad input, attention plots."""

from __future__ import annotations

import dataclasses
import io
import os
import pty
import select
import shutil
import stat
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
import torch
import yaml

import nmt.decoding.translate as translate_module
import nmt.decoding.translator as translator_module
from nmt.cli import main
from nmt.config import ModelConfig, load_config, save_config
from nmt.data.batching import make_source_batch
from nmt.decoding.search import Hypothesis
from nmt.decoding.translate import translate_file
from nmt.decoding.translator import Translation, Translator
from nmt.errors import NMTError
from nmt.models import build_model
from nmt.special import BOS_ID, EOS_ID
from tests.helpers import fake_run, unwritable
from tests.synthetic import reverse_pairs

PAIRS = reverse_pairs(24, 5, 8, seed=5)
# empty lines first, in the middle and last: each must come out as an empty line in its place
LINES = ["", *[s for s, _ in PAIRS[:12]], "", *[s for s, _ in PAIRS[12:]], ""]
REFERENCES = ["", *[t for _, t in PAIRS[:12]], "", *[t for _, t in PAIRS[12:]], ""]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def test_cli_keeps_line_order_and_count_and_reverses_digits(trained_reverse_run: Path, tmp_path: Path) -> None:
    source = _write(tmp_path / "in.txt", LINES)
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(tmp_path / "out.txt")]) == 0
    out = _read(tmp_path / "out.txt")
    assert len(out) == len(LINES)
    assert [i for i, line in enumerate(out) if not line] == [0, 13, 26]
    correct = sum(o == r for o, r in zip(out, REFERENCES, strict=True) if r)
    assert correct >= 0.85 * len(PAIRS)  # measured 0.96-1.0 over seeds and thread counts (conftest)
    # the same outputs from the Python API, from other batch sizes and from smaller streamed chunks
    assert Translator.from_run(trained_reverse_run).translate(LINES) == out
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(tmp_path / "b1.txt"),
                 "--batch-size", "1"]) == 0
    assert _read(tmp_path / "b1.txt") == out
    crlf = tmp_path / "crlf.txt"  # a file written on Windows
    crlf.write_bytes("".join(line + "\r\n" for line in LINES).encode())
    assert main(["translate", str(trained_reverse_run), "-i", str(crlf), "-o", str(tmp_path / "crlf.out.txt")]) == 0
    assert _read(tmp_path / "crlf.out.txt") == out
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(translate_module, "CHUNK_LINES", 5)
        translate_file(trained_reverse_run, source, tmp_path / "chunks.txt", overrides=["decoding.batch_size=3"])
    assert _read(tmp_path / "chunks.txt") == out


@pytest.mark.slow
def test_stdin_to_stdout_through_python_m_nmt(trained_reverse_run: Path) -> None:
    lines = ["1 2 3 4 5", "", "9 8 7 6 5 4"]
    done = subprocess.run(
        [sys.executable, "-m", "nmt", "translate", str(trained_reverse_run), "--beam", "1"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.split("\n")
    assert out[-1] == "" and len(out) == 4 and out[1] == ""
    assert out[:3] == Translator.from_run(trained_reverse_run, beam_size=1).translate(lines)


def test_each_sentence_is_cleaned_as_the_training_corpus_was(trained_reverse_run: Path) -> None:
    """The run's source cleans a user's sentence before it is encoded (Source.clean_input: the Bible's
    typography); a run of the files source reads it as it is."""
    plain = Translator.from_run(trained_reverse_run, beam_size=1)
    assert plain.clean_input("1 2’3") == "1 2’3"
    cleaned = Translator(plain.model, plain.tokenizer, plain.decoding, 1, clean_input=lambda text: text.replace("x", "7"))
    assert cleaned.translate(["1 x 3 x 5"]) == plain.translate(["1 7 3 7 5"]) != plain.translate(["1 x 3 x 5"])
    # a cleaning that drops pieces: the attention's source labels are those of the cleaned sentence too
    shorter = Translator(plain.model, plain.tokenizer, plain.decoding, 1, clean_input=lambda text: text.replace(" x", ""))
    (translation,) = shorter.translate(["1 x 3 x 5"], return_attention=True)
    assert translation.src_pieces == plain.translate(["1 3 5"], return_attention=True)[0].src_pieces
    assert translation.attention is not None and translation.attention.shape[1] == len(translation.src_pieces)


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_translations_reach_stdout_in_utf8_whatever_the_locale(encoding: str) -> None:
    """-o's file and the input are UTF-8; so is stdout, where the locale's encoding would fail on (ascii) or
    change (latin-1) a translation's characters. What was printed before comes first."""
    text = "la lumière, l’Éternel\n"
    code = ("import sys; from nmt.decoding.translate import _utf8_stdout; print('before')\n"
            f"with _utf8_stdout() as sink: sink.write({text!r}); sink.flush()\nprint('after')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONIOENCODING": encoding, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"before\n" + text.encode("utf-8") + b"after\n"


@pytest.mark.slow
@pytest.mark.parametrize("stdin", ["terminal", "pipe"])
def test_a_line_is_answered_before_the_input_ends(trained_reverse_run: Path, stdin: str) -> None:
    """A line typed, or written into a pipe by a program that waits for its answer (a coprocess), is
    translated at once, not when a chunk of lines or the end of the input has come. A terminal is told where
    the input comes from (else a forgotten -i would look like a hang); a pipe is not."""
    reader, writer = pty.openpty()[::-1] if stdin == "terminal" else os.pipe()
    expected = Translator.from_run(trained_reverse_run, beam_size=1).translate(["1 2 3 4 5", "5 4 3"])
    with subprocess.Popen(
        [sys.executable, "-m", "nmt", "translate", str(trained_reverse_run), "--beam", "1"],
        stdin=reader, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as child:
        os.close(reader)
        assert child.stdout is not None
        try:
            os.write(writer, b"1 2 3 4 5\n")  # stdin stays open: no EOF yet
            # a deadline only so that a regression fails instead of hanging; it is not a speed check
            ready, _, _ = select.select([child.stdout], [], [], 120)
            assert ready, "no translation before the end of the input"
            assert child.stdout.readline().decode("utf-8") == expected[0] + "\n"
            os.write(writer, b"5 4 3\n")  # and the next one, as a coprocess writes after each answer
            assert select.select([child.stdout], [], [], 120)[0], "no translation of the second line"
            assert child.stdout.readline().decode("utf-8") == expected[1] + "\n"
        finally:
            child.kill()
        assert child.stderr is not None
        told = "reading sentences from the terminal, one a line; Ctrl-D ends" in child.stderr.read().decode("utf-8")
        assert told == (stdin == "terminal")
    os.close(writer)


def test_nbest_writes_k_lines_per_input_line_best_first(trained_reverse_run: Path, tmp_path: Path) -> None:
    # OpenNMT-py's layout, the default: output line (i - 1) * K + j is the j-th best of input line i
    source = _write(tmp_path / "in.txt", LINES[:6])
    out = tmp_path / "out.txt"
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(out), "--beam", "3",
                 "--nbest", "3"]) == 0
    translator = Translator.from_run(trained_reverse_run, beam_size=3)
    expected = translator.translate(LINES[:6], nbest=3)
    rows = _read(out)
    assert rows == [t.text for hyps in expected for t in hyps]
    assert rows[:3] == ["", "", ""] and len(rows) == 18  # an empty line too has its 3 (empty) lines
    assert all(len(set(rows[i : i + 3])) == 3 for i in range(3, 18, 3))
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(out), "--beam", "3",
                 "--nbest", "2", "--scores"]) == 0
    rows = _read(out)
    assert rows[:2] == ["\t", "\t"] and len(rows) == 12
    # (search stops once it has K finished hypotheses: the 2 best of --nbest 3 need not be those of --nbest 2)
    for row, hyp in zip(rows[2:], [t for hyps in translator.translate(LINES[1:6], nbest=2) for t in hyps], strict=True):
        text, score = row.split("\t")
        assert text == hyp.text and float(score) == pytest.approx(hyp.score, abs=1e-4)


def test_nbest_writes_k_tab_separated_translations(trained_reverse_run: Path, tmp_path: Path) -> None:
    source = _write(tmp_path / "in.txt", LINES[:6])
    out = tmp_path / "out.txt"
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(out), "--beam", "3",
                 "--nbest", "3", "--nbest-layout", "tabs"]) == 0
    best = Translator.from_run(trained_reverse_run, beam_size=3).translate(LINES[:6])
    rows = _read(out)
    assert rows[0] == "\t\t"  # an empty line too has its 3 (empty) fields
    for row, first in zip(rows[1:], best[1:], strict=True):
        fields = row.split("\t")
        assert len(fields) == 3 and fields[0] == first and len(set(fields)) == 3
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "--beam", "2", "--nbest", "3"]) == 2


def test_nbest_with_scores_and_decode_time_settings(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _write(tmp_path / "in.txt", [*LINES[:6], "\u200b", "   "])
    out = tmp_path / "out.txt"
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(out), "--nbest", "2",
                 "--scores", "--set", "decoding.beam_size=3", "--set", "decoding.length_penalty=none",
                 "--threads", "1", "--nbest-layout", "tabs"]) == 0
    translator = Translator.from_run(trained_reverse_run, beam_size=3)
    translator.decoding.length_penalty = "none"
    expected = translator.translate(LINES[:6], nbest=2)
    rows = _read(out)
    # an empty line, a zero-width space, spaces: nothing to translate, 2 empty translations and 2 empty scores
    assert rows[0] == rows[6] == rows[7] == "\t\t\t" and len(rows) == 8
    for row, hyps in zip(rows[1:6], expected[1:], strict=True):
        text_a, score_a, text_b, score_b = row.split("\t")
        assert (text_a, text_b) == (hyps[0].text, hyps[1].text)
        assert (float(score_a), float(score_b)) == (pytest.approx(hyps[0].score, abs=1e-4),
                                                    pytest.approx(hyps[1].score, abs=1e-4))
        assert float(score_a) >= float(score_b) and float(score_a) < 0
    assert torch.get_num_threads() == 1
    # decode-time --set is decoding.* only: the weights fix the model and the training
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "--set", "model.hidden_size=8"]) == 2
    err = capsys.readouterr().err
    assert "--set model.hidden_size=8: nmt translate takes only decoding.* keys" in err
    assert "fixed when a run is trained" in err
    # an evaluation.* key is no training setting: it is nmt evaluate's, which scores (translate scores nothing)
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "--set", "evaluation.by=reference"]) == 2
    err = capsys.readouterr().err
    assert "nmt translate takes only decoding.* keys; evaluation.* settings say how translations are scored" in err
    assert "nmt evaluate RUN_DIR --set evaluation.by=reference" in err and "Train a new run" not in err
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "--set", "decoding.beam_size=0"]) == 2
    assert "invalid value for 'decoding.beam_size'" in capsys.readouterr().err


def test_nbest_0_is_refused_as_an_invalid_decoding_nbest_without_a_beam_hint(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _write(tmp_path / "in.txt", LINES[:3])
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "--nbest", "0"]) == 2
    err = capsys.readouterr().err
    assert "invalid value for 'decoding.nbest': must be >= 1" in err  # --nbest K is decoding.nbest=K
    assert "--beam" not in err


def test_the_apis_nbest_checks_name_its_arguments_not_the_cli_flags(trained_reverse_run: Path) -> None:
    # the CLI's --nbest is decoding.nbest, refused with the config: only Python callers see these
    translator = Translator.from_run(trained_reverse_run, beam_size=2)
    for method in (translator.translate, translator.translate_nbest):  # each: with beam 1, nbest 3 gave 1 or 3
        for nbest, wanted in ((0, "nbest=0: "), (3, "nbest=3 needs 1 <= nbest <= the beam size (2)")):
            with pytest.raises(NMTError) as caught:
                method(["1 2 3", ""], nbest=nbest)
            assert caught.value.message.startswith(wanted)
            assert "--" not in caught.value.message + caught.value.hint
        assert "beam_size=3" in caught.value.hint
    for arguments, wanted in (({"beam_size": 0}, "beam_size=0: "), ({"batch_size": 0}, "batch_size=0: ")):
        with pytest.raises(NMTError) as caught:
            Translator.from_run(trained_reverse_run, **arguments)
        assert caught.value.message.startswith(wanted) and "--" not in caught.value.hint


def test_a_checkpoint_not_found_is_named_as_the_argument_in_python_and_as_the_flag_on_the_command_line(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Translator.from_run(checkpoint=...) and translate_file(checkpoint=...) say checkpoint=, nmt translate
    # --checkpoint says --checkpoint, with or without -o; each message otherwise the same
    missing = f"{trained_reverse_run} has no {trained_reverse_run / 'checkpoints' / 'averaged.pt'} (it has: best.pt, "
    with pytest.raises(NMTError) as caught:
        Translator.from_run(trained_reverse_run, checkpoint="averaged.pt")
    assert caught.value.message.startswith(f"checkpoint=averaged.pt: {missing}")
    with pytest.raises(NMTError) as caught:
        Translator.from_run(trained_reverse_run, checkpoint=tmp_path)
    assert caught.value.message == f"checkpoint={tmp_path} is a folder, not a checkpoint file."
    with pytest.raises(NMTError) as caught:
        Translator.from_run(trained_reverse_run / "checkpoints" / "best.pt")
    assert caught.value.hint == f"Give its run folder, {trained_reverse_run}, and the checkpoint's name with checkpoint=best.pt."
    source = _write(tmp_path / "in.txt", ["1 2 3"])
    for output in (None, tmp_path / "out.txt"):
        with pytest.raises(NMTError) as caught:
            translate_file(trained_reverse_run, source, output, checkpoint="averaged.pt")
        assert caught.value.message.startswith(f"checkpoint=averaged.pt: {missing}")
    with pytest.raises(NMTError) as caught:
        translate_file(trained_reverse_run / "checkpoints" / "best.pt", source)
    assert caught.value.hint.endswith("the checkpoint's name with checkpoint=best.pt.")
    for output in ([], ["-o", str(tmp_path / "out.txt")]):
        assert main(["translate", str(trained_reverse_run), "--checkpoint", "averaged.pt", "-i", str(source), *output]) == 2
        assert capsys.readouterr().err.startswith(f"nmt translate: error: --checkpoint averaged.pt: {missing}")
    assert main(["translate", str(trained_reverse_run / "checkpoints" / "best.pt"), "-i", str(source)]) == 2
    assert capsys.readouterr().err.endswith("the checkpoint's name with --checkpoint best.pt.\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]


def test_a_plain_string_is_not_translated_character_by_character(trained_reverse_run: Path) -> None:
    translator = Translator.from_run(trained_reverse_run, beam_size=1)
    with pytest.raises(TypeError, match=r"translate\(\['1 2 3'\]\)"):
        translator.translate("1 2 3")
    assert len(translator.translate(["1 2 3"])) == 1


def test_the_api_names_a_sentence_or_argument_of_the_wrong_type(trained_reverse_run: Path) -> None:
    translator = Translator.from_run(trained_reverse_run, beam_size=1)
    for sentences, wanted in (
        (None, "Translator.translate takes a list of sentences (str), not NoneType."),
        (["1 2", None], "Translator.translate: sentence 1 is NoneType None, not a str."),
        (["1 2", 3], "Translator.translate: sentence 1 is int 3, not a str."),
        ([b"1 2"], "Translator.translate: sentence 0 is bytes b'1 2', not a str (decode bytes first: .decode('utf-8'))."),
    ):
        with pytest.raises(TypeError) as caught:
            translator.translate(sentences)  # type: ignore[arg-type]
        assert str(caught.value) == wanted
    with pytest.raises(NMTError, match=r"^nbest='2': "):
        translator.translate(["1 2"], nbest="2")  # type: ignore[arg-type]
    for arguments, wanted in (({"beam_size": "3"}, "beam_size='3': it must be an int >= 1."),
                              ({"batch_size": 2.5}, "batch_size=2.5: it must be an int >= 1.")):
        with pytest.raises(NMTError) as error:
            Translator.from_run(trained_reverse_run, **arguments)  # type: ignore[arg-type]
        assert error.value.message == wanted


def test_an_endless_line_is_read_in_bounded_pieces_and_cut(capsys: pytest.CaptureFixture[str]) -> None:
    reads: list[int] = []

    class Recording(io.BytesIO):
        def readline(self, size: int | None = -1) -> bytes:
            line = super().readline(size)
            reads.append(len(line))
            return line

    long = " ".join(["7"] * 100)  # 199 bytes
    # the cut falls inside "é" (2 bytes): it moves back to the character boundary, no UTF-8 error
    # a CRLF line end split between two pieces (17 bytes, 16 ending in CR, then LF), and the last line without a line end
    # and a line of the limit exactly, whose CRLF comes in two pieces too: whole, and not said to be cut
    source = Recording(f"1 2 3\n{long}\n1 2 3 4 5 6 7 8é 9\n{'8' * 32}\r\n4 5 6\n{'6' * 16}\r\n{'9' * 40}".encode())
    lines = list(translate_module._read_lines(source, "in.txt", 16))
    assert lines == ["1 2 3", long[:16], "1 2 3 4 5 6 7 8", "8" * 16, "4 5 6", "6" * 16, "9" * 16]
    err = capsys.readouterr().err
    assert "line 6" not in err and err.count("only its first") == 4
    assert "in.txt: line 2 has 199 bytes: only its first 16 are translated" in err  # its line end not counted
    assert "line 3 has 19 bytes: only its first 15 are translated" in err
    assert "line 4 has 32 bytes: only its first 16" in err and "line 7 has 40 bytes: only its first 16" in err
    assert max(reads) <= 17  # never more than the limit (+ the newline) of a line at once


def test_a_huge_sentence_from_python_is_cut_before_encoding(
    trained_reverse_run: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(translator_module, "MAX_LINE_BYTES", 16)
    translator = Translator.from_run(trained_reverse_run, beam_size=1)
    sentences = ["1 2 3", " ".join(["7"] * 100)]
    encoded: list[int] = []
    original = translator.tokenizer.encode_src
    monkeypatch.setattr(translator.tokenizer, "encode_src", lambda text: encoded.append(len(text)) or original(text))
    assert translator.translate(sentences) == translator.translate(["1 2 3", "7 7 7 7 7 7 7 7 "])
    assert "line 2: 199 characters, cut to the first 16" in capsys.readouterr().err
    assert max(encoded) == 16 and sentences[1] == " ".join(["7"] * 100)  # the caller's list is untouched


def test_a_byte_order_mark_is_not_part_of_the_first_line(trained_reverse_run: Path, tmp_path: Path) -> None:
    source = tmp_path / "bom.txt"
    source.write_bytes(b"\xef\xbb\xbf" + b"1 2 3 4 5\n6 7 8 9\n")
    out = tmp_path / "out.txt"
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(out), "--beam", "1"]) == 0
    assert _read(out) == Translator.from_run(trained_reverse_run, beam_size=1).translate(["1 2 3 4 5", "6 7 8 9"])


def test_the_output_may_not_be_the_input_file(
    trained_reverse_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _write(tmp_path / "in.txt", LINES[:3])
    before = source.read_bytes()
    os.link(source, tmp_path / "link.txt")
    monkeypatch.chdir(tmp_path)
    for output in (str(source), "./in.txt", "link.txt"):
        assert main(["translate", str(trained_reverse_run), "-i", "in.txt", "-o", output]) == 2
        assert source.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "link.txt"]
    # nor a file of the run it translates with
    run = tmp_path / "run"
    shutil.copytree(trained_reverse_run, run)
    for name in ("config.yaml", "checkpoints/best.pt", "tokenizer/tokenizer.json"):
        kept = (run / name).read_bytes()
        assert main(["translate", str(run), "-i", "in.txt", "-o", str(run / name)]) == 2
        assert (run / name).read_bytes() == kept
    # nor a file of another run's own (its checkpoints folder holds the user's files too)
    other = tmp_path / "other"
    shutil.copytree(trained_reverse_run, other)
    for name in ("summary.json", "config.yaml", "log.jsonl", "checkpoints/best.pt", "checkpoints/step_00000150.pt"):
        kept = (other / name).read_bytes()
        assert main(["translate", str(run), "-i", "in.txt", "-o", str(other / name)]) == 2
        assert (other / name).read_bytes() == kept
    assert main(["translate", str(run), "-i", "in.txt", "-o", str(other / "checkpoints" / "mine.txt")]) == 0
    # nor a checkpoint under a name of the user's (an average), nor any other zip archive (a document)
    shutil.copy(other / "checkpoints" / "best.pt", other / "checkpoints" / "averaged.pt")
    document = tmp_path / "notes.docx"
    with zipfile.ZipFile(document, "w") as archive:
        archive.writestr("word/document.xml", "<w:document/>")
    for kept_path in (other / "checkpoints" / "averaged.pt", document):
        kept = kept_path.read_bytes()
        assert main(["translate", str(run), "-i", "in.txt", "-o", str(kept_path)]) == 2
        assert kept_path.read_bytes() == kept
    # nor the file a shell gives as stdin (`-o in.txt < in.txt`)
    with open(source, encoding="utf-8") as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        for argv in ([], ["-i", "-"]):
            assert main(["translate", str(run), *argv, "-o", "link.txt"]) == 2
            assert source.read_bytes() == before
    # nor an experiment's own files (its config, timings, lock, its runs' logs); its other files are the user's
    experiment = tmp_path / "experiment"
    (experiment / "runs").mkdir(parents=True)
    names = ("config.yaml", "timings.json", "runs/a.log")
    for name in names:
        (experiment / name).write_text("kept\n", encoding="utf-8")
    for name in names:
        assert main(["translate", str(run), "-i", "in.txt", "-o", str(experiment / name)]) == 2
        assert (experiment / name).read_text(encoding="utf-8") == "kept\n"
    assert main(["translate", str(run), "-i", "in.txt", "-o", str(experiment / "notes.txt")]) == 0


def test_dash_is_stdin_and_stdout_and_no_file_named_dash_is_written(
    trained_reverse_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"1 2 3 4 5\n6 7 8\n"), encoding="utf-8"))
    assert main(["translate", str(trained_reverse_run), "-i", "-", "-o", "-", "--beam", "1"]) == 0
    expected = Translator.from_run(trained_reverse_run, beam_size=1).translate(["1 2 3 4 5", "6 7 8"])
    assert capsys.readouterr().out == "".join(line + "\n" for line in expected)
    assert list(tmp_path.iterdir()) == []


def test_a_closed_stdin_or_stdout_is_named_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `nmt translate RUN <&-` (or >&-, a daemon's job): Python's sys.stdin (stdout) is None
    run = fake_run(tmp_path / "run")
    (tmp_path / "in.txt").write_text("1 2\n", encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", None)
    assert main(["translate", str(run)]) == 2
    assert capsys.readouterr().err == ("nmt translate: error: stdin is closed, and without -i the input is read from "
                                       "it.\nGive the input file with -i FILE.\n")
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["translate", str(run), "-i", str(tmp_path / "in.txt")]) == 2
    assert capsys.readouterr().err == ("nmt translate: error: stdout is closed, and without -o the translation is "
                                       "written to it.\nGive the output file with -o FILE.\n")


def test_an_output_or_plots_folder_that_cannot_be_written_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a read-only folder: refused before the model is loaded, not after the whole input was translated
    run = fake_run(tmp_path / "run")
    (tmp_path / "in.txt").write_text("1 2\n", encoding="utf-8")
    (tmp_path / "ro").mkdir()
    unwritable(monkeypatch, tmp_path / "ro")
    monkeypatch.setattr(Translator, "from_run", lambda *args, **kwargs: pytest.fail("the model was loaded"))
    out = tmp_path / "ro" / "out.fr"
    assert main(["translate", str(run), "-i", str(tmp_path / "in.txt"), "-o", str(out)]) == 2
    assert capsys.readouterr().err == (f"nmt translate: error: the folder of -o {out}: it cannot be written (no "
                                       "permission to write there, or a read-only disk).\n"
                                       "Give -o a file in a folder you can write; nothing was done.\n")
    plots = tmp_path / "ro" / "plots"
    assert main(["translate", str(run), "-i", str(tmp_path / "in.txt"), "--attention-plots", str(plots)]) == 2
    assert f"--attention-plots {plots}: {tmp_path / 'ro'}, where it would be made, cannot" in capsys.readouterr().err
    assert list((tmp_path / "ro").iterdir()) == []


def test_the_output_is_written_through_a_link_and_into_a_pipe_not_over_them(
    trained_reverse_run: Path, tmp_path: Path
) -> None:
    source = _write(tmp_path / "in.txt", ["1 2 3 4 5", "6 7 8"])
    expected = Translator.from_run(trained_reverse_run, beam_size=1).translate(["1 2 3 4 5", "6 7 8"])
    # a symbolic link: its file gets the translation, the link stays (a shell's > does the same)
    (tmp_path / "real").mkdir()
    target = _write(tmp_path / "real" / "out.txt", ["old"])
    (tmp_path / "link.txt").symlink_to(target)
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(tmp_path / "link.txt"),
                 "--beam", "1"]) == 0
    assert (tmp_path / "link.txt").is_symlink() and _read(target) == expected
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["out.txt"]
    # a named pipe (as /dev/stdout is a device): written into, not replaced by a file its reader never sees
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(fifo), "--beam", "1"]) == 0
    reader.join(timeout=60)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert received == ["".join(line + "\n" for line in expected).encode("utf-8")]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
def test_a_descriptor_named_as_output_is_written_through_not_replaced(trained_reverse_run: Path, tmp_path: Path) -> None:
    """-o /dev/stdout (or /dev/fd/N) behind a shell's `>> all.fr`: appended through the descriptor as `-o -` is,
    where replacing the file behind it lost what it held and left the shell writing to a deleted file."""
    source = _write(tmp_path / "in.txt", ["1 2 3 4 5", "6 7 8"])
    expected = Translator.from_run(trained_reverse_run, beam_size=1).translate(["1 2 3 4 5", "6 7 8"])
    all_out = _write(tmp_path / "all.fr", ["EARLIER"])
    with open(all_out, "ab") as handle:
        assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", f"/dev/fd/{handle.fileno()}",
                     "--beam", "1"]) == 0
        handle.write(b"LATER\n")  # the caller's descriptor still writes into the file it sees
    assert _read(all_out) == ["EARLIER", *expected, "LATER"]
    script = f"echo HEADER; {sys.executable} -m nmt translate {trained_reverse_run} -i {source} -o /dev/stdout --beam 1; echo FOOTER"
    block = tmp_path / "block.txt"
    subprocess.run(["bash", "-c", f"{{ {script}; }} > {block}"], check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert _read(block) == ["HEADER", *expected, "FOOTER"]


@pytest.mark.skipif(not Path("/dev/full").is_char_device(), reason="no /dev/full here")
def test_a_device_that_cannot_be_written_is_named(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a full disk's write error names no file: the device written to is named, as a full disk's file is
    source = _write(tmp_path / "in.txt", ["1 2 3"])
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", "/dev/full", "--beam", "1"]) == 2
    assert capsys.readouterr().err.startswith("nmt translate: error: /dev/full: No space left on device\n")
    with open("/dev/full", "wb") as full:  # stdout there: named as stdin is
        done = subprocess.run([sys.executable, "-m", "nmt", "translate", str(trained_reverse_run), "-i", str(source),
                               "--beam", "1"], stdout=full, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert (done.returncode, done.stderr.splitlines()[0]) == (2, "nmt translate: error: <stdout>: No space left on device")


def test_an_input_pipe_is_read_and_a_folder_for_a_file_is_named_before_any_work(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # -i <(...) names a pipe, which is no regular file but reads as one
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(b"1 2 3 4 5\n"), daemon=True)
    writer.start()
    assert main(["translate", str(trained_reverse_run), "-i", str(fifo), "--beam", "1"]) == 0
    writer.join(timeout=60)
    assert capsys.readouterr().out == Translator.from_run(trained_reverse_run, beam_size=1).translate(["1 2 3 4 5"])[0] + "\n"
    source = _write(tmp_path / "in.txt", ["1 2 3"])
    out = tmp_path / "out.txt"
    assert main(["translate", str(trained_reverse_run), "-i", str(tmp_path), "-o", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"nmt translate: error: -i {tmp_path} is a folder, not a file.\n"
        "Give a text file, one sentence a line, or omit -i to read stdin.\n"
    )
    with pytest.raises(SystemExit) as exit_:  # the output folders' type, before the model loads
        main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(out), "--attention-plots", str(source)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith(f"argument --attention-plots: '{source}' is a file: give a folder "
                                            "(one that does not exist yet is made)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.fifo", "in.txt"]


def test_nbest_defaults_to_the_runs_config_within_the_beam(trained_reverse_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained_reverse_run, run)
    config = load_config(run / "config.yaml")
    config.decoding.beam_size, config.decoding.nbest = 3, 2
    save_config(config, run / "config.yaml")
    source = _write(tmp_path / "in.txt", LINES[1:4])
    for extra, fields in (([], 2), (["--beam", "1"], 1)):
        out = tmp_path / f"out{fields}.txt"
        assert main(["translate", str(run), "-i", str(source), "-o", str(out), *extra]) == 0
        assert len(_read(out)) == fields * 3 and all(_read(out))


def test_invalid_utf8_names_the_line_and_leaves_no_output_file(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes(b"1 2 3 4 5\n6 7 8 9 0\n1 2 \xe9 3\n4 5 6 7 8\n")
    out = tmp_path / "out.txt"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(translate_module, "CHUNK_LINES", 2)  # the first chunk is translated before the error
        assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "line 3" in err and "UTF-8" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == [source]


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux's /proc/self/mem, whose read fails")
def test_an_input_that_cannot_be_read_is_named_not_the_output(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # reading /proc/self/mem from its start fails with EIO: the error names it, not -o out.fr being written
    out = tmp_path / "out.fr"
    assert main(["translate", str(trained_reverse_run), "-i", "/proc/self/mem", "-o", str(out)]) == 2
    assert capsys.readouterr().err == ("nmt translate: error: /proc/self/mem: Input/output error\n"
                                       "Check that the path exists, is writable and that the disk has space.\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16"])
def test_a_utf16_input_is_named_with_its_iconv_command_and_nothing_is_written(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], codec: str
) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes("1 2 3 4 5\n6 7 8 9 0\n".encode(codec))  # without a byte-order mark, and with one
    out = tmp_path / "out.txt"
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    named = "UTF-16LE" if codec == "utf-16-le" else "UTF-16"
    assert f"{source} is {named}, not UTF-8 (" in err and f"`iconv -f {named} -t UTF-8 {source} > {source}.utf8`" in err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == [source]


def test_a_nul_character_in_a_line_is_refused_naming_the_line(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A zero byte in a later line (the first's zero bytes would name UTF-16): refused as a corpus file's is, by
    its line; no output file."""
    source = tmp_path / "in.txt"
    source.write_bytes(b"1 2 3\n4 \x00 5\n")
    out = tmp_path / "out.txt"
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (f"nmt translate: error: {source}: line 2 holds a NUL character (a zero byte), which no sentence "
                   "holds: the input is likely UTF-16 without a byte-order mark, or not text.\nConvert the input to "
                   "UTF-8 (e.g. iconv -f UTF-16LE -t UTF-8), or fix that line.\n")
    assert list(tmp_path.iterdir()) == [source]


def test_an_over_long_line_is_cut_with_a_warning(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long_line = " ".join(["7"] * 400 + ["3"] * 50)
    source = _write(tmp_path / "in.txt", ["1 2 3 4 5", long_line, "3 4 5 6 7"])
    out = tmp_path / "out.txt"
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(out), "--beam", "1"]) == 0
    err = capsys.readouterr().err
    assert "line 2: 450 source pieces, cut to the first 400" in err
    assert "line 1" not in err and "line 3" not in err
    rows = _read(out)
    assert len(rows) == 3 and rows[0] and rows[2]
    translator = Translator.from_run(trained_reverse_run, beam_size=1)
    assert rows[1] == translator.translate([" ".join(["7"] * 400)])[0]  # the first 400 pieces, not the last
    (cut,) = translator.translate([long_line], return_attention=True)
    assert len(cut.src_pieces) == 401 == cut.attention.shape[1]  # the pieces read, EOS included


def test_attention_plots_one_png_per_sentence(trained_reverse_run: Path, tmp_path: Path) -> None:
    source = _write(tmp_path / "in.txt", ["1 2 3 4 5", "", "9 8 7 6 5 4"])
    plots = tmp_path / "plots"
    assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(tmp_path / "out.txt"),
                 "--attention-plots", str(plots)]) == 0
    assert sorted(p.name for p in plots.iterdir()) == ["line-000001.png", "line-000003.png"]
    assert (plots / "line-000001.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # read in chunks of 2 lines (as of max(1,000, the batch size) lines): the third chunk's line is still line 5
    _write(tmp_path / "in.txt", ["1 2", "", "3 4", "", "5 6"])
    shutil.rmtree(plots)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(translate_module, "CHUNK_LINES", 2)
        assert main(["translate", str(trained_reverse_run), "-i", str(source), "-o", str(tmp_path / "out.txt"),
                     "--attention-plots", str(plots), "--batch-size", "1"]) == 0
    assert sorted(p.name for p in plots.iterdir()) == ["line-000001.png", "line-000003.png", "line-000005.png"]


def test_plots_of_an_earlier_input_left_in_the_folder_are_named(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shorter input, or one whose line is empty now, draws fewer plots: those an earlier input left would pass for
    this one's, so they are named on stderr (and left there)."""
    plots = tmp_path / "plots"
    argv = ["translate", str(trained_reverse_run), "--attention-plots", str(plots), "-o", str(tmp_path / "out.txt")]
    assert main([*argv, "-i", str(_write(tmp_path / "in.txt", ["1 2 3", "4 5 6", "7 8"]))]) == 0
    assert "also holds" not in capsys.readouterr().err
    assert main([*argv, "-i", str(_write(tmp_path / "in.txt", ["", "4 5 6"]))]) == 0
    assert (f"warning: {plots} also holds 2 plots that this translation did not draw (line-000001.png, line-000003.png): "
            "an earlier input's. Remove them, or give --attention-plots a folder of its own.") in capsys.readouterr().err
    assert sorted(p.name for p in plots.iterdir()) == ["line-000001.png", "line-000002.png", "line-000003.png"]


def test_attention_plots_come_with_the_output_file_or_not_at_all(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad line after plots were drawn (read a line at a time here): no output file, and no plots of the lines
    before it, in a new folder or beside a user's files; on stdout each plot comes with its line."""
    source = tmp_path / "in.txt"
    source.write_bytes(b"1 2 3\n4 5 6\n7 \xff 8\n")
    plots, out = tmp_path / "plots", tmp_path / "out.txt"
    argv = ["translate", str(trained_reverse_run), "-i", str(source), "--attention-plots", str(plots)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(translate_module, "CHUNK_LINES", 1)
        assert main([*argv, "-o", str(out), "--batch-size", "1"]) == 2
        assert "line 3 is not valid UTF-8" in capsys.readouterr().err
        assert not out.exists() and not plots.exists()
        plots.mkdir()
        (plots / "mine.png").write_bytes(b"a user's")
        assert main([*argv, "-o", str(out), "--batch-size", "1"]) == 2
        assert [path.name for path in plots.iterdir()] == ["mine.png"]
        assert main([*argv, "--batch-size", "1"]) == 2
        assert sorted(path.name for path in plots.iterdir()) == ["line-000001.png", "line-000002.png", "mine.png"]


def test_a_model_without_attention_warns_that_there_is_nothing_to_plot(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a run directory of an (untrained) RNNencdec with the same tokenizer
    run = tmp_path / "encdec"
    shutil.copytree(trained_reverse_run / "tokenizer", run / "tokenizer")
    config = yaml.safe_load((trained_reverse_run / "config.yaml").read_text(encoding="utf-8"))
    config["model"]["attention"] = "none"
    (run / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (run / "checkpoints").mkdir()
    vocab = Translator.from_run(trained_reverse_run).tokenizer.tgt_vocab_size
    model = build_model(ModelConfig(**config["model"]), vocab, vocab)
    torch.save({"model": model.state_dict(), "step": 0}, run / "checkpoints" / "best.pt")

    source = _write(tmp_path / "in.txt", ["1 2 3 4 5", "6 7 8"])
    plots = tmp_path / "plots"
    out = tmp_path / "out.txt"
    assert main(["translate", str(run), "-i", str(source), "-o", str(out), "--attention-plots", str(plots)]) == 0
    assert f"warning: {run} is a model without attention (attention: none, RNNencdec): there is nothing to plot." in (
        capsys.readouterr().err)
    assert len(_read(out)) == 2 and not plots.exists()


def test_a_run_without_checkpoint_is_a_clear_error(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "untrained"
    shutil.copytree(trained_reverse_run / "tokenizer", run / "tokenizer")
    shutil.copy(trained_reverse_run / "config.yaml", run / "config.yaml")
    assert main(["translate", str(run), "-i", str(_write(tmp_path / "in.txt", ["1 2"]))]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_python_api_two_lines_and_translation_details(trained_reverse_run: Path) -> None:
    t = Translator.from_run(trained_reverse_run)
    assert t.translate(["1 2 3 4 5 6", ""]) == ["6 5 4 3 2 1", ""]

    (detail,) = t.translate(["1 2 3 4 5 6"], return_attention=True)
    assert isinstance(detail, Translation) and detail.text == "6 5 4 3 2 1"
    # the piece lists end with EOS, as the attention's rows (target) and columns (source) do
    assert detail.src_pieces == ["▁1", "▁2", "▁3", "▁4", "▁5", "▁6", "</s>"]
    assert detail.tgt_pieces == ["▁6", "▁5", "▁4", "▁3", "▁2", "▁1", "</s>"] and detail.score < 0
    assert detail.attention is not None and detail.attention.shape == (7, 7)
    # the last source digits are read first, the first ones last: an anti-diagonal
    peaks = detail.attention[:6].argmax(dim=1).tolist()
    assert peaks == sorted(peaks, reverse=True) and peaks[0] >= 4 and peaks[-1] <= 1

    (alternatives,) = t.translate(["1 2 3 4 5 6"], nbest=2)
    assert [a.text for a in alternatives][0] == "6 5 4 3 2 1" and alternatives[0].score >= alternatives[1].score
    # n-best Translations carry their pieces too, and with attention its shape is the lists' lengths
    assert alternatives[0].src_pieces == detail.src_pieces and alternatives[0].tgt_pieces == detail.tgt_pieces
    for alternative in t.translate(["1 2 3 4 5 6"], nbest=2, return_attention=True)[0]:
        assert alternative.attention is not None and alternative.tgt_pieces[-1] == "</s>"
        assert alternative.attention.shape == (len(alternative.tgt_pieces), len(alternative.src_pieces))


@pytest.mark.parametrize("beam", [1, 3])
def test_a_translation_s_score_is_its_log_probability_over_the_length_penalty_it_was_asked_for(
    trained_reverse_run: Path, beam: int
) -> None:
    """By teacher forcing: log p(pieces + EOS | source) / ((5 + length) / 6)^alpha (GNMT's) with decoding.alpha
    1.0, not the default 0.6, whether greedy (beam 1) or beam search scored it."""
    decoding = dataclasses.replace(load_config(trained_reverse_run / "config.yaml").decoding, alpha=1.0,
                                   length_penalty="gnmt")
    t = Translator.from_run(trained_reverse_run, device="cpu", beam_size=beam, decoding=decoding)
    (detail,) = t.translate(["1 2 3 4 5 6"], return_attention=True)
    src, lengths = make_source_batch([t.tokenizer.encode_src("1 2 3 4 5 6")])
    target = [*t.tokenizer.encode_tgt(detail.text), EOS_ID]
    with torch.no_grad():
        logits = t.model(src, lengths, torch.tensor([[BOS_ID, *target[:-1]]]))
    log_prob = float(torch.log_softmax(logits[0].double(), -1)[torch.arange(len(target)), target].sum())
    assert detail.score == pytest.approx(log_prob / ((5 + len(target)) / 6), rel=1e-5)


def test_a_hypothesis_cut_after_a_word_boundary_piece_has_no_trailing_space(
    trained_reverse_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cut at its length limit, a hypothesis may end in the lone piece "▁" that opens a word the limit
    # left out: sentencepiece would turn it into a trailing space.
    translator = Translator.from_run(trained_reverse_run, beam_size=1)
    tokenizer = translator.tokenizer
    boundary = [i for i in range(tokenizer.tgt_vocab_size) if tokenizer.tgt_id_to_piece([i]) == ["▁"]]
    cut = Hypothesis([*tokenizer.encode_tgt("3 2"), *boundary], -1.0, None, -1.0)
    monkeypatch.setattr(translator, "_search", lambda src_ids, nbest, attention: [[cut] for _ in src_ids])
    assert boundary and translator.translate(["1 2 3 4 5"]) == ["3 2"]
    (detail,) = translator.translate(["1 2 3 4 5"], return_attention=True)
    assert detail.text == "3 2" and detail.tgt_pieces[-2:] == ["▁", "</s>"]  # the pieces are what search found


def test_translate_and_curve_use_the_runs_training_threads_unless_given_threads(
    trained_reverse_run: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained_reverse_run, run)  # curve writes its cache into the run
    config = load_config(run / "config.yaml")
    config.training.threads = 1
    save_config(config, run / "config.yaml")
    source = _write(tmp_path / "in.txt", LINES[1:3])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert main(["translate", str(run), "-i", str(source), "-o", str(tmp_path / "out.txt")]) == 0
        assert torch.get_num_threads() == 1  # the run's training.threads
        assert main(["translate", str(run), "-i", str(source), "-o", str(tmp_path / "out.txt"), "--threads", "2"]) == 0
        assert torch.get_num_threads() == 2
        assert main(["curve", str(run), "--sentences-per-bucket", "2", "--out", str(tmp_path / "curve")]) == 0
        assert torch.get_num_threads() == 1
        assert main(["curve", str(run), "--sentences-per-bucket", "2", "--out", str(tmp_path / "curve"),
                     "--threads", "2"]) == 0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_a_trained_transformer_translates_alike_at_batch_1_and_16_and_plots(
    trained_transformer_run: Path, tmp_path: Path
) -> None:
    sources = [src for src, _ in reverse_pairs(24, 5, 10, seed=7)]
    source = _write(tmp_path / "in.txt", sources)
    outputs = []
    for batch in ("1", "16"):
        out = tmp_path / f"out-{batch}.txt"
        assert main(["translate", str(trained_transformer_run), "-i", str(source), "-o", str(out), "--beam", "5",
                     "--set", f"decoding.batch_size={batch}", "--attention-plots", str(tmp_path / "plots")]) == 0
        outputs.append(_read(out))
    assert outputs[0] == outputs[1]
    right = sum(out == " ".join(reversed(src.split())) for out, src in zip(outputs[0], sources, strict=True))
    assert right >= 6, outputs[0]  # it has learned the task (9 of 24 here), not a constant
    assert len(list((tmp_path / "plots").iterdir())) == 24


def test_a_batch_larger_than_a_chunk_is_read_whole(trained_reverse_run: Path, tmp_path: Path) -> None:
    """decoding.batch_size above CHUNK_LINES is not cut to it: the file is read a batch at a time, so that a
    GPU gets the batches it was asked for (and the outputs are those of smaller chunks)."""
    source = tmp_path / "in.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    sizes: list[int] = []
    translate_nbest = Translator.translate_nbest

    def counting(self: Translator, lines: list[str], *args: object, **kwargs: object) -> object:
        sizes.append(len(lines))
        return translate_nbest(self, lines, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(translate_module, "CHUNK_LINES", 2)
        patch.setattr(Translator, "translate_nbest", counting)
        translate_file(trained_reverse_run, source, tmp_path / "big.txt", overrides=["decoding.batch_size=5"])
        translate_file(trained_reverse_run, source, tmp_path / "small.txt", overrides=["decoding.batch_size=1"])
    batches = -(-len(LINES) // 5)
    assert sizes[:batches] == [5] * (batches - 1) + [len(LINES) - 5 * (batches - 1)]
    assert set(sizes[batches:]) <= {1, 2} and sum(sizes[batches:]) == len(LINES)
    assert _read(tmp_path / "big.txt") == _read(tmp_path / "small.txt")


def test_no_output_folder_lies_inside_a_run_s_own_folders(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Plots or a report written into a run's tokenizer/, checkpoints/ or hyps/ would pass for the run's own files;
    a report in the run's folder itself (RUN/evaluation, evaluate's default) is the user's. Refused before any work."""
    run = tmp_path / "run"
    shutil.copytree(trained_reverse_run, run)
    source = _write(tmp_path / "in.txt", LINES[:3])
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    for inside in ("tokenizer", "checkpoints", "hyps/plots"):
        folder = run / inside
        top = inside.split("/")[0]
        for argv, named in (
            (["translate", str(run), "-i", str(source), "-o", str(tmp_path / "out.txt"), "--attention-plots", str(folder)],
             "--attention-plots"),
            (["curve", str(run), "--out", str(folder)], "--out"),
        ):
            assert main(argv) == 2
            assert capsys.readouterr().err.endswith(
                f"error: {named} {folder} is inside {top}/ of the run {run}, which nmt writes and reads.\n"
                f"Write it beside the run's own folders (e.g. {run / 'evaluation'}); nothing was written.\n")
    assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()} == before
    assert not (tmp_path / "out.txt").exists()
    # the translation and the plots in one path: refused before the translating, nothing made
    both = tmp_path / "both"
    assert main(["translate", str(run), "-i", str(source), "-o", str(both), "--attention-plots", str(both)]) == 2
    assert capsys.readouterr().err.endswith(f"error: -o {both} is the --attention-plots folder too.\n"
                                            "Give the translation and the plots each a path of its own; nothing was "
                                            "written.\n")
    assert not both.exists()
    assert main(["score", str(source), "--ref", str(source), "--out", str(run / "evaluation")]) == 0


@pytest.mark.parametrize("scores", [False, True])
def test_a_search_that_found_fewer_than_nbest_keeps_k_fields_or_k_lines_per_input(scores: bool) -> None:
    """A beam wider than the vocabulary can finish fewer than K hypotheses: the rest are empty, so that line i's
    translations stay at lines i*K .. i*K+K-1 (and K tab-separated fields)."""
    from nmt.decoding.translator import Translation

    found = [[Translation("a b", -0.5, ["x", "</s>"], ["a", "b", "</s>"])],
             [Translation("c", -0.25, ["y", "</s>"], ["c", "</s>"]), Translation("d", -0.75, ["y", "</s>"], ["d", "</s>"])]]
    for layout, expected in (("lines", ["a b", "", "", "c", "d", ""]), ("tabs", ["a b\t\t", "c\td\t"])):
        sink = io.StringIO()
        translate_module._write_chunk(sink, found, scores, layout, 3)
        lines = sink.getvalue().split("\n")[:-1]
        if not scores:
            assert lines == expected
        else:
            assert len(lines) == len(expected)
            fields = [line.split("\t") for line in lines]
            assert all(len(f) == (2 if layout == "lines" else 6) for f in fields), fields
            assert fields[0][:2] == ["a b", "-0.5000"] and (fields[1] == ["", ""] if layout == "lines" else fields[0][2:] == ["", "", "", ""])
