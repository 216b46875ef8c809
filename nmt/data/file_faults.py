"""Where in a split's local data files a record is, and what in them `datasets` cannot read.

For the huggingface source's error messages: `datasets` names neither file nor line ("Expected object or
value", "An error occurred while generating the dataset"), so on its failure path, and only there, the files
are read here to name the first line at fault and what to do.
"""

from __future__ import annotations

import codecs
import csv
import json
import re
from collections.abc import Iterator


class _Fault(Exception):
    """A line datasets cannot read: (message, hint)."""


def record_place(files: list[str], key: str, row: int, rows: int) -> str:
    """Where record `row` (from 0) of a split read from `files` (`key`'s data files) is: 'FILE, line N' for
    one JSON Lines file, else 'record N of FILE' (N from 1), the files listed where there are several."""
    if len(files) > 1:  # which file holds the record depends on the order datasets reads them in
        return f"record {row + 1} of the {len(files)} files of {key} ({', '.join(files)})"
    line = _json_lines_line(files[0], row, rows) if _is_json_lines(files[0]) else None
    return f"{files[0]}, line {line}" if line else f"record {row + 1} of {files[0]}"


def data_file_fault(files: list[str], builder: str = "") -> tuple[str, str] | None:
    """The message and hint for the first line of a split's `files` (in the order datasets reads them) that
    datasets cannot read, in its JSON Lines or CSV files (by their suffix, or every file where `builder`, the
    dataset's name, is datasets' json or csv builder); None if none is found."""
    json_lines = [path for path in files if builder == "json" or _is_json_lines(path)]
    csv = [path for path in files if builder == "csv" or path.lower().endswith(".csv")]
    try:
        _check_json_lines(json_lines)
        _check_csv_headers(csv)
        _check_csv_types(csv)
    except _Fault as fault:
        message, hint = fault.args
        return message, hint
    return None


def _is_json_lines(path: str) -> bool:
    """Whether `path` is read as JSON Lines (as datasets' json builder reads .json / .jsonl files; a compressed
    one is not read here)."""
    return path.lower().endswith((".json", ".jsonl"))


def _json_lines_line(path: str, row: int, rows: int) -> int | None:
    """The line number of record `row` (from 0) of a JSON Lines file of `rows` records: the json builder
    skips blank lines, so it is the row-th line not blank, if exactly `rows` lines are not blank (else the
    file is no JSON Lines, e.g. a JSON array over several lines, and records are not lines); None if not."""
    found, count = None, 0
    try:
        with open(path, "rb") as file:
            for number, line in enumerate(file, 1):
                if line.removeprefix(codecs.BOM_UTF8).strip():  # the builder drops a leading byte-order mark too
                    if count == row:
                        found = number
                    count += 1
    except OSError:
        return None
    return found if count == rows else None


def _check_json_lines(files: list[str]) -> None:
    """Raise _Fault for the first line of the JSON Lines `files` that datasets' json builder cannot read: a
    line that is no JSON object, a field whose JSON type differs from the first record's (which the builder
    reads only in a file without blank lines), or, in a later file, a field with no value in any record of the
    first file (which gives the split its fields)."""
    first: tuple[str, int, dict[str, str]] | None = None  # the first record's file, line and field types
    fields: dict[str, bool] = {}  # the first file's fields and objects' keys (see _add_fields)
    shapes: dict[str, frozenset[str] | None] = {}
    for index, path in enumerate(files):
        for number, record, blank in _json_records(path):
            values = _field_values(record)
            if index == 0:
                _add_fields(values, fields, shapes)
            elif fields and first and (new := _new_fields(values, fields, shapes)):
                raise _Fault(
                    f"{path}, line {number}: field{'s' if len(new) > 1 else ''} {', '.join(map(repr, new))} "
                    f"{'have' if len(new) > 1 else 'has'} no value in any record of {first[0]}, the split's "
                    "first file.",
                    "datasets takes a split's fields from its first file: give every file the same fields, each "
                    f"with a value (not null) in some record of {first[0]}, or remove them from {path}.",
                )
            # a null, which datasets reads as a missing value of any type, has no type to differ
            types = {field: _json_type(value) for field, value in values.items() if value is not None}
            first = first or (path, number, types)
            differing = next((field for field, kind in types.items() if first[2].get(field, kind) != kind), None)
            if differing:
                at = f"line {first[1]}" if first[0] == path else f"{first[0]}, line {first[1]}"
                blanks = f", or remove the file's blank lines (the first is line {blank})" if blank else ""
                raise _Fault(
                    f"{path}, line {number}: field '{differing}' is {_a(types[differing])}, but "
                    f"{_a(first[2][differing])} in the first record ({at}).",
                    f"Give the field one JSON type in every record (a text is a string: \"5\", not 5){blanks}.",
                )


def _json_records(path: str) -> Iterator[tuple[int, dict, int]]:
    """(line number, record, the file's first blank line so far or 0) for each record of the JSON Lines file
    `path`; _Fault for a line that is no JSON object. A file that is one JSON array, or cannot be read, is
    left to datasets."""
    blank, seen = 0, False  # the first blank line; whether a line not blank came
    try:
        with open(path, "rb") as file:
            for number, line in enumerate(file, 1):
                line = line.removeprefix(codecs.BOM_UTF8).strip()
                if not line:
                    blank = blank or number
                    continue
                if not seen and line.startswith(b"["):
                    return
                seen = True
                try:
                    record = json.loads(line)
                except ValueError as exc:  # UnicodeDecodeError included
                    detail = f"{exc.msg}, character {exc.colno} of the line" if isinstance(exc, json.JSONDecodeError) else exc
                    raise _Fault(f"{path}, line {number}: invalid JSON ({detail}).", "One JSON object per line.") from None
                if not isinstance(record, dict):
                    raise _Fault(f"{path}, line {number}: a JSON {_json_type(record)}, not an object.",
                                 "One JSON object per line.")
                yield number, record, blank
    except OSError:
        return


