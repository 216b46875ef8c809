"""The RNN encoder-decoder of Bahdanau et al. 2015: RNNsearch (additive attention) and RNNencdec (Cho et al.'s
fixed context vector). model.py joins encoder.py, decoder.py and attention.py (the context providers)."""
