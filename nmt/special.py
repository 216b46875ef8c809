"""Special token ids, shared by the sentencepiece models and the neural models."""

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
