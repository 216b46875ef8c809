"""Batched greedy and beam search over any model with `encode`, `init_state` and `decode_step`.

Every decision is made per sentence, from that sentence's own numbers: its own length limit, its own
finished hypotheses, its own length penalty. Finished sentences leave the batch, so nothing depends on
the batch's other members or its maximum length, and a sentence gets the same translation whatever
batch it is decoded in (up to float noise in near-ties).

Hypotheses always end with EOS: at a sentence's length limit only EOS may be chosen. `tokens` holds
neither BOS nor EOS; the score counts EOS's log-probability, and a hypothesis' length is len(tokens) + 1.
PAD and BOS are never chosen (as in fairseq): no target has them, so a trained model gives them next to no
probability, but one stopped early might, and either would decode to nothing. EOS is not chosen before
`min_length` tokens (fairseq's --min-len, JoeyNMT's min_output_length; 0, OpenNMT-py's default, lets a
hypothesis end at once, as an undertrained model's beam often does).

On a GPU the host waits for the device twice a step: for which hypotheses ended (then one copy of their
tokens and one of their scores) and for which sentences are done. Everything else it decides from what it
already knows (the length limits, the shapes), so that it can queue the step's kernels without waiting.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from nmt.config_sections import LengthPenalty
from nmt.models.interface import TranslationModel
from nmt.special import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Hypothesis:
    """One output sentence: token ids (no BOS/EOS), ranking score, attention and raw log-probability.

    `score` is `log_prob` divided by the length penalty (greedy: the plain log-probability).
    `attention` is tgt_len x src_len with tgt_len = len(tokens) + 1 (the EOS row) and src_len the
    sentence's own source length including its EOS, or None when not requested or the model has none.
    """

    tokens: list[int]
    score: float
    attention: Tensor | None
    log_prob: float


_LONGEST_OUTPUT = 2**31 - 1  # tokens: more than any search runs, few enough for an int64 and a float64


def max_output_lengths(src_lengths: Tensor, ratio: float, offset: int) -> Tensor:
    """Per-sentence output limit (tokens before EOS): floor(ratio * src_length) + offset, at least 1.

    src_lengths: batch -> batch (long)
    """
    # float64 and a hair over: in float32 30 x 2.1 is 62.99999, and in float64 100 x 0.29 is 28.999999999999996;
    # bounded in float64, where a huge ratio or offset cannot wrap round to a negative integer
    return ((src_lengths.double() * ratio + 1e-9).floor() + float(offset)).clamp(1, _LONGEST_OUTPUT).long()


@functools.lru_cache(maxsize=4096)
def length_penalty_divisor(length: int, kind: LengthPenalty, alpha: float) -> float:
    """What a hypothesis' log-probability is divided by: 1, its length, or GNMT's (5+len)^a / 6^a.

    Cached: beam search asks at every step where a hypothesis ends, greedy's caller once per sentence, and
    the CPU tensor each call builds costs a few % of a small step."""
    return float(_divisors(torch.tensor([float(length)]), kind, alpha)[0])


def _divisors(lengths: Tensor, kind: LengthPenalty, alpha: float) -> Tensor:
    """length_penalty_divisor for a float tensor of lengths (any shape)."""
    if kind == "none":
        return torch.ones_like(lengths)
    if kind == "average":
        return lengths
    if kind == "gnmt":
        return ((5.0 + lengths) / 6.0) ** alpha
    raise ValueError(f"unknown length penalty {kind!r}: expected none, average or gnmt")


@contextlib.contextmanager
def _searching(
    model: nn.Module, src: Tensor, src_lengths: Tensor, max_lengths: Tensor, min_length: int
) -> Iterator[tuple[Tensor, list[int], set[int]]]:
    """-> (max_lengths on src's device, src_lengths as a list, the set of max_lengths: the steps at which
    some sentence reaches its limit, known on the host without asking the device), once the batch sizes
    agree, under search settings, the caller's restored after: dropout off (it would make outputs
    random), no gradients, and no TF32 on CUDA: cuDNN's TF32 error, different for different batch
    shapes, flipped near-tie beam choices between batch sizes (1 in 100 sentences on an H200)."""
    if not (src.size(0) == src_lengths.size(0) == max_lengths.size(0)):
        raise ValueError("src, src_lengths and max_lengths must have the same batch size")
    max_len, lengths, limits = max_lengths.to(src.device), src_lengths.tolist(), set(max_lengths.tolist())
    if limits and min_length > min(limits):  # EOS would be blocked at a limit that allows EOS alone
        raise ValueError(f"min_length {min_length} is above a sentence's length limit ({min(limits)})")
    was_training = model.training
    tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    model.eval()
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.inference_mode():
            yield max_len, lengths, limits
    finally:
        model.train(was_training)
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32


def _never_chosen(device: torch.device, eos: bool = False) -> Tensor:
    """The ids search never chooses (`_block`), on `device`: PAD and BOS, and EOS where `eos` (the steps before
    min_length). 2 or 3 (long)"""
    return torch.tensor([PAD_ID, BOS_ID, *([EOS_ID] if eos else [])], device=device)


def _block(log_probs: Tensor, never: Tensor) -> Tensor:
    """log_probs with those of the ids `never` (`_never_chosen`) at -inf, in place, in one kernel.
    log_probs: ... x vocab -> log_probs"""
    return log_probs.index_fill_(-1, never, -math.inf)


def _only_eos(log_probs: Tensor, at_limit: Tensor) -> Tensor:
    """Rows at their length limit keep only EOS's log-probability (in place); the others are unchanged.
    A pass over every row, not an index of those at the limit: finding them would make the host wait for
    the device. Callers skip the steps at which no sentence reaches its limit.

    log_probs: rows x ... x vocab (float32), at_limit: rows (bool) -> log_probs
    """
    eos = log_probs[..., EOS_ID].clone()
    # adding 0 leaves a value as it was; a broadcast add is 10x faster than masked_fill_ on a CPU
    log_probs.add_(torch.where(at_limit, -math.inf, 0.0).view(-1, *[1] * (log_probs.dim() - 1)))
    log_probs[..., EOS_ID] = eos
    return log_probs


def greedy_hypotheses(
    model: TranslationModel, src: Tensor, src_lengths: Tensor, max_lengths: Tensor, return_attention: bool = False,
    min_length: int = 0,
) -> list[Hypothesis]:
    """Greedy search: the most probable token at every step, for every sentence of the batch at once.

    src: batch x src_len (padded, incl. EOS), src_lengths: batch, max_lengths: batch (tokens before EOS), each
    at least min_length (the fewest tokens before EOS) -> one Hypothesis per sentence, in input order; score = log_prob.
    """
    n, device = src.size(0), src.device
    results: list[Hypothesis | None] = [None] * n
    with _searching(model, src, src_lengths, max_lengths, min_length) as (max_len, lengths, limits):
        enc = model.encode(src, src_lengths)
        state = model.init_state(enc)
        active = torch.arange(n, device=device)  # input position of each row
        prev = torch.full((n,), BOS_ID, dtype=torch.long, device=device)
        never, never_yet = _never_chosen(device), _never_chosen(device, eos=True)
        scores = torch.zeros(n, device=device)
        seqs = torch.empty(n, 0, dtype=torch.long, device=device)  # rows x t
        attn_hist: Tensor | None = None  # rows x t x src_len
        step = 0
        while active.numel() > 0:
            log_probs, state, attn = model.decode_step(prev, state, enc)  # rows x vocab
            log_probs = _block(log_probs.float(), never_yet if step < min_length else never)
            tokens = log_probs.argmax(dim=-1)  # rows
            if step in limits:  # a row at its limit ends: EOS, whatever its log-probabilities (NaN included)
                tokens = torch.where(max_len <= step, EOS_ID, tokens)
            scores = scores + log_probs.gather(1, tokens.unsqueeze(1)).squeeze(1)
            seqs = torch.cat([seqs, tokens.unsqueeze(1)], dim=1)
            if return_attention and attn is not None:
                step_attn = attn.float().unsqueeze(1)
                attn_hist = step_attn if attn_hist is None else torch.cat([attn_hist, step_attn], dim=1)
            done = tokens == EOS_ID
            step += 1
            done_rows = done.nonzero().squeeze(1)  # the host's first wait for the device in this step
            if done_rows.numel() > 0:
                # one copy each to the host: input positions with tokens, scores, attention
                ended = torch.cat([active[done_rows].unsqueeze(1), seqs[done_rows, :-1]], dim=1).tolist()
                ended_scores = scores[done_rows].tolist()
                ended_attn = None if attn_hist is None else attn_hist[done_rows].cpu()
                for i, ((sent, *toks), score) in enumerate(zip(ended, ended_scores, strict=True)):
                    attention = None if ended_attn is None else ended_attn[i, :, : lengths[sent]]
                    results[sent] = Hypothesis(toks, score, attention, score)
                keep = (~done).nonzero().squeeze(1)
                active, max_len, scores, seqs = active[keep], max_len[keep], scores[keep], seqs[keep]
                attn_hist = None if attn_hist is None else attn_hist[keep]
                enc, state, tokens = enc.index_select(keep), state.index_select(keep), tokens[keep]
            prev = tokens
    return [h for h in results if h is not None]


def greedy_search(
    model: TranslationModel, src: Tensor, src_lengths: Tensor, max_lengths: Tensor, min_length: int = 0
) -> list[list[int]]:
    """Greedy search's token ids (no BOS/EOS) per sentence, in input order; shapes as `greedy_hypotheses`."""
    return [h.tokens for h in greedy_hypotheses(model, src, src_lengths, max_lengths, min_length=min_length)]


