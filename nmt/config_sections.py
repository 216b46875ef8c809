"""The five sections of a configuration, one validated dataclass each: every key's default, its type
(checked when the YAML is read) and its valid values (`validate`, which names the key it refuses).

`Config` (nmt/config.py) holds one of each; every key is commented in `configs/quick.yaml`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from nmt.errors import require
from nmt.registry import ARCHITECTURES, ATTENTIONS

LengthPenalty = Literal["none", "average", "gnmt"]
BucketBy = Literal["source", "reference"]
# sacrebleu's tokenizers that need no download; "none" is for data tokenized beforehand
Tokenize = Literal["13a", "intl", "char", "zh", "ja-mecab", "none"]


# Keys each corpus source used to read flat in data (before each source's keys moved into a sub-section
# named after it): old key -> its spelling now, for the one message that refuses an old config and for
# migrating a run directory's own config.yaml (load_saved_config). data.train / valid / test went to the
# sub-section of data.source: files, or huggingface (a builder's data files).
MOVED_DATA_KEYS = {
    "bible_src": "bible.src", "bible_tgt": "bible.tgt", "bible_extra_translations": "bible.extra_translations",
    **{f"{split}_{side}": f"files.{split}_{side}" for split in ("train", "valid", "test") for side in ("src", "tgt")},
    "hf_name": "huggingface.name", "hf_config": "huggingface.config",
    **{f"hf_{split}_split": f"huggingface.{split}_split" for split in ("train", "valid", "test")},
}
MOVED_SPLIT_KEYS = ("train", "valid", "test")

# Names that JoeyNMT, fairseq or OpenNMT-py configs give a setting -> (the key that does its job here, what differs),
# suggested for an unknown key where the nearest spelling would be another setting (data.src is no data.source,
# training.max_len no max_steps) or none is near. Only names of one clear meaning.
OTHER_TOOLKIT_KEYS: dict[str, tuple[str, str]] = {
    **dict.fromkeys(
        ("epochs", "max_epoch", "max_epochs"),
        ("training.max_steps", "It counts optimiser steps, a batch each, not passes over the data"),
    ),
    "max_update": ("training.max_steps", ""),
    "lr": ("training.learning_rate", ""),
    "batch_size": ("training.batch_tokens", "A batch's budget of tokens, not of sentences; decoding.batch_size is "
                   "the sentences translated at once"),
    "src": ("data.src_lang", "The source language's code; data.source names the corpus"),
    **dict.fromkeys(("trg", "tgt"), ("data.tgt_lang", "The target language's code")),
    **dict.fromkeys(
        ("max_len", "max_sent_length"),
        ("training.max_words", "It counts the words, not subwords, of each side of a training pair; "
         "data.max_train_words drops longer pairs when preparing, decoding.max_length_ratio bounds a "
         "translation's length"),
    ),
    **dict.fromkeys(("valid_steps", "validation_freq"), ("training.validate_every", "")),
    "random_seed": ("training.seed", ""),
    "rnn_type": ("model.cell", ""),
    "testing": ("decoding", "It holds the beam search's settings; evaluation holds the scoring's"),
}


@dataclass
class DataConfig:
    """Where the parallel corpus comes from, how it is split, and its subword models.

    Plain data: the keys every source shares are fields; each source's own keys sit in a sub-section named
    after it (data.bible: {src: k, tgt: l}), held here unread in `sources` as the YAML gave them. The data
    layer owns the rest: nmt/data/sources/ types and checks a sub-section against the settings its source
    declares, and derives the prepared-data folder when data.dir is "" (prepared_dir), so that this
    layer imports nothing of nmt.data and a new source adds no key here.
    """

    SUBSECTIONS: ClassVar[str] = "sources"

    source: str = "bible"  # a name in nmt/data/sources/__init__.py's SOURCES (checked there)
    dir: str = ""  # "" = derived from the corpus and its settings (nmt/data/sources: prepared_dir)
    cache_dir: str = "data/cache"
    src_lang: str = "en"
    tgt_lang: str = "fr"
    # valid and test: the fraction of pairs (or verses) a source carves from its training data
    valid_fraction: float = 0.02
    test_fraction: float = 0.1
    # fields of a JSON-lines / Hugging Face record; "" means translation.<src_lang> / <tgt_lang>
    src_field: str = ""
    tgt_field: str = ""
    # filtering (training split only)
    max_train_words: int = 0
    max_train_pairs: int = 0
    # valid/test pairs whose source sentence is also a training source measure memory, not translation
    drop_train_overlap: bool = True
    # subwords
    vocab_size: int = 8000
    subword_type: Literal["unigram", "bpe"] = "unigram"
    joint_vocab: bool = True
    character_coverage: float = 1.0
    # source name -> its sub-section (data.NAME: {...}), plain data for nmt/data/sources to read
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def moved_keys(cls, raw: dict[str, Any]) -> dict[str, str]:
        """The keys of `raw` (a data section) that moved into a source's sub-section -> their new spelling."""
        split_home = "huggingface" if raw.get("source") == "huggingface" else "files"
        moved = {key: f"{split_home}.{key}" for key in MOVED_SPLIT_KEYS if key in raw}
        return {**moved, **{key: new for key, new in MOVED_DATA_KEYS.items() if key in raw}}

    def validate(self) -> None:
        """Raise NMTError naming the first shared key of this section whose value is out of range (the
        source's own keys are checked by nmt/data/sources when the command starts)."""
        require(self.vocab_size >= 16, "data.vocab_size", "must be at least 16")
        require(0.0 < self.valid_fraction < 0.5, "data.valid_fraction", "must be in (0, 0.5)")
        require(0.0 < self.test_fraction < 0.5, "data.test_fraction", "must be in (0, 0.5)")
        require(self.max_train_words >= 0, "data.max_train_words", "must be >= 0 (0 = at most 250 words)")
        require(self.max_train_pairs >= 0, "data.max_train_pairs", "must be >= 0 (0 = all)")
        require(0.9 <= self.character_coverage <= 1.0, "data.character_coverage", "must be in [0.9, 1]")


