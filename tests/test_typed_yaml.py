"""nmt/typed_yaml.py on a section of its own (nothing of the toolkit's config): types checked naming the key,
unknown keys with the nearest one suggested, YAML errors with where they are, and differences between nested
dicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from nmt.cli import main
from nmt.errors import NMTError
from nmt.overrides import apply_overrides, parse_override
from nmt.typed_yaml import (
    ABSENT,
    build_section,
    check_type,
    config_changes,
    config_diff,
    dump_yaml,
    key_line,
    load_yaml,
    read_yaml,
    unknown_key,
)


@dataclass
class Section:
    size: int = 8
    rate: float = 0.5
    name: str = "x"
    flag: bool = False
    kind: Literal["a", "b"] = "a"
    sizes: list[int] = field(default_factory=lambda: [1, 2])
    limit: int | None = None

    def validate(self) -> None:
        if self.size < 1:
            raise NMTError(f"invalid value for 'part.size': {self.size} (at least 1).")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"size": "big"}, "wrong type for 'part.size': expected int, got 'big' (str)."),
        ({"size": True}, "wrong type for 'part.size': expected int, got True (bool)."),
        ({"size": 2.0}, "wrong type for 'part.size': expected int, got 2.0 (float)."),
        ({"rate": "fast"}, "wrong type for 'part.rate': expected float, got 'fast' (str)."),
        ({"flag": "yes"}, "wrong type for 'part.flag': expected bool, got 'yes' (str)."),
        # a value that is none of a choice's is no type error: 'c' is a str, as 'a' and 'b' are
        ({"kind": "c"}, "invalid value for 'part.kind': expected one of 'a', 'b', got 'c' (str)."),
        ({"sizes": [1, "x"]}, "wrong type for 'part.sizes[1]': expected int, got 'x' (str)."),
        ({"sizes": {"a": 1}}, "wrong type for 'part.sizes'"),
        ({"name": 5}, "wrong type for 'part.name': expected str, got 5 (int)."),
        ({"limit": "none"}, "wrong type for 'part.limit'"),
    ],
)
def test_a_wrong_type_is_refused_naming_the_key_the_type_and_the_value(raw: dict, message: str) -> None:
    with pytest.raises(NMTError) as error:
        build_section(Section, raw, "part")
    assert error.value.message.startswith(message)
    assert error.value.hint == ("Fix it in the config or with --set." if raw != {"name": 5} else
                                """YAML reads 5 as a number: quoted, it is text: name: "5" in the config, --set 'part.name="5"' on the command line.""")


def test_values_that_fit_are_kept_and_ints_become_floats() -> None:
    section = build_section(Section, {"size": 3, "rate": 1, "kind": "b", "sizes": [], "limit": 4}, "part")
    assert section == Section(size=3, rate=1.0, kind="b", sizes=[], limit=4)
    assert isinstance(section.rate, float)
    assert build_section(Section, None, "part") == Section()  # an empty section: every default
    assert build_section(Section, {"limit": None}, "part").limit is None
    assert check_type(7, float, "k") == 7.0 and isinstance(check_type(7, float, "k"), float)


@dataclass
class Loose:
    anything: Any = None
    items: list[Any] = field(default_factory=list)
    maybe: Any | None = None

    def validate(self) -> None:
        pass


def test_a_field_typed_any_takes_any_value() -> None:
    raw = {"anything": {"a": [1]}, "items": [1, "x", None], "maybe": 2.5}
    assert build_section(Loose, raw, "part") == Loose(anything={"a": [1]}, items=[1, "x", None], maybe=2.5)
    with pytest.raises(NMTError, match=r"wrong type for 'part.items': expected list"):
        build_section(Loose, {"items": "x"}, "part")  # the list around Any is still checked


def test_unknown_keys_suggest_the_nearest_and_list_the_valid_ones() -> None:
    with pytest.raises(NMTError) as error:
        build_section(Section, {"sise": 3}, "part")
    assert error.value.message == "unknown key 'part.sise' (did you mean 'part.size'?)."
    assert error.value.hint == "Valid keys of part: size, rate, name, flag, kind, sizes, limit."
    with pytest.raises(NMTError) as error:
        build_section(Section, {"zzzz": 1}, "part")
    assert error.value.message == "unknown key 'part.zzzz'."  # nothing close: no suggestion


def test_a_list_given_as_commas_or_one_item_gets_the_spelling_that_works() -> None:
    """`--set part.sizes=1,2` is the text '1,2' in YAML: its error says how a list is written, in the config and
    quoted in a --set; a value whose items would not fit the list's type keeps the plain hint."""
    for value, written in (("1,2", "[1, 2]"), ("1, 2", "[1, 2]"), (3, "[3]")):
        with pytest.raises(NMTError) as error:
            build_section(Section, apply_overrides({}, [f"part.sizes={value}"])["part"], "part")
        assert error.value.message.startswith("wrong type for 'part.sizes': expected list, got ")
        assert error.value.hint == (f"A list is written in brackets: {written}, quoted for the shell in a --set: "
                                    f"--set 'part.sizes={written}'.")
    for value in ("1,x", "[1", True, None):
        with pytest.raises(NMTError) as error:
            build_section(Section, {"sizes": value}, "part")
        assert error.value.hint == "Fix it in the config or with --set."


