"""nmt: RNN encoder-decoders with and without attention, and BLEU by sentence length."""

__version__ = "0.1.0"
