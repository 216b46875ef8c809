"""nmt: RNNencdec, RNNsearch and the Transformer, and BLEU by sentence length."""

__version__ = "0.1.0"
