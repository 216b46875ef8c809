"""RUN_DIR/hyps/: the cache of a run's translations of a test set.

A cache file is keyed by the checkpoint file (name, size, mtime), the exact source text, the kind of
device (a GPU's floats differ from a CPU's in the last digits, enough to change a search's choice) and every
decoding setting that changes the output, so re-running an evaluation (another bucketing, another run
added) re-uses the translations instead of translating again. The file records the sha256 of its
translations beside the key: one edited since (a line blanked) is translated again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nmt.fileio import atomic_write_text

HYPS_DIR = "hyps"
CACHE_VERSION = 1


def cache_key(checkpoint: Path, sources: Sequence[str], decoding: dict[str, Any], device: str) -> dict[str, Any]:
    """What a cached translation depends on (`device`: the device type translating, cpu or cuda); its sha256
    names the cache file."""
    stat = checkpoint.stat()
    return {
        "version": CACHE_VERSION,
        "checkpoint": checkpoint.name,
        "checkpoint_size": stat.st_size,
        "checkpoint_mtime_ns": stat.st_mtime_ns,
        "source_sha256": hashlib.sha256("\n".join(sources).encode("utf-8")).hexdigest(),
        "n_sentences": len(sources),
        "decoding": decoding,
        "device": device,
    }


def cache_path(run_dir: Path, key: dict[str, Any]) -> Path:
    """RUN_DIR/hyps/<first 20 hex digits of the key's sha256>.json"""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()
    return run_dir / HYPS_DIR / f"{digest[:20]}.json"


def read_cached(path: Path, key: dict[str, Any]) -> list[str] | None:
    """Hypotheses cached under `key`, or None if absent, unreadable or stale."""
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("key") != key:
        return None
    hyps = cached.get("hypotheses")
    if not isinstance(hyps, list) or len(hyps) != key["n_sentences"] or cached.get("sha256") != _checksum(hyps):
        return None
    return hyps


def write_cached(path: Path, key: dict[str, Any], origin: str, hypotheses: Sequence[str]) -> None:
    """Write the cache file `path` (atomically: a reader never sees half of it)."""
    payload = {"key": key, "origin": origin, "sha256": _checksum(hypotheses), "hypotheses": list(hypotheses)}
    atomic_write_text(path, json.dumps(payload, ensure_ascii=False, indent=0) + "\n")


def _checksum(hypotheses: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps(list(hypotheses), ensure_ascii=False).encode("utf-8")).hexdigest()
