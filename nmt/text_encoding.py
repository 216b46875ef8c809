"""What a text file that should be UTF-8 was saved in instead: UTF-16 or UTF-32, with or without a byte-order mark,
or a compressed file (a WMT test set as it is downloaded, test.de.gz).

Decoded as UTF-8, a UTF-16 file with a mark fails at its first byte, and one without a mark (ASCII text with a
zero byte after each character) decodes without error into text that trains and scores as garbage: both are
told apart here so that the error names the encoding and the iconv command that converts the file. A compressed
file fails as bytes that are no UTF-8, for which iconv is no cure: it is named with the command that unpacks it.
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
# The bytes a compressed file starts with (bzip2's: "BZh", its level, its first block's magic), the command
# that writes out its contents and the file name's usual suffix.
COMPRESSED = (
    ("gzip", (b"\x1f\x8b",), "gzip -dc", ".gz"),
    ("bzip2", tuple(b"BZh%d1AY&SY" % level for level in range(1, 10)), "bzip2 -dc", ".bz2"),
    ("xz", (b"\xfd7zXZ\x00",), "xz -dc", ".xz"),
    ("zstd", (b"\x28\xb5\x2f\xfd",), "zstd -dc", ".zst"),
    ("zip", (b"PK\x03\x04",), "unzip -p", ".zip"),
)


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


def compression(start: bytes) -> tuple[str, str, str] | None:
    """(format, the command that writes out the contents, the usual suffix) when the first bytes of a file,
    `start`, are those of a compressed file; None otherwise."""
    for name, magics, command, suffix in COMPRESSED:
        if start.startswith(magics):
            return name, command, suffix
    return None


def refuse_foreign_encoding(start: bytes, shown: str, path: str | None) -> None:
    """NMTError naming `shown` (e.g. "corpus file PATH") and the iconv command that converts the file at
    `path` (None: a stream) when `start`, its first bytes, is UTF-16 or UTF-32 rather than UTF-8; or the
    command that unpacks it when it is a compressed file."""
    packed = compression(start)
    if packed is not None:
        name, command, suffix = packed
        unpacked = path.removesuffix(suffix) if path and path.endswith(suffix) and path != suffix else f"{path}.txt"
        unpack = f"`{command} {path} > {unpacked}`, and give that file" if path else f"by piping it through `{command}`"
        raise NMTError(f"{shown} is {name}-compressed, not text.", f"Unpack it first, e.g. {unpack}.")
    foreign = foreign_encoding(start)
    if foreign is None:
        return
    encoding, why = foreign
    iconv = f"iconv -f {encoding} -t UTF-8"
    convert = f"`{iconv} {path} > {path}.utf8`, and give that file" if path else f"by piping it through `{iconv}`"
    raise NMTError(f"{shown} is {encoding}, not UTF-8 ({why}).", f"Convert it to UTF-8, e.g. {convert}.")
