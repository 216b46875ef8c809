"""Typed YAML: a file read with its error marks, values checked against dataclass field types, and
differences between nested dicts (the command line's `--set` overrides: nmt/overrides.py). Nothing here
knows the toolkit's sections; nmt/config_sections.py declares them and nmt/config.py assembles them.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from nmt.errors import FIX_IN_CONFIG, UNREADABLE, NMTError
from nmt.text_encoding import refuse_foreign_encoding

INT64_MAX = 2**63 - 1  # the largest int a config key takes


def type_name(tp: Any) -> str:
    """How an error message names a field type: 'int', 'one of 'a', 'b''."""
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def check_type(value: Any, tp: Any, key: str) -> Any:
    """Return `value` if it fits `tp` (ints are accepted as floats), else raise NMTError."""
    if tp is Any:  # any value fits, and isinstance(value, Any) would raise TypeError, a traceback
        return value
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list and isinstance(value, list):
        return [check_type(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is Literal:
        ok = value in args
    elif origin in (typing.Union, types.UnionType):
        ok = any(fits(value, a) for a in args)
    elif tp is float:  # an int beyond a float's range (1 and 400 zeros) is none
        ok = isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)
                                          and abs(value) <= sys.float_info.max)
        value = float(value) if ok else value
    else:  # bool, int, str, a list that is not one, None in an optional: a bool is no int
        ok = isinstance(value, origin or tp) and (tp is bool or not isinstance(value, bool))
        if ok and tp is int and abs(value) > INT64_MAX:  # torch's integers, and every count here, fit in 64 bits
            raise NMTError(f"invalid value for '{key}': {value} is too large (at most {INT64_MAX:,}).", FIX_IN_CONFIG,
                           key.split("[")[0])
    if not ok:
        # a choice of values ('gru', 'lstm') is no type: 'rnn' is a str, as asked, but not one of them
        what = "invalid value" if origin is Literal else "wrong type"
        raise NMTError(
            f"{what} for '{key}': expected {type_name(tp)}, got {value!r} ({type(value).__name__}).",
            (origin is list and _as_list_hint(value, tp, key)) or _as_text_hint(value, tp, key) or FIX_IN_CONFIG,
            key.split("[")[0],  # an item of a list: the list's key
        )
    return value


def _as_text_hint(value: Any, tp: Any, key: str) -> str:
    """For a number or a boolean where text is expected (a Bible translation's code 4, the language code no), the
    hint that quotes it: YAML reads 4 as a number and "4" as text, no as false and "no" as text; else ""."""
    if tp is not str or not isinstance(value, int | float):
        return ""
    leaf = key.rsplit(".", 1)[-1]
    if isinstance(value, bool):  # Norwegian's code, no, among them
        word = "yes" if value else "no"
        return (f"YAML reads an unquoted yes, no, on, off, true or false as a boolean ({value}): quoted, it is text: "
                f"{leaf}: \"{word}\" in the config, --set '{key}=\"{word}\"' on the command line.")
    return (f'YAML reads {value!r} as a number: quoted, it is text: {leaf}: "{value}" in the config, '
            f"--set '{key}=\"{value}\"' on the command line.")


def _as_list_hint(value: Any, tp: Any, key: str) -> str:
    """For `value`, no list where the list type `tp` is expected: the hint that writes it as the list it reads as
    (10,20 is the text '10,20' in YAML, and 10 a number), if its items fit `tp`, else ""."""
    try:
        items = load_yaml(f"[{value}]") if isinstance(value, str) else [value]
    except yaml.YAMLError:
        return ""
    if not fits(items, tp):
        return ""
    written = yaml.safe_dump(items, default_flow_style=True).strip()
    # worded for a config file and a --set alike: translate, evaluate and score read no config of the user's
    return f"A list is written in brackets: {written}, quoted for the shell in a --set: --set '{key}={written}'."


def fits(value: Any, tp: Any) -> bool:
    """Whether `value` passes `check_type` for `tp`."""
    try:
        check_type(value, tp, "")
    except NMTError:
        return False
    return True


def did_you_mean(
    name: str, names: Sequence[str], prefix: str = "", other_names: Mapping[str, tuple[str, str]] | None = None
) -> str:
    """" (did you mean 'PREFIXx'?)" with the one of `names` nearest to `name`, or "" if none is near. A name of
    `other_names` (a name other tools give a key -> (the key that does its job here, what to know of it)) is
    answered with that key instead: a near spelling would be a different setting."""
    if other_names and name in other_names:
        key, note = other_names[name]
        return f" (did you mean '{key}'?{' ' + note if note else ''})"
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return f" (did you mean '{prefix}{close[0]}'?)" if close else ""


def unknown_key(
    key: str, valid: list[str], prefix: str, other_names: Mapping[str, tuple[str, str]] | None = None
) -> NMTError:
    """The error for an unknown key, with the nearest valid one (or its name in `other_names`) suggested."""
    return NMTError(
        f"unknown key '{prefix}{key}'{did_you_mean(key, valid, prefix, other_names)}.",
        f"Valid keys{' of ' + prefix.rstrip('.') if prefix else ''}: {', '.join(valid)}.",
        f"{prefix}{key}",
    )


# KEY:VALUE written without the space after the colon that makes YAML read a key (a URL's :// is no key)
_NO_SPACE = re.compile(r"([A-Za-z_][\w-]*):([^\s/]\S*)")


def missing_space(text: Any) -> str:
    """The hint for `text`, YAML's plain text where keys were expected, if it holds KEY:VALUE words (YAML reads
    `max_steps:5` as the text 'max_steps:5', and several such lines as one text), else ""."""
    words = text.split() if isinstance(text, str) else []
    pairs = [match for word in words if (match := _NO_SPACE.fullmatch(word))]
    if not pairs:
        return ""
    return "YAML needs a space after a key's colon: " + ", ".join(f"{m[1]}: {m[2]}" for m in pairs) + "."


def build_section(
    cls: type, raw: Any, name: str, validate: bool = True, other_names: Mapping[str, tuple[str, str]] | None = None
) -> Any:
    """The dataclass `cls` from the mapping `raw` of section `name`: keys known (an unknown one answered with
    `unknown_key`, `other_names` its names of other tools), types checked, then (unless not `validate`) the
    section's own `validate()`.

    Three optional class attributes: `SUBSECTIONS` names a dict field that holds, as plain data, the keys
    of `raw` that are no field and hold a mapping (sub-sections that a layer above types and checks;
    `section_dict` puts them back beside the fields); `moved_keys(raw)` returns {old key: new spelling}
    of keys that moved, refused all in one message; `check_raw(raw)` raises NMTError for a value whose
    type error would mislead (one that another command takes), before the types are checked."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise NMTError(f"section '{name}' must be a mapping of keys, got {raw!r}.", missing_space(raw), name)
    moved = cls.moved_keys(raw) if hasattr(cls, "moved_keys") else {}
    if moved:
        raise NMTError(
            "keys that have moved: " + "; ".join(f"'{name}.{old}' is now '{name}.{new}'" for old, new in moved.items()) + ".",
            "Spell them so in the config or in --set (each corpus source's keys sit in a sub-section named after it).",
        )
    if hasattr(cls, "check_raw"):
        cls.check_raw(raw)
    subsections = getattr(cls, "SUBSECTIONS", None)
    field_types = typing.get_type_hints(cls)  # the fields' types (ClassVars such as SUBSECTIONS are not keys)
    hints = {f.name: field_types[f.name] for f in dataclasses.fields(cls) if f.name != subsections}
    valid = list(hints)
    values: dict[str, Any] = {subsections: {}} if subsections else {}
    for key, value in raw.items():
        if key not in hints and subsections and isinstance(value, dict | None):
            values[subsections][str(key)] = copy.deepcopy(value or {})
            continue
        if key not in hints:
            error = unknown_key(str(key), valid, f"{name}.", other_names)
            # a sub-section written as one value (data.files: PATH) is read as an unknown key; a typo is not
            if subsections and not did_you_mean(str(key), valid, f"{name}.", other_names):
                error.hint += f" A sub-section of {name} holds keys: {key}: {{KEY: VALUE}}, not {value!r}."
            raise error
        values[key] = check_type(value, hints[key], f"{name}.{key}")
    section = cls(**values)
    if validate:
        section.validate()
    return section