@dataclass
class _Beams:
    """What a beam search carries from step to step for the n sentences still searched, k beams each."""

    active: Tensor  # n: each sentence's input position
    max_len: Tensor  # n: its length limit (tokens before EOS)
    max_divisor: Tensor  # n: its length penalty at that limit, EOS included
    best_done: Tensor  # n x nbest: its best finished scores (-inf while it has fewer)
    scores: Tensor  # n x k: each alive beam's log-probability
    seqs: Tensor  # n x k x t: its tokens
    attn_hist: Tensor | None  # n x k x t x src_len: its attention, when asked

    @classmethod
    def start(cls, max_len: Tensor, k: int, nbest: int, max_divisor: Tensor) -> _Beams:
        """Every sentence with k empty beams, of which only the first may expand (they are identical)."""
        n, device = max_len.size(0), max_len.device
        scores = torch.full((n, k), -math.inf, device=device)
        scores[:, 0] = 0.0
        best_done = torch.full((n, nbest), -math.inf, device=device)
        seqs = torch.empty(n, k, 0, dtype=torch.long, device=device)
        return cls(torch.arange(n, device=device), max_len, max_divisor, best_done, scores, seqs, None)

    def keep(self, keep: Tensor) -> None:
        """Keep only the sentences at positions `keep` (the others are done)."""
        for name in (f.name for f in dataclasses.fields(self)):
            value = getattr(self, name)
            setattr(self, name, None if value is None else value[keep])


