"""`nmt evaluate` and `nmt score`: two front doors to one scoring and report path (`score_and_report`).

`nmt evaluate` translates a test set with each run first; `nmt score` takes translations from files,
whatever system made them. Evaluate's translations are cached in RUN_DIR/hyps/, keyed by the
checkpoint file (name, size, mtime), the exact source text and every decoding setting that changes
the output, so re-running an evaluation (another bucketing, another run added) re-uses them instead
of translating again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.config import Config, EvaluationConfig, config_from_dict, load_config, override_sections
from nmt.data.corpus import read_lines
from nmt.errors import NMTError
from nmt.evaluation.buckets import BucketBy
from nmt.evaluation.effect import check_effect, format_checks, long_sentence_bleu
from nmt.evaluation.report import format_examples, format_table, write_report
from nmt.evaluation.scoring import looks_tokenized, score_systems
from nmt.fileio import atomic_write_text, same_file

HYPS_DIR = "hyps"
CACHE_VERSION = 1
# Decoding keys that cannot change a 1-best translation: left out of the cache key.
_KEY_EXEMPT = ("batch_size", "nbest")
# What `--set` may change in each front door: a trained run's learning settings are fixed.
EVALUATE_SECTIONS = ("decoding", "evaluation")
SCORE_SECTIONS = ("evaluation",)


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


def _unique(name: str, taken: set[str]) -> str:
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
    for one run, a path; the default is the run's own choice (`default_checkpoint`)."""
    from nmt.rundir.checkpoints import CHECKPOINT_DIR, default_checkpoint

    infos: list[RunInfo] = []
    taken: set[str] = set()
    for run_dir in map(Path, run_dirs):
        config_path = run_dir / "config.yaml"
        if not config_path.is_file():
            raise NMTError(
                f"{run_dir} is not a training run (no config.yaml).", "Pass the folders `nmt train` wrote."
            )
        name = _unique(run_dir.resolve().name, taken)
        config = override_sections(load_config(config_path), list(overrides), EVALUATE_SECTIONS, "nmt evaluate")
        if checkpoint is None:
            path = default_checkpoint(run_dir)
        elif len(run_dirs) == 1 and Path(checkpoint).is_file():
            path = Path(checkpoint)
        else:
            path = run_dir / CHECKPOINT_DIR / Path(checkpoint).name
            if not path.is_file():
                raise NMTError(
                    f"--checkpoint {checkpoint}: {run_dir} has no {path}.",
                    f"Give a file name that every run has in {CHECKPOINT_DIR}/ (best.pt, averaged.pt, "
                    "step_*.pt), or leave --checkpoint out to use each run's default.",
                )
        infos.append(RunInfo(name, run_dir, config, path))
    return infos


def effect_pairs(runs: Sequence[RunInfo]) -> tuple[list[tuple[str, str]], list[str]]:
    """(fixed-vector run, attention run) names to check for the long-sentence effect: the runs without
    attention and those with it, paired in the order given (rnnencdec-30 with rnnsearch-30, ...);
    and the names of the runs left without a partner."""
    baselines = [run.name for run in runs if run.config.model.attention == "none"]
    attentive = [run.name for run in runs if run.config.model.attention != "none"]
    paired = min(len(baselines), len(attentive))
    return list(zip(baselines[:paired], attentive[:paired], strict=True)), baselines[paired:] + attentive[paired:]


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


def default_out_dir(run_dirs: Sequence[Path]) -> Path:
    """RUN_DIR/evaluation for one run; `evaluation/` in the runs' common parent for several."""
    if len(run_dirs) == 1:
        return Path(run_dirs[0]) / "evaluation"
    common = Path(os.path.commonpath([str(Path(d).resolve()) for d in run_dirs]))
    return common / "evaluation"


def _write_lines(path: Path, lines: Sequence[str]) -> None:
    # a hypothesis never holds a newline, but one stray one would shift every later line
    atomic_write_text(path, "".join(line.replace("\n", " ") + "\n" for line in lines))