def migrate_data_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """A copy of the data section `raw` with its moved keys (DataConfig.moved_keys) put where they live now,
    for a run directory's own config.yaml written before the move (it lists every key of every source)."""
    raw = dict(raw)
    for old, new in DataConfig.moved_keys(raw).items():
        home, key = new.split(".")
        value = raw.pop(old)
        raw[home] = {**(raw.get(home) or {}), key: value}
    return raw


@dataclass
class ModelConfig:
    """Sizes and kind of the encoder-decoder: an RNN (`attention: none` is the fixed-vector RNNencdec) or a
    Transformer, whose d_model is hidden_size (`architecture`: a name of nmt/registry.py's ARCHITECTURES)."""

    @property
    def bidirectional_encoder(self) -> bool:
        """Every model reads the source both ways except the paper's RNNencdec (one forward RNN)."""
        return self.attention != "none" or self.fixed_context == "both_ends"

    architecture: str = "rnn"  # a name of nmt/registry.py's ARCHITECTURES
    attention: str = "additive"  # a name of nmt/registry.py's ATTENTIONS
    # attention none: c = tanh(V h_T) of a forward-only encoder (Cho et al.; Bahdanau et al.'s RNNencdec),
    # or both_ends: c = tanh(V [fwd_T ; bwd_1]) of the bidirectional encoder (an ablation, stronger)
    fixed_context: Literal["last_state", "both_ends"] = "last_state"
    cell: Literal["gru", "lstm"] = "gru"
    embedding_size: int = 256
    hidden_size: int = 256  # per encoder direction and in the decoder (paper: 1000)
    attention_size: int = 256  # the additive alignment model's hidden size (paper: 1000); dot and scaled_dot project to it
    maxout_size: int = 256
    encoder_layers: int = 1
    dropout: float = 0.0
    tie_target_embeddings: bool = False
    init: Literal["pytorch", "bahdanau"] = "pytorch"
    # transformer: layers on each side, heads of hidden_size / heads, the feed-forward layer's width
    layers: int = 3
    heads: int = 4
    feedforward_size: int = 1024
    # sinusoidal (the paper's) | learned (absolute) | relative: Shaw et al.'s keys, distances clipped to ±relative_clip
    positions: Literal["sinusoidal", "learned", "relative"] = "sinusoidal"
    relative_clip: int = 16
    norm: Literal["post", "pre"] = "post"  # post: LN(x + sublayer(x)), the paper's; pre: x + sublayer(LN(x))
    scaled_attention: bool = True  # divide the scores by sqrt(d_k), the paper's; false: the explainer's ablation
    # one embedding matrix for source and target (with tie_target_embeddings, the output layer's too: the paper's
    # three-way sharing); needs data.joint_vocab, where an id is one piece on both sides
    share_embeddings: bool = False

    def validate(self) -> None:
        """Raise NMTError naming the first key of this section whose value is out of range, or that the
        architecture does not use (another architecture's key, set away from its default)."""
        require(self.architecture in ARCHITECTURES, "model.architecture",
                f"{self.architecture!r} is not an architecture: expected one of {', '.join(ARCHITECTURES)}")
        own, defaults = ARCHITECTURES[self.architecture].keys, ModelConfig()
        for other, entry in ARCHITECTURES.items():
            for key in entry.keys:
                require(
                    key in own or getattr(self, key) == getattr(defaults, key), f"model.{key}",
                    f"is a setting of model.architecture {other}, not of {self.architecture}: leave it out",
                )
        if "attention" in own:
            require(self.attention in ATTENTIONS, "model.attention",
                    f"{self.attention!r} is not an attention type: expected one of {', '.join(ATTENTIONS)}")
            require(self.attention == "none" or self.fixed_context == defaults.fixed_context, "model.fixed_context",
                    f"is a setting of the fixed vector (model.attention none), not of attention {self.attention}: "
                    "leave it out")
        sizes = ("embedding_size", "hidden_size", "attention_size", "encoder_layers", "layers", "heads",
                 "feedforward_size", "relative_clip")
        for key in sizes:
            require(getattr(self, key) >= 1, f"model.{key}", "must be >= 1")
        if "heads" in own:  # d_model split into heads, as every architecture with model.heads does
            require(self.embedding_size == self.hidden_size, "model.embedding_size", "must equal model.hidden_size "
                    f"(d_model) for a {self.architecture}")
            require(self.hidden_size % self.heads == 0, "model.heads", "must divide model.hidden_size (d_model)")
        require(self.maxout_size >= 0, "model.maxout_size", "must be >= 0 (0 = tanh layer)")
        require(0.0 <= self.dropout < 1.0, "model.dropout", "must be in [0, 1)")
        require(  # a tied output embedding is fed by an RNN's maxout (or tanh) layer
            not self.tie_target_embeddings or "maxout_size" not in own
            or self.maxout_size in (0, self.embedding_size),
            "model.tie_target_embeddings",
            "needs model.maxout_size equal to model.embedding_size, or 0 (a tanh layer as wide as the embeddings)",
        )


