"""The report of `nmt experiment` (report.md): the machine and the data, the tables of parameters, of how
each run's training ended (where, in which precision, at which commit) and of step times, then the
evaluation's report, the attention checks and the learning curve; and results.json's "training".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nmt.analysis.attention_stats import ENTROPY_SENTENCES, PLOTTED_WORDS
from nmt.compare.attention_checks import CHECKS
from nmt.config import Config, load_saved_config
from nmt.data.sources import corpus_source, prepared_dir
from nmt.errors import NMTError, counted
from nmt.evaluation.curves import CURVE
from nmt.evaluation.tables import markdown_table
from nmt.models.interface import model_kind
from nmt.rundir.folders import read_summary

# Beside every heatmap: what the weights are, and the command that measures what they do not tell.
ATTENTION_CAVEAT = (
    "An attention map is one mixing step, not the model's reasoning. `nmt attention-checks RUN_DIR ...` "
    "measures whether the output depends on where it looks (an RNN's weights made uniform, permuted or one-hot; "
    "a Transformer's cross-attention heads silenced or made uniform) and "
    "how often its argmax agrees with a word aligner (docs/results.md)."
)


def _commit_words(commit: str | None) -> str:
    """A commit as environment.json's nmt_commit names it, in words: its first 9 digits and what
    `source_commit` says after them ("with uncommitted changes"), or "no git checkout"."""
    if commit is None:
        return "no git checkout"
    sha, _, said = commit.partition(" ")
    return sha[:9] + (f" {said}" if said else "")


def _setup_lines(config: Config, out_dir: Path, machine: dict[str, Any]) -> list[str]:
    """The report's machine (`machine`: `describe_environment`'s, where the report is written) and data
    paragraphs; the torch threads each run trained with come from its environment.json."""
    first = config.for_run(next(iter(config.runs)))
    data, scored = first.data, first.evaluation  # the first run's, as the evaluation reads them
    folders = {name: prepared_dir(config.for_run(name).data) for name in config.runs}
    if len(set(folders.values())) == 1:
        prepared = f"`{prepared_dir(data)}`"
    else:  # runs with data keys of their own prepare folders of their own: each named
        prepared = ", ".join(f"`{folder}` ({name})" for name, folder in folders.items())
    threads = {_environment(out_dir / "runs" / name).get("torch_threads", "?") for name in config.runs}
    model = f" ({machine['cpu_model']})" if machine["cpu_model"] else ""
    made = "from no git checkout" if machine["nmt_commit"] is None else f"at {_commit_words(machine['nmt_commit'])}"
    return [
        f"Machine: {machine['cpu']}{model}, torch's {machine['cpu_capability']} kernels, "
        f"{machine['cpu_count']} cores, torch threads {', '.join(sorted(map(str, threads)))} "
        f"per training run and {machine['torch_threads']} in evaluation"
        + (f", GPU {machine['gpu']}" if machine["gpu"] else ", no GPU")
        + f"; Python {machine['python']}, torch {machine['torch']}; nmt {made} "
        "(the report's; each run's in the training table).",
        "",
        f"Data: `{data.source}` ({corpus_source(data).languages()}), prepared in {prepared}; "
        f"scored on the `{scored.split}` split, buckets by {scored.by} length in words.",
    ]


def _environment(run_dir: Path) -> dict[str, Any]:
    """A run's environment.json (nothing where it cannot be read)."""
    try:
        environment = json.loads((run_dir / "environment.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return environment if isinstance(environment, dict) else {}


def _device_name(environment: dict[str, Any], summary: dict[str, Any]) -> str:
    """The device a run trained on, by name: its GPU's (environment.json), or the CPU's model."""
    device = str(summary.get("device", "?"))
    if device.startswith("cuda"):
        return f"GPU {environment.get('gpu') or device}"
    return f"CPU {environment['cpu']}" if environment.get("cpu") else device


def _commits(environment: dict[str, Any]) -> list[str]:
    """The commits a run trained at (environment.json), in words, one per session where it changed, oldest first."""
    earlier = environment.get("earlier_sessions")
    sessions = [*(earlier if isinstance(earlier, list) else []), environment] if environment else []
    words = [_commit_words(session["nmt_commit"]) if isinstance(session, dict) and "nmt_commit" in session else "?"
             for session in sessions]
    return [word for i, word in enumerate(words) if i == 0 or word != words[i - 1]]


def training_outcomes(config: Config, run_dirs: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """results.json's "training": per run, how its training ended (summary.json): stopped by early stopping
    or by a cap (training.max_steps or training.max_minutes), at which step, its best validation and where, on which device and
    in which precision, after how long, at which commit(s) of nmt. Its training settings are those the run
    trained with (RUN_DIR/config.yaml): a finished run that a later command skipped keeps its own."""
    outcomes = {}
    for name, run_dir in run_dirs.items():
        summary, training = read_summary(run_dir) or {}, _trained_with(config.for_run(name), run_dir).training
        environment = _environment(run_dir)
        outcomes[name] = {
            "stopped_by": summary.get("stopped_by"), "final_step": summary.get("final_step"),
            "max_steps": training.max_steps, "max_minutes": training.max_minutes, "patience": training.patience,
            "validate_every": training.validate_every, "best_step": summary.get("best_step"),
            "best_score": summary.get("best_score"), "early_stopping_metric": summary.get("early_stopping_metric"),
            "device": _device_name(environment, summary), "precision": summary.get("precision", "?"),
            "wall_time_s": summary.get("wall_time_s"), "commits": _commits(environment),
        }
    return outcomes


def _trained_with(config: Config, run_dir: Path) -> Config:
    """The config `run_dir` trained with (its config.yaml), or `config` where it cannot be read."""
    try:
        return load_saved_config(run_dir / "config.yaml")
    except NMTError:
        return config


def _stopped(outcome: dict[str, Any]) -> str:
    """How a run's training ended, in words: early stopping (with its patience) or a cap."""
    if outcome["stopped_by"] == "early_stopping":
        count = outcome["patience"]
        return f"early stopping ({count} validation{'' if count == 1 else 's'} without improvement)"
    if outcome["stopped_by"] == "max_steps":
        return f"its cap (max_steps {outcome['max_steps']:,})"
    if outcome["stopped_by"] == "max_minutes":
        return f"its time limit (max_minutes {outcome['max_minutes']:g})"
    return "?"


def _training_table(outcomes: dict[str, dict[str, Any]]) -> list[str]:
    """The report's table of how each run's training ended, where, in which precision and at which commit."""
    def number(value: Any, spec: str) -> str:
        return "?" if value is None else format(value, spec)

    rows = [[name, _stopped(o), o["device"], o["precision"], ", then ".join(o["commits"]) or "?",
             number(o["final_step"], ","), number(o["best_step"], ","),
             f"{o['early_stopping_metric'] or '?'} {number(o['best_score'], '.2f')}",
             number(None if o["wall_time_s"] is None else o["wall_time_s"] / 60, ".1f")]
            for name, o in outcomes.items()]
    header = ["run", "training stopped by", "device", "precision", "nmt commit", "last step", "best step",
              "best validation", "training minutes"]
    return markdown_table(header, rows, left=5)


def _session_words(session: dict[str, Any], number: int) -> str:
    """One session of timings.json (`Timings`) in words: when, on what and with which command it ran."""
    machine = session.get("machine")
    if not machine:
        return f"Session {number}, written by an earlier nmt, which kept no command or machine with its times:"
    model = f" ({machine['cpu_model']})" if machine["cpu_model"] else ""
    gpu = f", GPU {machine['gpu']}" if machine["gpu"] else ""
    return (f"Session {number}, started {session['started']} on {machine['cpu']}{model}{gpu}, nmt at "
            f"{_commit_words(machine['nmt_commit'])}: `{session['command']}`")


def _time_lines(sessions: list[dict[str, Any]]) -> list[str]:
    """Each session's step times (one table; one per session where the folder saw several commands)."""
    lines: list[str] = []
    for number, session in enumerate(sessions, 1):
        if len(sessions) > 1:
            lines += [_session_words(session, number), ""]
        rows = [[step, f"{seconds:.0f}"] for step, seconds in session["seconds"].items()]
        lines += [*markdown_table(["step", "seconds"], rows, left=2), ""]
    return lines[:-1]


def _tables(
    config: Config, sessions: list[dict[str, Any]], counts: dict[str, int | None],
    attention: dict[str, dict[str, float]], outcomes: dict[str, dict[str, Any]],
) -> list[str]:
    """The report's tables of parameters, how each training ended, each session's step times (`sessions`:
    timings.json's) and attention entropy."""
    rows = [[name, model_kind(config.for_run(name).model).attention, f"{counts[name]:,}"] if counts.get(name) else [name, "?", "?"]
            for name in config.runs]
    lines = markdown_table(["run", "attention", "parameters"], rows, left=3)
    lines += ["", *_training_table(outcomes)]
    lines += ["", *_time_lines(sessions)]
    if attention:
        header = ["run", "mean attention entropy (nats)", "relative to uniform weights"]
        rows = [[name, f"{a['mean_entropy_nats']:.3f}", f"{a['mean_entropy_vs_uniform']:.3f}"]
                for name, a in attention.items()]
        lines += ["", f"Attention entropy of each attention run's greedy translations of the first "
                  f"{ENTROPY_SENTENCES} test sentences:", "", *markdown_table(header, rows, left=3)]
    return lines


def experiment_report(
    command: str,
    config: Config,
    machine: dict[str, Any],
    sessions: list[dict[str, Any]],
    counts: dict[str, int | None],
    attention: dict[str, dict[str, float]],
    attention_plot: str | None,
    out_dir: Path,
    outcomes: dict[str, dict[str, Any]],
    checks: dict[str, Any] | None = None,
    failed: dict[str, str] | None = None,
) -> str:
    """report.md of the experiment: setup and tables, then the evaluation's report (the out_dir's report.md
    until now), the attention checks (when run) and the learning curve. `sessions`: timings.json's, each
    command's step times; `failed`: the runs that failed to train (left out of the report), with why."""
    lines = ["# Experiment report", "", f"Command: `{command}`", "", *_setup_lines(config, out_dir, machine), ""]
    for name, why in (failed or {}).items():
        lines += [f"**Not in this report: run {name}, which failed to train.** {why}", ""]
    lines += _tables(config, sessions, counts, attention, outcomes)
    lines += ["", (out_dir / "report.md").read_text(encoding="utf-8").strip(), ""]
    if attention_plot:
        shown = next(iter(attention))  # the first attention run's (the experiment's `_attention`)
        lines += ["", f"{shown}'s attention in its greedy translation of the first test sentence of {PLOTTED_WORDS}+ "
                  "words (or the longest):", "", f"![{shown}'s attention over one long test sentence]({attention_plot})",
                  "", ATTENTION_CAVEAT, ""]
    if checks is not None:
        ran = " and ".join(checks["checks"])
        lines += ["", f"Attention checks ({ran}, on {counted(checks['sentences'], 'test sentence')}): "
                  f"[{CHECKS}.md]({CHECKS}.md), [{CHECKS}.json]({CHECKS}.json).", ""]
        if checks.get("alignment_skipped"):
            lines += [f"Note: {checks['alignment_skipped']}.", ""]
        lines += [f"![attention checks]({CHECKS}.png)", ""]
    curve = (out_dir / f"{CURVE}.md").read_text(encoding="utf-8").strip()
    lines += ["", curve, "", f"![learning curve by sentence length]({CURVE}.png)", ""]
    return "\n".join(lines)
