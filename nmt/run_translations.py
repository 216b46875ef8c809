"""The runs `nmt evaluate` and `nmt curve` translate, the test set they translate, and the cache of
their translations.

Translations are cached in RUN_DIR/hyps/, keyed by the checkpoint file (name, size, mtime), the
exact source text and every decoding setting that changes the output, so re-running an evaluation
(another bucketing, another run added) re-uses them instead of translating again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.config import Config, load_config, override_sections
from nmt.data.corpus import read_lines
from nmt.errors import NMTError
from nmt.fileio import atomic_write_text

HYPS_DIR = "hyps"
CACHE_VERSION = 1
# Decoding keys that cannot change a 1-best translation: left out of the cache key.
_KEY_EXEMPT = ("batch_size", "nbest")
# What `--set` may change in `nmt evaluate`: a trained run's learning settings are fixed.
EVALUATE_SECTIONS = ("decoding", "evaluation")

@dataclass(frozen=True)
class TestSet:
    """What every system is scored on: references, their sources (None when `nmt score` has no --src),
    and where they came from."""

    sources: list[str] | None
    references: list[str]
    origin: str  # "split test of data/prepared/...", "--src FILE" or "--ref FILE"


@dataclass(frozen=True)
class RunInfo:
    """A run directory as evaluation sees it: its name, config and the checkpoint it will use."""

    name: str
    run_dir: Path
    config: Config
    checkpoint: Path


def file_test_set(src_path: Path, ref_path: Path) -> TestSet:
    """Source and reference files given on the command line; they must have the same line count."""
    sources = read_lines(src_path, "--src", "Give an existing text file to --src.")
    references = read_lines(ref_path, "--ref", "Give an existing text file to --ref.")
    if len(sources) != len(references):
        raise NMTError(
            f"--src {src_path} has {len(sources)} lines but --ref {ref_path} has {len(references)}.",
            "Give one reference line per source line.",
        )
    if not sources:
        raise NMTError(f"--src {src_path} is empty: nothing to evaluate.", "Give a file with one sentence a line.")
    return TestSet(sources, references, f"--src {src_path}")


def split_test_set(config: Config, split: str) -> TestSet:
    """The `split` pairs of a run's prepared data (prepared first if needed)."""
    from nmt.data.prepare import describe_source, load_prepared

    pairs = load_prepared(config.data).pairs(split)
    if not pairs:
        raise NMTError(f"the {split} split of {config.data.dir} is empty.", "Use the other split or --src/--ref.")
    origin = f"split {split} of {config.data.dir}, prepared from {describe_source(config.data)}"
    return TestSet([s for s, _ in pairs], [t for _, t in pairs], origin)


def unique_name(name: str, taken: set[str]) -> str:
    """`name`, or name-2, name-3, ... if it is taken; the result is added to `taken`."""
    unique, suffix = name, 2
    while unique in taken:
        unique = f"{name}-{suffix}"
        suffix += 1
    taken.add(unique)
    return unique


def describe_runs(
    run_dirs: Sequence[Path], overrides: Sequence[str] = (), checkpoint: str | None = None
) -> list[RunInfo]:
    """Config (with `--set` decoding/evaluation overrides) and checkpoint of each run, named by folder
    name (made unique: name, name-2, ...). `checkpoint` is a file name in each RUN_DIR/checkpoints/ or,
    for one run, a path (`resolve_checkpoint`); the default is the run's own choice."""
    from nmt.rundir.checkpoints import CHECKPOINT_DIR, resolve_checkpoint

    if checkpoint is not None and Path(checkpoint).parent != Path(".") and len(run_dirs) > 1:
        raise NMTError(
            f"--checkpoint {checkpoint} is one file, but {len(run_dirs)} runs are evaluated.",
            f"Give a file name that every run has in {CHECKPOINT_DIR}/ (e.g. averaged.pt), or evaluate that run alone.",
        )

    infos: list[RunInfo] = []
    taken: set[str] = set()
    for run_dir in map(Path, run_dirs):
        config_path = run_dir / "config.yaml"
        if not config_path.is_file():
            raise NMTError(
                f"{run_dir} is not a training run (no config.yaml).", "Pass the folders `nmt train` wrote."
            )
        name = unique_name(run_dir.resolve().name, taken)
        config = override_sections(load_config(config_path), list(overrides), EVALUATE_SECTIONS, "nmt evaluate")
        infos.append(RunInfo(name, run_dir, config, resolve_checkpoint(run_dir, checkpoint)))
    return infos


def decoding_settings(config: Config, beam_size: int | None) -> dict[str, Any]:
    """The run's decoding section with the beam override applied, minus keys that do not change output."""
    settings = dataclasses.asdict(config.decoding)
    if beam_size is not None:
        settings["beam_size"] = beam_size
    return {k: v for k, v in settings.items() if k not in _KEY_EXEMPT}


def cache_key(checkpoint: Path, sources: Sequence[str], decoding: dict[str, Any]) -> dict[str, Any]:
    """What a cached translation depends on; its sha256 names the cache file."""
    stat = checkpoint.stat()
    return {
        "version": CACHE_VERSION,
        "checkpoint": checkpoint.name,
        "checkpoint_size": stat.st_size,
        "checkpoint_mtime_ns": stat.st_mtime_ns,
        "source_sha256": hashlib.sha256("\n".join(sources).encode("utf-8")).hexdigest(),
        "n_sentences": len(sources),
        "decoding": decoding,
    }


def _cache_path(run_dir: Path, key: dict[str, Any]) -> Path:
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
    if not isinstance(hyps, list) or len(hyps) != key["n_sentences"]:
        return None
    return [str(h) for h in hyps]


def translate_cached(
    run: RunInfo, test_set: TestSet, beam_size: int | None, device: str
) -> tuple[list[str], Path, bool]:
    """(hypotheses, cache file, whether it was a cache hit) of one run on the test set."""
    decoding = decoding_settings(run.config, beam_size)
    key = cache_key(run.checkpoint, test_set.sources, decoding)
    path = _cache_path(run.run_dir, key)
    hyps = read_cached(path, key)
    if hyps is not None:
        print(f"{run.name}: re-using cached translations {path}", file=sys.stderr)
        return hyps, path, True
    from nmt.decoding.translate import Translator

    print(
        f"{run.name}: translating {len(test_set.sources)} sentences with {run.checkpoint.name} "
        f"(beam {decoding['beam_size']})",
        file=sys.stderr,
    )
    translator = Translator.from_run(
        run.run_dir, checkpoint=run.checkpoint, device=device, beam_size=decoding["beam_size"],
        decoding=run.config.decoding,
    )
    hyps = list(translator.translate(test_set.sources))
    if len(hyps) != len(test_set.sources):
        raise RuntimeError(f"{run.name}: {len(hyps)} translations for {len(test_set.sources)} sentences")
    payload = {"key": key, "origin": test_set.origin, "hypotheses": hyps}
    atomic_write_text(path, json.dumps(payload, ensure_ascii=False, indent=0) + "\n")
    return hyps, path, False
