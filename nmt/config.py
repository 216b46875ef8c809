"""Configuration: YAML -> one validated dataclass per section -> the rest of the toolkit.

The sections, each key's default and valid values, are in nmt/config_sections.py; reading them typed
(unknown keys refused with the nearest one suggested) is nmt/typed_yaml.py, `--set` is nmt/overrides.py.
This module assembles them into a `Config`, its runs, and its file.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nmt.config_sections import (
    OTHER_TOOLKIT_KEYS,
    DataConfig,
    DecodingConfig,
    EvaluationConfig,
    ModelConfig,
    TrainingConfig,
    migrate_data_keys,
)
from nmt.errors import FIX_IN_CONFIG, NMTError, require
from nmt.fileio import atomic_write_text
from nmt.overrides import apply_overrides, as_given, blame_flag, parse_override, sets_key
from nmt.typed_yaml import (
    build_section,
    did_you_mean,
    dump_yaml,
    key_line,
    missing_space,
    read_yaml,
    section_dict,
    unknown_key,
)

SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "training": TrainingConfig,
    "decoding": DecodingConfig,
    "evaluation": EvaluationConfig,
}

# each section's keys -> the section (a key given at the top level was meant under it)
_SECTION_OF = {
    f.name: name
    for name, cls in SECTIONS.items()
    for f in dataclasses.fields(cls)
    if f.name != getattr(cls, "SUBSECTIONS", None)
}


@dataclass
class Config:
    """A whole configuration. `runs` names the runs of an experiment: name -> section overrides."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict, the inverse of `config_from_dict`."""
        return {**{name: section_dict(getattr(self, name)) for name in SECTIONS}, "runs": copy.deepcopy(self.runs)}

    def only_runs(self, names: Sequence[str], source: str) -> Config:
        """This config with only the runs `names`, in that order; NMTError naming any that `source`, the
        config file, does not define."""
        unknown = [name for name in names if name not in self.runs]
        if unknown:
            raise NMTError(f"--runs {' '.join(unknown)}: not a run of {source}{did_you_mean(unknown[0], list(self.runs))}.",
                           f"Its runs: {', '.join(self.runs)}.")
        return dataclasses.replace(self, runs={name: self.runs[name] for name in names})

    def for_run(self, name: str) -> Config:
        """The configuration of one experiment run: this one with the run's overrides applied."""
        if name not in self.runs:
            raise NMTError(f"unknown run '{name}'{did_you_mean(name, list(self.runs))}.",
                           f"The config defines: {', '.join(self.runs) or 'no runs'}.")
        raw = self.to_dict()
        raw["runs"] = {}
        overrides = {} if self.runs[name] is None else self.runs[name]  # `name:` alone: the top level's settings
        if not isinstance(overrides, dict):  # [], 0, "" or false: no run's settings
            raise NMTError(f"runs.{name} must be a mapping of sections, got {overrides!r} ({type(overrides).__name__}).",
                           "Give the run's settings by section, e.g. runs: {" + name + ": {model: {attention: none}}}, "
                           f"or `{name}:` alone for the top level's settings.", key=f"runs.{name}")
        for section, values in overrides.items():
            if section not in SECTIONS or not isinstance(values, dict):
                raise NMTError(
                    f"runs.{name}.{section}: expected one of the sections {', '.join(SECTIONS)} holding a mapping "
                    f"of keys{did_you_mean(str(section), list(SECTIONS)) if section not in SECTIONS else ''}.",
                    key=f"runs.{name}.{section}",
                )
            for key, value in values.items():  # a source's sub-section (data.files: {...}) is merged key by key
                both = isinstance(value, dict) and isinstance(raw[section].get(key), dict)
                raw[section][key] = {**raw[section][key], **value} if both else value
        try:
            return config_from_dict(raw, f"runs.{name}")
        except NMTError as error:
            raise error_in_run(error, name, overrides) from None


_SECTION_KEY = re.compile(r"'((?:" + "|".join(SECTIONS) + r")\.[^']+)'")


def error_in_run(error: NMTError, name: str, overrides: dict[str, Any]) -> NMTError:
    """`error` about the config of run `name` (its section `overrides` applied): each key it quotes is named
    runs.NAME.section.key but the refused key where the run only inherits it from its top-level section (a message
    naming no key of the run starts with runs.NAME), and the key refused is placed where the file gives it."""
    inherited = error.key if error.key and not _gives(overrides, error.key.split(".")) else ""

    def named(match: re.Match[str]) -> str:  # the refused key of the top level's, which the run does not set: as it is
        return match.group(0) if match.group(1) == inherited else f"'runs.{name}.{match.group(1)}'"

    message = _SECTION_KEY.sub(named, error.message)
    if message == error.message:
        message = f"runs.{name}: {message}"
    key = f"runs.{name}.{error.key}" if error.key and not inherited else error.key
    return NMTError(message, f"{error.hint} (runs.{name} applies its keys over the top-level sections.)".strip(), key)