def section_dict(section: Any) -> dict[str, Any]:
    """A section as the plain mapping `build_section` reads back: its fields, its sub-sections beside them."""
    raw = dataclasses.asdict(section)
    subsections = getattr(type(section), "SUBSECTIONS", None)
    if subsections:
        raw.update(raw.pop(subsections))
    return raw


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, but a key given twice in one mapping is an error: PyYAML would keep the
    last silently, so that a section written twice (two `training:`) loses the first's keys unsaid. Keys
    merged in with `<<: *anchor` may still be overridden, as YAML's merge key intends."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: PyYAML's own check refuses it
                    continue
                if first is not key_node.start_mark:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"'{key}' is given twice in one mapping (first on line {first.line + 1}); "
                        "only one can count", key_node.start_mark,
                    )
        return super().construct_mapping(node, deep)


# YAML 1.1 (PyYAML) reads 1e-3, 5E4 and 1.5e2 as text: its floats need a dot, and their exponents a sign. YAML 1.2
# and every other reader (and the user who writes learning_rate: 1e-3) take them as numbers.
_EXPONENT_NUMBER = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_NUMBER, list("-+0123456789."))


class _Dumper(yaml.SafeDumper):
    """yaml.safe_dump's, knowing the loader's exponents: the text 1e3 is written quoted, so that it reads back
    as text, not as the number 1000.0."""


