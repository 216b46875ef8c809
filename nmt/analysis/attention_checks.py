"""`nmt attention-checks`' measurements: what a trained run's attention weights do and do not tell.

1. Does the output depend on where attention looks? Greedy decoding with the model's own weights
   (`none`) and with them replaced at every decoder step (nmt/analysis/hooks.py's perturbations):
   uniform over the real source positions, permuted across them (seeded), or one-hot at their argmax;
   BLEU per length bucket of each. A Transformer's cross-attention is ablated instead, layer by layer
   (`head_ablation_bleu`): each head silenced in turn, all heads uniform, all but the best-aligning head
   silenced (Michel et al. 2019); each against `none` by paired bootstrap, on all and on long sentences.
2. Do the weights agree with a word aligner? Teacher-forced attention over the reference, summed over a
   source word's pieces and averaged over a target word's pieces (the per-word maps of the attention
   plots); the argmax source word of each target word is checked against eflomal's symmetrised links
   (nmt/analysis/alignment.py), per length bucket and per kept training checkpoint.
The report (attention_checks.md) is nmt/analysis/attention_report.py's; which runs, which test set and
where the files go is nmt/compare/attention_checks.py's.
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

from nmt.analysis.alignment import Link, Symmetrisation, agreement_per_bucket, align_words
from nmt.analysis.attention_report import percent
from nmt.analysis.hooks import AttentionSwitches, attention_switches, attention_views
from nmt.config_sections import DataConfig, EvaluationConfig
from nmt.data.batching import make_batch
from nmt.data.pairs import Pair
from nmt.data.prepared import load_prepared
from nmt.data.sources import prepared_dir
from nmt.decoding.plots import EOS_LABEL, word_attention
from nmt.decoding.translator import Translator
from nmt.evaluation.buckets import sentence_lengths
from nmt.evaluation.curves import SELECTION, bucket_bleu, bucket_counts
from nmt.evaluation.metrics import Bleu, bleu_from_stats
from nmt.evaluation.scoring import bootstrap_bleu, paired_p_value
from nmt.evaluation.testset import TestSet
from nmt.fileio import atomic_write_text
from nmt.lengths import assign_buckets, make_buckets
from nmt.models.interface import MAIN_VIEW
from nmt.rundir.loading import LoadedRun


@dataclass(frozen=True)
class CheckContext:
    """What the checks of every run share: the sentences checked, the scorer of their references, the
    first run's evaluation settings (buckets, bootstrap), the permutations' seed, and how the runs translate
    (batch size, device)."""

    test_set: TestSet
    scorer: Bleu
    settings: EvaluationConfig
    seed: int
    batch_size: int
    device: str


def perturbation(
    name: str, evaluated: LoadedRun, context: CheckContext, heads: dict[str, Any] | None
) -> dict[str, Any]:
    """The model's attention switches (`heads`: its per-head agreement) scored: an RNN's perturbations by
    `perturbation_bleu`, a Transformer's head ablations, each compared with the unchanged model, by
    `head_ablation_bleu`."""
    switched = attention_switches(evaluated.model, context.seed, heads)
    if switched.compared:
        return head_ablation_bleu(name, evaluated, context, switched)
    return perturbation_bleu(name, evaluated, context, switched)


def setting(context: CheckContext, per_bucket: int, symmetrisation: Symmetrisation) -> dict[str, Any]:
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
        "batch_size": context.batch_size,  # permute's draws follow the batches (nmt/analysis/hooks.py)
        "symmetrisation": symmetrisation,
        "significance": settings.significance,  # a Transformer's ablations: what p counts as chance
        "bootstrap_samples": settings.bootstrap_samples,
        "bootstrap_seed": settings.bootstrap_seed,
        "bleu_signature": context.scorer.signature,
        "runs": {},
    }


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
    (an RNN's: each of nmt.analysis.hooks.PERTURBATIONS), within the run's decoding length limits."""
    return {kind: score for kind, score, _ in _greedy_bleu(name, switched.what, loaded, context, switched.switches)}


