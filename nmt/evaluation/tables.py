"""What the reports' tables share: a Markdown table, and the cell of a difference with its p."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], left: int = 1) -> list[str]:
    """The lines of a Markdown table whose first `left` columns are aligned left, the others right."""
    align = ["---"] * left + ["---:"] * (len(header) - left)
    return ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|", *("| " + " | ".join(r) + " |" for r in rows)]


def diff_cell(diff: float | None, p: float | None) -> str:
    """A difference and its paired p as one cell, `+1.23 (p=0.045)`; a dash for none, `p -` for no p."""
    if diff is None:
        return "-"
    return f"{diff:+.2f} (p={p:.3f})" if p is not None else f"{diff:+.2f} (p -)"
