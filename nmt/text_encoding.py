"""What a text file that should be UTF-8 was saved in instead: UTF-16 or UTF-32, with or without a byte-order mark.

Decoded as UTF-8, a UTF-16 file with a mark fails at its first byte, and one without a mark (ASCII text with a
zero byte after each character) decodes without error into text that trains and scores as garbage: both are
told apart here so that the error names the encoding and the iconv command that converts the file.
"""

from __future__ import annotations

import codecs

from nmt.errors import NMTError

# Windows' "Unicode" is UTF-16 LE; UTF-32's marks first, since UTF-32 LE's begins with UTF-16 LE's.
FOREIGN_BOMS = (
    ("UTF-32", codecs.BOM_UTF32_LE),
    ("UTF-32", codecs.BOM_UTF32_BE),
    ("UTF-16", codecs.BOM_UTF16_LE),
    ("UTF-16", codecs.BOM_UTF16_BE),
)
# Which of each 4 bytes are mostly zero in ASCII text saved in each encoding without a mark.
ZERO_BYTES = {
    (False, True, False, True): "UTF-16LE",
    (True, False, True, False): "UTF-16BE",
    (False, True, True, True): "UTF-32LE",
    (True, True, True, False): "UTF-32BE",
}
SAMPLE_BYTES = 4096


def foreign_encoding(start: bytes) -> tuple[str, str] | None:
    """(encoding, why) when the first bytes of a file, `start`, are UTF-16 or UTF-32 rather than UTF-8: by
    its byte-order mark, or without one by where its zero bytes fall; None otherwise (UTF-8, with or
    without its own mark, has no zero bytes but NUL characters)."""
    for encoding, bom in FOREIGN_BOMS:
        if start.startswith(bom):
            return encoding, f"it starts with {encoding}'s byte-order mark, {bom.hex(' ').upper()}"
    sample = start[:SAMPLE_BYTES]
    if b"\x00" not in sample:
        return None
    zero = tuple(sample[i::4].count(0) > len(sample[i::4]) / 2 for i in range(4))
    encoding = ZERO_BYTES.get(zero)
    if encoding is None:
        return None
    return encoding, f"it has no byte-order mark, but its zero bytes fall where {encoding}'s ASCII characters put them"


def refuse_foreign_encoding(start: bytes, shown: str, path: str | None) -> None:
    """NMTError naming `shown` (e.g. "corpus file PATH") and the iconv command that converts the file at
    `path` (None: a stream) when `start`, its first bytes, is UTF-16 or UTF-32 rather than UTF-8."""
    foreign = foreign_encoding(start)
    if foreign is None:
        return
    encoding, why = foreign
    iconv = f"iconv -f {encoding} -t UTF-8"
    convert = f"`{iconv} {path} > {path}.utf8`, and give that file" if path else f"by piping it through `{iconv}`"
    raise NMTError(f"{shown} is {encoding}, not UTF-8 ({why}).", f"Convert it to UTF-8, e.g. {convert}.")
