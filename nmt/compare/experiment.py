"""`nmt experiment`: prepare the data once, train every run, evaluate them together, draw each run's
learning curve by length, write the report.

Each step is skipped when it is already done with the same config, and a training run cut off
part-way is resumed, so re-running after an interruption finishes the job; `force` redoes all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import json
import shlex
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from nmt.analysis.attention_stats import attention_diagnostics
from nmt.compare.attention_checks import CHECKS, attention_checks
from nmt.compare.curve import GREEDY, learning_curves
from nmt.compare.evaluate import ONE_BEST, evaluate_runs
from nmt.compare.experiment_folder import check_out_folder, delete_for_force
from nmt.compare.experiment_report import experiment_report, training_outcomes
from nmt.compare.runs import describe_runs, split_test_set, translate_cached
from nmt.config import Config, save_config
from nmt.config_sections import EvaluationConfig
from nmt.data.prepare import prepare_summary
from nmt.data.sources import load_checked_config, prepared_dir
from nmt.environment import describe_environment
from nmt.errors import NMTError, counted
from nmt.evaluation import curves
from nmt.evaluation.metrics import sacrebleu_bleu
from nmt.evaluation.report import REPORT_MD, RESULTS_JSON
from nmt.evaluation.report_folder import EXPERIMENT_TIMINGS
from nmt.fileio import atomic_write_files, atomic_write_json, json_text
from nmt.models.interface import model_kind
from nmt.rundir.checkpoints import step_checkpoints
from nmt.rundir.folders import read_summary
from nmt.rundir.lock import ExperimentLock
from nmt.training.parallel import check_runs, train_runs
from nmt.training.run_process import AfterTraining


class Timings:
    """Wall time of each step, kept in timings.json per session (one `nmt experiment` command on the folder):
    a re-run or a resumed experiment adds its session beside the earlier ones, each with its command, start,
    machine and commit, so that no time is read as another command's or machine's. `machine`:
    describe_environment's (None in tests that need no machine)."""

    def __init__(self, path: Path, command: str, machine: dict[str, Any] | None) -> None:
        self.path = path
        self.earlier = _read_sessions(path) if path.exists() else []
        started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        self.session: dict[str, Any] = {"command": command, "started": started, "machine": machine, "seconds": {}}

    @property
    def seconds(self) -> dict[str, float]:
        """This session's steps and their seconds."""
        return self.session["seconds"]

    @property
    def sessions(self) -> list[dict[str, Any]]:
        """Every session, oldest first, this one last."""
        return [*self.earlier, self.session]

    def record(self, step: str, seconds: float) -> None:
        self.seconds[step] = round(seconds, 1)
        self.write()

    def write(self) -> None:
        """Write timings.json: every session, this one with the steps it has recorded."""
        atomic_write_json(self.path, {"sessions": self.sessions})

    @contextlib.contextmanager
    def phase(self, step: str) -> Iterator[None]:
        """Record the wall time of the `with` block as `step`'s."""
        start = time.perf_counter()
        yield
        self.record(step, time.perf_counter() - start)

    @contextlib.contextmanager
    def noting_interruption(self, began: float) -> Iterator[None]:
        """Where the `with` block is interrupted (Ctrl-C, SIGTERM), record that, with the seconds since `began`:
        the session then says it ended there, not only which steps it finished."""
        try:
            yield
        except KeyboardInterrupt:
            self.record("interrupted, after", time.perf_counter() - began)
            raise


_SESSION_MACHINE = {"cpu", "cpu_model", "gpu", "nmt_commit"}  # what the report says of a session's machine


def _as_written(session: dict[str, Any]) -> bool:
    """Whether a session read back holds what the report reads of it: a machine (describe_environment's) with
    its command and start, or no machine (an earlier nmt's session)."""
    machine = session.get("machine")
    if machine is None:
        return True
    strings = all(isinstance(session.get(key), str) for key in ("command", "started"))
    return isinstance(machine, dict) and machine.keys() >= _SESSION_MACHINE and strings