# numpy's legacy seeding (np.random.seed, which training seeds) takes no other
SEED_LIMIT = 2**32
SEED_RANGE = f"must be an integer from 0 to {SEED_LIMIT - 1:,}"
MAX_THREADS = 1024  # beyond any machine's cores; torch's own limit is lower than an int's (a crash there)
# the least training.learning_rate taken with Adadelta (1.0 in Bahdanau et al.; 0.002, Adam's, barely trains)
ADADELTA_MIN_RATE = 0.05


@dataclass
class TrainingConfig:
    """The optimisation loop, validation, checkpoints and hardware. The defaults are the recipe of
    configs/quick.yaml, measured there (tests/test_config.py checks that they stay so)."""

    max_steps: int = 900
    # a cap on the run's training time in minutes, validations included (fairseq's stop_time_hours), 0 = none:
    # reached, the run ends as at max_steps (its last step validated and checkpointed), stopped_by max_minutes
    max_minutes: float = 0.0
    batch_tokens: int = 3000
    # train only on pairs of at most this many words on both sides (the paper's -30 / -50 runs); 0 = all.
    # Runs of one config share the prepared data (vocabulary, test split) and differ only here.
    max_words: int = 0
    seed: int = 1
    threads: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    optimizer: Literal["adam", "adadelta"] = "adam"
    # the recipe's Adam rate; 0 = the optimiser's default (Adam 0.001, Adadelta 1.0); with adadelta 0 or >= 0.05
    learning_rate: float = 0.002
    clip_grad_norm: float = 1.0  # 0 = no clipping
    label_smoothing: float = 0.0
    warmup_steps: int = 100  # linear warm-up from 0 to the learning rate
    # constant; cosine: from the base lr after the warm-up down to 0 at max_steps; inverse_sqrt: the base lr
    # x sqrt(warmup_steps / step) after the warm-up (Vaswani et al.), for runs whose length is not known
    lr_schedule: Literal["constant", "cosine", "inverse_sqrt"] = "cosine"
    lr_decay_factor: float = 0.5
    lr_patience: int = 0
    # the validation score whose plateaus decay the rate: "" = early_stopping_metric's; loss, as fairseq's
    # reduce_lr_on_plateau reads it
    lr_decay_metric: Literal["", "bleu", "loss"] = ""
    validate_every: int = 300
    valid_max_sentences: int = 200
    checkpoint_every: int = 300
    keep_last: int = 0  # periodic checkpoints kept besides best.pt (0 = all: `nmt curve` scores each)
    early_stopping_metric: Literal["bleu", "loss"] = "bleu"
    patience: int = 0
    log_every: int = 50
    tensorboard: bool = False
    # keep additive attention's tanh out of memory and recompute it in the backward pass
    recompute_attention: bool = False
    # the training step's teacher-forced forward through torch.compile (nmt/training/compiling.py): the
    # Transformer's whole, an RNN's decoder step where its decoder steps in Python (RNNsearch; RNNencdec off CUDA)
    compile: bool = False

    def validate(self) -> None:
        """Raise NMTError naming the first key of this section whose value is out of range."""
        for key in ("max_steps", "batch_tokens", "validate_every", "checkpoint_every", "log_every"):
            require(getattr(self, key) >= 1, f"training.{key}", "must be >= 1")
        for key in ("max_words", "threads", "warmup_steps", "lr_patience", "patience", "keep_last"):
            require(getattr(self, key) >= 0, f"training.{key}", "must be >= 0")
        require(self.threads <= MAX_THREADS, "training.threads", f"must be <= {MAX_THREADS}")
        require(self.max_minutes >= 0, "training.max_minutes", "must be >= 0 (0 = no time limit)")
        require(0 <= self.seed < SEED_LIMIT, "training.seed", SEED_RANGE)
        require(0 <= self.learning_rate < math.inf, "training.learning_rate", "must be >= 0 and finite (0 = the optimiser's default)")
        # Adadelta's rate scales its own adaptive steps (1.0 in Bahdanau et al.): at an Adam rate it barely moves
        require(self.optimizer != "adadelta" or self.learning_rate == 0 or self.learning_rate >= ADADELTA_MIN_RATE,
                "training.learning_rate", f"must be 0 (Adadelta's default, 1.0) or >= {ADADELTA_MIN_RATE} with optimizer "
                f"adadelta, whose rate scales its own adaptive steps: at {self.learning_rate:g}, a rate for Adam, it "
                "would barely train")
        require(self.clip_grad_norm >= 0, "training.clip_grad_norm", "must be >= 0 (0 = no clipping)")
        require(0.0 <= self.label_smoothing < 1.0, "training.label_smoothing", "must be in [0, 1)")
        require(0.0 < self.lr_decay_factor <= 1.0, "training.lr_decay_factor", "must be in (0, 1]")
        require(self.lr_schedule != "inverse_sqrt" or self.warmup_steps >= 1, "training.warmup_steps",
                "must be >= 1 with lr_schedule inverse_sqrt (its peak, the learning rate, is at the warm-up's end)")
        require(self.valid_max_sentences >= 0, "training.valid_max_sentences", "must be >= 0 (0 = all)")