_Dumper.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_NUMBER, list("-+0123456789."))


MAX_NESTING = 32  # levels of mappings and lists: a config has 3 or 4, and PyYAML's recursion gives out near 500


class NestingError(yaml.YAMLError):
    """A YAML document nesting deeper than MAX_NESTING, or holding itself (an alias inside its own anchor)."""


def load_yaml(text: str) -> Any:
    """yaml.safe_load, refusing a key given twice in one mapping (`_UniqueKeyLoader`) and a document that
    nests too deeply or holds itself (NestingError): each would end in a RecursionError in whatever walks it."""
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except RecursionError:
        raise NestingError(f"it nests too deeply to read (a config nests no more than {MAX_NESTING} levels)") from None
    if _levels(data, {}, set()) > MAX_NESTING:
        raise NestingError(f"it nests more than {MAX_NESTING} levels of mappings and lists (a config needs 3 or 4)")
    return data


def _levels(value: Any, known: dict[int, int], enclosing: set[int]) -> int:
    """How many levels of mappings and lists `value` nests, each shared one (an anchor's aliases) measured once
    (`known`, by id); NestingError where one holds itself (`enclosing`: the ids of those around `value`).
    Stops counting past MAX_NESTING, so that its own recursion stays shallow."""
    if not isinstance(value, dict | list):
        return 0
    if id(value) in enclosing:
        raise NestingError("an alias (*name) stands inside its own anchor (&name): the value would hold itself")
    if id(value) not in known:
        if len(enclosing) >= MAX_NESTING:
            return MAX_NESTING + 1
        enclosing.add(id(value))
        items = value.values() if isinstance(value, dict) else value
        known[id(value)] = 1 + max((_levels(item, known, enclosing) for item in items), default=0)
        enclosing.discard(id(value))
    return known[id(value)]


