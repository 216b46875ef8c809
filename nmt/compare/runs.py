"""The trained runs `nmt evaluate`, `nmt curve` and `nmt experiment` translate, the prepared test split
they translate, translating it through the run's cache (RUN_DIR/hyps/, nmt/rundir/translations.py), and
where and how the comparison commands write their reports."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from nmt.config import Config, load_saved_config, override_sections
from nmt.data.prepared import load_prepared
from nmt.data.sources import corpus_source, prepared_dir
from nmt.decoding.translator import Translator
from nmt.errors import NMTError, counted
from nmt.evaluation.testset import TestSet, given_names, shown_path, unique_name
from nmt.figures import png_bytes
from nmt.fileio import atomic_write_files, errors_naming, folder_locked, json_text, refuse_unwritable
from nmt.models.interface import model_kind
from nmt.rundir import translations
from nmt.rundir.checkpoints import CHECKPOINT_DIR, names_a_file, resolve_checkpoint
from nmt.rundir.folders import refuse_folder_of_run
from nmt.rundir.loading import check_run_dir, resolve_device

# Decoding keys that cannot change a 1-best translation: left out of the cache key.
_KEY_EXEMPT = ("batch_size", "nbest")
# Decoding keys at the value under which search runs as it did before the key existed: left out of the cache key
# too, so that translations cached before it are found.
_NO_OP_VALUES = {"min_length": 0}
# What `--set` may change in `nmt evaluate`: a trained run's learning settings are fixed.
EVALUATE_SECTIONS = ("decoding", "evaluation")


@dataclass(frozen=True)
class RunInfo:
    """A run directory as evaluation sees it: its name, config and the checkpoint it will use."""

    name: str
    run_dir: Path
    config: Config
    checkpoint: Path


def split_test_set(config: Config, split: str) -> TestSet:
    """The `split` pairs of a run's prepared data (prepared first if needed; `nmt prepare` refuses an empty
    split, nmt/data/prepare.py's load_corpus)."""
    data = config.data
    pairs = load_prepared(data).pairs(split)
    source = corpus_source(data)
    origin = f"{split} split of {shown_path(prepared_dir(data))} ({source.label()}, {source.languages()})"
    return TestSet([s for s, _ in pairs], [t for _, t in pairs], origin)


def describe_runs(
    run_dirs: Sequence[Path], overrides: Sequence[str] = (), checkpoint: str | None = None,
    option: str = "checkpoint=", names: Sequence[str] | None = None,
) -> list[RunInfo]:
    """Config (with `--set` decoding/evaluation overrides) and checkpoint of each run, named by `names`
    (--names: one per run) or by folder name (made unique: name, name-2, ...). `checkpoint` is a file name in each RUN_DIR/checkpoints/ or,
    for one run, a path (`resolve_checkpoint`); the default is the run's own choice. `option` is how
    the caller's user gave it, in errors ("checkpoint=" in Python, "--checkpoint " for a command's flag, "" for
    a command without one). At least one run: the commands take one or more RUN_DIR (nargs="+"), and `nmt
    experiment` refuses a config without runs."""
    if checkpoint is not None and names_a_file(checkpoint) and len(run_dirs) > 1:
        raise NMTError(
            f"{option}{checkpoint} is one file, but {len(run_dirs)} runs are evaluated.",
            f"Give a file name that every run has in {CHECKPOINT_DIR}/ (e.g. averaged.pt), or evaluate that run alone.",
        )
    if names is not None:
        names = given_names(names, len(run_dirs), "runs", "RUN_DIR")
    infos: list[RunInfo] = []
    taken: set[str] = set()
    seen: dict[Path, Path] = {}
    for run_dir in run_dirs:
        check_run_dir(run_dir, option)
        # one run twice would be translated twice and compared with itself (name-2: a difference of +0.00)
        first = seen.setdefault(run_dir.resolve(), run_dir)
        if first is not run_dir:
            same = "" if str(first) == str(run_dir) else f" (as {first} and as {run_dir})"
            raise NMTError(f"the run {first} is given twice{same}.", "Give each RUN_DIR once.")
        name = unique_name(run_dir.resolve().name, taken) if names is None else names[len(infos)]
        config = override_sections(load_saved_config(run_dir / "config.yaml"), list(overrides), EVALUATE_SECTIONS, "nmt evaluate")
        infos.append(RunInfo(name, run_dir, config, resolve_checkpoint(run_dir, checkpoint, option)))
    return infos


def refuse_runs_without_attention(runs: Sequence[RunInfo], need: str) -> None:
    """Refuse, before any work, a run without attention weights (the fixed-vector model, attention: none)
    given to a command that measures them; `need` says what the command then lacks."""
    for run in runs:
        without = model_kind(run.config.model).without_attention
        if without:
            raise NMTError(
                f"{run.name} has no attention ({without}): {need}.",
                "Give runs with attention (RNNsearch, the Transformer); the fixed-vector model has one context for every "
                "step.",
            )


