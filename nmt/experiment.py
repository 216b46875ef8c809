"""`nmt experiment`: prepare the data once, train every run, evaluate them together, draw each run's
learning curve by length, write the report.

Each step is skipped when it is already done with the same config, and a training run cut off
part-way is resumed, so re-running after an interruption finishes the job; `force` redoes all.
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import os
import shlex
import shutil
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from nmt.config import Config, load_config, save_config
from nmt.environment import available_cores, describe_environment
from nmt.errors import NMTError
from nmt.fileio import atomic_write_text, same_file


class Timings:
    """Wall time of each step, kept in a JSON file so skipped steps still report their first run's time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = {}
        if path.exists():
            try:
                self.seconds = {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
            except (ValueError, TypeError, AttributeError) as exc:  # not JSON, not an object, not numbers
                raise NMTError(
                    f"{path} is not the step timings `nmt experiment` writes ({type(exc).__name__}: {exc}).",
                    "Delete it (the next run records the times again), or re-run with --force.",
                ) from None

    def record(self, step: str, seconds: float) -> None:
        self.seconds[step] = round(seconds, 1)
        atomic_write_text(self.path, json.dumps(self.seconds, indent=2))

    def forget(self, step: str) -> None:
        """Drop a step's time (one that no longer describes this folder)."""
        if self.seconds.pop(step, None) is not None:
            atomic_write_text(self.path, json.dumps(self.seconds, indent=2))


# A re-run whose training was all skipped mostly reads cached translations: its evaluation and
# learning-curve times are recorded under these names, beside the first run's, not over them.
RERUN = " (re-run, training skipped)"


def _train_run(name: str, config: Config, run_dir: Path) -> str:
    """Train one run unless it is finished; returns what was done ('trained', 'resumed', 'skipped')."""
    from nmt.rundir.writing import config_differences, learning_differences, write_config
    from nmt.training.trainer import train

    saved = run_dir / "config.yaml"
    if not saved.exists():
        train(config, run_dir, resume=False)
        return "trained"
    previous = load_config(saved)
    differing = learning_differences(previous, config)
    if differing:
        raise NMTError(
            f"run '{name}' in {run_dir} was trained with a different config ({', '.join(differing)}).",
            "Re-run with --force to redo it, or choose another --out folder.",
        )
    finished = (run_dir / "summary.json").exists()
    if finished and previous.training.max_steps == config.training.max_steps:
        # evaluation reads decoding and evaluation settings from the run's config.yaml: keep it current
        if config_differences(previous, config):
            write_config(config, run_dir)
        return "skipped"
    train(config, run_dir, resume=True)
    return "resumed"


def training_jobs(config: Config, jobs: int) -> int:
    """How many runs train at once: `jobs`, or if 0, one per core on a CPU (each run then gets
    cores / jobs torch threads) and one on CUDA. On a 2-core CPU two 1-thread trainings do 1.5x the
    steps per second of one 2-thread training: the recurrences' small matrix products keep two
    threads of one process waiting on each other (docs/usage.md)."""
    if jobs:
        return jobs
    uses_cuda = any(
        config.for_run(name).training.device == "cuda"
        or (config.for_run(name).training.device == "auto" and torch.cuda.is_available())
        for name in config.runs
    )
    return 1 if uses_cuda else max(1, min(len(config.runs), available_cores()))


def _train_in_child(name: str, config: Config, run_dir: Path, log_path: Path) -> tuple[str, float, Any]:
    """One run's training in a worker process, its output in `log_path`; returns (what was done,
    seconds, None), or ("failed", seconds, (message, hint)) so that the error reaches the parent whole."""
    start = time.perf_counter()
    with open(log_path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            done = _train_run(name, config, run_dir)
        except NMTError as error:
            return "failed", time.perf_counter() - start, (error.message, error.hint)
    return done, time.perf_counter() - start, None


def train_runs(config: Config, run_dirs: dict[str, Path], jobs: int, timings: Timings) -> int:
    """Train every run, `jobs` at once (see training_jobs); returns how many were already finished."""
    jobs = min(training_jobs(config, jobs), len(run_dirs))
    configs = {name: config.for_run(name) for name in run_dirs}
    start = time.perf_counter()
    if jobs == 1:
        results = {}
        for name, run_dir in run_dirs.items():
            print(f"\n== run {name} ({configs[name].model.attention} attention) ==")
            run_start = time.perf_counter()
            results[name] = (_train_run(name, configs[name], run_dir), time.perf_counter() - run_start)
    else:
        threads = max(1, available_cores() // jobs)
        for name, run_config in configs.items():
            if not run_config.training.threads:
                configs[name] = replace(run_config, training=replace(run_config.training, threads=threads))
        results = _train_in_parallel(configs, run_dirs, jobs)
    skipped = 0
    for name, (done, seconds) in results.items():
        if done == "skipped":
            skipped += 1
            print(f"run {name} already finished: skipped")
        else:
            timings.record(f"train {name}", seconds)
    if skipped < len(results):  # the runs' own times overlap when they train side by side
        timings.record(f"train (all runs, {jobs} at once)", time.perf_counter() - start)
    return skipped


def _train_in_parallel(configs: dict[str, Config], run_dirs: dict[str, Path], jobs: int) -> dict[str, tuple[str, float]]:
    """Train the runs in `jobs` worker processes, the costliest first (steps x 2 for attention runs),
    so that the last to finish starts early; each run's output goes to runs/NAME.log."""
    order = sorted(run_dirs, key=lambda n: -configs[n].training.max_steps * (2 if configs[n].model.attention != "none" else 1))
    logs = {name: run_dir.parent / f"{name}.log" for name, run_dir in run_dirs.items()}
    for log in logs.values():
        log.parent.mkdir(parents=True, exist_ok=True)
    print(f"\n== training {len(order)} runs, {jobs} at once ({configs[order[0]].training.threads} torch threads each); "
          f"each run's output: {logs[order[0]].parent}/NAME.log ==")
    results: dict[str, tuple[str, float]] = {}
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_train_in_child, n, configs[n], run_dirs[n], logs[n]): n for n in order}
        try:
            for future in as_completed(futures):
                name = futures[future]
                done, seconds, failure = future.result()
                if failure is not None:
                    raise NMTError(f"run {name}: {failure[0]}", f"{failure[1]} (its output: {logs[name]})".strip())
                results[name] = (done, seconds)
                print(f"run {name}: {done} in {seconds / 60:.1f} min ({time.perf_counter() - start:.0f} s into training)")
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return {name: results[name] for name in run_dirs}


def attention_entropy(weights: torch.Tensor) -> tuple[float, float]:
    """Mean entropy in nats of the rows of `weights` (tgt_len x src_len), and its mean ratio to the
    entropy of uniform weights, log(src_len): near 0 means one-hot (saturated), 1 means uniform."""
    rows = weights.double().clamp_min(1e-12)
    entropy = -(rows * rows.log()).sum(dim=-1)  # tgt_len
    uniform = math.log(weights.size(-1)) if weights.size(-1) > 1 else 1.0
    return float(entropy.mean()), float(entropy.mean() / uniform)


def _attention_diagnostics(
    run_dir: Path, config: Config, plot_path: Path | None, sentences: int = 200
) -> dict[str, float]:
    """Mean attention entropy over the first test sentences (greedy), and, if `plot_path` is given,
    the heatmap of the first test sentence of 50+ words (or the longest one)."""
    from nmt.data.prepare import load_prepared
    from nmt.decoding.plots import plot_attention
    from nmt.decoding.translate import Translator

    sources = [src for src, _ in load_prepared(config.data).pairs(config.evaluation.split)]
    translator = Translator.from_run(run_dir, beam_size=1)
    entropies = [
        attention_entropy(t.attention)
        for t in translator.translate(sources[:sentences], return_attention=True)
        if t.attention is not None
    ]
    if plot_path is not None and sources:
        long_sources = [src for src in sources if len(src.split()) >= 50]
        source = long_sources[0] if long_sources else max(sources, key=lambda s: len(s.split()))
        (translation,) = translator.translate([source], return_attention=True)
        plot_attention(translation.attention, translation.src_pieces, translation.tgt_pieces, plot_path, source)
    return {
        "sentences": len(entropies),
        "mean_entropy_nats": sum(e for e, _ in entropies) / max(len(entropies), 1),
        "mean_entropy_vs_uniform": sum(r for _, r in entropies) / max(len(entropies), 1),
    }


def _parameter_counts(run_dirs: dict[str, Path]) -> dict[str, int | None]:
    counts = {}
    for name, run_dir in run_dirs.items():
        summary = run_dir / "summary.json"
        counts[name] = json.loads(summary.read_text()).get("parameters") if summary.exists() else None
    return counts


def _report(
    config_path: Path,
    overrides: list[str],
    config: Config,
    timings: Timings,
    counts: dict[str, int | None],
    evaluation_report: str,
    attention: dict[str, dict[str, float]],
    attention_plot: str | None,
    curve_report: str,
    curve_plot: str,
    out_dir: Path | None = None,
) -> str:
    machine = describe_environment(torch.device("cuda") if torch.cuda.is_available() else None)
    # the command that reproduces this report: config, overrides and the output folder
    command = shlex.join(
        ["nmt", "experiment", str(config_path)]
        + [part for o in overrides for part in ("--set", o)]
        + (["--out", str(out_dir)] if out_dir is not None else [])
    )
    lines = [
        "# Experiment report",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {machine['cpu']}, {machine['cpu_count']} cores, torch threads {machine['torch_threads']}"
        + (f", GPU {machine['gpu']}" if machine["gpu"] else ", no GPU")
        + f"; Python {machine['python']}, torch {machine['torch']}.",
        "",
        f"Data: `{config.data.source}`"
        + (f" ({config.data.bible_src} -> {config.data.bible_tgt})" if config.data.source == "bible" else "")
        + f", prepared in `{config.data.dir}`; scored on the `{config.evaluation.split}` split, "
        f"buckets by {config.evaluation.by} length in words.",
        "",
        "| run | attention | parameters |",
        "|---|---|---|",
    ]
    for name in config.runs:
        count = counts.get(name)
        lines.append(
            f"| {name} | {config.for_run(name).model.attention} | {count:,} |"
            if count
            else f"| {name} | ? | ? |"
        )
    lines += ["", "| step | seconds |", "|---|---|"]
    lines += [f"| {step} | {seconds:.0f} |" for step, seconds in timings.seconds.items()]
    if attention:
        lines += [
            "",
            "| run | mean attention entropy (nats) | relative to uniform weights |",
            "|---|---|---|",
        ]
        lines += [
            f"| {name} | {a['mean_entropy_nats']:.3f} | {a['mean_entropy_vs_uniform']:.3f} |"
            for name, a in attention.items()
        ]
    lines += ["", evaluation_report.strip(), ""]
    if attention_plot:
        lines += ["", f"![attention of one long test sentence]({attention_plot})", ""]
    lines += ["", curve_report.strip(), "", f"![learning curve by sentence length]({curve_plot})", ""]
    return "\n".join(lines)


def _check_is_experiment_folder(out_dir: Path) -> None:
    """--force deletes the folder: only ever one that `nmt experiment` wrote (it starts with timings.json)."""
    if not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / "timings.json").is_file()):
        raise NMTError(
            f"--force would delete {out_dir}, which is not an experiment folder (no timings.json); "
            "nothing was deleted.",
            "Give --out a new folder or one an earlier `nmt experiment` wrote.",
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


def run_experiment(
    config_path: Path, overrides: list[str], out_dir: Path, force: bool = False, jobs: int = 0
) -> dict[str, Any]:
    """Run the whole comparison described by `config_path`; returns the evaluation results (results.json).
    `jobs` runs train at once (0: see `training_jobs`)."""
    config = load_config(config_path, overrides)
    from nmt.comparison import evaluate_runs
    from nmt.data.prepare import format_stats, prepare
    from nmt.learning_curve import CURVE_MD, CURVE_PNG, learning_curves

    if not config.runs:
        raise NMTError(
            f"{config_path}: no runs to compare.",
            "Add a 'runs:' section, e.g. runs: {rnnencdec: {model: {attention: none}}, rnnsearch: {}}.",
        )
    _check_config_kept(config_path, out_dir, force)
    if force and out_dir.exists():
        _check_is_experiment_folder(out_dir)
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, out_dir / "config.yaml")
    timings = Timings(out_dir / "timings.json")

    start = time.perf_counter()
    data_sections = {run.data.dir: run.data for run in (config.for_run(name) for name in config.runs)}
    for data in data_sections.values():  # each data folder the runs use, once
        print(format_stats(prepare(data), data))
    timings.record("prepare", time.perf_counter() - start)

    run_dirs = {name: out_dir / "runs" / name for name in config.runs}
    skipped = train_runs(config, run_dirs, jobs, timings)
    rerun = RERUN if skipped == len(run_dirs) and "evaluate" in timings.seconds else ""
    if not rerun:
        for step in ("evaluate", "learning curve"):
            timings.forget(step + RERUN)

    start = time.perf_counter()
    results = evaluate_runs(list(run_dirs.values()), out_dir=out_dir)  # each run's own decoding section
    timings.record("evaluate" + rerun, time.perf_counter() - start)

    attentive = [name for name in config.runs if config.for_run(name).model.attention != "none"]
    attention_plot = "attention_long_sentence.png" if attentive else None
    results["attention"] = {}
    for index, name in enumerate(attentive):
        plot_path = out_dir / attention_plot if index == 0 and attention_plot else None
        results["attention"][name] = _attention_diagnostics(run_dirs[name], config.for_run(name), plot_path)
    atomic_write_text(out_dir / "results.json", json.dumps(results, indent=2))

    start = time.perf_counter()
    learning_curves(list(run_dirs.values()), out_dir=out_dir)  # every checkpoint the runs kept
    timings.record("learning curve" + rerun, time.perf_counter() - start)

    evaluation_report = (out_dir / "report.md").read_text(encoding="utf-8")
    report = _report(
        config_path,
        overrides,
        config,
        timings,
        _parameter_counts(run_dirs),
        evaluation_report,
        results["attention"],
        attention_plot,
        (out_dir / CURVE_MD).read_text(encoding="utf-8"),
        CURVE_PNG,
        out_dir=out_dir,
    )
    atomic_write_text(out_dir / "report.md", report)
    print(f"\nReport: {out_dir / 'report.md'}")
    return results