def head_ablation_bleu(
    name: str, loaded: LoadedRun, context: CheckContext, switched: AttentionSwitches
) -> dict[str, Any]:
    """Greedy BLEU per bucket of run `name`'s loaded checkpoint with each of its model's attention switches
    (a Transformer's: its cross-attention ablated in one decoder layer at a time, the module docstring),
    each with its paired-bootstrap p against the unchanged model ("none") on all sentences and on the long
    ones (evaluation.long_words and more), where they are evaluation.min_bucket_sentences or more (as a
    bucket's p: fewer say too little to test)."""
    test_set, settings = context.test_set, context.settings
    assert test_set.sources is not None
    lengths = np.asarray(sentence_lengths(test_set.sources, test_set.references, settings.by))
    long = np.flatnonzero(lengths >= settings.long_words)
    scores: dict[str, Any] = {}
    stats: dict[str, np.ndarray] = {}
    for kind, score, hyps in _greedy_bleu(name, switched.what, loaded, context, switched.switches):
        stats[kind] = context.scorer.sentence_stats(hyps)
        score["long"] = float(bleu_from_stats(stats[kind][long].sum(axis=0))) if long.size else None
        for part, rows in (("all", np.arange(lengths.size)), ("long", long)):
            if kind != "none" and rows.size >= settings.min_bucket_sentences:
                samples = bootstrap_bleu([stats["none"][rows], stats[kind][rows]], settings.bootstrap_samples,
                                         settings.bootstrap_seed)
                score[f"p_{part}"] = paired_p_value(*samples)
        scores[kind] = score
    return scores


ALIGNMENTS = "alignments"  # the folder of cached links in a prepared data folder


def alignment_cache(data: DataConfig, test_set: TestSet, symmetrisation: Symmetrisation) -> tuple[Path, list[Pair]]:
    """Where the links of `test_set` aligned with `data`'s prepared training pairs are cached: a file named by
    the hash of everything they depend on (the symmetrisation, the training pairs, the test pairs), in the
    prepared folder (`nmt prepare` replaces it whole when the data change); and those training pairs."""
    train = load_prepared(data).pairs("train")
    content = json.dumps([symmetrisation, train, test_set.sources, test_set.references], ensure_ascii=False)
    digest = hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]
    return Path(prepared_dir(data)) / ALIGNMENTS / f"{symmetrisation}-{digest}.json", train


def cached_links(data: DataConfig, test_set: TestSet, symmetrisation: Symmetrisation) -> list[set[Link]] | None:
    """The cached links of `alignment_cache`, or None."""
    path, _ = alignment_cache(data, test_set, symmetrisation)
    if not path.is_file():
        return None
    return [{(int(i), int(j)) for i, j in pair} for pair in json.loads(path.read_text(encoding="utf-8"))]


def aligner_links(data: DataConfig, test_set: TestSet, symmetrisation: Symmetrisation) -> list[set[Link]]:
    """eflomal's symmetrised links of the test pairs, aligned together with the prepared training pairs of
    a run's `data` (all of them: the run's training.max_words filter is not applied), as is usual for an
    unsupervised aligner. Cached in the prepared folder (`alignment_cache`): a machine without eflomal
    re-uses the links computed elsewhere, and every run and seed is measured against the same links
    (eflomal takes no seed)."""
    found = cached_links(data, test_set, symmetrisation)
    if found is not None:
        print(f"eflomal: links of {len(found)} test pairs read from the cache in {prepared_dir(data)}", file=sys.stderr)
        return found
    path, train = alignment_cache(data, test_set, symmetrisation)
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


def teacher_forced_argmax(
    model: Any, tokenizer: Any, sources: Sequence[str], references: Sequence[str], batch_size: int
) -> dict[str, list[list[int] | None]]:
    """Per attention view (`attention_views`, nmt/analysis/hooks.py) and pair, the argmax source word of each reference word under
    teacher forcing (None where the pieces' words do not match the whitespace words the aligner sees, or a
    side is empty).

    Each batch: src batch x S, tgt_in batch x T -> weights batch x T x S; row t is the step that predicts
    reference piece t (the last, EOS), column s source piece s (the last real one, EOS)."""
    # the model's own view even where no pair has two non-empty sides (then no batch runs): every pair skipped
    result: dict[str, list[list[int] | None]] = {MAIN_VIEW: [None] * len(sources)}
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
            views = attention_views(model, data.src, data.src_lengths, data.tgt_in)
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