def decoding_settings(config: Config) -> dict[str, Any]:
    """The run's decoding section minus keys that do not change output, or not at the value they have."""
    return {k: v for k, v in asdict(config.decoding).items()
            if k not in _KEY_EXEMPT and not (k in _NO_OP_VALUES and v == _NO_OP_VALUES[k])}


def translate_cached(run: RunInfo, test_set: TestSet, device: str) -> tuple[list[str], Path | None, bool]:
    """(hypotheses, cache file (None where it could not be written), whether it was a cache hit) of one run
    on the test set, decoded with the run's decoding section (`--set` overrides included: `describe_runs`)."""
    assert test_set.sources is not None, "a run translates sources"
    decoding = decoding_settings(run.config)
    key = translations.cache_key(run.checkpoint, test_set.sources, decoding, resolve_device(device).type)
    path = translations.cache_path(run.run_dir, key)
    hyps = translations.read_cached(path, key)
    if hyps is not None:
        print(f"{run.name}: re-using cached translations {path}", file=sys.stderr)
        return hyps, path, True

    print(f"{run.name}: translating {counted(len(test_set.sources), 'sentence')} with {run.checkpoint.name} "
          f"(beam {decoding['beam_size']})", file=sys.stderr)
    translator = Translator.from_run(run.run_dir, run.checkpoint, device, decoding=run.config.decoding)
    hyps = list(translator.translate(test_set.sources))  # one per sentence: Translator.translate_nbest
    try:
        translations.write_cached(path, key, test_set.origin, hyps)
    except OSError as error:  # a run on a read-only disk or of another user: the cache is only a saving
        print(f"warning: {run.name}: the translations could not be cached in {error.filename} "
              f"({error.strerror}), so the next evaluation translates again; they are scored now.", file=sys.stderr)
        return hyps, None, False
    return hyps, path, False


def check_sentences_per_bucket(per_bucket: int | None) -> None:
    """Refuse a negative --sentences-per-bucket (None: the config's, checked when it was loaded)."""
    if per_bucket is not None and per_bucket < 0:
        raise NMTError(
            f"--sentences-per-bucket {per_bucket}: it must be >= 0.", "Give a count, or 0 for every sentence."
        )


def default_out_dir(run_dirs: Sequence[Path], out_dir: Path | None = None) -> Path:
    """Where a comparison command writes: `out_dir` when given (--out), else RUN_DIR/evaluation for one
    run and `evaluation/` in the runs' common parent for several; refused, before any work, where it cannot
    be written."""
    if out_dir is not None:
        refuse_folder_of_run(out_dir, f"--out {out_dir}")
        refuse_unwritable(out_dir, f"--out {out_dir}")
        return out_dir
    if len(run_dirs) == 1:
        out = run_dirs[0] / "evaluation"
    else:
        out = Path(os.path.commonpath([d.resolve() for d in run_dirs])) / "evaluation"
    refuse_unwritable(out, f"the report's folder {out} (without --out)")
    return out


def _output_names(stem: str) -> list[str]:
    """The files `write_outputs` writes for `stem`."""
    return [f"{stem}.json", f"{stem}.md", f"{stem}.png"]


def refuse_foreign_outputs(out: Path, stem: str, command: str) -> None:
    """NMTError before any work where `out` holds STEM.json, .md or .png that no nmt command wrote (beside no
    STEM.json of nmt's, a JSON object with its runs): files of the user's own, which `write_outputs` would
    replace. The files of an earlier `command` there are its to replace."""
    present = [name for name in _output_names(stem) if (out / name).exists()]
    try:
        earlier = json.loads((out / f"{stem}.json").read_text(encoding="utf-8"))
        ours = isinstance(earlier, dict) and isinstance(earlier.get("runs"), dict)
    except (OSError, ValueError):  # none there, or not JSON
        ours = False
    if present and not ours:
        them = "it" if len(present) == 1 else "them"
        raise NMTError(
            f"--out {out} holds {', '.join(present)}, which no {command} wrote there: its report would replace "
            f"{them}. Nothing was written.",
            f"Give --out a folder of its own (a new or an empty one), or move {them} out of {out}.",
        )


def write_outputs(
    out: Path, stem: str, results: dict[str, Any], markdown: str, figure: Figure, dpi: int,
) -> None:
    """STEM.json (`results`), STEM.md and STEM.png in `out` for curve and the attention commands, all or none
    (a full disk leaves the earlier three whole; two commands writing into one folder take turns); the
    Markdown on stdout."""
    contents = [json_text(results).encode("utf-8"), markdown.encode("utf-8"), png_bytes(figure, dpi)]
    with errors_naming(out):
        out.mkdir(parents=True, exist_ok=True)
    with folder_locked(out, f"waiting for another report to be written into {out} ..."):
        atomic_write_files(out, dict(zip(_output_names(stem), contents, strict=True)))
    print(markdown)
    print(f"{stem.replace('_', ' ')} written to {out}/")
