"""Greedy and beam search on a trained reverse-digits model: batch invariance, beam 1 == greedy, scores
that are the model's own log-probabilities, n-best order, length penalties and length limits."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, get_args

import pytest
import torch

from nmt.config import ModelConfig
from nmt.config_sections import LengthPenalty
from nmt.data.batching import make_source_batch
from nmt.decoding.search import (
    Hypothesis,
    _finite,
    beam_search,
    greedy_hypotheses,
    greedy_search,
    length_penalty_divisor,
    max_output_lengths,
)
from nmt.decoding.translator import Translation, Translator
from nmt.errors import NMTError
from nmt.models import build_model
from nmt.rundir.loading import load_run
from nmt.special import BOS_ID, EOS_ID, PAD_ID
from tests.helpers import needs_cuda
from tests.synthetic import reverse_pairs


@pytest.fixture(scope="module")
def loaded(trained_reverse_run: Path) -> Any:
    return load_run(trained_reverse_run, device="cpu")


@pytest.fixture(scope="module")
def sources(loaded: Any) -> list[list[int]]:
    """20 sources of 1-25 digits: shorter and longer than anything in training (5-12)."""
    return [loaded.tokenizer.encode_src(src) for src, _ in reverse_pairs(20, 1, 25, seed=11)]


def _batch(seqs: list[list[int]], ratio: float = 2.0, offset: int = 10) -> tuple[torch.Tensor, ...]:
    src, lengths = make_source_batch(seqs)
    return src, lengths, max_output_lengths(lengths, ratio, offset)


def _alone(seqs: list[list[int]], search: Any) -> list[Any]:
    return [search(*_batch([s]))[0] for s in seqs]


def _assert_same(batched: list[Hypothesis], alone: list[Hypothesis]) -> None:
    assert [h.tokens for h in batched] == [h.tokens for h in alone]
    for b, a in zip(batched, alone, strict=True):
        assert b.score == pytest.approx(a.score, abs=1e-4)


def test_max_output_lengths() -> None:
    assert max_output_lengths(torch.tensor([1, 10, 7]), 1.5, 2).tolist() == [3, 17, 12]
    assert max_output_lengths(torch.tensor([1, 3]), 0.1, 0).tolist() == [1, 1]
    # ratios whose product is whole but lands a hair under it in float32 (2.1) or float64 (0.29)
    assert max_output_lengths(torch.tensor([30, 50, 60]), 2.1, 0).tolist() == [63, 105, 126]
    assert max_output_lengths(torch.tensor([100, 90]), 0.29, 1).tolist() == [30, 27]
    # a huge limit stays a huge limit: it does not wrap round to a negative integer clamped to 1 token
    assert max_output_lengths(torch.tensor([3]), 1e30, 0).tolist() == [2**31 - 1]
    assert max_output_lengths(torch.tensor([3]), 1.0, 10**20).tolist() == [2**31 - 1]


def test_finite_is_isfinite_on_what_scores_can_be() -> None:
    scores = torch.tensor([-math.inf, -1e38, -3.5, -1e-30, 0.0, math.nan])  # never +inf: sums of log-probabilities
    assert _finite(scores).tolist() == torch.isfinite(scores).tolist() == [False, True, True, True, True, False]


def test_length_penalty_divisors() -> None:
    assert length_penalty_divisor(9, "none", 0.6) == 1.0
    assert length_penalty_divisor(9, "average", 0.6) == 9.0
    assert length_penalty_divisor(1, "gnmt", 0.6) == pytest.approx(1.0)
    assert length_penalty_divisor(7, "gnmt", 1.0) == pytest.approx(2.0)
    assert length_penalty_divisor(19, "gnmt", 0.5) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="unknown length penalty"):
        length_penalty_divisor(3, "wordcount", 0.6)  # type: ignore[arg-type]


def test_greedy_is_the_same_alone_in_a_mixed_batch_and_in_any_order(loaded: Any, sources: list[list[int]]) -> None:
    model = loaded.model
    batched = greedy_hypotheses(model, *_batch(sources))
    alone = _alone(sources, lambda *b: greedy_hypotheses(model, *b))
    _assert_same(batched, alone)
    reversed_batch = greedy_hypotheses(model, *_batch(sources[::-1]))[::-1]
    _assert_same(reversed_batch, alone)
    assert greedy_search(model, *_batch(sources)) == [h.tokens for h in alone]


@pytest.mark.parametrize("penalty", ["none", "gnmt"])
def test_beam_is_the_same_alone_in_a_mixed_batch_and_in_any_split(
    loaded: Any, sources: list[list[int]], penalty: str
) -> None:
    def search(*batch: torch.Tensor) -> list[list[Hypothesis]]:
        return beam_search(loaded.model, batch[0], batch[1], 5, batch[2], length_penalty=penalty, nbest=3)

    batched = search(*_batch(sources))
    alone = _alone(sources, search)
    # other company: the odd sentences with the even ones, in another order
    regrouped = search(*_batch(sources[1::2] + sources[::2]))
    regrouped = [regrouped[len(sources) // 2 + i // 2] if i % 2 == 0 else regrouped[i // 2] for i in range(20)]
    for hyps in (batched, regrouped):
        for b, a in zip(hyps, alone, strict=True):
            assert len(b) == len(a) == 3
            _assert_same(b, a)


@pytest.mark.parametrize("penalty", get_args(LengthPenalty))
def test_beam_of_one_is_greedy(loaded: Any, sources: list[list[int]], penalty: str) -> None:
    greedy = greedy_hypotheses(loaded.model, *_batch(sources))
    beam = [h[0] for h in beam_search(loaded.model, *_batch(sources)[:2], 1, _batch(sources)[2], penalty)]
    assert [h.tokens for h in beam] == [h.tokens for h in greedy]
    assert [h.log_prob for h in beam] == pytest.approx([h.log_prob for h in greedy], abs=1e-4)


def test_scores_are_the_model_log_probabilities_over_the_length_penalty(
    loaded: Any, sources: list[list[int]]
) -> None:
    model = loaded.model
    for penalty, alpha in (("none", 0.6), ("average", 0.6), ("gnmt", 1.0)):
        for row, hyps in enumerate(beam_search(model, *_batch(sources)[:2], 4, _batch(sources)[2], penalty, alpha, 4)):
            for h in hyps:
                target = torch.tensor([[BOS_ID, *h.tokens, EOS_ID]])
                src, lengths = make_source_batch([sources[row]])
                with torch.no_grad():
                    log_probs = model(src, lengths, target[:, :-1]).log_softmax(-1)
                teacher_forced = log_probs[0].gather(1, target[0, 1:, None]).sum().item()
                assert h.log_prob == pytest.approx(teacher_forced, abs=1e-3)
                assert h.score == pytest.approx(h.log_prob / length_penalty_divisor(len(h.tokens) + 1, penalty, alpha))


def test_beam_finds_at_least_the_greedy_log_probability(loaded: Any, sources: list[list[int]]) -> None:
    greedy = greedy_hypotheses(loaded.model, *_batch(sources))
    beam = [h[0] for h in beam_search(loaded.model, *_batch(sources)[:2], 5, _batch(sources)[2], "none")]
    gains = [b.log_prob - g.log_prob for b, g in zip(beam, greedy, strict=True)]
    assert min(gains) >= -1e-4
    assert max(gains) > 1e-3, "beam search never beat greedy: it is not searching"


def test_nbest_lists_are_distinct_and_sorted_best_first(loaded: Any, sources: list[list[int]]) -> None:
    for penalty in get_args(LengthPenalty):
        for hyps in beam_search(loaded.model, *_batch(sources)[:2], 5, _batch(sources)[2], penalty, nbest=5):
            assert 1 <= len(hyps) <= 5
            scores = [h.score for h in hyps]
            assert scores == sorted(scores, reverse=True)
            assert len({tuple(h.tokens) for h in hyps}) == len(hyps)
    with pytest.raises(ValueError, match="nbest"):
        beam_search(loaded.model, *_batch(sources)[:2], 2, _batch(sources)[2], nbest=3)


def test_each_sentence_keeps_its_own_length_limit(loaded: Any, sources: list[list[int]]) -> None:
    src, lengths, _ = _batch(sources)
    limits = torch.tensor([1 + i % 4 if i % 3 else 60 for i in range(len(sources))])
    for hyps in (
        [[h] for h in greedy_hypotheses(loaded.model, src, lengths, limits)],
        beam_search(loaded.model, src, lengths, 3, limits, nbest=3),
    ):
        for row, row_hyps in enumerate(hyps):
            assert all(len(h.tokens) <= limits[row] for h in row_hyps)
    # the unlimited sentences are untouched by their cut-short neighbours
    free = [i for i in range(len(sources)) if i % 3 == 0]
    unlimited = greedy_search(loaded.model, src, lengths, torch.full((len(sources),), 60))
    limited = greedy_search(loaded.model, src, lengths, limits)
    assert [limited[i] for i in free] == [unlimited[i] for i in free]
    assert any(len(unlimited[i]) > limits[i] for i in range(len(sources)) if i % 3)


def test_attention_rows_are_alignments_over_the_own_source(loaded: Any, sources: list[list[int]]) -> None:
    hyps = beam_search(loaded.model, *_batch(sources)[:2], 3, _batch(sources)[2], return_attention=True)
    greedy = greedy_hypotheses(loaded.model, *_batch(sources), return_attention=True)
    for row, (best, g) in enumerate(zip([h[0] for h in hyps], greedy, strict=True)):
        n = len(sources[row]) + 1  # with EOS
        for h in (best, g):
            assert h.attention is not None and h.attention.shape == (len(h.tokens) + 1, n)
            torch.testing.assert_close(h.attention.sum(1), torch.ones(len(h.tokens) + 1), atol=1e-4, rtol=0)
    # within the trained lengths, output token i is read from about source position n - 2 - i (reversal;
    # a bidirectional annotation also knows its neighbours, so one position off is an alignment too)
    trained = [loaded.tokenizer.encode_src(src) for src, _ in reverse_pairs(20, 5, 12, seed=12)]
    mirrored = total = 0
    for seq, h in zip(trained, beam_search(loaded.model, *_batch(trained)[:2], 3, _batch(trained)[2],
                                           return_attention=True), strict=True):
        n = len(seq) + 1
        for i in range(min(len(h[0].tokens), n - 1)):
            mirrored += abs(int(h[0].attention[i].argmax()) - (n - 2 - i)) <= 1
            total += 1
    assert mirrored / total > 0.85


def test_search_needs_no_attention_and_leaves_the_training_mode(sources: list[list[int]]) -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(attention="none", embedding_size=8, hidden_size=8, maxout_size=4, dropout=0.5), 30, 30)
    model.train()
    src, lengths, limits = _batch(sources[:4], 1.0, 2)
    first = beam_search(model, src, lengths, 2, limits, return_attention=True)
    assert model.training
    assert all(h[0].attention is None for h in first)
    again = beam_search(model, src, lengths, 2, limits, return_attention=True)  # dropout is off while searching
    assert [h[0].tokens for h in again] == [h[0].tokens for h in first]


def test_search_never_chooses_pad_or_bos(loaded: Any, sources: list[list[int]]) -> None:
    model = loaded.model
    src, lengths, limits = _batch(sources[:6])
    greedy, beam = greedy_hypotheses(model, src, lengths, limits), beam_search(model, src, lengths, 3, limits)

    for preferred in (PAD_ID, BOS_ID):

        def preferring(*args: Any, token: int = preferred) -> Any:  # a model that would rather say nothing
            log_probs, state, attn = type(model).decode_step(model, *args)
            log_probs[:, token] = 0.0  # probability 1
            return log_probs, state, attn

        model.decode_step = preferring
        try:
            assert [h.tokens for h in greedy_hypotheses(model, src, lengths, limits)] == [h.tokens for h in greedy]
            assert [[h.tokens for h in hs] for hs in beam_search(model, src, lengths, 3, limits)] == [
                [h.tokens for h in hs] for hs in beam]
        finally:
            del model.decode_step
    assert all(h.tokens for h in greedy)  # translations to compare, not empty ones


def test_greedy_ends_at_the_limit_on_log_probabilities_of_nan(loaded: Any, sources: list[list[int]]) -> None:
    model, steps = loaded.model, []

    def nan_step(*args: Any) -> Any:  # a model that overflowed
        steps.append(1)
        assert len(steps) < 100, "greedy went on past its limit"
        log_probs, state, attn = type(model).decode_step(model, *args)
        return torch.full_like(log_probs, math.nan), state, attn

    model.decode_step = nan_step
    try:
        src, lengths, limits = _batch(sources[:1], 1.0, 3)
        (found,) = greedy_hypotheses(model, src, lengths, limits)
    finally:
        del model.decode_step
    assert len(found.tokens) == limits[0] and math.isnan(found.log_prob)
    # beam search finishes no hypothesis of a finite score: the translator says so, naming the line
    translator = Translator(model, loaded.tokenizer, loaded.config.decoding, 3, 8)
    model.decode_step, steps[:] = nan_step, []
    try:
        with pytest.raises(NMTError, match="^line 2: the model's log-probabilities are not finite"):
            translator.translate(["", "1 2 3"])
        # and greedy (beam 1), whose NaN hypotheses end at the limit: no blank line in their place
        greedy = Translator(model, loaded.tokenizer, loaded.config.decoding, 1, 8)
        with pytest.raises(NMTError, match="^line 1: the model's log-probabilities are not finite"):
            greedy.translate(["1 2 3"])
    finally:
        del model.decode_step


@needs_cuda
def test_on_cuda_greedy_and_beam_search_find_the_cpus_hypotheses(
    trained_reverse_run: Path, loaded: Any, sources: list[list[int]]
) -> None:
    """Search runs in fp32 without TF32 on a GPU (cuDNN's RNN there, the step loop here): the same
    hypotheses as on the CPU, log-probabilities equal to 1e-4."""
    on_gpu = load_run(trained_reverse_run, device="cuda")
    src, lengths, max_lengths = _batch(sources)
    searches = {
        "greedy": lambda model, *batch: greedy_hypotheses(model, *batch),
        "beam": lambda model, *batch: [h[0] for h in beam_search(model, *batch[:2], 5, batch[2], "gnmt")],
    }
    for name, search in searches.items():
        cpu = search(loaded.model, src, lengths, max_lengths)
        gpu = search(on_gpu.model, src.cuda(), lengths.cuda(), max_lengths)
        assert [h.tokens for h in gpu] == [h.tokens for h in cpu], name
        assert [h.log_prob for h in gpu] == pytest.approx([h.log_prob for h in cpu], abs=1e-4), name


@needs_cuda
@pytest.mark.parametrize("run", ["trained_reverse_run", "trained_transformer_run"])
def test_on_cuda_a_batch_of_256_mixed_lengths_translates_as_each_sentence_alone(
    run: str, request: pytest.FixtureRequest
) -> None:
    """The Translator on a GPU decodes as `nmt translate` does there: fp32 without TF32 and without autocast
    (only training and its validation run in bf16). 256 sentences of 1-12 digits in one batch, where sentences
    leave the batch as they finish, get the same greedy and beam-5 texts as each sentence alone in a batch of
    one. The two batches' GEMMs have different shapes, and so may round differently in the last fp32 bits:
    what is compared is the texts, exactly, and the scores to 1e-4 (a near-tie within that rounding could
    still flip a choice, and this test would show it)."""
    loaded = load_run(request.getfixturevalue(run), device="cuda")
    sentences = [src for src, _ in reverse_pairs(256, 1, 12, seed=13)]

    def best(beam: int, batch_size: int) -> list[Translation]:
        translator = Translator(loaded.model, loaded.tokenizer, loaded.config.decoding, beam, batch_size)
        return [first for first, *_ in translator.translate_nbest(sentences)]

    for beam in (1, 5):
        together, alone = best(beam, len(sentences)), best(beam, 1)
        assert [t.text for t in together] == [t.text for t in alone], f"beam {beam}"
        assert [t.score for t in together] == pytest.approx([t.score for t in alone], abs=1e-4), f"beam {beam}"


class _Rows:
    """An encoder output or decoder state with nothing in it: what search reorders, beams copied."""

    def index_select(self, rows: torch.Tensor) -> _Rows:
        return self


class _ScriptedModel(torch.nn.Module):
    """log p(next | previous token), written out: from BOS, EOS (-1.0) or 5 (-0.9); then 5 -> 6 -> 7 -> EOS
    (-0.2, -0.2, -0.1); every other continuation -50. Hypotheses: "EOS" at -1.0, "5 6 7 EOS" at -1.4."""

    NEXT = {BOS_ID: {EOS_ID: -1.0, 5: -0.9}, 5: {6: -0.2}, 6: {7: -0.2}, 7: {EOS_ID: -0.1}}

    def encode(self, src: torch.Tensor, lengths: torch.Tensor) -> _Rows:
        return _Rows()

    def init_state(self, enc: _Rows) -> _Rows:
        return _Rows()

    def decode_step(self, prev: torch.Tensor, state: _Rows, enc: _Rows) -> tuple[torch.Tensor, _Rows, None]:
        log_probs = torch.full((prev.numel(), 9), -50.0)
        for row, token in enumerate(prev.tolist()):
            for choice, value in self.NEXT.get(token, {}).items():
                log_probs[row, choice] = value
        return log_probs, state, None


def test_a_live_beam_that_would_win_under_the_length_penalty_is_searched_to_its_end() -> None:
    """Under GNMT's penalty (alpha 1) "5 6 7 EOS" scores -1.4 / (9/6) = -0.93 and beats "EOS"'s -1.0 / 1, though
    its log-probability (-1.1 at step 2) is already below -1.0: only the bound over the largest divisor the
    length limit allows keeps it searched; a bound on the raw log-probability stops at step 2 with "EOS"."""
    src, lengths = make_source_batch([[4, 4]])
    (found,) = beam_search(_ScriptedModel(), src, lengths, 2, torch.tensor([10]), length_penalty="gnmt", alpha=1.0)
    assert [h.tokens for h in found] == [[5, 6, 7]]
    assert found[0].score == pytest.approx(-1.4 / 1.5)
    (plain,) = beam_search(_ScriptedModel(), src, lengths, 2, torch.tensor([10]), length_penalty="none")
    assert [h.tokens for h in plain] == [[]]  # by log-probability alone, "EOS" (-1.0) is best


class _EndingAtTheLimit(_ScriptedModel):
    """"5 6 7 EOS" at -1.48, whose last steps cost little: with a limit of 3 tokens it ends exactly there."""

    NEXT = {BOS_ID: {EOS_ID: -1.0, 5: -0.9}, 5: {6: -0.5}, 6: {7: -0.05}, 7: {EOS_ID: -0.03}}


def test_the_bound_of_a_live_beam_counts_the_eos_that_the_limit_still_allows() -> None:
    """At the limit of 3 tokens "5 6 7 EOS" has 4 (EOS counted): (5 + 4) / 6 = 1.5, so -1.48 / 1.5 = -0.987 beats
    "EOS"'s -1.0. A bound over a divisor of 3 tokens ((5 + 3) / 6) gives up on it at step 2 (-1.4 / 1.33 < -1.0)."""
    src, lengths = make_source_batch([[4, 4]])
    (found,) = beam_search(_EndingAtTheLimit(), src, lengths, 2, torch.tensor([3]), length_penalty="gnmt", alpha=1.0)
    assert [h.tokens for h in found] == [[5, 6, 7]] and found[0].score == pytest.approx(-1.48 / 1.5)


def test_greedy_cut_at_its_limit_scores_the_eos_it_is_given() -> None:
    """Limit 2: "5 6", then EOS forced, whose log-probability after 6 is -50: the score is -0.9 - 0.2 - 50, not
    that of the 7 the model would have chosen (-0.2)."""
    src, lengths = make_source_batch([[4, 4]])
    (cut,) = greedy_hypotheses(_ScriptedModel(), src, lengths, torch.tensor([2]))
    assert cut.tokens == [5, 6] and cut.score == pytest.approx(-51.1)
    (whole,) = greedy_hypotheses(_ScriptedModel(), src, lengths, torch.tensor([10]))
    assert whole.tokens == [5, 6, 7] and whole.score == pytest.approx(-1.4)


class _EndingAtOnce(_ScriptedModel):
    """From BOS, EOS (-0.1) before 5 (-2.0); then 5 -> 6 -> EOS (-0.2, -0.1): "EOS" at -0.1 beats "5 6 EOS" (-2.3)."""

    NEXT = {BOS_ID: {EOS_ID: -0.1, 5: -2.0}, 5: {6: -0.2}, 6: {EOS_ID: -0.1}}


@pytest.mark.parametrize("beam", [1, 2])
def test_min_length_keeps_eos_back_for_its_first_tokens(beam: int) -> None:
    """An undertrained model's favourite, the empty translation, is what search finds at min_length 0 (OpenNMT-py's
    default); at 1 (fairseq's, JoeyNMT's) EOS waits for a first token, and the search goes on as before after it."""
    src, lengths = make_source_batch([[4, 4]])

    def search(min_length: int) -> Hypothesis:
        if beam == 1:
            return greedy_hypotheses(_EndingAtOnce(), src, lengths, torch.tensor([10]), min_length=min_length)[0]
        return beam_search(_EndingAtOnce(), src, lengths, beam, torch.tensor([10]), length_penalty="none",
                           min_length=min_length)[0][0]

    assert search(0).tokens == [] and search(0).log_prob == pytest.approx(-0.1)
    assert search(1).tokens == [5, 6] and search(1).log_prob == pytest.approx(-2.3)
    assert search(2).tokens == [5, 6]  # EOS after 6 is its third step: allowed
    with pytest.raises(ValueError, match=r"min_length 11 is above a sentence's length limit \(10\)"):
        search(11)


def test_min_length_reaches_the_translator_from_the_config(loaded: Any) -> None:
    """decoding.min_length, through `nmt translate`'s Translator (greedy and beam): a model that would end every
    translation at once gives translations of at least that many pieces; the config refuses a minimum above the
    least length limit (max_length_offset), where EOS would be both required and refused."""
    import dataclasses

    from nmt.config_sections import DecodingConfig

    model = loaded.model

    def ending(*args: Any) -> Any:  # a model that would rather say nothing at every step
        log_probs, state, attn = type(model).decode_step(model, *args)
        log_probs[:, EOS_ID] = 0.0
        return log_probs, state, attn

    model.decode_step = ending
    try:
        for beam in (1, 3):
            plain = Translator(model, loaded.tokenizer, loaded.config.decoding, beam, 8)
            assert [[t.tgt_pieces for t in ts] for ts in plain.translate_nbest(["1 2 3", "4 5"])] == [[["</s>"]]] * 2
            at_least = dataclasses.replace(loaded.config.decoding, min_length=2)
            found = Translator(model, loaded.tokenizer, at_least, beam, 8).translate_nbest(["1 2 3", "4 5"])
            assert [len(ts[0].tgt_pieces) for ts in found] == [3, 3], found  # two pieces and EOS
    finally:
        del model.decode_step
    with pytest.raises(NMTError, match=r"'decoding.min_length': must be from 0 to decoding.max_length_offset \(3\)"):
        DecodingConfig(min_length=4, max_length_offset=3).validate()
    DecodingConfig(min_length=3, max_length_offset=3).validate()
