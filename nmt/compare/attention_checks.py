"""`nmt attention-checks`: what a trained run's attention weights do and do not tell (issue 22 §2).

1. Does the output depend on where attention looks? Greedy decoding with the model's own weights
   (`none`) and with them replaced at every decoder step (nmt/models/attention.py, `analysed_attention`):
   uniform over the real source positions, permuted across them (seeded), or one-hot at their argmax;
   BLEU per length bucket of each. A Transformer's cross-attention is ablated instead, layer by layer
   (`head_ablation_bleu`): each head silenced in turn, all heads uniform, all but the best-aligning head
   silenced (Michel et al. 2019); each against `none` by paired bootstrap, on all and on long sentences.
2. Do the weights agree with a word aligner? Teacher-forced attention over the reference, summed over a
   source word's pieces and averaged over a target word's pieces (the per-word maps of the attention
   plots); the argmax source word of each target word is checked against eflomal's symmetrised links
   (nmt/evaluation/alignment.py), per length bucket and per kept training checkpoint.
The report (attention_checks.md, rendered by nmt/evaluation/attention_report.py) says what each number can
and cannot show.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nmt.compare.evaluate import check_src_and_ref, common_test_set
from nmt.compare.runs import (
    RunInfo,
    check_sentences_per_bucket,
    default_out_dir,
    describe_runs,
    split_test_set,
    write_outputs,
)
from nmt.config import Config
from nmt.config_sections import DataConfig, EvaluationConfig
from nmt.data.batching import make_batch
from nmt.data.pairs import Pair
from nmt.data.prepare import load_prepared
from nmt.data.sources import prepared_dir
from nmt.decoding.plots import EOS_LABEL, word_attention
from nmt.decoding.translator import Translator
from nmt.errors import NMTError
from nmt.evaluation.alignment import (
    INSTALL_HINT,
    Link,
    Symmetrisation,
    agreement_per_bucket,
    align_words,
    aligner_installed,
    require_aligner,
)
from nmt.evaluation.attention_report import checks_figure, format_checks_markdown, percent
from nmt.evaluation.buckets import sentence_lengths
from nmt.evaluation.curves import SELECTION, bucket_bleu, bucket_counts, sample_test_set
from nmt.evaluation.scoring import CorpusScorer, bleu_from_stats, bootstrap_bleu, paired_p_value
from nmt.evaluation.testset import TestSet, shown_path
from nmt.fileio import atomic_write_text
from nmt.lengths import assign_buckets, make_buckets
from nmt.models.interface import MAIN_VIEW, AttentionSwitches, model_kind
from nmt.rundir.checkpoints import CHECKPOINT_DIR, step_checkpoint_name, step_checkpoints
from nmt.rundir.loading import LoadedRun, load_run

CHECKS = "attention_checks"  # the stem of the .json, .md and .png written


def attention_checks(
    run_dirs: Sequence[Path],
    out_dir: Path | None = None,
    split: str | None = None,
    src_path: Path | None = None,
    ref_path: Path | None = None,
    checkpoint: str | None = None,
    steps: Sequence[int] | None = None,
    per_bucket: int | None = None,
    seed: int = 1,
    symmetrisation: Symmetrisation = "grow-diag-final-and",
    checks: Sequence[str] = ("perturbation", "alignment"),
    device: str = "auto",
    batch_size: int = 64,
    skip_alignment_without_aligner: bool = False,
) -> dict[str, Any]:
    """Run the checks on each attention run and write attention_checks.json, .md and .png into `out_dir`
    (default: where `nmt evaluate` writes). `steps`: the periodic checkpoints whose alignment agreement
    is measured besides the evaluated one (None: every kept step_*.pt; []: none). `per_bucket` > 0 takes
    the learning curve's deterministic sample of the test set (None: evaluation.curve_sentences_per_bucket,
    as curve and attention-scaling do; 0: all of it). BLEU uses the first run's
    evaluation.tokenize and evaluation.lowercase, as `nmt evaluate` does. The aligner's links come from the
    prepared data's cache where they were computed before (`aligner_links`), else from eflomal; without
    either, the alignment check is refused, or with `skip_alignment_without_aligner` left out (results
    then say so under "alignment_skipped"). Returns the content of the JSON."""

    check_src_and_ref(src_path, ref_path)
    check_sentences_per_bucket(per_bucket)
    runs = describe_runs(run_dirs, checkpoint=checkpoint)
    _refuse_runs_without_attention(runs)
    settings = runs[0].config.evaluation
    per_bucket = settings.curve_sentences_per_bucket if per_bucket is None else per_bucket
    test_set = common_test_set(runs, split or settings.split, src_path, ref_path)  # nmt evaluate's rule
    if per_bucket:
        test_set = sample_test_set(test_set, settings.buckets, settings.by, per_bucket)
    skipped = None
    if "alignment" in checks and not all(
        cached_links(run.config.data, test_set, symmetrisation) is not None for run in runs
    ):  # before the perturbations' minutes
        if not skip_alignment_without_aligner:
            require_aligner()
        elif not aligner_installed():
            skipped = f"the alignment check was skipped: eflomal is not installed and no links were cached ({INSTALL_HINT})"
            print(f"attention checks: {skipped}", file=sys.stderr)
            checks = tuple(check for check in checks if check != "alignment")
    scorer = CorpusScorer(test_set.references, settings.tokenize, settings.lowercase)  # all runs, all kinds
    context = CheckContext(test_set, scorer, settings, seed, batch_size, device)
    results = _setting(context, per_bucket, symmetrisation)
    if skipped:
        results["alignment_skipped"] = skipped
    links: dict[str, list[set[Link]]] = {}
    out = default_out_dir(run_dirs, out_dir)
    for run in runs:
        entry: dict[str, Any] = {"run_dir": shown_path(run.run_dir, out), "checkpoint": run.checkpoint.name}
        evaluated = load_run(run.run_dir, run.checkpoint, device)  # read once for both checks
        if "alignment" in checks:  # first: a Transformer's ablation keeps each layer's best-aligning head
            data_dir = prepared_dir(run.config.data)
            if data_dir not in links:
                links[data_dir] = aligner_links(run.config.data, test_set, symmetrisation)
            entry["alignment"] = _agreements(run, evaluated, context, links[data_dir], steps)
        if "perturbation" in checks:
            heads = entry["alignment"][-1].get("heads") if "alignment" in entry else None
            entry["perturbation"] = _perturbation(run, evaluated, context, heads)
        results["runs"][run.name] = entry
    write_outputs(out, CHECKS, results, format_checks_markdown(results), checks_figure(results), 100)
    return results


@dataclass(frozen=True)
class CheckContext:
    """What the checks of every run share: the sentences checked, the scorer of their references, the
    first run's evaluation settings (buckets, bootstrap), the permutations' seed, and how the runs translate
    (batch size, device)."""

    test_set: TestSet
    scorer: CorpusScorer
    settings: EvaluationConfig
    seed: int
    batch_size: int
    device: str


def _perturbation(
    run: RunInfo, evaluated: LoadedRun, context: CheckContext, heads: dict[str, Any] | None
) -> dict[str, Any]:
    """The model's attention switches (`heads`: its per-head agreement) scored: an RNN's perturbations by
    `perturbation_bleu`, a Transformer's head ablations, each compared with the unchanged model, by
    `head_ablation_bleu`."""
    switched = evaluated.model.attention_switches(context.seed, heads)
    if switched.compared:
        return head_ablation_bleu(run.name, evaluated, context, switched)
    return perturbation_bleu(run.name, evaluated, context, switched)


def _agreements(
    run: RunInfo, evaluated: LoadedRun, context: CheckContext, links: list[set[Link]], steps: Sequence[int] | None
) -> list[dict[str, Any]]:
    """`agreement_by_bucket` of each checkpoint of `_checkpoints` (`evaluated`, loaded already, last) with
    the aligner's `links`."""
    return [
        agreement_by_bucket(run.name, evaluated if path == run.checkpoint else load_run(run.run_dir, path, context.device),
                            context, links)
        for path in _checkpoints(run, steps)
    ]