@dataclass
class DecodingConfig:
    """Search settings for validation, `nmt translate` and `nmt evaluate`."""

    beam_size: int = 5
    length_penalty: LengthPenalty = "gnmt"
    alpha: float = 0.6
    max_length_ratio: float = 2.0
    max_length_offset: int = 10
    # the fewest pieces before EOS (fairseq's --min-len, JoeyNMT's min_output_length); 0, OpenNMT-py's default,
    # lets a translation end at once: empty
    min_length: int = 0
    batch_size: int = 64
    max_input_tokens: int = 400
    nbest: int = 1

    def validate(self) -> None:
        """Raise NMTError naming the first key of this section whose value is out of range."""
        for key in ("beam_size", "batch_size", "max_input_tokens", "nbest"):
            require(getattr(self, key) >= 1, f"decoding.{key}", "must be >= 1")
        require(self.nbest <= self.beam_size, "decoding.nbest", f"{self.nbest} is above decoding.beam_size "
                f"{self.beam_size}, and a beam keeps that many translations: raise the beam (--beam) or lower nbest")
        require(0 < self.max_length_ratio < math.inf, "decoding.max_length_ratio", "must be > 0 and finite")
        require(self.max_length_offset >= 0, "decoding.max_length_offset", "must be >= 0")
        require(0 <= self.min_length <= self.max_length_offset, "decoding.min_length",
                f"must be from 0 to decoding.max_length_offset ({self.max_length_offset}), the least length limit "
                "of a translation")
        require(0 <= self.alpha < math.inf, "decoding.alpha", "must be >= 0 and finite")