def _add_fields(values: dict[str, object], fields: dict[str, bool], shapes: dict[str, frozenset[str] | None]) -> None:
    """Add a record's field `values` (by dotted path) to `fields` (whether any record gives the field a value)
    and `shapes` (the keys of each object field, None once they differ between records or are none)."""
    for field, value in values.items():
        fields[field] = fields.get(field, False) or value is not None
        if isinstance(value, dict):
            shape = frozenset(value)
            shapes[field] = shape if shape and shapes.get(field, shape) == shape else None


def _new_fields(values: dict[str, object], fields: dict[str, bool], shapes: dict[str, frozenset[str] | None]) -> list[str]:
    """The fields of a record's `values` (by dotted path) that no record of the split's first file (its `fields`
    and `shapes`, see _add_fields) gives a value (a null is new only where that file lacks the field), but for
    those inside what is no object of fixed keys there (datasets reads one of varying keys as JSON text)."""
    return [
        field for field, value in values.items()
        if not fields.get(field) and (value is not None or field not in fields)
        and all(shapes.get(field[:end]) is not None for end, char in enumerate(field) if char == ".")
    ]


def _check_csv_headers(files: list[str]) -> None:
    """Raise _Fault for the first of the CSV `files` whose header has a column that the first file's lacks
    (datasets takes a split's columns from its first file; a later file may lack one, or order them
    otherwise)."""
    first: tuple[str, list[str]] | None = None  # the first file and its header
    for path in files:
        try:
            with open(path, newline="", encoding="utf-8-sig") as file:
                header = next(csv.reader(file), [])
        except (OSError, ValueError, csv.Error):  # UnicodeDecodeError included
            continue
        if first and (new := [column for column in header if column not in first[1]]):
            raise _Fault(
                f"{path}, line 1: column{'s' if len(new) > 1 else ''} {', '.join(map(repr, new))} "
                f"{'are' if len(new) > 1 else 'is'} not in the header of {first[0]}, the split's first file.",
                "datasets takes a split's columns from its first file: give every file the same columns, or remove "
                f"them from {path}.",
            )
        first = first or (path, header)


# datasets' csv builder reads a split with pandas in chunks of this many rows, each column typed by the values of
# its chunk; the first chunk's types are the split's, and a later chunk typed otherwise cannot be written
CSV_CHUNK_ROWS = 10_000
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|infinity)", re.IGNORECASE)
_MISSING = {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
            "NA", "NULL", "NaN", "None", "n/a", "nan", "null"}  # pandas' missing values (STR_NA_VALUES)


def _is_number(value: str) -> bool:
    """Whether pandas reads a CSV value as a number, or as missing (which leaves a column of numbers numeric)."""
    return value.strip() in _MISSING or bool(_NUMBER.fullmatch(value.strip()))


def _check_csv_types(files: list[str]) -> None:
    """Raise _Fault for the first CSV row of the split past its first chunk (CSV_CHUNK_ROWS rows of its first file)
    with text in a column that holds only numbers (or blanks) in that chunk: datasets typed the column as numbers
    there and fails on the later chunk, naming neither ("An error occurred while generating the dataset")."""
    numeric: dict[str, bool] = {}  # the first chunk's columns: whether each holds numbers only
    for index, path in enumerate(files):
        for row_number, (line, values) in enumerate(_csv_rows(path)):
            if index == 0 and row_number < CSV_CHUNK_ROWS:
                for column, value in values.items():
                    numeric[column] = numeric.get(column, True) and _is_number(value)
            elif text := next((c for c, value in values.items() if numeric.get(c) and not _is_number(value)), None):
                raise _Fault(
                    f"{path}, line {line}: column '{text}' holds text ({values[text]!r}) where the first "
                    f"{CSV_CHUNK_ROWS:,} rows of {files[0]} hold only numbers or blanks.",
                    "datasets types a CSV column by those rows and cannot read text in it later: remove the column "
                    "from the files if nmt does not read it (data.src_field, data.tgt_field), or give the pairs as "
                    "a .tsv with data.source: files, whose values are always text.",
                )


def _csv_rows(path: str) -> Iterator[tuple[int, dict[str, str]]]:
    """Each row of a CSV file, as its line number (its last line's) and its values by column, up to what cannot
    be read (that is another check's to name)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as file:
            reader = csv.DictReader(file)
            for row in reader:
                yield reader.line_num, {column: value or "" for column, value in row.items() if isinstance(column, str)}
    except (OSError, ValueError, csv.Error):  # UnicodeDecodeError included
        return


def _json_type(value: object) -> str:
    """The JSON type of a parsed JSON value."""
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string", type(None): "null"}.get(type(value), "number")


def _a(kind: str) -> str:
    """A JSON type's name with its article: 'a string', 'an object'."""
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _field_values(record: dict, prefix: str = "") -> dict[str, object]:
    """The value of each field of `record` and of its objects' fields, by dotted path (nulls included)."""
    values: dict[str, object] = {}
    for key, value in record.items():
        values[prefix + key] = value
        if isinstance(value, dict):
            values.update(_field_values(value, f"{prefix}{key}."))
    return values
