"""The library's fused RNN against the written-out step loops, on this machine (issue 15).

    python scripts/rnn_trial.py [--config configs/bench.yaml] [--steps 12] [--threads 2] [--rounds 2]

The encoder can run each layer as a Python loop over time steps (`Encoder.fused = False`) or as one
packed call of torch's fused GRU/LSTM (`True`, what nn.GRU runs: cuDNN on CUDA); RNNencdec's decoder
likewise steps its GRU with c's gate product precomputed, or runs one fused call over [E y ; c]
(`Decoder.fused_fixed_steps`). Both pairs compute the same values (tests/test_encoder.py,
tests/test_decoder.py). This trial times forward + backward of the whole model on the same real Bible
batches with each combination, in alternating rounds in one process (round-to-round spread = the
noise), and prints target tokens/s and the largest gradient difference against the step loops. The
models' `None` (auto) setting picks the fused calls on CUDA only unless this shows them faster on a CPU.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch
from benchmark import training_batches  # scripts/ is on sys.path when this script runs
from compile_trial import timed_round

from nmt.config import load_config
from nmt.data.batching import make_batch
from nmt.models import build_model

# (label, encoder fused, fixed-vector decoder fused); the first is the reference of the differences
VARIANTS = (("step loops", False, False), ("fused encoder", True, False), ("fused both", True, True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/bench.yaml")
    parser.add_argument("--steps", type=int, default=12, help="batches per round, warm-up included")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rounds", type=int, default=2, help="rounds of all variants per model")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(args.config)
    tok, src, tgt, epoch = training_batches(config)
    batches = [make_batch([src[i] for i in b], [tgt[i] for i in b], b) for b in epoch[: args.steps]]
    for attention in ("additive", "none"):
        torch.manual_seed(config.training.seed)
        model_config = dataclasses.replace(config.model, attention=attention)
        model = build_model(model_config, tok.src_vocab_size, tok.tgt_vocab_size).train()
        # the decoder's fused path exists for the fixed vector only
        variants = VARIANTS if attention == "none" else VARIANTS[:2]
        for round_ in range(1, args.rounds + 1):
            reference_rate, reference_grads = 0.0, {}
            for label, encoder_fused, decoder_fused in variants:
                model.encoder.fused, model.decoder.fused_fixed_steps = encoder_fused, decoder_fused
                rate, grads = timed_round(model, batches)
                if not reference_grads:
                    reference_rate, reference_grads = rate, grads
                diff = max((grads[k] - reference_grads[k]).abs().max().item() for k in grads)
                print(
                    f"attention {attention:8s} round {round_}: {label:13s} {rate:6.0f} tgt tok/s "
                    f"({rate / reference_rate - 1:+.1%}), max gradient difference {diff:.1e}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