def test_unknown_keys_name_another_tools_spelling_with_its_key_here() -> None:
    """A name of `other_names` is answered with the key it maps to and its note, not with the nearest spelling."""
    other = {"epochs": ("part.size", "It counts steps"), "nm": ("other.name", "")}
    assert unknown_key("epochs", ["size"], "part.", other).message == (
        "unknown key 'part.epochs' (did you mean 'part.size'? It counts steps).")
    assert unknown_key("nm", ["name"], "part.", other).message == "unknown key 'part.nm' (did you mean 'other.name'?)."
    with pytest.raises(NMTError) as error:
        build_section(Section, {"epochs": 3}, "part", other_names=other)
    assert error.value.message.startswith("unknown key 'part.epochs' (did you mean 'part.size'?")
    assert error.value.key == "part.epochs"


def test_a_section_that_is_not_a_mapping_and_the_sections_own_validation() -> None:
    with pytest.raises(NMTError, match=r"section 'part' must be a mapping of keys, got \[1, 2\]"):
        build_section(Section, [1, 2], "part")
    with pytest.raises(NMTError, match=r"invalid value for 'part.size': 0"):
        build_section(Section, {"size": 0}, "part")


def test_keys_written_without_the_space_after_the_colon_get_the_spelling_that_works(tmp_path: Path) -> None:
    """`size:5` is text to YAML, not a key: as a whole section (one line or several, folded into one text) it is
    refused with the keys spelt with the space; among keys, the YAML error names its line with the same hint."""
    with pytest.raises(NMTError) as error:
        build_section(Section, "size:5", "part")
    assert error.value.message == "section 'part' must be a mapping of keys, got 'size:5'."
    assert error.value.hint == "YAML needs a space after a key's colon: size: 5."
    with pytest.raises(NMTError) as error:
        build_section(Section, "size:5 kind:b", "part")
    assert error.value.hint == "YAML needs a space after a key's colon: size: 5, kind: b."
    for text in ("just words", "http://example.org"):  # no KEY:VALUE: nothing to say
        with pytest.raises(NMTError) as error:
            build_section(Section, text, "part")
        assert error.value.hint == ""
    path = tmp_path / "c.yaml"
    path.write_text("part:\n  size: 5\n  kind:b\n", encoding="utf-8")  # PyYAML: "could not find expected ':'"
    with pytest.raises(NMTError) as error:
        read_yaml(path)
    assert error.value.message.startswith(f"{path}: line 4, column 1 is not valid YAML: could not find expected ':'")
    assert error.value.hint == "YAML needs a space after a key's colon: kind: b (line 3)."
    path.write_text("part:\n  size:5\n  kind: b\n", encoding="utf-8")  # "mapping values are not allowed here"
    with pytest.raises(NMTError) as error:
        read_yaml(path)
    assert error.value.hint == "YAML needs a space after a key's colon: size: 5 (line 2)."


