"""The command line's `--set section.key=value` overrides: parsed as YAML, applied to a config read from
YAML (every run that sets the key too, a run's own override last), and an error about a value that a
shorthand flag wrote (`--beam 3`) told against that flag.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from nmt.errors import NMTError
from nmt.typed_yaml import NestingError, did_you_mean, load_yaml


class FlagOverride(str):
    """A --set text that a command-line shorthand wrote (`--beam 3`: "decoding.beam_size=3"); `flag` is the
    shorthand as given ("--beam 3"), so that an error about the value can name what the user typed."""

    flag: str

    def __new__(cls, text: str, flag: str = "") -> FlagOverride:  # the default: pickle's copy sets flag after
        override = super().__new__(cls, text)
        override.flag = flag
        return override


def blame_flag(error: NMTError, overrides: Sequence[str]) -> NMTError:
    """`error`, or, if it refuses the value of a key that a shorthand flag set last among `overrides`, the
    same error naming that flag and telling to fix it there (the value is not in the config or a --set)."""
    if not error.key:
        return error
    keys = error.key.split(".")
    setting = next((text for text in reversed(overrides) if parse_override(text)[0] == keys), None)
    if not isinstance(setting, FlagOverride):
        return error
    name = setting.flag.split()[0]
    return NMTError(f"{setting.flag}: {error.message}", f"Fix the value of {name} on the command line "
                    f"({name} is short for --set {error.key}=...).", error.key)


def as_given(overrides: Sequence[str]) -> str:
    """`overrides` as the command line gave them: each a --set, or the shorthand flag that wrote it."""
    return " ".join(text.flag if isinstance(text, FlagOverride) else f"--set {text}" for text in overrides)


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split 'section.key=value' into (['section', 'key'], value parsed as YAML)."""
    if "=" not in text:
        raise NMTError(f"--set '{text}': expected section.key=value, e.g. --set model.hidden_size=256.")
    path, _, value_text = text.partition("=")
    keys = [k.strip() for k in path.strip().split(".")]
    if len(keys) < 2 or not all(keys):  # 'training..max_steps', '.x': a part left out, whichever was meant
        raise NMTError(f"--set '{text}': the key must name a section and a key, each part between dots named, "
                       "e.g. training.max_steps.")
    try:
        value = load_yaml(value_text) if value_text.strip() else ""
    except NestingError as exc:  # the value (hundreds of brackets) is not worth repeating
        raise NMTError(f"--set {path}=...: {exc}.") from None
    except yaml.YAMLError as exc:  # in one line: PyYAML's own text quotes the value in several, '<unicode string>' and all
        mark = getattr(exc, "problem_mark", None)
        where = "" if mark is None else f" at character {mark.column + 1}" + (f" of its line {mark.line + 1}" if mark.line else "")
        problem = str(getattr(exc, "problem", None) or exc).replace("'<stream end>'", "the end of the value")
        raise NMTError(f"--set '{text}': the value is not valid YAML{where}: {problem}.") from None
    except ValueError as exc:  # Python's limit on an int's digits, which PyYAML meets converting one
        raise NMTError(f"--set {path}=...: a number too long to read ({str(exc).split(';')[0]}).") from None
    return keys, value


def sets_key(overrides: Sequence[str], dotted: str) -> bool:
    """Whether any of `overrides` (--set texts, shorthands included) sets the key `dotted`, e.g.
    "decoding.nbest", or a key below it (decoding.nbest.x=1 makes its value a section); a text that is not an
    override raises NMTError as parse_override does."""
    keys = dotted.split(".")
    return any(parse_override(text)[0][: len(keys)] == keys for text in overrides)


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of `raw` with each 'a.b.c=value' override set (sections created as needed).

    The command line wins over the file: 'section.key=value' (or 'section.key.sub=value') also replaces
    that key in every `runs:` entry that sets it (`--set training.max_steps=100` shortens every run);
    'runs.NAME.section.key=value' changes one run only, and wins over 'section.key=value' whatever the
    order of the two: the general overrides are applied first, then the run-specific ones (each group in
    its order, the last one winning). NAME must be a run of `raw`: a misspelt one would otherwise add a run
    and leave the one meant unchanged.
    """
    raw = _unshared(raw) if raw else {}
    parsed = [(text, *parse_override(text)) for text in overrides]
    for text, keys, value in sorted(parsed, key=lambda override: override[1][0] == "runs"):  # stable: order kept
        if keys[0] == "runs":
            _check_run_name(text, keys[1], raw.get("runs"))
        node = raw
        for key in keys[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[keys[-1]] = value
        runs = raw.get("runs")
        if keys[0] != "runs" and isinstance(runs, dict):
            for entry in runs.values():
                _replace_if_set(entry, keys, value)
    return raw


def _unshared(value: Any) -> Any:
    """A copy of a YAML document in which no mapping or list appears twice: an anchor and its aliases load as one
    object (deepcopy keeps them one), and setting a key of one run would set it in every place that aliases it."""
    if isinstance(value, dict):
        return {key: _unshared(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unshared(item) for item in value]
    return value


def _replace_if_set(entry: Any, keys: list[str], value: Any) -> None:
    """Set `keys` (section, key[, sub-key...]) to `value` in the run entry `entry` where it sets that key."""
    for key in keys[:-1]:
        entry = entry.get(key) if isinstance(entry, dict) else None
    if isinstance(entry, dict) and keys[-1] in entry:
        entry[keys[-1]] = value


def _check_run_name(text: str, name: str, runs: Any) -> None:
    """Refuse the override `text` of run `name` unless `runs` (the config's runs: mapping) has that run."""
    names = [str(run) for run in runs] if isinstance(runs, dict) else []
    if name in names:
        return
    raise NMTError(
        f"--set {text}: the config has no run '{name}'{did_you_mean(name, names)}.",
        f"Its runs: {', '.join(names) or 'none'}. --set runs.NAME... changes a run the config defines; "
        "to add a run, write it under runs: in the config file.",
    )
