"""The `huggingface` source: `datasets.load_dataset(name, config, split=...)` per split, its keys in
data.huggingface.

`name` may be a hub name, a local dataset folder, or a builder such as 'json' / 'parquet' with
data.huggingface.train / valid / test as its data files. An empty *_split name is carved from train.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.config_sections import DataConfig
from nmt.data.corpus import (
    Source,
    SourceSettings,
    assemble,
    file_of_two_splits,
    record_pair,
    shared_sentences,
)
from nmt.data.file_faults import data_file_fault, record_place
from nmt.data.pairs import SPLITS, Corpus, Pair
from nmt.errors import NMTError, require

# How long a connection to the Hugging Face hub may take before the machine counts as offline.
HUB_PROBE_SECONDS = 3.0


_SPLIT_EXAMPLES = {"train": "train", "valid": "validation", "test": "test"}


@dataclass
class HuggingFaceSettings(SourceSettings):
    """data.huggingface: the dataset, its configuration, the name of each split ("" = carved from train)
    and, for a builder (json, parquet, csv, ...), each split's data files (a path or a glob)."""

    PATHS = ("train", "valid", "test")

    name: str = ""  # a hub name, a local dataset folder, or a builder such as json / parquet
    config: str = ""
    train_split: str = "train"
    valid_split: str = "validation"
    test_split: str = "test"
    train: str = ""
    valid: str = ""
    test: str = ""

    def validate(self) -> None:
        require(bool(self.name), "data.huggingface.name", "is required when data.source is 'huggingface'")
        require(bool(self.train_split), "data.huggingface.train_split", "must name the training split, e.g. train")
        named: dict[str, str] = {}  # split name -> the first role given it
        for role in self.PATHS:
            name, files = getattr(self, f"{role}_split"), getattr(self, role)
            # one split in two roles is the same sentences twice (test = valid, or test = train), and a
            # builder's files are keyed by split name: the later role's files would replace the earlier's
            require(name not in named, f"data.huggingface.{role}_split",
                    f"'{name}' is data.huggingface.{named.get(name)}_split too: one split cannot serve as both "
                    f"(give each its own name, or \"\" to carve {role} from train)")
            # a file with no split name to load it as would be left unread, the split carved from train instead
            require(bool(name) or not files, f"data.huggingface.{role}_split",
                    f'is "" (carved from train), but data.huggingface.{role} gives the file {files}: name the split '
                    f"(e.g. {_SPLIT_EXAMPLES[role]}) to read it, or leave data.huggingface.{role} empty")
            if name:
                named[name] = role

    def absolute(self) -> HuggingFaceSettings:
        """Its data files, and its name if it is a local path, absolute."""
        made = super().absolute()
        # a path gone since the data was prepared stays the path it was, not a setting changed
        is_path = _is_path(self.name) or os.path.exists(self.name)
        return dataclasses.replace(made, name=os.path.abspath(self.name)) if is_path else made


class HuggingFace(Source):
    """A dataset of the Hugging Face hub, a local dataset folder, or local files read by a builder."""

    Settings = HuggingFaceSettings
    settings: HuggingFaceSettings
    reads_folders = True

    def read(self) -> Corpus:
        # Short timeouts so an offline machine fails in seconds rather than retrying for minutes; before datasets
        # is imported (_is_builder imports it), since huggingface_hub reads them when it is
        os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")
        os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "5")
        own = self.settings
        names = {split: getattr(own, f"{split}_split") for split in SPLITS}
        # A packaged builder reads only the files it is given: every split it is asked for needs its files.
        for split, name in names.items():
            if name and not getattr(own, split) and _is_builder(own.name):
                carve = "" if split == "train" else (
                    f', or set data.huggingface.{split}_split: "" to carve {split} from train '
                    f"(data.{split}_fraction of its pairs)"
                )
                raise NMTError(
                    f"data.huggingface.{split}_split is '{name}', but data.huggingface.{split} gives the {own.name} "
                    "builder no file for it.",
                    f"Set data.huggingface.{split} to the split's file (a path or a glob){carve}.",
                )
        for split, name in names.items():
            if name and _is_builder(own.name):  # a dataset folder's files are found from that folder, by datasets
                _check_data_files(f"data.huggingface.{split}", getattr(own, split))
        _check_splits_apart({split: getattr(own, split) for split, name in names.items() if name})
        _check_hub_reachable(own.name)
        data_files = {name: getattr(own, split) for split, name in names.items() if name and getattr(own, split)}
        read = {
            split: _hf_split(self.config, own, split, name, data_files) if name else None for split, name in names.items()
        }
        return assemble(read, self.config)

    def name(self) -> str:
        return "hf-" + (Path(self.settings.name).name or "dataset")

    def label(self) -> str:
        return f"huggingface {self.settings.name}"

    def describe(self) -> str:
        own = self.settings
        files = "".join(f", {split} {getattr(own, split)}" for split in SPLITS if getattr(own, split))
        carved = "".join(
            f", {split} carved from train" for split in ("valid", "test") if not getattr(own, f"{split}_split")
        )
        return f"Hugging Face dataset {own.name}" + (f" ({own.config})" if own.config else "") + files + carved

    def inputs(self) -> list[Path]:
        """Its dataset folder and data files, paths or globs (a hub name, which is no path, stands for no file)."""
        own = self.settings
        return [Path(spec) for spec in (own.name, own.train, own.valid, own.test) if spec]


