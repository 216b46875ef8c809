"""The `huggingface` source: `datasets.load_dataset(hf_name, hf_config, split=...)` per split.

`hf_name` may be a hub name, a local dataset folder, or a builder such as 'json' / 'parquet'
with data.train / valid / test as its data files. An empty hf_*_split name is carved from train.
"""

from __future__ import annotations

import glob
import os
import socket
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

from nmt.data.corpus import Source, assemble, record_pair
from nmt.data.pairs import SPLITS, Corpus, Pair
from nmt.errors import NMTError, require

if TYPE_CHECKING:
    from nmt.config_sections import DataConfig

# How long a connection to the Hugging Face hub may take before the machine counts as offline.
HUB_PROBE_SECONDS = 3.0


class HuggingFace(Source):
    """A dataset of the Hugging Face hub, a local dataset folder, or local files read by a builder."""

    reads_folders = True

    def read(self) -> Corpus:
        config = self.config
        names = {split: getattr(config, f"hf_{split}_split") for split in SPLITS}
        if not names["train"]:
            raise NMTError("data.hf_train_split is empty.", "Name the training split, e.g. train.")
        # A packaged builder reads only the files it is given: every split it is asked for needs data.<split>.
        for split, name in names.items():
            if name and not getattr(config, split) and _is_builder(config.hf_name):
                carve = "" if split == "train" else (
                    f', or set data.hf_{split}_split: "" to carve {split} from train (data.{split}_fraction of its pairs)'
                )
                raise NMTError(
                    f"data.hf_{split}_split is '{name}', but data.{split} gives the {config.hf_name} builder no file for it.",
                    f"Set data.{split} to the split's file (a path or a glob){carve}.",
                )
        _check_hub_reachable(config)
        # Short timeouts so an offline machine fails in seconds rather than retrying for minutes.
        os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")
        os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "5")
        data_files = {name: getattr(config, split) for split, name in names.items() if name and getattr(config, split)}
        read = {split: _hf_split(config, split, name, data_files) if name else None for split, name in names.items()}
        return assemble(read, config)

    def name(self) -> str:
        return "hf-" + (Path(self.config.hf_name).name or "dataset")

    def describe(self) -> str:
        config = self.config
        files = "".join(f", {split} {getattr(config, split)}" for split in SPLITS if getattr(config, split))
        carved = "".join(
            f", {split} carved from train" for split in ("valid", "test") if not getattr(config, f"hf_{split}_split")
        )
        return f"Hugging Face dataset {config.hf_name}" + (f" ({config.hf_config})" if config.hf_config else "") + files + carved

    def validate(self) -> None:
        require(bool(self.config.hf_name), "data.hf_name", "is required when data.source is 'huggingface'")

    def absolute_paths(self) -> dict[str, str]:
        """hf_name if it is a local path."""
        return {"hf_name": os.path.abspath(self.config.hf_name)} if os.path.exists(self.config.hf_name) else {}

    def inputs(self) -> list[Path]:
        """Its dataset folder and data files (globs expanded; a hub name, which is no path, gives nothing that exists)."""
        config = self.config
        specs = [spec for spec in (config.train, config.valid, config.test) if spec]
        return [Path(p) for spec in [config.hf_name, *specs] for p in (sorted(glob.glob(spec)) or [spec])]


_LOCAL_DATA_HINT = (
    "Data on this machine works offline: data.source: files (text, .tsv or .jsonl files), or data.source: "
    "huggingface with data.hf_name a local dataset folder (save_to_disk or data files), or a builder such "
    "as json / parquet / csv with data.train / valid / test naming its files."
)


def _is_builder(name: str) -> bool:
    """Whether `name` is one of datasets' packaged builders (json, parquet, csv, ...)."""
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    return name in _PACKAGED_DATASETS_MODULES


def _check_hub_reachable(config: DataConfig) -> None:
    """Fail in seconds, not after the hub client's retries, when `hf_name` needs the hub and it cannot be
    reached. Local folders, packaged builders (json, parquet, ...) and offline mode need no hub."""
    offline = any(
        os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )
    if offline or os.path.exists(config.hf_name) or _is_builder(config.hf_name):
        return
    endpoint = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_SECONDS).close()
    except OSError as exc:
        raise NMTError(
            f"data.hf_name '{config.hf_name}' is a Hugging Face hub dataset, but the hub ({host}:{port}) "
            f"cannot be reached from this machine ({exc.strerror or type(exc).__name__}).",
            "If the dataset is in the local Hugging Face cache, set HF_HUB_OFFLINE=1 (and HF_DATASETS_OFFLINE=1) "
            f"to use it from there. {_LOCAL_DATA_HINT}",
        ) from None


def _hf_split(config: DataConfig, split: str, name: str, data_files: dict[str, str]) -> list[Pair]:
    import datasets

    try:
        dataset = datasets.load_dataset(
            config.hf_name, config.hf_config or None, split=name, data_files=data_files or None
        )
    except Exception as exc:  # datasets raises many types (connection, not found, offline, bad split)
        text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        raise NMTError(
            f"could not load the {split} split '{name}' of Hugging Face dataset '{config.hf_name}' ({text}).",
            "Check data.hf_name, data.hf_config and data.hf_*_split. Offline, HF_HUB_OFFLINE=1 uses datasets "
            f"already in the local Hugging Face cache. {_LOCAL_DATA_HINT}",
        ) from None
    return [record_pair(record, config, f"{config.hf_name}[{name}] row {i}") for i, record in enumerate(dataset)]
