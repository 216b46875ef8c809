"""Does torch.compile pay for the recurrent steps on this machine?

    python scripts/compile_trial.py [--config configs/bench.yaml] [--steps 12] [--threads 2] [--rounds 2]

On a CPU both models run their time steps in Python loops (the encoder's directions, the decoder):
per step a few library matrix products and, between them, the elementwise work of the gate update
and of attention (tanh, masked softmax). Only that elementwise work is what `torch.compile`
(inductor, dynamic shapes) can fuse, so this trial compiles exactly those functions, the GRU/LSTM
gate update and `Attention.attend`, and times forward + backward on the same real Bible batches,
eager and compiled in alternating rounds in one process (round-to-round spread = the noise). It
prints target tokens/s per round and the largest gradient difference between the two. The toolkit
keeps eager mode unless this shows a clear win (README, Performance).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time
from collections.abc import Iterator

import torch
from benchmark import training_batches  # scripts/ is on sys.path when this script runs

import nmt.models.rnn.decoder as decoder_module
import nmt.models.rnn.encoder as encoder_module
from nmt.config import load_config
from nmt.data.batching import Batch, make_batch
from nmt.models import build_model
from nmt.models.rnn.attention import Attention
from nmt.training.validation import batch_loss_sum

WARMUP_STEPS = 2  # the compiled rounds compile (and recompile for new shapes) here


@contextlib.contextmanager
def compiled_steps() -> Iterator[None]:
    """Swap in compiled versions of the gate update and of the attention step, restored on exit."""
    gated_update, attend = encoder_module.gated_update, Attention.attend
    fast_update = torch.compile(gated_update, dynamic=True)
    encoder_module.gated_update = decoder_module.gated_update = fast_update
    Attention.attend = torch.compile(attend, dynamic=True)  # type: ignore[method-assign]
    try:
        yield
    finally:
        encoder_module.gated_update = decoder_module.gated_update = gated_update
        Attention.attend = attend  # type: ignore[method-assign]


def timed_round(model: torch.nn.Module, batches: list[Batch]) -> tuple[float, dict[str, torch.Tensor]]:
    """Target tokens/s of forward + backward over batches[WARMUP_STEPS:], and the last batch's gradients."""
    for batch in batches[:WARMUP_STEPS]:
        model.zero_grad(set_to_none=True)
        batch_loss_sum(model, batch, 0.0).backward()
    tokens, start = 0, time.perf_counter()
    for batch in batches[WARMUP_STEPS:]:
        model.zero_grad(set_to_none=True)
        batch_loss_sum(model, batch, 0.0).backward()
        tokens += int(batch.n_tgt_tokens)
    rate = tokens / (time.perf_counter() - start)
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return rate, grads


def trial_models(description: str, rounds_help: str) -> Iterator[tuple[str, torch.nn.Module, list[Batch], int]]:
    """The command line of a trial (--config, --steps, --threads, --rounds), then per model (RNNsearch,
    then RNNencdec, freshly initialised from the config's seed): its attention type, the model, the
    same real Bible batches, and the number of rounds."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/bench.yaml")
    parser.add_argument("--steps", type=int, default=12, help="batches per round, warm-up included")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rounds", type=int, default=2, help=rounds_help)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(args.config)
    tok, src, tgt, epoch = training_batches(config)
    batches = [make_batch([src[i] for i in b], [tgt[i] for i in b], b) for b in epoch[: args.steps]]
    for attention in ("additive", "none"):
        torch.manual_seed(config.training.seed)
        model_config = dataclasses.replace(config.model, attention=attention)
        model = build_model(model_config, tok.src_vocab_size, tok.tgt_vocab_size).train()
        yield attention, model, batches, args.rounds


def main() -> None:
    for attention, model, batches, rounds in trial_models(__doc__, "eager/compiled round pairs per model"):
        for round_ in range(1, rounds + 1):
            eager, eager_grads = timed_round(model, batches)
            with compiled_steps():
                compiled, compiled_grads = timed_round(model, batches)
            diff = max((compiled_grads[k] - eager_grads[k]).abs().max().item() for k in eager_grads)
            print(
                f"attention {attention:8s} round {round_}: eager {eager:6.0f} tgt tok/s, compiled "
                f"{compiled:6.0f} ({compiled / eager - 1:+.1%}), max gradient difference {diff:.1e}",
                flush=True,
            )


if __name__ == "__main__":
    main()
