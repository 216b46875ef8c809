"""The one exception type a user sees: what went wrong (naming the file, line or key) and what to do."""


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
        raise NMTError(f"invalid value for '{key}': {what}.", "Fix it in the config or with --set.", key)