@dataclass
class _Candidates:
    """The 2k best continuations of each sentence's k beams at one step, best first (n x 2k each)."""

    scores: Tensor  # log-probability of the beam and its next token
    beam: Tensor  # the beam it continues
    token: Tensor
    is_eos: Tensor  # token == EOS_ID, compared once for _finish and _advance
    attn: Tensor | None  # n x k x 1 x src_len: each beam's attention at this step, when asked


def _finite(scores: Tensor) -> Tensor:
    """torch.isfinite for scores, which are never +inf (sums of log-probabilities): one kernel rather than
    isfinite's four (==, abs, !=, *). NaN is not finite in either."""
    return scores > -math.inf


def _candidates(
    beams: _Beams, log_probs: Tensor, at_limit: Tensor | None, attn: Tensor | None, never: Tensor
) -> _Candidates:
    """The step's best continuations. log_probs: n*k x vocab, at_limit: n (None: no sentence is at its
    limit), attn: n*k x src_len or None, never: the ids never chosen (`_never_chosen`)."""
    n, k = beams.scores.shape
    vocab = log_probs.size(-1)
    log_probs = _block(log_probs.float(), never).view(n, k, vocab)  # n x k x vocab
    if at_limit is not None:
        log_probs = _only_eos(log_probs, at_limit)
    flat = (beams.scores.unsqueeze(2) + log_probs).view(n, k * vocab)  # n x k*vocab: beam-major, then token
    top_scores, top_idx = flat.topk(min(2 * k, k * vocab), dim=1)
    step_attn = None if attn is None else attn.float().view(n, k, 1, -1)  # n x k x 1 x src_len
    token = top_idx % vocab
    return _Candidates(top_scores, top_idx // vocab, token, token == EOS_ID, step_attn)


def _finish(
    beams: _Beams, cand: _Candidates, length: int, penalty: tuple[LengthPenalty, float], lengths: list[int],
    finished: list[list[Hypothesis]],
) -> Tensor:
    """Add the candidates among the k best that end in EOS to `finished` (by input position), their
    log-probabilities divided by the length penalty (kind, alpha) of a hypothesis of `length` tokens with
    EOS, and to `beams.best_done`. -> which ended, n x k.

    Each beam has one EOS candidate, so the 2k candidates always hold at least k others to keep alive.
    """
    k = beams.scores.size(1)
    ended = cand.is_eos[:, :k] & _finite(cand.scores[:, :k])
    e_row, e_rank = ended.nonzero(as_tuple=True)  # the host's first wait for the device in this step
    if e_row.numel() == 0:
        return ended
    divisor = length_penalty_divisor(length, *penalty)
    e_beam = cand.beam[e_row, e_rank]
    e_attn = None
    if cand.attn is not None:
        past = beams.attn_hist[e_row, e_beam] if beams.attn_hist is not None else cand.attn[e_row, e_beam, :0]
        e_attn = torch.cat([past, cand.attn[e_row, e_beam]], dim=1).cpu()
    # one copy to the host for the input positions and tokens, one for the log-probabilities
    seqs = torch.cat([beams.active[e_row].unsqueeze(1), beams.seqs[e_row, e_beam]], dim=1).tolist()
    log_probs = cand.scores[e_row, e_rank].tolist()
    for i, ((sent, *toks), log_prob) in enumerate(zip(seqs, log_probs, strict=True)):
        attention = None if e_attn is None else e_attn[i, :, : lengths[sent]]
        finished[sent].append(Hypothesis(toks, log_prob / divisor, attention, log_prob))
    ended_scores = torch.where(ended, cand.scores[:, :k] / divisor, -math.inf)
    nbest = beams.best_done.size(1)
    beams.best_done = torch.cat([beams.best_done, ended_scores], dim=1).topk(nbest, dim=1).values
    return ended


def _advance(beams: _Beams, cand: _Candidates) -> tuple[Tensor, Tensor]:
    """Make the k best candidates not ending in EOS the beams (a stable sort keeps their score order).
    -> each new beam's token (n x k) and the row of the old beam it extends (n*k)."""
    n, k = beams.scores.shape
    alive_rank = torch.sort(cand.is_eos.to(torch.uint8), dim=1, stable=True).indices[:, :k]
    alive_beam = cand.beam.gather(1, alive_rank)  # n x k: which old beam each new beam extends
    alive_tok = cand.token.gather(1, alive_rank)
    beams.scores = cand.scores.gather(1, alive_rank)
    old = beams.seqs.gather(1, alive_beam.unsqueeze(2).expand_as(beams.seqs))
    beams.seqs = torch.cat([old, alive_tok.unsqueeze(2)], 2)
    if cand.attn is not None:
        idx = alive_beam.view(n, k, 1, 1)
        new_attn = cand.attn.gather(1, idx.expand(n, k, 1, cand.attn.size(3)))
        hist = beams.attn_hist
        if hist is not None:
            new_attn = torch.cat([hist.gather(1, idx.expand_as(hist)), new_attn], dim=2)
        beams.attn_hist = new_attn
    first_rows = torch.arange(0, n * k, k, device=alive_beam.device)  # n: each sentence's first row
    return alive_tok, (first_rows.unsqueeze(1) + alive_beam).view(-1)


def beam_search(
    model: TranslationModel, src: Tensor, src_lengths: Tensor, beam_size: int, max_lengths: Tensor,
    length_penalty: LengthPenalty = "gnmt", alpha: float = 0.6, nbest: int = 1, return_attention: bool = False,
    min_length: int = 0,
) -> list[list[Hypothesis]]:
    """Beam search over all sentences and beams at once; the `nbest` best hypotheses per sentence.

    src: batch x src_len (padded, incl. EOS), src_lengths: batch, max_lengths: batch (tokens before EOS), each
    at least min_length (the fewest tokens before EOS)
    -> per sentence, in input order, up to `nbest` hypotheses sorted by score (best first).

    Each step takes the 2k best continuations of the sentence's k beams (topk over beam x vocab);
    those among the first k that end in EOS are finished, the k best others stay alive. A sentence is
    done, once it has `nbest` finished hypotheses, when
    - no alive beam can beat its nbest-th finished score: log-probabilities only fall, so an alive
      beam can at best reach its log-probability over the largest divisor its length limit allows
      (stopping at k finished hypotheses instead loses to greedy when k short ones end first); or
    - the step's best candidate by log-probability ends in EOS (with k = 1 this is greedy). Under a length
      penalty (gnmt, average) a beam still alive might yet end with a better penalised score: the rule is
      OpenNMT-py's and JoeyNMT's (stop when the top beam is finished), chosen for their speed over exactness;
    and in any case at its length limit, where only EOS is allowed.
    """
    if not 1 <= nbest <= beam_size:
        raise ValueError(f"need beam_size >= 1 and 1 <= nbest <= beam_size, got {beam_size}, {nbest}")
    k, batch, device = beam_size, src.size(0), src.device
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    with _searching(model, src, src_lengths, max_lengths, min_length) as (max_len, lengths, limits):
        # Encoder outputs (and precomputed attention keys) are computed once and copied to every beam.
        rows = torch.arange(batch, device=device).repeat_interleave(k)
        enc = model.encode(src, src_lengths).index_select(rows)
        state = model.init_state(enc)
        beams = _Beams.start(max_len, k, nbest, _divisors(max_len.float() + 1.0, length_penalty, alpha))
        prev = torch.full((batch * k,), BOS_ID, dtype=torch.long, device=device)
        never, never_yet = _never_chosen(device), _never_chosen(device, eos=True)
        step = 0
        while beams.active.numel() > 0:
            log_probs, state, attn = model.decode_step(prev, state, enc)  # n*k x vocab
            # n; None at the steps no sentence's limit falls on (a sentence ends at its limit, so none is past it)
            at_limit = beams.max_len <= step if step in limits else None
            step_attn = attn if return_attention else None
            cand = _candidates(beams, log_probs, at_limit, step_attn, never_yet if step < min_length else never)
            ended = _finish(beams, cand, step + 1, (length_penalty, alpha), lengths, finished)  # ending now
            alive_tok, reorder = _advance(beams, cand)
            step += 1
            # max() of -inf scores is -inf: a sentence with no finite beam left is done too
            out_of_reach = beams.best_done[:, -1] >= beams.scores.max(dim=1).values / beams.max_divisor
            # the best candidate ended and the sentence has its nbest (with nbest 1, the first implies the second)
            best_ended = ended[:, 0] if nbest == 1 else ended[:, 0] & _finite(beams.best_done[:, -1])
            done = out_of_reach | best_ended
            if at_limit is not None:
                done |= at_limit
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() < done.numel():
                keep_rows = (keep.unsqueeze(1) * k + torch.arange(k, device=device)).view(-1)
                reorder, enc, alive_tok = reorder[keep_rows], enc.index_select(keep_rows), alive_tok[keep]
                beams.keep(keep)
            state, prev = state.index_select(reorder), alive_tok.reshape(-1)
    return [sorted(hyps, key=lambda h: -h.score)[:nbest] for hyps in finished]
