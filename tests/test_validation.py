"""nmt/training/validation.py: a validation pass's loss, perplexity and greedy BLEU on a small known case
(the reverse-digits run of conftest.py), whatever the batching; the metric it reports; which sentences
it validates on."""

from __future__ import annotations

import dataclasses
import math
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import pytest
import sacrebleu
import torch

from nmt.config_sections import EvaluationConfig
from nmt.data.batching import make_batch, make_source_batch
from nmt.decoding.search import greedy_search, max_output_lengths
from nmt.rundir.loading import LoadedRun, load_run
from nmt.special import EOS_ID
from nmt.training.validation import (
    ValidationResult,
    ValidSet,
    batch_loss_sum,
    build_valid_set,
    safe_exp,
    validate,
)
from tests.synthetic import reverse_pairs

CPU = torch.device("cpu")


def _one_at_a_time(run: LoadedRun, valid: ValidSet) -> tuple[list[str], float]:
    """Greedy translations and the per-token loss, each sentence decoded and scored alone."""
    decoding = run.config.decoding
    hypotheses, loss_sum, tokens = [], 0.0, 0
    with torch.no_grad():
        for i, (src, tgt) in enumerate(zip(valid.src, valid.tgt, strict=True)):
            batch = make_batch([src], [tgt], [i])
            loss_sum += float(batch_loss_sum(run.model, batch))
            tokens += int(batch.n_tgt_tokens)
            ids, lengths = make_source_batch([src])
            limit = max_output_lengths(lengths, decoding.max_length_ratio, decoding.max_length_offset)
            hypotheses.append(run.tokenizer.decode_tgt(greedy_search(run.model, ids, lengths, limit)[0]))
    return hypotheses, loss_sum / tokens


def test_validation_is_the_loss_and_sacrebleu_of_the_greedy_translations_whatever_the_batching(
    trained_reverse_run: Path,
) -> None:
    run = load_run(trained_reverse_run, device="cpu")
    pairs = reverse_pairs(12, 5, 10, seed=5)  # held out: the run trained on seed 0
    valid = build_valid_set(pairs, run.tokenizer, 0, EvaluationConfig())
    run.model.eval()
    hypotheses, loss = _one_at_a_time(run, valid)
    run.model.train()
    for batch_tokens in (30, 10_000):  # a sentence or two per batch, and all in one
        config = dataclasses.replace(run.config, training=dataclasses.replace(run.config.training, batch_tokens=batch_tokens))
        result = validate(run.model, valid, run.tokenizer, config, CPU, None)
        assert result.sentences == 12
        assert result.bleu == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [[t for _, t in pairs]]).score)
        assert result.loss == pytest.approx(loss, rel=1e-5)
        assert result.ppl == pytest.approx(math.exp(result.loss))
        assert "nrefs:1" in result.signature and "tok:13a" in result.signature
        assert run.model.training  # the model goes back to training mode
    # it learned the task: most held-out sequences come out reversed exactly (12 of 12, BLEU 100, loss 0.04 on
    # the 2-core AMD EPYC)
    assert sum(h == t for h, (_, t) in zip(hypotheses, pairs, strict=True)) >= 9
    assert result.bleu > 80 and result.loss < 0.5
    # scored as nmt evaluate scores, with evaluation.tokenize and evaluation.lowercase: best.pt chooses by it
    references = [t.replace(" ", "", 1) for _, t in pairs]  # the first two digits one word: char tokens see no change
    shortened = [(source, reference) for (source, _), reference in zip(pairs, references, strict=True)]
    scores = []
    for evaluation in (EvaluationConfig(), EvaluationConfig(tokenize="char", lowercase=True)):
        scored = validate(run.model, build_valid_set(shortened, run.tokenizer, 0, evaluation), run.tokenizer, run.config, CPU, None)
        expected = sacrebleu.BLEU(tokenize=evaluation.tokenize, lowercase=evaluation.lowercase)
        assert scored.bleu == pytest.approx(expected.corpus_score(hypotheses, [references]).score)
        assert f"tok:{evaluation.tokenize}" in scored.signature
        assert ("case:lc" in scored.signature) == evaluation.lowercase
        scores.append(scored.bleu)
    assert scores[0] != pytest.approx(scores[1])