def _setting(context: CheckContext, per_bucket: int, symmetrisation: Symmetrisation) -> dict[str, Any]:
    """The results' head: what was checked and how; "runs" is filled run by run."""
    test_set, settings = context.test_set, context.settings
    return {
        "test_set": test_set.describe(),
        "sentences": len(test_set.references),
        "selection": f"up to {per_bucket} per bucket, {SELECTION}" if per_bucket else "all",
        "buckets": settings.buckets,
        "by": settings.by,
        "n": bucket_counts(test_set, settings.buckets, settings.by),
        "decoding": "greedy (beam 1), the run's length limits",
        "seed": context.seed,
        "symmetrisation": symmetrisation,
        "significance": settings.significance,  # a Transformer's ablations: what p counts as chance
        "runs": {},
    }


def _refuse_runs_without_attention(runs: Sequence[RunInfo]) -> None:
    """Both checks need attention weights: the fixed-vector model (attention: none) has none."""
    for run in runs:
        without = model_kind(run.config.model).without_attention
        if without:
            raise NMTError(
                f"{run.name} has no attention ({without}): there are no weights to check.",
                "Give runs with attention (RNNsearch); the fixed-vector model has one context for every step.",
            )


def _greedy_bleu(
    name: str, what: str, loaded: LoadedRun, context: CheckContext, switches: dict[str, AbstractContextManager[Any]]
) -> Iterator[tuple[str, dict[str, Any], list[str]]]:
    """Greedy BLEU per bucket of run `name`'s loaded checkpoint within each of `switches` (each entered once;
    `what` they change, for the log), within the run's decoding length limits: (switch, its score, its
    translations) one switch at a time."""
    test_set = context.test_set
    assert test_set.sources is not None
    translator = Translator(loaded.model, loaded.tokenizer, loaded.config.decoding, 1, context.batch_size)  # greedy
    for kind, switch in switches.items():
        started = time.perf_counter()
        with switch:
            hyps = [str(h) for h in translator.translate(test_set.sources)]
        bleu, overall = bucket_bleu(context.scorer, hyps, test_set.sources, test_set.references, context.settings.buckets,
                                    context.settings.by)
        print(f"{name}: {what} {kind}: BLEU {overall:.2f}", file=sys.stderr)
        yield kind, {"bleu": bleu, "all": overall, "seconds": round(time.perf_counter() - started, 1)}, hyps