def _gives(mapping: Any, keys: list[str]) -> bool:
    """Whether the nested mapping holds the key path `keys` (["training", "max_steps"])."""
    for key in keys:
        if not isinstance(mapping, dict) or key not in mapping:
            return False
        mapping = mapping[key]
    return True


def config_from_dict(raw: Any, source: str = "config") -> Config:
    """Validate a nested dict (as read from YAML) into a Config. Raises NMTError naming the key."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise NMTError(f"{source}: the top level must be a mapping of sections, got {type(raw).__name__}.")
    valid = [*SECTIONS, "runs"]
    for key in raw:
        if key in _SECTION_OF:
            section = _SECTION_OF[key]
            raise NMTError(
                f"unknown key '{key}': a key of the {section} section, not a section "
                f"(did you mean '{section}.{key}'?).",
                f"Indent it under {section}: with spaces, as the section's other keys.",
                key,
            )
        if key not in valid:
            raise unknown_key(str(key), valid, "", OTHER_TOOLKIT_KEYS)
    runs = {} if raw.get("runs") is None else raw["runs"]  # `runs:` alone is none; `runs: []` a mistake
    if not isinstance(runs, dict):
        raise NMTError(
            f"'runs' must map run names to section overrides, e.g. rnnsearch: {{model: {{attention: additive}}}}; "
            f"got {runs!r} ({type(runs).__name__}).", FIX_IN_CONFIG, "runs",
        )
    for run_name in runs:
        _check_run_name(run_name)
    config = Config(
        **{name: _build_section(name, raw.get(name)) for name in SECTIONS},
        runs=copy.deepcopy(runs),
    )
    require(config.data.joint_vocab or not config.model.share_embeddings, "model.share_embeddings",
            "needs data.joint_vocab: true (one sentencepiece vocabulary, so that an id is one piece on both sides)")
    for run_name in runs:  # each run must itself be a valid configuration
        config.for_run(run_name)
    return config


def _build_section(name: str, raw: Any) -> Any:
    """Section `name` from `raw` (build_section); a key of another section given in it is refused naming
    that section, where the nearest spelling among its own keys would be another setting. A name of
    OTHER_TOOLKIT_KEYS keeps its answer, which names the key of each section it could mean."""
    for key in raw if isinstance(raw, dict) else ():
        home = _SECTION_OF.get(key)
        if home not in (None, name) and key not in OTHER_TOOLKIT_KEYS:
            raise NMTError(
                f"unknown key '{name}.{key}': a key of the {home} section (did you mean '{home}.{key}'?).",
                f"Give it in the {home} section: each section takes only its own keys.",
                f"{name}.{key}",
            )
    return build_section(SECTIONS[name], raw, name, other_names=OTHER_TOOLKIT_KEYS)


def _check_run_name(name: Any) -> None:
    """Refuse a run name that cannot name its folder and files (OUT/runs/NAME, NAME.hyp.txt, NAME.log):
    `..` or `a/b` would put a run's files over the experiment's own, and a number is no path part."""
    if not isinstance(name, str):
        raise NMTError(
            f"runs: a run's name must be text, not {name!r} ({type(name).__name__}).",
            "Name each run with letters, digits, '-' and '_' (quote a number: '50': {...}).",
        )
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise NMTError(
            f"runs: '{name}' cannot name a run: it is also the name of the run's folder (runs/{name}) and files.",
            "Use letters, digits, '-' and '_', not starting with '.'.",
        )
    if "." in name:  # --set runs.NAME.section.key=value splits the key at its dots
        raise NMTError(f"runs: '{name}' cannot name a run: --set runs.{name}.training.max_steps=... would read "
                       f"the run's name as '{name.split('.')[0]}'.", "Use letters, digits, '-' and '_'.")


def override_sections(config: Config, overrides: list[str], sections: tuple[str, ...], command: str) -> Config:
    """`config` with the `--set` overrides of a command that may change only `sections`, validated."""
    _refuse_other_sections(overrides, sections, command)
    try:
        return config_from_dict(apply_overrides(config.to_dict(), overrides), "--set")
    except NMTError as error:
        raise _blame_command_line(error, overrides) from None


def override_section(section: str, overrides: list[str], command: str) -> Any:
    """The defaults of `section` with the `--set` overrides of a command that may change only it, validated
    alone: `nmt score` has no model section to check, and the model's check imports torch."""
    _refuse_other_sections(overrides, (section,), command)
    try:
        return _build_section(section, apply_overrides({}, overrides).get(section))
    except NMTError as error:
        raise _blame_command_line(error, overrides) from None