def test_the_early_stopping_metric_and_an_overflowing_perplexity() -> None:
    result = ValidationResult(loss=2.0, ppl=math.exp(2.0), bleu=31.5, signature="", sentences=3)
    assert (result.score("bleu"), result.score("loss")) == (31.5, 2.0)
    assert safe_exp(1000.0) == math.inf and safe_exp(0.0) == 1.0


def test_every_forward_pass_runs_under_the_training_precision(
    trained_reverse_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nmt.training.validation as validation

    asked: list[torch.dtype | None] = []

    def recording_autocast(dtype: torch.dtype | None) -> AbstractContextManager[None]:
        asked.append(dtype)  # the CPU has no bf16 autocast to enter: record, then run in fp32
        return nullcontext()

    monkeypatch.setattr(validation, "autocast", recording_autocast)
    run = load_run(trained_reverse_run, device="cpu")
    valid = build_valid_set(reverse_pairs(4, 5, 10, seed=5), run.tokenizer, 0, EvaluationConfig())
    config = dataclasses.replace(run.config, training=dataclasses.replace(run.config.training, batch_tokens=30))
    validate(run.model, valid, run.tokenizer, config, CPU, torch.bfloat16)
    assert len(asked) >= 4 and set(asked) == {torch.bfloat16}  # a loss and a search per batch of 1-2 sentences


class TaggingTokenizer:
    """Encodes each side so that the test sees which encoder a sentence went through."""

    def encode_src(self, text: str) -> list[str]:
        return ["src", text]

    def encode_tgt(self, text: str) -> list[str]:
        return ["tgt", text]


def test_the_validation_subset_is_spread_over_the_whole_split() -> None:
    pairs = [(" ".join(str(i)), f"t{i}") for i in range(100)]
    tokenizer = TaggingTokenizer()
    subset = build_valid_set(pairs, tokenizer, 10, EvaluationConfig())
    assert subset.references == [f"t{i}" for i in range(0, 100, 10)]
    assert subset.src[1] == ["src", "1 0"] and subset.tgt[1] == ["tgt", "t10"]
    assert build_valid_set(pairs, tokenizer, 30, EvaluationConfig()).references == [f"t{i}" for i in range(0, 90, 3)]
    assert build_valid_set(pairs[:5], tokenizer, 10, EvaluationConfig()).references == [f"t{i}" for i in range(5)]
    # fewer than twice as many pairs as asked for: spread to the end too, not the first ones
    assert build_valid_set(pairs, tokenizer, 60, EvaluationConfig()).references[-3:] == ["t95", "t96", "t98"]
    assert build_valid_set(pairs, tokenizer, 50, EvaluationConfig()).references[:3] == ["t0", "t2", "t4"]
    assert len(build_valid_set(pairs, tokenizer, 99, EvaluationConfig()).references) == 99
    assert len(build_valid_set(pairs, tokenizer, 0, EvaluationConfig()).references) == 100  # 0: every sentence


def test_validation_decodes_with_the_runs_min_length(trained_reverse_run: Path) -> None:
    """decoding.min_length holds in validation's greedy search as in `nmt translate`: a model that would end every
    translation at once validates at BLEU 0 with no minimum, and at the BLEU of its translations of at least
    that many pieces with one."""
    run = load_run(trained_reverse_run, device="cpu")
    pairs = reverse_pairs(12, 5, 10, seed=5)
    valid = build_valid_set(pairs, run.tokenizer, 0, EvaluationConfig())
    model = run.model

    def ending(*args: object) -> object:
        log_probs, state, attn = type(model).decode_step(model, *args)
        log_probs[:, EOS_ID] = 0.0
        return log_probs, state, attn

    model.decode_step = ending
    try:
        assert validate(model, valid, run.tokenizer, run.config, CPU, None).bleu == 0.0
        decoding = dataclasses.replace(run.config.decoding, min_length=8)
        result = validate(model, valid, run.tokenizer, dataclasses.replace(run.config, decoding=decoding), CPU, None)
        ids, lengths = make_source_batch(valid.src)
        limits = max_output_lengths(lengths, decoding.max_length_ratio, decoding.max_length_offset)
        found = greedy_search(model, ids, lengths, limits, min_length=8)
    finally:
        del model.decode_step
    assert all(len(tokens) == 8 for tokens in found)  # EOS as soon as it is allowed
    hypotheses = [run.tokenizer.decode_tgt(tokens) for tokens in found]
    assert result.bleu > 0 and result.bleu == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [[t for _, t in pairs]]).score)