def test_key_line_finds_where_the_file_gives_a_key(tmp_path: Path) -> None:
    """The line of a dotted key: its value's where that is text (maybe on the next line), else the key's own."""
    path = tmp_path / "c.yaml"
    path.write_text("# a comment\npart:\n  size: 5\n  sizes:\n    - 1\nother:\n  size:5\n", encoding="utf-8")
    assert key_line(path, "part.size") == 3
    assert key_line(path, "part.sizes") == 4 and key_line(path, "part") == 2
    assert key_line(path, "other") == 7  # the text 'size:5', where a mapping was meant
    assert key_line(path, "part.rate") is None and key_line(path, "other.size") is None
    assert key_line(tmp_path / "none.yaml", "part") is None


def test_read_yaml_says_where_the_file_is_wrong(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("a:\n  b: [1, 2]\n", encoding="utf-8")
    assert read_yaml(good) == {"a": {"b": [1, 2]}}
    with pytest.raises(NMTError, match=r"config file not found: .*missing\.yaml"):
        read_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a:\n  b: 1\n c: 2\n", encoding="utf-8")
    with pytest.raises(NMTError, match=r"bad\.yaml: line 3, column 2 is not valid YAML") as error:
        read_yaml(bad)
    assert error.value.hint.startswith("Correct it there: YAML is `key: value`")  # what to do, as every error says
    bad.write_bytes(b"a: 1\nb: \xff\n")
    with pytest.raises(NMTError, match=r"not valid UTF-8 \(line 2, byte 4 of the line\)"):
        read_yaml(bad)
    # a control character (a NUL-padded file) is placed by line and column, not by PyYAML's character offset
    bad.write_bytes(b"a: 1\nb: x\x00\n")
    with pytest.raises(NMTError) as error:
        read_yaml(bad)
    assert error.value.message == (
        f"{bad}: line 2, column 5 is not valid YAML: the character U+0000 (not printable) is not allowed in YAML."
    )
    assert "<unicode string>" not in str(error.value) and "NUL" in error.value.hint


def test_a_tab_in_a_config_is_placed_and_the_hint_says_to_indent_with_spaces(tmp_path: Path) -> None:
    """A tab where PyYAML refuses one (indentation, an unquoted value) is an error with its line and what to do,
    not PyYAML's words alone; a tab in a quoted value is read."""
    path = tmp_path / "config.yaml"
    path.write_text("training:\n  max_steps: 5\n\tseed: 2\n", encoding="utf-8")
    with pytest.raises(NMTError) as error:
        read_yaml(path)
    assert error.value.message == (
        f"{path}: line 3, column 1 is not valid YAML: found character '\\t' that cannot start any token."
    )
    assert error.value.hint == "Replace the tab by spaces (YAML indents with spaces), or quote a value that holds one."
    path.write_text('training:\n  name: "a\tb"\n', encoding="utf-8")
    assert read_yaml(path) == {"training": {"name": "a\tb"}}


def test_a_config_saved_as_utf16_is_named_so_with_the_command_that_converts_it(tmp_path: Path) -> None:
    """A config in UTF-16 (Windows PowerShell's `>`), with its byte-order mark or without one, is refused naming
    the encoding and the iconv command, not as bytes that are no UTF-8 or as NUL characters of a damaged file."""
    path = tmp_path / "config.yaml"
    for encoding in ("utf-16", "utf-16-le"):
        path.write_bytes("training:\n  max_steps: 5\n".encode(encoding))
        with pytest.raises(NMTError) as error:
            read_yaml(path)
        assert error.value.message.startswith(f"{path} is UTF-16")
        assert "iconv -f UTF-16" in error.value.hint and "NUL" not in error.value.hint
    path.write_bytes("training:\r\n  max_steps: 5\r\n".encode("utf-8-sig"))  # UTF-8, its mark and CRLF: read
    assert read_yaml(path) == {"training": {"max_steps": 5}}


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # PyYAML keeps the last silently: a second `training:` would drop the first's keys unsaid
    twice = tmp_path / "twice.yaml"
    twice.write_text("training:\n  max_steps: 3\ntraining:\n  seed: 2\n", encoding="utf-8")
    with pytest.raises(NMTError, match=r"twice\.yaml: line 3, column 1 is not valid YAML: 'training' is given "
                       r"twice in one mapping \(first on line 1\)"):
        read_yaml(twice)
    twice.write_text("training: {max_steps: 3, max_steps: 4}\n", encoding="utf-8")
    with pytest.raises(NMTError, match=r"line 1, column 26 .*'max_steps' is given twice"):
        read_yaml(twice)
    with pytest.raises(NMTError, match=r"--set 'a.b=\{c: 1, c: 2\}': the value is not valid YAML at character 8: 'c' is given twice"):
        parse_override("a.b={c: 1, c: 2}")
    # a merge key's values may still be overridden, as configs/transformer.yaml does
    merged = tmp_path / "merged.yaml"
    merged.write_text("a: &x {b: 1, c: 2}\nd: {<<: *x, c: 3}\n", encoding="utf-8")
    assert read_yaml(merged) == {"a": {"b": 1, "c": 2}, "d": {"b": 1, "c": 3}}
    # from the command line: exit status 2, no traceback, nothing trained
    twice.write_text("training:\n  max_steps: 3\ntraining:\n  seed: 2\n", encoding="utf-8")
    assert main(["train", str(twice), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nmt train: error: {twice}: line 3, column 1 is not valid YAML: 'training' is given twice")
    assert "Traceback" not in err and not (tmp_path / "run").exists()


def test_config_diff_names_the_dotted_keys_that_differ() -> None:
    a = {"model": {"size": 8, "kind": "a"}, "training": {"steps": 2}, "runs": {}}
    b = {"model": {"size": 16, "kind": "a"}, "training": {"steps": 2, "seed": 1}, "data": {"dir": "d"}, "runs": {}}
    assert config_diff(a, b) == ["data", "model.size", "training.seed"]
    assert config_diff(a, a) == [] and config_diff({"x": [1, 2]}, {"x": [1, 3]}) == ["x"]


def test_config_changes_gives_each_differing_key_with_its_two_values() -> None:
    """The keys of config_diff, each with its old and new value: ABSENT where one side lacks the key (a whole
    section on one side only is one change), and a lacking key is no change from None."""
    a = {"model": {"size": 8, "kind": "a"}, "bible": {"src": "k"}, "seed": None}
    b = {"model": {"size": 16, "kind": "a"}, "files": {"train": "t"}}
    assert config_changes(a, b, "x.") == [
        ("x.bible", {"src": "k"}, ABSENT), ("x.files", ABSENT, {"train": "t"}), ("x.model.size", 8, 16)]
    assert [key for key, _, _ in config_changes(a, b, "x.")] == config_diff(a, b, "x.")


def test_an_exponent_without_a_dot_or_a_sign_is_a_number_as_in_yaml_1_2(tmp_path: Path) -> None:
    # PyYAML read learning_rate: 1e-3 and max_minutes: 1.5e2 as text: "wrong type ... expected float, got '1e-3' (str)"
    assert parse_override("training.learning_rate=1e-3") == (["training", "learning_rate"], 0.001)
    assert parse_override("a.b=[1E5, -2e+4, 1.5e-3]") == (["a", "b"], [100000.0, -20000.0, 0.0015])
    assert parse_override("a.b=[1.5e2, 2.E3, .5e1, -1_0.5e1]") == (["a", "b"], [150.0, 2000.0, 5.0, -105.0])
    assert parse_override("a.b=1e") == (["a", "b"], "1e") and parse_override("a.b=e5") == (["a", "b"], "e5")
    assert parse_override("a.b=1.5e") == (["a", "b"], "1.5e") and parse_override("a.b=.e5") == (["a", "b"], ".e5")
    assert load_yaml(dump_yaml({"a": "1.5e2"})) == {"a": "1.5e2"}  # the text, written quoted
    path = tmp_path / "rates.yaml"
    path.write_text("training:\n  learning_rate: 5e-4\n  max_steps: 1e3\n", encoding="utf-8")
    assert read_yaml(path) == {"training": {"learning_rate": 0.0005, "max_steps": 1000.0}}
    assert build_section(Section, {"rate": read_yaml(path)["training"]["learning_rate"]}, "s").rate == 0.0005
    with pytest.raises(NMTError, match=r"wrong type for 's.size': expected int, got 1000.0 \(float\)"):
        build_section(Section, {"size": read_yaml(path)["training"]["max_steps"]}, "s")
