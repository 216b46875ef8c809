"""What the reports' tables share: a Markdown table, and the cell of a difference with its p."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], left: int = 1) -> list[str]:
    """The lines of a Markdown table whose first `left` columns are aligned left, the others right."""
    align = ["---"] * left + ["---:"] * (len(header) - left)
    return ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|", *("| " + " | ".join(r) + " |" for r in rows)]


def p_number(p: float) -> str:
    """A p-value to three decimals, `0.045`; `<0.001` below what three decimals show (many resamples)."""
    return f"{p:.3f}" if p >= 0.0005 else "<0.001"


def p_text(p: float) -> str:
    """A p-value as a report's prose gives it: `p=0.045`, or `p<0.001`."""
    number = p_number(p)
    return f"p{number}" if number.startswith("<") else f"p={number}"


def diff_cell(diff: float | None, p: float | None) -> str:
    """A difference and its paired p as one cell, `+1.23 (p=0.045)`; a dash for none, `p -` for no p."""
    if diff is None:
        return "-"
    return f"{diff:+.2f} ({p_text(p)})" if p is not None else f"{diff:+.2f} (p -)"