MIN_SIGNIFICANCE = 1e-6  # its fewest_resamples: 2,000,000


def fewest_resamples(significance: float) -> int:
    """The fewest paired-bootstrap resamples n whose smallest p, 2/(n+1) (nmt/evaluation/scoring.py's
    paired_p_value), is below `significance`."""
    n = max(1, math.floor(2 / significance) - 1)
    while 2 / (n + 1) >= significance:
        n += 1
    return n


@dataclass
class EvaluationConfig:
    """Length buckets, significance testing and the split `nmt evaluate` scores."""

    split: Literal["valid", "test"] = "test"
    buckets: list[int] = field(default_factory=lambda: [10, 20, 30, 40, 50, 60])
    by: BucketBy = "source"
    bootstrap_samples: int = 1000
    bootstrap_seed: int = 12345
    # learning curve (`nmt curve`): greedy BLEU per bucket of each kept checkpoint on a fixed sample
    curve_sentences_per_bucket: int = 100
    # sacrebleu's tokenizer and case folding (both change scores; the signature shows them)
    tokenize: Tokenize = "13a"
    lowercase: bool = False
    # a bucket gets an interval and p-values, and speaks in the paper's checks, only with this many sentences
    min_bucket_sentences: int = 50
    # the paper's checks (nmt/evaluation/effect.py), for runs paired with a fixed-vector run
    ahead_from_words: int = 20  # 1: attention ahead (p < significance) in every bucket from this length
    long_words: int = 40  # 2-5: the long sentences have this many words or more
    fixed_vector_max_ratio: float = 0.5  # 2: the fixed vector's long BLEU at most this x its best bucket
    attention_min_ratio: float = 0.75  # 3: attention's long BLEU at least this x its best bucket (95% interval) ...
    flat_from_ceiling: int = 50  # ... if trained on sentences of this many words or more
    significance: float = 0.05  # paired bootstrap p below this: 1's yes, 4's and 5's yes or no; the leaders
    # `nmt experiment` also runs `nmt attention-checks` on its attention runs (on the learning curve's sample)
    attention_checks: bool = False

    @classmethod
    def check_raw(cls, raw: dict[str, Any]) -> None:
        """Refuse buckets: auto with what it is and what is taken instead, not as a wrong type: `nmt score`
        takes it (sizing the buckets from the translations it scores, before it builds this section)."""
        require(raw.get("buckets") != "auto", "evaluation.buckets",
                "auto (buckets sized from the data) is for nmt score only (--buckets auto); other commands take "
                "length cutoffs, a non-empty list of increasing positive integers, e.g. [10, 20, 30] (--buckets "
                "10,20,30)")

    def validate(self) -> None:
        """Raise NMTError naming the first key of this section whose value is out of range."""
        increasing = len(self.buckets) >= 1 and self.buckets == sorted(set(self.buckets))
        what = "must be a non-empty list of increasing positive integers, e.g. [10, 20, 30]"
        require(increasing and self.buckets[0] > 0, "evaluation.buckets", what)
        require(self.bootstrap_samples >= 10, "evaluation.bootstrap_samples", "must be >= 10")
        require(self.bootstrap_seed >= 0, "evaluation.bootstrap_seed", "must be >= 0")
        require(
            self.curve_sentences_per_bucket >= 0, "evaluation.curve_sentences_per_bucket", "must be >= 0 (0 = all)"
        )
        require(self.min_bucket_sentences >= 1, "evaluation.min_bucket_sentences", "must be >= 1")
        for key in ("ahead_from_words", "long_words", "flat_from_ceiling"):
            require(getattr(self, key) >= 1, f"evaluation.{key}", "must be >= 1 (words)")
        for key in ("fixed_vector_max_ratio", "attention_min_ratio"):
            require(0.0 < getattr(self, key) <= 1.0, f"evaluation.{key}", "must be in (0, 1]")
        require(MIN_SIGNIFICANCE <= self.significance < 1.0, "evaluation.significance",
                f"must be in [{MIN_SIGNIFICANCE:g}, 1): a smaller one needs millions of bootstrap resamples to reach")
        fewest = fewest_resamples(self.significance)
        require(self.bootstrap_samples >= fewest, "evaluation.bootstrap_samples",
                f"must be at least {fewest} with evaluation.significance {self.significance:g}: the smallest p of "
                "the paired bootstrap over n resamples is 2/(n+1), and a smaller n could never show a difference")
