"""The library's fused RNN against the written-out step loops, on this machine.

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

from compile_trial import timed_round, trial_models

# (label, encoder fused, fixed-vector decoder fused); the first is the reference of the differences
VARIANTS = (("step loops", False, False), ("fused encoder", True, False), ("fused both", True, True))


def main() -> None:
    """Each model, each round: every variant's tokens/s and gradient difference from the step loops."""
    for attention, model, batches, rounds in trial_models(__doc__, "rounds of all variants per model"):
        # the decoder's fused path exists for the fixed vector only
        variants = VARIANTS if attention == "none" else VARIANTS[:2]
        for round_ in range(1, rounds + 1):
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