_LOCAL_DATA_HINT = (
    "Data on this machine works offline: data.source: files (text, .tsv or .jsonl files), or data.source: "
    "huggingface with data.huggingface.name a local dataset folder (save_to_disk or data files), or a builder "
    "such as json / parquet / csv with data.huggingface.train / valid / test naming its files."
)


def _is_builder(name: str) -> bool:
    """Whether `name` is one of datasets' packaged builders (json, parquet, csv, ...)."""
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    return name in _PACKAGED_DATASETS_MODULES


def _is_path(name: str) -> bool:
    """Whether `name` can only be a path: a hub name is NAME or OWNER/NAME, never /..., ./..., ~/... or A/B/C."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)


def _check_data_files(key: str, spec: str) -> None:
    """Refuse a builder's data files (`key`'s value, a path or a glob) that match nothing: datasets says
    only StopIteration for a glob that matches nothing. A URL (hf://, https://) is left to datasets."""
    if not spec or "://" in spec or glob.glob(spec, recursive=True):
        return
    what = "matches no file" if any(c in spec for c in "*?[") else "does not exist"
    where = "" if os.path.isabs(spec) else f" (looked for from the current folder, {os.getcwd()})"
    raise NMTError(f"{key} '{spec}' {what}{where}.", f"Set {key} to the split's data file(s): a path or a glob.")


def _check_splits_apart(specs: dict[str, str]) -> None:
    """Refuse a data file that two splits' paths or globs (`specs`, by split) both take in, as the files source
    does: the same sentences would be trained on and scored, or validate the checkpoints that the test then scores.
    A URL (hf://, https://) is left to datasets."""
    shared = file_of_two_splits({split: [Path(path) for path in sorted(glob.glob(spec, recursive=True))]
                                 for split, spec in specs.items() if spec and "://" not in spec})
    if shared is not None:
        path, other, split = shared
        raise NMTError(
            f"{path} is a data file of both the {other} and the {split} split (data.huggingface.{other} "
            f"'{specs[other]}', data.huggingface.{split} '{specs[split]}'): the same sentences would be "
            f"{shared_sentences(other, split)}.",
            f"Give the {split} split files of its own (a glob that leaves the other split's out), or set "
            f'data.huggingface.{split}_split: "" to carve it from train.',
            key=f"data.huggingface.{split}",
        )


def _check_hub_reachable(dataset: str) -> None:
    """Fail in seconds, not after the hub client's retries, when `dataset` needs the hub and it cannot be
    reached. Local folders, packaged builders (json, parquet, ...) and offline mode need no hub."""
    if _is_path(dataset) and not os.path.exists(dataset):
        # else it is taken for a hub name: "the hub cannot be reached" for a mistyped folder
        where = "" if os.path.isabs(os.path.expanduser(dataset)) else f" (looked for from the current folder, {os.getcwd()})"
        raise NMTError(
            f"data.huggingface.name '{dataset}' is a path, and nothing is there{where}.",
            "Give the folder of a local dataset (save_to_disk, or one holding its data files), or a hub name "
            "such as wmt14 or OWNER/NAME.",
        )
    offline = any(
        os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )
    if offline or os.path.exists(dataset) or _is_builder(dataset):
        return
    endpoint = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_SECONDS).close()
    except OSError as exc:
        raise NMTError(
            f"data.huggingface.name '{dataset}' is a Hugging Face hub dataset, but the hub ({host}:{port}) "
            f"cannot be reached from this machine ({exc.strerror or type(exc).__name__}).",
            "If the dataset is in the local Hugging Face cache, set HF_HUB_OFFLINE=1 (and HF_DATASETS_OFFLINE=1) "
            f"to use it from there. {_LOCAL_DATA_HINT}",
        ) from None