def perturbation_bleu(name: str, loaded: LoadedRun, context: CheckContext, switched: AttentionSwitches) -> dict[str, Any]:
    """Greedy BLEU per bucket of run `name`'s loaded checkpoint with each of its model's attention switches
    (an RNN's: each of nmt.models.attention.PERTURBATIONS), within the run's decoding length limits."""
    return {kind: score for kind, score, _ in _greedy_bleu(name, switched.what, loaded, context, switched.switches)}


def head_ablation_bleu(
    name: str, loaded: LoadedRun, context: CheckContext, switched: AttentionSwitches
) -> dict[str, Any]:
    """Greedy BLEU per bucket of run `name`'s loaded checkpoint with each of its model's attention switches
    (a Transformer's: its cross-attention ablated in one decoder layer at a time, the module docstring),
    each with its paired-bootstrap p against the unchanged model ("none") on all sentences and on the long
    ones (evaluation.long_words and more)."""
    test_set, settings = context.test_set, context.settings
    assert test_set.sources is not None
    lengths = np.asarray(sentence_lengths(test_set.sources, test_set.references, settings.by))
    long = np.flatnonzero(lengths >= settings.long_words)
    scores: dict[str, Any] = {}
    stats: dict[str, np.ndarray] = {}
    for kind, score, hyps in _greedy_bleu(name, switched.what, loaded, context, switched.switches):
        stats[kind] = context.scorer.sentence_stats(hyps)
        score["long"] = float(bleu_from_stats(stats[kind][long].sum(axis=0))) if long.size else None
        for part, rows in (("all", slice(None)), ("long", long)):
            if kind != "none" and (part == "all" or long.size):
                samples = bootstrap_bleu([stats["none"][rows], stats[kind][rows]], settings.bootstrap_samples,
                                         settings.bootstrap_seed)
                score[f"p_{part}"] = paired_p_value(*samples)
        scores[kind] = score
    return scores


