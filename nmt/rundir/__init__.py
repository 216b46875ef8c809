"""The run directory `nmt train` writes, in one home that training, decoding and evaluation use:

    RUN_DIR/config.yaml        the run's config, data paths absolute (writing.py)
    RUN_DIR/tokenizer/         copy of the sentencepiece models it was trained with (writing.py)
    RUN_DIR/checkpoints/       step_*.pt, best.pt, averaged.pt (checkpoints.py, averaging.py)
    RUN_DIR/environment.json, log.jsonl, summary.json, tensorboard/   (writing.py)
    RUN_DIR/hyps/              cached translations of test sets, for evaluate and curve (translations.py)
    RUN_DIR/train.lock         held by the training that writes the run, with its PID (lock.py)

checks.py refuses to overwrite another run, or to resume one trained otherwise; averaging.py is `nmt average`;
loading.py loads a run onto a device for translation.
"""
