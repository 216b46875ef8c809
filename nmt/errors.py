"""The one exception type a user sees: what went wrong (naming the file, line or key) and what to do; and the
wording its messages share."""

# the hint of a refused value where it may come from a config or a --set (typed_yaml.check_type, `require`)
FIX_IN_CONFIG = "Fix it in the config or with --set."


class NMTError(Exception):
    """A user mistake or an unusable input: `message` says what is wrong and where, `hint` what to do;
    `key` names the config key (section.key, or a top-level one) that is refused, for its value or for being
    unknown, if that is what is wrong (nmt.config.load_config names its line of the file)."""

    def __init__(self, message: str, hint: str = "", key: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.key = key

    def __str__(self) -> str:
        return f"{self.message} {self.hint}".strip()


def require(condition: bool, key: str, what: str) -> None:
    """Refuse the value of config key `key` (section.key) unless `condition`: it `what` (e.g. "must be >= 1")."""
    if not condition:
        raise NMTError(f"invalid value for '{key}': {what}.", FIX_IN_CONFIG, key)


def counted(count: int, noun: str) -> str:
    """`count` and `noun`, plural unless it is one: "1 line", "0 lines", "2 sentences"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
