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


def beside(value: float, limit: float, digits: int) -> str:
    """`value` to `digits` decimals, or to as many more as keep it on its side of `limit` (below, on or above it),
    the line the verdict beside it is drawn at: p = 0.04995 is 0.04995 under p < 0.05, not the 0.050 of three."""
    side = _side(value, limit)
    for places in range(digits, digits + 10):
        text = f"{value:.{places}f}"
        if _side(float(text), limit) == side:
            return text
    return repr(value)


def _side(value: float, limit: float) -> int:
    return (value > limit) - (value < limit)


def p_number(p: float, significance: float) -> str:
    """A p-value to three decimals, `0.045`, or more where three would show it on the other side of
    `significance` (`beside`); `<0.001` below what three decimals show (many resamples)."""
    return "<0.001" if p < min(0.0005, significance) else beside(p, significance, 3)


def p_text(p: float, significance: float) -> str:
    """A p-value as a report's prose gives it: `p=0.045`, or `p<0.001` (`p_number`)."""
    number = p_number(p, significance)
    return f"p{number}" if number.startswith("<") else f"p={number}"


def diff_cell(diff: float | None, p: float | None, significance: float) -> str:
    """A difference and its paired p as one cell, `+1.23 (p=0.045)`; a dash for none, `p -` for no p."""
    if diff is None:
        return "-"
    return f"{diff:+.2f} ({p_text(p, significance)})" if p is not None else f"{diff:+.2f} (p -)"
