"""What the reports' tables share: a Markdown table, and the cell of a difference with its p."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], left: int = 1) -> list[str]:
    """The lines of a Markdown table whose first `left` columns are aligned left, the others right; a '|' in a cell
    (a system's name) is escaped, so that it does not split the cell."""
    align = ["---"] * left + ["---:"] * (len(header) - left)
    return [_row(header), "|" + "|".join(align) + "|", *map(_row, rows)]


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


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
