"""The one exception type a user sees: what went wrong (naming the file, line or key) and what to do."""


class NMTError(Exception):
    """A user mistake or an unusable input: `message` says what is wrong and where, `hint` what to do."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} {self.hint}".strip()
