"""What `nmt experiment` may write into, and what its --force deletes: the --out folder is new, empty or an
experiment's own (timings.json, its first file), never a run's or one holding the config given, and never
holds what the runs read (their prepared data, the download cache, the corpus files) where --force would
delete it.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from nmt.config import Config
from nmt.data.sources import corpus_source, prepared_dir
from nmt.errors import NMTError
from nmt.evaluation.report_folder import EXPERIMENT_TIMINGS
from nmt.fileio import same_file
from nmt.rundir.folders import run_files
from nmt.rundir.lock import ExperimentLock, RunLock


def check_out_folder(config: Config, config_path: Path, out_dir: Path, force: bool, runs: Iterable[str] | None) -> None:
    """Refuse, before anything is written or deleted, an --out that is a trained run's folder, that holds the
    config file given, or a folder of the user's own (not empty, no timings.json); with `force` (which deletes
    the folder, or only the folders of `runs` where given), one that is no experiment's, whose runs a process
    trains now, or that holds what the runs read."""
    _check_not_a_run(out_dir)
    _check_config_kept(config_path, out_dir, force)
    if not force:
        _check_own_folder(out_dir)
    elif out_dir.exists():
        _check_is_experiment_folder(out_dir)
        _check_none_training(out_dir, runs)
        if runs is None:  # the whole folder goes
            _check_data_kept(config, out_dir)


def _check_own_folder(out_dir: Path) -> None:
    """A new experiment writes only into a folder of its own: a new or empty one, or one an experiment wrote
    (it writes timings.json first). In a folder of the user's it would replace files of its names (config.yaml,
    report.md, learning_curve.png, ...), and a later --force would delete all of it."""
    if out_dir.exists() and not out_dir.is_dir():
        raise NMTError(f"--out {out_dir} is a file, not a folder. Nothing was written.",
                       "Give --out a folder (a new one: the experiment makes it).")
    if not out_dir.exists() or (out_dir / EXPERIMENT_TIMINGS).is_file():
        return
    held = sorted(path.name for path in out_dir.iterdir() if not path.name.startswith(".") and path.name != ExperimentLock.name)
    if held:
        shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
        raise NMTError(
            f"--out {out_dir} holds {shown}, and no nmt experiment wrote it (it has no {EXPERIMENT_TIMINGS}): the "
            "experiment would write its config.yaml, runs and report among them. Nothing was written.",
            f"Give --out a new or empty folder (e.g. {out_dir / 'experiment'}).",
        )


def _check_data_kept(config: Config, out_dir: Path) -> None:
    """--force deletes the folder: refuse where what a run reads lies in it: its prepared data (data.dir, which
    --force would prepare and then delete), the download cache (data.cache_dir), the corpus source's files
    (a glob's folder) that exist."""
    out = Path(os.path.abspath(out_dir))
    for name in config.runs:
        data = config.for_run(name).data
        read = [("data.dir", prepared_dir(data), True), ("data.cache_dir", data.cache_dir, True)]
        read += [(f"data.{data.source}'s file", str(path), False) for path in corpus_source(data).inputs()]
        for key, path, made_here in read:  # --force would prepare data.dir and the cache anew, then delete them
            fixed = _fixed_part(path) if path else None
            if fixed is None or not (made_here or fixed.exists()):  # a hub dataset's name is no file
                continue
            if fixed == out or out in fixed.parents:
                raise NMTError(
                    f"--force would delete {out_dir}, and run '{name}' reads {key} {path} there. Nothing was deleted.",
                    f"Move it out of {out_dir} (and the config's path with it), or give another --out.",
                )


def _fixed_part(path: str) -> Path:
    """`path` made absolute, cut before its first part that holds a glob character (data/*.jsonl: data)."""
    parts = itertools.takewhile(lambda part: not any(character in part for character in "*?["), Path(path).parts)
    return Path(os.path.abspath(Path(*parts)))


def _check_is_experiment_folder(out_dir: Path) -> None:
    """--force deletes the folder: only ever one that `nmt experiment` wrote (it starts with timings.json)."""
    if not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / EXPERIMENT_TIMINGS).is_file()):
        raise NMTError(
            f"--force would delete {out_dir}, which is not an experiment folder (no timings.json); "
            "nothing was deleted.",
            "Give --out a new folder or one an earlier `nmt experiment` wrote.",
        )


def _check_none_training(out_dir: Path, runs: Iterable[str] | None) -> None:
    """--force: refuse, deleting nothing, while a process trains one of the run folders it would delete
    (all of OUT/runs, or with --runs only `runs`): it holds the run's train.lock (nmt/rundir/lock.py)."""
    folders = [out_dir / "runs" / name for name in runs] if runs is not None else (
        sorted(path for path in (out_dir / "runs").iterdir() if path.is_dir()) if (out_dir / "runs").is_dir() else [])
    for folder in folders:
        lock = RunLock(folder)
        if (holder := lock.holder()) is not None:
            raise NMTError(
                f"--force would delete {folder}, which a process ({holder}) is training now (it holds {lock.path}); "
                "nothing was deleted.",
                f"Wait for that training to end, or stop it ({holder.stop_command}) first.",
            )


def delete_for_force(out_dir: Path, runs: Iterable[str] | None) -> None:
    """--force: delete the experiment folder, or with --runs (`runs`) only those runs' folders and logs, so that
    they train afresh and the runs it leaves out stay trained (the report is written anew in any case)."""
    if runs is None:  # all but the lock this experiment holds (a new file would be a new lock: nobody's held)
        for path in out_dir.iterdir():
            if path.name == ExperimentLock.name:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        return
    for name in runs:
        shutil.rmtree(out_dir / "runs" / name, ignore_errors=True)
        (out_dir / "runs" / f"{name}.log").unlink(missing_ok=True)


def _check_not_a_run(out_dir: Path) -> None:
    """Refuse an --out that holds a trained run (its own config.yaml and files; an experiment's run folders
    among them): the experiment's config.yaml would replace the run's record of what it was trained with."""
    present = [name for name in run_files(out_dir) if name != "config.yaml"]  # an experiment folder has one too
    if present:
        raise NMTError(
            f"--out {out_dir} holds a trained run ({', '.join(present)}): the experiment would write its own "
            "config.yaml over the run's, and its report beside it. Nothing was written.",
            "Give --out a folder of its own (an experiment keeps each run in OUT/runs/NAME).",
        )


def _check_config_kept(config_path: Path, out_dir: Path, force: bool) -> None:
    """Refuse an --out that would replace the config file given (OUT/config.yaml is written; --force
    deletes OUT first)."""
    inside = Path(os.path.abspath(out_dir)) in Path(os.path.abspath(config_path)).parents
    if same_file(config_path, out_dir / "config.yaml") or (force and inside):
        raise NMTError(
            f"{config_path} lies in the --out folder {out_dir}, where the experiment writes its own config.yaml"
            f"{' after --force deletes the folder' if force else ''}: your config would be replaced.",
            "Give another --out, or copy the config out of that folder first; nothing was written.",
        )