def _read_sessions(path: Path) -> list[dict[str, Any]]:
    """The sessions timings.json at `path` holds; one written before sessions were kept (a flat object of
    step: seconds) is one session whose command, start and machine are unknown."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        sessions = saved["sessions"] if isinstance(saved, dict) and "sessions" in saved else [{"seconds": saved}]
        for session in sessions:
            session["seconds"] = {str(k): float(v) for k, v in session["seconds"].items()}
            if not _as_written(session):
                raise ValueError("a session's machine, command or start is not as nmt writes them")
        return sessions
    except (ValueError, TypeError, AttributeError, KeyError) as exc:  # not JSON, not objects, not numbers
        raise NMTError(
            f"{path} is not the step timings `nmt experiment` writes ({type(exc).__name__}: {exc}).",
            "Delete it (the next run records the times again), or re-run with --force.",
        ) from None


def _runs_to_compare(config_path: Path, overrides: list[str], runs: Sequence[str]) -> Config:
    """The config's runs to train (only `runs` where given), refused where there are none (loading the config
    refuses runs that would prepare their data differently into one folder), or where a run's BLEU tokenizer
    cannot run here (ja-mecab without its packages): each run would fail on it, after the folder is written."""
    config = load_checked_config(config_path, overrides)
    if runs:
        config = config.only_runs(runs, str(config_path))
    if not config.runs:
        raise NMTError(
            f"{config_path}: no runs to compare.",
            "Add a 'runs:' section, e.g. runs: {rnnencdec: {model: {attention: none}}, rnnsearch: {}}.",
        )
    evaluations = [config.for_run(name).evaluation for name in config.runs]
    for tokenize, lowercase in {(evaluation.tokenize, evaluation.lowercase) for evaluation in evaluations}:
        sacrebleu_bleu(tokenize, lowercase)
    return config


def run_experiment(
    config_path: Path, overrides: list[str], out_dir: Path, force: bool = False, jobs: int = 0,
    runs: Sequence[str] = (),
) -> dict[str, Any]:
    """Run the whole comparison described by `config_path` (only its `runs` where given); returns the
    evaluation results (results.json). `jobs` runs train at once (0: see `nmt.training.parallel.training_jobs`)."""
    began = time.perf_counter()
    config = _runs_to_compare(config_path, overrides, runs)
    lock = ExperimentLock(out_dir)
    lock.refuse_if_held()  # before any other check: theirs would meet the other's runs
    deleted = config.runs if runs else None
    check_out_folder(config, config_path, out_dir, force, deleted)
    with contextlib.ExitStack() as stack:
        if force and out_dir.exists():
            # held through the preparing and the deletion (which keeps its file): no second experiment starts meanwhile
            stack.enter_context(lock)
        # with --force, before anything is deleted: a corpus or data setting at fault then leaves the folder whole
        prepare_seconds = _prepare_data(config) if force else None
        if force and out_dir.exists():
            delete_for_force(out_dir, deleted)
        run_dirs = {name: out_dir / "runs" / name for name in config.runs}
        check_runs(config, run_dirs)  # a refused experiment leaves the folder as it was
        command = _reproducing_command(config_path, overrides, list(config.runs) if runs else [], out_dir, jobs)
        machine = describe_environment(torch.device("cuda") if torch.cuda.is_available() else None)
        timings = Timings(out_dir / EXPERIMENT_TIMINGS, command, machine)
        out_dir.mkdir(parents=True, exist_ok=True)
        if not lock.held:  # taken once the folder exists; the runs hold their own
            stack.enter_context(lock)
        timings.write()  # first: the folder is an experiment's from here on (check_out_folder)
        save_config(config, out_dir / "config.yaml")
        with timings.noting_interruption(began):
            timings.record("prepare", _prepare_data(config) if prepare_seconds is None else prepare_seconds)
            settings = config.for_run(next(iter(config.runs))).evaluation  # the report's
            then = AfterTraining("translate", functools.partial(translate_ahead, settings=settings))
            failed = train_runs(config, run_dirs, jobs, timings.record, then)
            if failed:  # the report of the runs that trained; the error follows it
                config, run_dirs = _trained_only(config, run_dirs, failed, config_path)
            with timings.phase("evaluate"):
                results = evaluate_runs(list(run_dirs.values()), out_dir=out_dir)  # each run's own decoding section
            with timings.phase("attention entropy and heatmap"):
                attention_plot = _attention(config, run_dirs, results, out_dir)
            with timings.phase("learning curve"):  # before the checks, the longest phase: a time limit spares it
                learning_curves(list(run_dirs.values()), out_dir=out_dir)  # every checkpoint the runs kept
            checks = _attention_checks(config, run_dirs, out_dir, timings, "attention checks")
            if checks is not None:
                results["attention_checks"] = checks
        timings.record("end to end", time.perf_counter() - began)

        counts = {name: (read_summary(run_dir) or {}).get("parameters") for name, run_dir in run_dirs.items()}
        outcomes = training_outcomes(config, run_dirs)
        results |= {"machine": machine, "training": outcomes, "timings": timings.sessions}
        if failed:
            results["failed_runs"] = {name: str(error) for name, error in failed.items()}
        report = experiment_report(command, config, machine, timings.sessions, counts, results["attention"], attention_plot,
                                   out_dir, outcomes, checks, results.get("failed_runs"))
        # until here results.json and report.md are the evaluation's (evaluate_runs): both replaced, or neither
        atomic_write_files(out_dir, {RESULTS_JSON: json_text(results).encode("utf-8"), REPORT_MD: report.encode("utf-8")})
        print(f"\nReport: {out_dir / 'report.md'}")
        if failed:
            raise NMTError(_failures(failed, f"the report ({out_dir / 'report.md'}) covers the other "
                                             f"{counted(len(config.runs), 'run')}"), RETRY_FAILED)
        return results


def translate_ahead(run_dir: Path, settings: EvaluationConfig) -> None:
    """The translations the experiment's evaluation and learning curve will ask of the run in `run_dir`, made into
    its translation cache (where they find them, by the same key): the `settings.split` with its checkpoint and
    decoding, and the curve's sample greedily with each kept step checkpoint. `settings`: the evaluation section
    they follow (the first run's). Called in a run's process once it has trained, while others still train: on 2
    cores, the core a run leaves free translates, rather than waiting for the last run."""
    run, = describe_runs([run_dir], [ONE_BEST])
    test_set = split_test_set(run.config, settings.split)
    translate_cached(run, test_set, "auto")
    greedy, = describe_runs([run_dir], GREEDY, option="")
    sample = curves.sample_test_set(test_set, list(settings.buckets), settings.by, settings.curve_sentences_per_bucket)
    for checkpoint in step_checkpoints(run_dir):
        translate_cached(dataclasses.replace(greedy, checkpoint=checkpoint), sample, "auto")


def _reproducing_command(config_path: Path, overrides: list[str], runs: list[str], out_dir: Path, jobs: int = 0) -> str:
    """The command line that reproduces the report: `nmt experiment` with its --set overrides, --runs (`runs`,
    none where every run of the config is) and --jobs where given (on a CPU a run's threads, and so its floats,
    follow it)."""
    sets = [part for override in overrides for part in ("--set", override)]
    chosen = ["--runs", *runs] if runs else []
    given = ["--jobs", str(jobs)] if jobs else []
    return shlex.join(["nmt", "experiment", str(config_path), *sets, *chosen, *given, "--out", str(out_dir)])


RETRY_FAILED = ("Mend what the failed runs' output says, then run the same command again: the runs that trained "
                "are skipped, the failed ones train (resumed where they saved), and the report is written anew.")


def _failures(failed: dict[str, NMTError], reported: str) -> str:
    """The runs that failed to train, what the report holds (`reported`), then each failure's message and hint."""
    return f"{counted(len(failed), 'run')} failed to train; {reported}. " + " ".join(map(str, failed.values()))


def _trained_only(
    config: Config, run_dirs: dict[str, Path], failed: dict[str, NMTError], config_path: Path
) -> tuple[Config, dict[str, Path]]:
    """The config and run folders without the runs that `failed`; NMTError where none is left to report."""
    trained = [name for name in config.runs if name not in failed]
    if not trained:
        raise NMTError(_failures(failed, "no run trained, so no report was written"), RETRY_FAILED)
    return config.only_runs(trained, str(config_path)), {name: run_dirs[name] for name in trained}


def _prepare_data(config: Config) -> float:
    """Prepare each data folder the runs use, once; returns the seconds it took."""
    start = time.perf_counter()
    data_sections = {prepared_dir(run.data): run.data for run in (config.for_run(name) for name in config.runs)}
    for data in data_sections.values():
        print(prepare_summary(data))
    return time.perf_counter() - start


def _attention(config: Config, run_dirs: dict[str, Path], results: dict[str, Any], out_dir: Path) -> str | None:
    """results["attention"]: each attention run's mean entropy; the first one's heatmap of a long test
    sentence, whose file name is returned (None without attention runs: an earlier report's heatmap, of a run
    this one no longer has, is removed)."""
    attentive = [name for name in config.runs if not model_kind(config.for_run(name).model).without_attention]
    plot = "attention_long_sentence.png"
    if not attentive:
        (out_dir / plot).unlink(missing_ok=True)
    results["attention"] = {
        name: attention_diagnostics(run_dirs[name], config.for_run(name), None if index else out_dir / plot)
        for index, name in enumerate(attentive)
    }
    return plot if attentive else None


def _attention_checks(
    config: Config, run_dirs: dict[str, Path], out_dir: Path, timings: Timings, step: str
) -> dict[str, Any] | None:
    """With evaluation.attention_checks, `nmt attention-checks` on the attention runs (best.pt, and the
    alignment agreement of every kept checkpoint) on the learning curve's sample, into OUT/attention_checks.*;
    the alignment check only where eflomal, or links cached in the prepared data, are found. Returns what
    results.json records of it (None: not asked for, or no attention run); their time goes to `timings` as `step`."""
    if not config.evaluation.attention_checks:
        return None
    attentive = [name for name in config.runs if not model_kind(config.for_run(name).model).without_attention]
    if not attentive:
        return None
    with timings.phase(step):
        found = attention_checks([run_dirs[name] for name in attentive], out_dir=out_dir,
                                 batch_size=config.decoding.batch_size, skip_alignment_without_aligner=True)
    ran = [check for check in ("perturbation", "alignment")
           if any(check in entry for entry in found["runs"].values())]
    return {"file": f"{CHECKS}.json", "runs": attentive, "checks": ran, "sentences": found["sentences"],
            "alignment_skipped": found.get("alignment_skipped")}
