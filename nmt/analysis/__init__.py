"""The paper's attention analyses (`nmt attention-checks`, `nmt attention-scaling`): their measurements,
statistics, word alignment and reports. Above models, decoding and evaluation; below compare and commands."""
