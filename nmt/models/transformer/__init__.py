"""The Transformer of Vaswani et al. 2017 (model.py), with its multi-head attention (multihead.py)."""
