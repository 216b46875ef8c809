"""The one exception type a user sees: what went wrong (naming the file, line or key) and what to do; and the
wording its messages share."""

# the hint of a refused value where it may come from a config or a --set (typed_yaml.check_type, `require`)
FIX_IN_CONFIG = "Fix it in the config or with --set."
# the hint of an input file the user may not read
UNREADABLE = "Make it readable for you (ls -l shows who may read it; chmod u+r FILE if it is yours), or give another file."


class NMTError(Exception):
    """A user mistake or an unusable input: `message` says what is wrong and where, `hint` what to do;
    `key` names the config key (section.key, or a top-level one) that is refused, for its value or for being
    unknown, if that is what is wrong (nmt.config.load_config names its line of the file)."""

    def __init__(self, message: str, hint: str = "", key: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.key = key
        self.on_every_rank = False  # raised on every process of a torchrun job alike (DistContext.agreed): told once

    def __str__(self) -> str:
        return f"{self.message} {self.hint}".strip()


def require(condition: bool, key: str, what: str) -> None:
    """Refuse the value of config key `key` (section.key) unless `condition`: it `what` (e.g. "must be >= 1")."""
    if not condition:
        raise NMTError(f"invalid value for '{key}': {what}.", FIX_IN_CONFIG, key)


def counted(count: int, noun: str) -> str:
    """`count` and `noun`, plural unless it is one: "1 line", "0 lines", "2 sentences"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


# What sizes the memory training takes, where it runs out (on a CPU or on a GPU)
TRAINING_MEMORY = ("Lower training.batch_tokens (a new run: --resume keeps the batch size), or validate with a "
                   "smaller decoding.batch_size; the run's checkpoints are kept.")
RUNS_MEMORY = f"{TRAINING_MEMORY} Side by side on one GPU, fewer runs at once take less: --jobs."


def out_of_memory(error: BaseException) -> bool:
    """Whether `error` says memory ran out: Python's MemoryError, torch's OutOfMemoryError (CUDA), or the
    RuntimeError torch's CPU allocator raises."""
    return (isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError"
            or "can't allocate memory" in str(error))


def first_line(error: BaseException) -> str:
    """An exception's first line of text, or its type's name where it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
