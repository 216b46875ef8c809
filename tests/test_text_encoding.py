"""Telling UTF-16 and UTF-32 text from UTF-8, with a byte-order mark or without."""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Callable
from pathlib import Path

import pytest

from nmt.data.corpus import read_lines
from nmt.errors import NMTError
from nmt.text_encoding import compression, foreign_encoding

TEXT = "In the beginning God created the heaven and the earth.\nEt la terre était informe et vide.\n"


@pytest.mark.parametrize(
    ("codec", "named"),
    [("utf-16-le", "UTF-16LE"), ("utf-16-be", "UTF-16BE"), ("utf-32-le", "UTF-32LE"), ("utf-32-be", "UTF-32BE")],
)
def test_a_text_without_a_byte_order_mark_is_named_by_its_zero_bytes(codec: str, named: str) -> None:
    encoding, why = foreign_encoding(TEXT.encode(codec))
    assert encoding == named and why.startswith("it has no byte-order mark")
    assert foreign_encoding("Hi\n".encode(codec)) is not None  # a line as short as one word


@pytest.mark.parametrize(("codec", "named"), [("utf-16", "UTF-16"), ("utf-32", "UTF-32")])
def test_a_byte_order_mark_names_the_encoding(codec: str, named: str) -> None:
    assert foreign_encoding(TEXT.encode(codec)) == (named, f"it starts with {named}'s byte-order mark, FF FE" +
                                                    (" 00 00" if named == "UTF-32" else ""))


def test_utf8_and_a_stray_nul_are_not_foreign() -> None:
    assert foreign_encoding(TEXT.encode("utf-8")) is None
    assert foreign_encoding(b"\xef\xbb\xbf" + TEXT.encode("utf-8")) is None  # UTF-8's own mark
    assert foreign_encoding(TEXT.encode("utf-8").replace(b" ", b"\x00", 1)) is None  # a NUL, not a pattern
    assert foreign_encoding(b"") is None


def test_reading_a_utf16_corpus_without_a_mark_names_its_iconv_command(tmp_path: Path) -> None:
    path = tmp_path / "train.en"
    path.write_bytes(TEXT.encode("utf-16-le"))  # as Python's utf-16-le and some exporters write it
    with pytest.raises(NMTError) as error:
        read_lines(path)
    assert error.value.message.startswith(f"corpus file {path} is UTF-16LE, not UTF-8 (it has no byte-order mark")
    assert f"`iconv -f UTF-16LE -t UTF-8 {path} > {path}.utf8`" in error.value.hint


def test_utf16_text_that_is_not_mostly_ascii_is_refused_by_its_nul_characters(tmp_path: Path) -> None:
    """Russian saved as UTF-16LE without a mark has too few zero bytes for their pattern (only its spaces and line
    ends are ASCII), and its bytes decode as UTF-8 control characters: the NUL of its first space names it."""
    path = tmp_path / "train.ru"
    path.write_bytes("В начале сотворил Бог небо и землю.\nЗемля же была безвидна и пуста.\n".encode("utf-16-le"))
    assert foreign_encoding(path.read_bytes()) is None
    with pytest.raises(NMTError) as error:
        read_lines(path)
    assert error.value.message == (f"corpus file {path}, line 1: a NUL character (a zero byte), which no text of "
                                   "sentences holds: the file is likely UTF-16 without a byte-order mark, or not text.")
    assert f"`iconv -f UTF-16LE -t UTF-8 {path} > {path}.utf8`" in error.value.hint
    path.write_bytes(b"one\ntwo\x00three\n")
    with pytest.raises(NMTError, match=r", line 2: a NUL character"):
        read_lines(path)


@pytest.mark.parametrize(
    ("pack", "name", "command", "suffix"),
    [(gzip.compress, "gzip", "gzip -dc", ".gz"), (bz2.compress, "bzip2", "bzip2 -dc", ".bz2"),
     (lzma.compress, "xz", "xz -dc", ".xz")],
)
def test_a_compressed_file_is_named_so_with_the_command_that_unpacks_it(
    tmp_path: Path, pack: Callable[[bytes], bytes], name: str, command: str, suffix: str
) -> None:
    """A compressed file (a test set as downloaded) is refused as such with its unpacking command, not as bytes
    that are no UTF-8 with `iconv -f latin1` to convert them; text that starts as bzip2's mark does is text."""
    path = tmp_path / f"test.de{suffix}"
    path.write_bytes(pack(TEXT.encode("utf-8")))
    with pytest.raises(NMTError) as error:
        read_lines(path)
    assert error.value.message == f"corpus file {path} is {name}-compressed, not text."
    assert error.value.hint == f"Unpack it first, e.g. `{command} {path} > {tmp_path / 'test.de'}`, and give that file."
    assert compression(b"BZh9 is no bzip2 file\n") is None and compression(TEXT.encode("utf-8")) is None


def test_cr_line_ends_are_refused_rather_than_read_as_one_line(tmp_path: Path) -> None:
    """A file saved with classic Mac OS line ends (CR alone) would be one sentence; CRLF and a last CR are line ends."""
    path = tmp_path / "valid.en"
    path.write_bytes(b"one\rtwo\rthree\r")
    with pytest.raises(NMTError) as error:
        read_lines(path)
    assert error.value.message == (f"corpus file {path}, line 1: a carriage return (CR) that ends no line (2 such CRs "
                                   "in the file, which is read a line per LF): a file saved with CR line ends would be "
                                   "read as one line.")
    assert error.value.hint.startswith(f"Convert its line ends: `tr '\\r' '\\n' < {path} > {path}.unix`")
    path.write_bytes(b"one\r\ntwo\nthree\rfour\n")
    with pytest.raises(NMTError, match=r", line 3: a carriage return \(CR\) that ends no line \(1 such CR in"):
        read_lines(path)
    path.write_bytes(b"one\r\ntwo\r\nthree\r")
    assert read_lines(path) == ["one", "two", "three"]
