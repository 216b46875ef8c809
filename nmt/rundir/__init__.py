"""The run directory that `nmt train` writes and translation and evaluation read: one home for
training, decoding and evaluation."""