ALIGNMENTS = "alignments"  # the folder of cached links in a prepared data folder


def _alignment_cache(data: DataConfig, test_set: TestSet, symmetrisation: Symmetrisation) -> tuple[Path, list[Pair]]:
    """Where the links of `test_set` aligned with `data`'s prepared training pairs are cached: a file named by
    the hash of everything they depend on (the symmetrisation, the training pairs, the test pairs), in the
    prepared folder (`nmt prepare` replaces it whole when the data change); and those training pairs."""
    train = load_prepared(data).pairs("train")
    content = json.dumps([symmetrisation, train, test_set.sources, test_set.references], ensure_ascii=False)
    digest = hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]
    return Path(prepared_dir(data)) / ALIGNMENTS / f"{symmetrisation}-{digest}.json", train


def cached_links(data: DataConfig, test_set: TestSet, symmetrisation: Symmetrisation) -> list[set[Link]] | None:
    """The cached links of `_alignment_cache`, or None."""
    path, _ = _alignment_cache(data, test_set, symmetrisation)
    if not path.is_file():
        return None
    return [{(int(i), int(j)) for i, j in pair} for pair in json.loads(path.read_text(encoding="utf-8"))]


def cache_experiment_links(config: Config, symmetrisation: Symmetrisation = "grow-diag-final-and") -> Path:
    """Align and cache (`aligner_links`) the sample an experiment's attention checks measure (`attention_checks`
    with its defaults: the first attention run's evaluation split and curve sample), so that the experiment
    can run the alignment check on a machine without eflomal once the prepared folder is carried there.
    Returns the cache file."""
    attentive = [name for name in config.runs if config.for_run(name).model.attention != "none"] or [None]
    run = config.for_run(attentive[0]) if attentive[0] else config
    settings = run.evaluation
    test_set = split_test_set(run, settings.split)
    if settings.curve_sentences_per_bucket:
        test_set = sample_test_set(test_set, settings.buckets, settings.by, settings.curve_sentences_per_bucket)
    aligner_links(run.data, test_set, symmetrisation)
    return _alignment_cache(run.data, test_set, symmetrisation)[0]


