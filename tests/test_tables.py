"""The reports' shared cells: Markdown tables, and p-values that never read as 0."""

from __future__ import annotations

from nmt.evaluation.tables import diff_cell, markdown_table, p_number, p_text


def test_p_values_below_three_decimals_read_as_below_them_not_as_zero() -> None:
    floor = 2 / 10_001  # the smallest paired-bootstrap p of 10,000 resamples
    assert (p_number(floor), p_text(floor), diff_cell(1.0, floor)) == ("<0.001", "p<0.001", "+1.00 (p<0.001)")
    assert (p_number(0.045), p_text(0.002), p_text(1.0)) == ("0.045", "p=0.002", "p=1.000")
    assert p_number(0.0005) == "0.001"  # what rounds to 0.001 is shown as it


def test_diff_cell_without_a_difference_or_a_p() -> None:
    assert (diff_cell(None, 0.5), diff_cell(-0.5, None)) == ("-", "-0.50 (p -)")


def test_markdown_table_aligns_the_first_columns_left() -> None:
    assert markdown_table(["a", "b", "c"], [["x", "1", "2"]], left=2) == [
        "| a | b | c |", "|---|---|---:|", "| x | 1 | 2 |"]