def evaluate_runs(
    run_dirs: Sequence[Path],
    split: str | None = None,
    src_path: Path | None = None,
    ref_path: Path | None = None,
    buckets: list[int] | None = None,
    by: BucketBy | None = None,
    beam_size: int | None = None,
    out_dir: Path | None = None,
    device: str = "auto",
    overrides: Sequence[str] = (),
    checkpoint: str | None = None,
) -> dict[str, Any]:
    """Translate (or re-use cached translations), score all runs together, write and print the report.

    Defaults for split, buckets, `by` and the bootstrap come from the first run's `evaluation`
    section; `overrides` are `--set` decoding.* and evaluation.* keys. Returns the content of results.json.
    """
    from nmt.rundir.checkpoints import describe_checkpoint

    if not run_dirs:
        raise NMTError("no run directory given.", "Pass one or more folders written by `nmt train`.")
    if (src_path is None) != (ref_path is None):
        raise NMTError("--src and --ref go together: give both files, or neither to use --split.")
    if beam_size is not None and beam_size < 1:
        raise NMTError(f"--beam {beam_size}: the beam size must be at least 1.", "Use --beam 1 for greedy search.")
    runs = describe_runs(run_dirs, overrides, checkpoint)
    _refuse_overwriting_inputs(Path(out_dir) if out_dir is not None else default_out_dir(run_dirs), runs, src_path, ref_path)
    settings = runs[0].config.evaluation
    split = split or settings.split
    test_set = _common_test_set(runs, split, src_path, ref_path)

    hypotheses: dict[str, list[str]] = {}
    systems: dict[str, dict[str, Any]] = {}
    scored = [f"test set: {test_set.origin}, {len(test_set.references)} sentences"]
    for run in runs:
        checkpoint_text = describe_checkpoint(run.checkpoint)
        print(f"{run.name}: checkpoint {checkpoint_text}", file=sys.stderr)
        hypotheses[run.name], path, _ = translate_cached(run, test_set, beam_size, device)
        decoding = decoding_settings(run.config, beam_size)
        systems[run.name] = {
            "run_dir": str(run.run_dir),
            "checkpoint": str(run.checkpoint),
            "beam_size": decoding["beam_size"],
            "length_penalty": decoding["length_penalty"],
            "alpha": decoding["alpha"],
            "hypotheses": str(path),
        }
        scored.append(
            f"{run.name}: `{run.run_dir}`, checkpoint {checkpoint_text}, beam {decoding['beam_size']}, "
            f"length penalty {decoding['length_penalty']} (alpha {decoding['alpha']:g})"
        )
    pairs, unpaired = effect_pairs(runs)
    note = None
    if pairs and unpaired:
        note = (
            f"not checked for the effect: {', '.join(unpaired)} (runs without attention pair with runs "
            "with attention in the order given; give as many of each to check them all)"
        )
    evaluation_settings = dataclasses.replace(settings, buckets=buckets or settings.buckets, by=by or settings.by)
    out = Path(out_dir) if out_dir is not None else default_out_dir(run_dirs)
    return score_and_report(hypotheses, test_set, evaluation_settings, out, scored, systems, pairs, note)


