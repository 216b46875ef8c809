"""The corpus sources by their data.source name (one module each, behind `nmt.data.corpus.Source`), and
everything about a data section that needs its source: typing and checking the source's own keys, the
prepared-data folder derived from them, and the section with absolute paths.

Why here and not in the config layer: a section of the config is plain data (nmt/config_sections.py
keeps each source's sub-section data.NAME as the YAML gave it), so the config layer imports nothing of
nmt.data; a source declares its own keys (its `Settings` dataclass, with their defaults and `validate`)
and this module reads data.NAME into them with typed_yaml's build_section when the source is built.
A command loads its config with `load_checked_config`, which checks the whole data section before any work
starts (`check_config`, with the same messages a
config key gets: unknown keys named data.NAME.KEY with the closest one suggested).

A new source is a module here (its Source subclass and Settings) and one line in SOURCES; its fetch,
cache and sha256 checks can use nmt/data/fetch.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from nmt.config import Config, error_in_run, load_config, placed
from nmt.config_sections import OTHER_TOOLKIT_KEYS, DataConfig
from nmt.data.corpus import Source
from nmt.data.sources.bible import Bible
from nmt.data.sources.files import Files
from nmt.data.sources.huggingface import HuggingFace
from nmt.errors import NMTError
from nmt.typed_yaml import build_section, config_diff, did_you_mean

SOURCES: dict[str, type[Source]] = {"bible": Bible, "files": Files, "huggingface": HuggingFace}


def source_settings(data: DataConfig, name: str, validate: bool = True) -> Any:
    """The typed settings of source `name` from its sub-section data.NAME (defaults if absent), their
    values checked by its `validate` unless not `validate`."""
    return build_section(SOURCES[name].Settings, data.sources.get(name), f"data.{name}", validate)


def corpus_source(data: DataConfig) -> Source:
    """The source named by data.source, reading its sub-section; NMTError naming the key it refuses."""
    if data.source not in SOURCES:
        raise NMTError(
            f"invalid value for 'data.source': {data.source!r} is not a corpus source{did_you_mean(data.source, list(SOURCES))}.",
            f"Expected one of {', '.join(SOURCES)} (nmt/data/sources/).",
            "data.source",
        )
    return SOURCES[data.source](data, source_settings(data, data.source))


def check_data(data: DataConfig) -> None:
    """Check data.source and its sub-section, and every other source sub-section the section holds (a
    config may carry the keys of several sources, as quick.yaml lists them, or for runs that switch
    data.source): each must name a source and hold its keys with values of their types; only data.source's
    values must also be complete (a files corpus needs data.files.train, a bible one does not)."""
    corpus_source(data)
    for name in data.sources:
        if name not in SOURCES:
            raise NMTError(
                f"unknown key 'data.{name}'{did_you_mean(name, list(SOURCES), other_names=OTHER_TOOLKIT_KEYS)}: "
                "not a key of data nor a corpus source.",
                f"Each source's keys sit under its name: {', '.join(f'data.{s}' for s in SOURCES)}.",
                f"data.{name}",
            )
        source_settings(data, name, validate=False)


def load_checked_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """A command's config: nmt.config.load_config (every section typed and checked), then its data
    section and each run's checked against their sources (check_config), before any work starts."""
    config = load_config(path, overrides)
    try:
        check_config(config)
    except NMTError as error:
        raise placed(error, path, overrides or []) from None
    return config


def check_config(config: Config) -> None:
    """Check the data section of `config` and of each of its runs, as loading a command's config does,
    before any work starts; and that no two runs prepare their data differently into one data.dir."""
    check_data(config.data)
    for name in config.runs:
        try:
            check_data(config.for_run(name).data)
        except NMTError as error:
            raise error_in_run(error, name, config.runs[name]) from None
    _check_shared_data_dirs(config)


def _check_shared_data_dirs(config: Config) -> None:
    """Refuse runs that prepare their data differently (a run's data.* keys) into one data.dir, whichever of them a
    command trains: each would rebuild the folder for itself, and the other would train or be evaluated on data not
    made for it."""
    shared = sharing_one_data_dir({name: config.for_run(name).data for name in config.runs})
    if shared is not None:
        other, name, folder, differing = shared
        raise NMTError(
            f"runs '{other}' and '{name}' prepare their data differently ({', '.join(differing)}) into the one "
            f"data.dir {folder}: each would rebuild it for itself, under the other run. Nothing was written.",
            f"Give run '{name}' a folder of its own (runs.{name}.data.dir), or leave data.dir out: each data "
            "setting then gets its own folder under data/prepared/.",
        )


def sharing_one_data_dir(sections: dict[str, DataConfig]) -> tuple[str, str, str, list[str]] | None:
    """The first two of the runs' data `sections` (by run name) that prepare their data differently into one
    data.dir: (one run, the other, the folder, the keys that differ); None where there are none."""
    first: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, data in sections.items():
        folder, settings = os.path.abspath(prepared_dir(data)), content_settings(data)
        other, theirs = first.setdefault(folder, (name, settings))
        differing = config_diff(theirs, settings, "data.")
        if differing:
            return other, name, folder, differing
    return None


def _with_absolute_paths(data: DataConfig) -> DataConfig:
    """The section with data.cache_dir and the paths of data.source's settings absolute, that sub-section
    alone kept, every key given; data.dir as it is."""
    settings = dataclasses.asdict(corpus_source(data).settings.absolute())
    cache_dir = os.path.abspath(data.cache_dir) if data.cache_dir else ""
    return dataclasses.replace(data, cache_dir=cache_dir, sources={data.source: settings})


def content_settings(data: DataConfig) -> dict[str, Any]:
    """Every key that changes the prepared data, paths absolute: the shared keys but data.dir and cache_dir
    (which say where things are kept, not what is in them), and the settings of data.source alone, every
    key given (prepared_dir's hash, nmt prepare's fingerprint)."""
    made = dataclasses.asdict(_with_absolute_paths(data))
    settings = made.pop("sources")
    return {**{key: value for key, value in made.items() if key not in ("dir", "cache_dir")}, **settings}


def prepared_dir(data: DataConfig) -> str:
    """data.dir, or when it is "" data/prepared/NAME-HASH: NAME says the corpus (bible-k-l, files-<train
    file>, hf-<dataset>), HASH covers every key that changes the prepared data (content_settings), so that
    two corpora, or one corpus prepared two ways, never share a folder."""
    if data.dir:
        return data.dir
    settings = json.dumps(content_settings(data), sort_keys=True)
    digest = hashlib.sha256(settings.encode("utf-8")).hexdigest()[:8]
    return f"data/prepared/{re.sub(r'[^A-Za-z0-9._-]+', '_', corpus_source(data).name())}-{digest}"


def absolute(data: DataConfig) -> DataConfig:
    """The section as a run's config.yaml records it: data.dir (derived if it was "") and every path
    absolute (against the working directory), so that the run finds its data from any folder; the
    sub-section of data.source alone, every key given."""
    return dataclasses.replace(_with_absolute_paths(data), dir=os.path.abspath(prepared_dir(data)))