def _hf_split(
    config: DataConfig, own: HuggingFaceSettings, split: str, name: str, data_files: dict[str, str]
) -> list[Pair]:
    import datasets

    try:
        dataset = (_saved_split(own.name, split, name) if _saved_to_disk(own.name) else
                   datasets.load_dataset(own.name, own.config or None, split=name, data_files=data_files or None))
    except NMTError:
        raise
    except Exception as exc:  # datasets raises many types (connection, not found, offline, bad split)
        # datasets says only "Expected object or value" or a pyarrow error for a JSON Lines line it cannot read,
        # and "An error occurred while generating the dataset" for a later file with a field the first lacks
        files = _split_files(own, name, data_files)
        fault = data_file_fault(files, own.name)
        if fault:
            raise NMTError(*fault) from None
        text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        raise NMTError(
            f"could not load the {split} split '{name}' of Hugging Face dataset '{own.name}' ({text}).",
            "Check data.huggingface.name, data.huggingface.config and data.huggingface.*_split. Offline, HF_HUB_OFFLINE=1 uses datasets "
            f"already in the local Hugging Face cache. {_LOCAL_DATA_HINT}",
        ) from None

    def where(row: int) -> str:
        """Row `row` of the split, for an error message: its file and line (or record), where the files are known,
        so that the user can open the file at the record."""
        files = _split_files(own, name, data_files)
        if not files:
            return f"{own.name}[{name}] row {row}"
        key = f"data.huggingface.{split}" if _is_builder(own.name) else f"split '{name}' of {own.name}"
        return record_place(files, key, row, len(dataset))

    return [record_pair(record, config, functools.partial(where, i)) for i, record in enumerate(dataset)]


def _saved_to_disk(name: str) -> bool:
    """Whether `name` is a folder that datasets' save_to_disk wrote (a Dataset's state.json, a DatasetDict's
    dataset_dict.json), which load_dataset refuses: load_from_disk reads it."""
    return os.path.isfile(os.path.join(name, "state.json")) or os.path.isfile(os.path.join(name, "dataset_dict.json"))


def _saved_split(folder: str, split: str, name: str) -> Any:
    """Split `name` (the `split` role's) of a save_to_disk folder: a DatasetDict's split of that name, or a Dataset
    saved alone, which has no splits: the training data, valid and test then carved from it."""
    import datasets

    saved = datasets.load_from_disk(folder)
    if isinstance(saved, datasets.DatasetDict):
        if name not in saved:
            raise NMTError(f"data.huggingface.{split}_split '{name}': the dataset saved in {folder} has no such split "
                           f"(its splits: {', '.join(saved)}).", f"Name one of them, or \"\" to carve {split} from train.",
                           key=f"data.huggingface.{split}_split")
        return saved[name]
    if split != "train":
        raise NMTError(f"data.huggingface.{split}_split '{name}': {folder} holds one dataset saved alone "
                       "(save_to_disk of a Dataset), which has no splits: it is the training data.",
                       f'Set data.huggingface.{split}_split: "" to carve {split} from it (data.{split}_fraction).',
                       key=f"data.huggingface.{split}_split")
    return saved


def _split_files(own: HuggingFaceSettings, name: str, data_files: dict[str, str]) -> list[str]:
    """The local files datasets reads split `name` from: a builder's data files, or those it finds in a local
    dataset folder; none for a hub dataset, or where datasets cannot say."""
    if _is_builder(own.name):
        return sorted(glob.glob(data_files[name], recursive=True)) if name in data_files else []
    if not os.path.isdir(own.name):
        return []
    import datasets

    try:
        found = datasets.load_dataset_builder(own.name, own.config or None, data_files=data_files or None).config.data_files
    except Exception:  # the folder's own error is the one to report: this only adds where it is
        return []
    return [str(path) for path in (found or {}).get(name, [])]