def score_files(
    ref_path: Path,
    hyp_paths: Sequence[Path],
    src_path: Path | None = None,
    names: Sequence[str] | None = None,
    buckets: list[int] | None = None,
    by: BucketBy | None = None,
    out_dir: Path | None = None,
    baseline: str | None = None,
    overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """`nmt score`: score translations from files (any system's) against `ref_path`, as `nmt evaluate` does.

    Systems are named by `names` or by their files' names; `baseline` names the fixed-vector system,
    whose effect checks are run against every other system. Without `src_path` sentences are bucketed
    by reference length. `overrides` are `--set evaluation.*` keys. Returns the content of results.json.
    """
    if not hyp_paths:
        raise NMTError("no translation file given.", "Pass one or more HYP files, one translation per line.")
    settings = override_sections(config_from_dict({}), list(overrides), SCORE_SECTIONS, "nmt score").evaluation
    if src_path is not None:
        test_set = file_test_set(src_path, ref_path)
    else:
        references = read_lines(ref_path, "--ref", "Give an existing text file to --ref.")
        if not references:
            raise NMTError(f"--ref {ref_path} is empty: nothing to score.", "Give a file with one sentence a line.")
        test_set = TestSet(None, references, f"--ref {ref_path}")
        if by == "source":
            raise NMTError("--by source needs the source sentences.", "Give them with --src, or use --by reference.")
        by = "reference"
    system_names = _system_names(hyp_paths, names)
    if baseline is not None and baseline not in system_names:
        raise NMTError(
            f"--baseline {baseline}: no such system.", f"The systems are: {', '.join(system_names)}."
        )
    if baseline is not None and len(system_names) < 2:
        raise NMTError(
            f"--baseline {baseline}: there is no other system to check it against.",
            "Give the attention system's translations too, or leave --baseline out.",
        )
    hypotheses: dict[str, list[str]] = {}
    for name, path in zip(system_names, hyp_paths, strict=True):
        lines = read_lines(path, "HYP", "Give an existing text file, one translation per line.")
        if not lines:
            raise NMTError(f"HYP {path} is empty.", f"Give one translation per line of --ref {ref_path}.")
        if len(lines) != len(test_set.references):
            raise NMTError(
                f"{path} has {len(lines)} lines but --ref {ref_path} has {len(test_set.references)}.",
                "Give one translation per reference line, in the same order.",
            )
        hypotheses[name] = lines
    scored = [f"test set: {test_set.origin}, {len(test_set.references)} sentences"]
    scored += [f"{name}: `{path}`" for name, path in zip(system_names, hyp_paths, strict=True)]
    systems: dict[str, dict[str, Any]] = {
        name: {"hypotheses": str(path)} for name, path in zip(system_names, hyp_paths, strict=True)
    }
    pairs = [(baseline, name) for name in system_names if name != baseline] if baseline is not None else []
    evaluation_settings = dataclasses.replace(settings, buckets=buckets or settings.buckets, by=by or settings.by)
    out = Path(out_dir) if out_dir is not None else Path("evaluation")
    return score_and_report(hypotheses, test_set, evaluation_settings, out, scored, systems, pairs)


def _system_names(hyp_paths: Sequence[Path], names: Sequence[str] | None) -> list[str]:
    """--names as given (one per file, unique, usable in file names), else the files' names made unique."""
    if names is None:
        taken: set[str] = set()
        return [_unique(Path(path).name.removesuffix(".txt").removesuffix(".hyp"), taken) for path in hyp_paths]
    names = [name.strip() for name in names]
    if len(names) != len(hyp_paths):
        raise NMTError(
            f"--names gives {len(names)} names for {len(hyp_paths)} translation files.",
            "Give one name per HYP file, comma-separated, e.g. --names encdec,search.",
        )
    for name in names:
        if not name or "/" in name or "\\" in name or name.startswith("."):
            raise NMTError(f"--names: '{name}' cannot name a system (it names its NAME.hyp.txt file too).",
                           "Use letters, digits, '-' and '_'.")
    if len(set(names)) != len(names):
        raise NMTError(f"--names {','.join(names)}: the names must differ.", "Give each system its own name.")
    return names


def score_and_report(
    hypotheses: dict[str, list[str]],
    test_set: TestSet,
    settings: EvaluationConfig,
    out: Path,
    scored: Sequence[str],
    systems: dict[str, dict[str, Any]],
    pairs: Sequence[tuple[str, str]],
    note: str | None = None,
) -> dict[str, Any]:
    """Score the systems' translations together and write and print the report: the one path behind
    `nmt evaluate` and `nmt score`.

    `scored` says what was scored (one line each, for report.md); `systems` goes into results.json's
    settings.runs; `pairs` are (fixed-vector, attention) systems to run the effect checks on.
    """
    tokenized = looks_tokenized(hypotheses, settings.tokenize)
    if tokenized:  # once per command, however many systems and resamples are scored
        print(
            f"warning: {', '.join(tokenized)}: 100 or more lines end in ' .', as tokenized text does; "
            "BLEU expects detokenized text (or evaluation.tokenize none for pre-tokenized data).",
            file=sys.stderr,
        )
    sources = test_set.sources if test_set.sources is not None else test_set.references
    evaluation = score_systems(
        hypotheses,
        sources,
        test_set.references,
        cutoffs=settings.buckets,
        by=settings.by,
        bootstrap_samples=settings.bootstrap_samples,
        bootstrap_seed=settings.bootstrap_seed,
        tokenize=settings.tokenize,
        lowercase=settings.lowercase,
    )
    effect = {}
    if pairs:
        long = long_sentence_bleu(
            hypotheses, sources, test_set.references, evaluation.by, settings.tokenize, settings.lowercase
        )
        effect = {pair: check_effect(evaluation, long, *pair, settings.min_bucket_sentences) for pair in pairs}
    examples = format_examples(evaluation, hypotheses, test_set.sources, test_set.references)
    extra = {"test_set": test_set.origin, "runs": systems}
    results = write_report(evaluation, out, extra, effect, scored, examples)
    if test_set.sources is not None:
        _write_lines(out / "src.txt", test_set.sources)
    _write_lines(out / "ref.txt", test_set.references)
    for name, hyps in hypotheses.items():
        _write_lines(out / f"{name}.hyp.txt", hyps)
    print(format_table(evaluation))
    for (baseline, attention), checks in effect.items():
        print("\n" + format_checks(checks, baseline, attention).replace("**", ""), end="")
    if note:
        print("\n" + note)
    print(f"\nreport written to {out}/")
    return results


def _common_test_set(runs: list[RunInfo], split: str, src_path: Path | None, ref_path: Path | None) -> TestSet:
    if src_path is not None and ref_path is not None:
        return file_test_set(src_path, ref_path)
    by_dir: dict[str, TestSet] = {}
    for run in runs:
        if run.config.data.dir not in by_dir:
            by_dir[run.config.data.dir] = split_test_set(run.config, split)
    first, *others = by_dir.values()
    for other in others:
        if (other.sources, other.references) != (first.sources, first.references):
            raise NMTError(
                f"the runs were trained on different data: the {first.origin} differs from the {other.origin}.",
                "Runs are compared on one test set: evaluate them with the same --src/--ref files.",
            )
    return first


def _refuse_overwriting_inputs(out: Path, runs: Sequence[RunInfo], src_path: Path | None, ref_path: Path | None) -> None:
    """Refuse an --out folder where the report's files would replace --src or --ref."""
    written = [out / name for name in ("results.json", "report.md", "bleu_by_length.png", "src.txt", "ref.txt")]
    written += [out / f"{run.name}.hyp.txt" for run in runs]
    for flag, given in (("--src", src_path), ("--ref", ref_path)):
        clash = next((path for path in written if given is not None and same_file(path, given)), None)
        if clash is not None:
            raise NMTError(
                f"{flag} {given} is the file {clash} that the report writes: it would be replaced.",
                "Give another --out folder; nothing was written.",
            )