def _blame_command_line(error: NMTError, overrides: list[str]) -> NMTError:
    """`blame_flag`'s error, told to fix the value on the command line rather than "in the config": the commands
    that take overrides alone (translate, evaluate, score) read no config of the user's; a run's config.yaml
    records how the run was trained, and is not to be edited."""
    error = blame_flag(error, overrides)
    if error.hint != FIX_IN_CONFIG:  # a shorthand flag's hint, or an error's own
        return error
    if any(parse_override(text)[0] == error.key.split(".") for text in overrides):
        hint = f"Fix the value of --set {error.key} on the command line."
    else:  # refused beside another key's new value (decoding.nbest above a lowered beam_size)
        hint = f"Give it a value that fits on the command line: --set {error.key}=..."
    return NMTError(error.message, hint, error.key)


def _refuse_other_sections(overrides: list[str], sections: tuple[str, ...], command: str) -> None:
    """NMTError for the first of `overrides` that sets a key outside `sections`, saying why `command` refuses it."""
    for text in overrides:
        keys, _ = parse_override(text)
        if keys[0] not in sections:
            allowed = " or ".join(f"{section}.*" for section in sections)
            if keys[0] == "evaluation":  # nmt translate: it writes translations and scores nothing
                why = "evaluation.* settings say how translations are scored, and it scores none"
                hint = f"Score a run's translations with them: nmt evaluate RUN_DIR --set {text}."
            elif keys[0] == "runs" and len(keys) > 3 and keys[2] in sections:
                # a config's runs.NAME.section.key: here there is no config, and --set sets section.key itself
                own = f"{'.'.join(keys[2:])}={text.partition('=')[2]}"
                why = "runs.* keys set one run of a config, and here " + (
                    "--set overrides RUN_DIR's own settings" if "decoding" in sections else "there is none")
                hint = f"Use --set {own}."
            elif "decoding" in sections:  # a command that decodes with a trained run: the rest came with it
                why = f"{keys[0]}.* settings are fixed when a run is trained"
                hint = "Train a new run with `nmt train CONFIG --set ...` to change them."
            else:  # nmt score: it reads translations from files and runs no model
                make = f"nmt translate RUN_DIR --set {text}" if keys[0] == "decoding" else f"nmt train CONFIG --set {text}"
                why = "it scores translation files and runs no model"
                hint = f"Make the translations with that setting ({make}), then score them."
            raise NMTError(f"--set {text}: {command} takes only {allowed} keys; {why}.", hint)


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Load a YAML config, apply `--set` overrides, and validate it."""
    raw = read_yaml(path)
    if raw is None:
        print(f"note: {path} is empty: every setting is its default (the Bible corpus, quick.yaml's recipe: "
              "nmt/config_sections.py lists them).", file=sys.stderr)
    elif not isinstance(raw, dict):
        raise NMTError(f"{path}: the top level must be a mapping of sections (data, model, ...).", missing_space(raw))
    try:
        return config_from_dict(apply_overrides(raw or {}, overrides or []), str(path))
    except NMTError as error:
        if error.message.startswith(str(path)):
            raise
        raise placed(error, path, overrides or []) from None


def placed(error: NMTError, path: str | Path, overrides: list[str]) -> NMTError:
    """`error` from checking the config file `path` with `overrides`, naming the file, the line of the key it
    refuses (where the file gives it, not where a --set or flag replaced its value) and the --set given."""
    error = blame_flag(error, overrides)
    line = key_line(path, error.key) if error.key and not sets_key(overrides, error.key) else None
    place = f"{path}, line {line}" if line else str(path)
    if error.message.startswith("--") or not overrides:  # it names the --set or flag itself
        where = place
    else:
        where = f"{place} (with {as_given(overrides)})"
    return NMTError(f"{where}: {error.message}", error.hint, error.key)


def load_saved_config(path: str | Path) -> Config:
    """A run directory's own config.yaml (written by training, never a user's config): one written before
    each corpus source's keys moved into its sub-section is migrated as it is read, so old runs still
    translate and evaluate; a user's config with the old keys is refused instead (load_config)."""
    raw = read_yaml(path)
    if isinstance(raw, dict) and isinstance(raw.get("data"), dict):
        raw = {**raw, "data": migrate_data_keys(raw["data"])}
    try:
        return config_from_dict(raw, str(path))
    except NMTError as error:  # no --set mends it: the commands that read a run refuse its training's keys
        line = key_line(path, error.key) if error.key else None
        message = error.message.removeprefix(f"{path}: ")
        raise NMTError(f"{path}{f', line {line}' if line else ''}: {message}",
                       "A run's config.yaml is written by its training and read as it is: undo the edit that broke "
                       "it, or train the run again.") from None


def save_config(config: Config, path: str | Path) -> None:
    """Write the resolved config as YAML; `load_config` reads it back unchanged."""
    atomic_write_text(path, dump_yaml(config.to_dict()))