def aligner_links(data: DataConfig, test_set: TestSet, symmetrisation: Symmetrisation) -> list[set[Link]]:
    """eflomal's symmetrised links of the test pairs, aligned together with the prepared training pairs of
    `data` (all of them: a run's training.max_words filter is not applied), as is usual for an unsupervised
    aligner. Cached in the prepared folder (`_alignment_cache`): a machine without eflomal re-uses the links
    computed elsewhere, and every run and seed is measured against the same links (eflomal takes no seed)."""
    found = cached_links(data, test_set, symmetrisation)
    if found is not None:
        print(f"eflomal: links of {len(found)} test pairs read from the cache in {prepared_dir(data)}", file=sys.stderr)
        return found
    path, train = _alignment_cache(data, test_set, symmetrisation)
    started = time.perf_counter()
    found = align_words(
        [s for s, _ in train] + list(test_set.sources or []), [t for _, t in train] + test_set.references, symmetrisation
    )[len(train):]
    print(f"eflomal: {len(train) + len(found)} pairs aligned in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    try:
        path.parent.mkdir(exist_ok=True)
        atomic_write_text(path, json.dumps([sorted(links) for links in found]))
    except OSError as error:  # a read-only data folder: the links are only not cached
        print(f"eflomal: the links were not cached ({error})", file=sys.stderr)
    return found


def _checkpoints(run: RunInfo, steps: Sequence[int] | None) -> list[Path]:
    """The periodic checkpoints asked for (None: every kept one), then the run's evaluated checkpoint."""
    if steps is None:
        chosen = step_checkpoints(run.run_dir)
    else:
        chosen = [run.run_dir / CHECKPOINT_DIR / step_checkpoint_name(step) for step in steps]
        missing = [path.name for path in chosen if not path.is_file()]
        if missing:
            have = ", ".join(p.name for p in step_checkpoints(run.run_dir)) or "none"
            raise NMTError(f"{run.name} has no {', '.join(missing)} (it keeps: {have}).", "Give --steps it has.")
    return [path for path in chosen if path.resolve() != run.checkpoint.resolve()] + [run.checkpoint]


def teacher_forced_argmax(
    model: Any, tokenizer: Any, sources: Sequence[str], references: Sequence[str], batch_size: int
) -> dict[str, list[list[int] | None]]:
    """Per attention view (the model's `attention_views`) and pair, the argmax source word of each reference word under
    teacher forcing (None where the pieces' words do not match the whitespace words the aligner sees, or a
    side is empty).

    Each batch: src batch x S, tgt_in batch x T -> weights batch x T x S; row t is the step that predicts
    reference piece t (the last, EOS), column s source piece s (the last real one, EOS)."""
    result: dict[str, list[list[int] | None]] = {}
    keep = [i for i in range(len(sources)) if sources[i].split() and references[i].split()]
    order = sorted(keep, key=lambda i: -len(sources[i]))
    device = next(model.parameters()).device
    model.eval()
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        src_ids = [tokenizer.encode_src(sources[i]) for i in batch]
        tgt_ids = [tokenizer.encode_tgt(references[i]) for i in batch]
        data = make_batch(src_ids, tgt_ids, batch).to(device)
        with torch.inference_mode():
            views = model.attention_views(data.src, data.src_lengths, data.tgt_in)
        for view, attention in views.items():
            found = result.setdefault(view, [None] * len(sources))
            attention = attention.float().cpu().numpy()
            for row, i in enumerate(batch):
                weights = attention[row, : len(tgt_ids[row]) + 1, : len(src_ids[row]) + 1]
                src_pieces, tgt_pieces = tokenizer.src_pieces(sources[i]), tokenizer.tgt_id_to_piece(tgt_ids[row])
                # words as in the attention plots; the EOS column is index n_src, the EOS row is left out
                rows, src_words, tgt_words = word_attention(weights, [*src_pieces, EOS_LABEL], [*tgt_pieces, EOS_LABEL])
                if (len(src_words) - 1, len(tgt_words) - 1) == (len(sources[i].split()), len(references[i].split())):
                    found[i] = [int(j) for j in rows[:-1].argmax(axis=1)]
    return result


def agreement_by_bucket(name: str, loaded: LoadedRun, context: CheckContext, links: list[set[Link]]) -> dict[str, Any]:
    """Alignment agreement with the aligner's `links` of a loaded checkpoint of run `name`: over all pairs
    and per bucket, of the model's attention and, for a Transformer, of each layer's heads and their mean
    ("heads")."""
    test_set, settings = context.test_set, context.settings
    assert test_set.sources is not None
    views = teacher_forced_argmax(loaded.model, loaded.tokenizer, test_set.sources, test_set.references, context.batch_size)
    n_src = [len(source.split()) for source in test_set.sources]
    buckets = make_buckets(settings.buckets)
    members = assign_buckets(sentence_lengths(test_set.sources, test_set.references, settings.by), buckets)
    scored = {}
    for view, argmaxes in views.items():
        per_bucket, total = agreement_per_bucket(argmaxes, links, n_src, members, len(buckets))
        scored[view] = {
            "all": {**total.summary(), "skipped_sentences": total.skipped},
            "buckets": {bucket.label: part.summary() for bucket, part in zip(buckets, per_bucket, strict=True)},
        }
    main = scored.pop(MAIN_VIEW)
    checkpoint = loaded.checkpoint.name
    print(f"{name}: {checkpoint} (step {loaded.step}): argmax agreement {percent(main['all']['agreement'])}",
          file=sys.stderr)
    return {"checkpoint": checkpoint, "step": loaded.step, **main, **({"heads": scored} if scored else {})}