def dump_yaml(data: Any) -> str:
    """`data` as YAML that load_yaml reads back as it is (keys in their order, Unicode as written)."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file, turning a missing file or a syntax error into an NMTError."""
    path = Path(path)
    try:
        data = path.read_bytes()
        # Windows PowerShell saves UTF-16: without its mark, decoded as UTF-8 it is a NUL after every character
        refuse_foreign_encoding(data, str(path), str(path))
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise NMTError(
            f"config file not found: {path}", "Check the path (configs/quick.yaml is the example)."
        ) from None
    except IsADirectoryError:
        raise NMTError(f"{path} is a folder, not a config file.", "Give a YAML file, e.g. configs/quick.yaml.") from None
    except PermissionError:
        raise NMTError(f"config file {path} cannot be read: permission denied.", UNREADABLE) from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        column = exc.start - exc.object.rfind(b"\n", 0, exc.start)
        raise NMTError(
            f"{path}: not valid UTF-8 (line {line}, byte {column} of the line).", "Save the file as UTF-8."
        ) from None
    try:
        return load_yaml(text)
    except yaml.reader.ReaderError as exc:  # no mark: PyYAML says 'in "<unicode string>", position N'
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - text.rfind("\n", 0, exc.position)
        raise NMTError(
            f"{path}: line {line}, column {column} is not valid YAML: the character U+{exc.character:04X} "
            "(not printable) is not allowed in YAML.",
            "Remove it: a config is plain text (a file full of NUL bytes was damaged, by a crash say: restore it).",
        ) from None
    except NestingError as exc:
        raise NMTError(f"{path}: {exc}.", "Correct it there (configs/quick.yaml shows a config's few levels).") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        # PyYAML's context says where the construct it could not finish began, e.g. an unclosed bracket:
        # often the place to fix, since the problem mark is then at the end of the file.
        context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        started = ""
        if context and context_mark:
            line, column = context_mark.line + 1, context_mark.column + 1
            started = f" ({context} that starts at line {line}, column {column})"
        problem = getattr(exc, "problem", exc)
        # PyYAML's words for a tab, which it takes neither as indentation nor in an unquoted value
        tab = "character '\\t'" in str(problem)
        hint = "Replace the tab by spaces (YAML indents with spaces), or quote a value that holds one." if tab else ""
        if mark and str(problem) in ("could not find expected ':'", "mapping values are not allowed here"):
            # KEY:VALUE among keys is text to PyYAML, which fails at the next line's colon, or at the lack of one
            first = context_mark.line if context and context_mark else max(mark.line - 1, 0)
            lines = text.splitlines()[first : mark.line + 1]
            hint = next((f"{said[:-1]} (line {first + i + 1})." for i, row in enumerate(lines)
                         if (said := missing_space(row))), "")
        hint = hint or ("Correct it there: YAML is `key: value`, a section's keys indented under it with spaces "
                        "(configs/quick.yaml comments every key).")
        raise NMTError(f"{path}:{where} is not valid YAML: {problem}{started}.", hint) from None
    except ValueError as exc:  # Python's limit on an int's digits (4,300), which PyYAML meets converting one
        raise NMTError(f"{path}: a number too long to read ({str(exc).split(';')[0]}).", FIX_IN_CONFIG) from None


def key_line(path: str | Path, dotted: str) -> int | None:
    """The line of the YAML file `path` where the key `dotted` (section.key) is given: its value's, when that
    is plain text (the value a message refuses, maybe on the next line); None where the file gives no such key."""
    try:
        node = yaml.compose(Path(path).read_text(encoding="utf-8-sig"), Loader=_UniqueKeyLoader)
    except (OSError, ValueError, yaml.YAMLError):  # ValueError: UnicodeDecodeError
        return None
    line = None
    for key in dotted.split("."):
        if not isinstance(node, yaml.MappingNode):
            return None
        found = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key]
        if not found:
            return None
        key_node, node = found[0]
        line = (node if isinstance(node, yaml.ScalarNode) else key_node).start_mark.line + 1
    return line


# config_changes' value for a key one side lacks
ABSENT: Any = object()


def config_changes(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, value in `a`, value in `b`) for each key whose values differ between two nested config dicts,
    ABSENT for a side that lacks the key (a lacking key and None do not differ)."""
    changes = []
    for key in sorted(set(a) | set(b)):
        left, right = a.get(key), b.get(key)
        if isinstance(left, dict) and isinstance(right, dict):
            changes += config_changes(left, right, f"{prefix}{key}.")
        elif left != right:
            changes.append((f"{prefix}{key}", a.get(key, ABSENT), b.get(key, ABSENT)))
    return changes


def config_diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested config dicts (e.g. ['model.hidden_size'])."""
    return [key for key, _, _ in config_changes(a, b, prefix)]
