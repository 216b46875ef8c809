"""The reports' shared cells: Markdown tables, and p-values that never read as 0 nor across their verdict's line."""

from __future__ import annotations

from nmt.evaluation.tables import beside, diff_cell, markdown_table, p_number, p_text


def test_p_values_below_three_decimals_read_as_below_them_not_as_zero() -> None:
    floor = 2 / 10_001  # the smallest paired-bootstrap p of 10,000 resamples
    assert (p_number(floor, 0.05), p_text(floor, 0.05), diff_cell(1.0, floor, 0.05)) == (
        "<0.001", "p<0.001", "+1.00 (p<0.001)")
    assert (p_number(0.045, 0.05), p_text(0.002, 0.05), p_text(1.0, 0.05)) == ("0.045", "p=0.002", "p=1.000")
    assert p_number(0.0005, 0.05) == "0.001"  # what rounds to 0.001 is shown as it
    assert p_number(0.0003, 0.0001) == "0.0003"  # above a significance that fine: not "<0.001"


def test_a_number_is_never_shown_across_the_line_its_verdict_is_drawn_at() -> None:
    """p = 50/1001 (t = 24 of 1,000 resamples) is under 0.05, and counts as significant: three decimals showed
    0.050 beside "ahead with p < 0.05". A ratio of 0.50004 is over "at most 0.5": two showed 0.50 beside "no"."""
    assert p_number(50 / 1001, 0.05) == "0.04995" and p_text(0.05, 0.05) == "p=0.050"
    assert diff_cell(5.7, 50 / 1001, 0.05) == "+5.70 (p=0.04995)" and p_number(0.05004, 0.05) == "0.05004"
    assert (beside(0.50004, 0.5, 2), beside(0.4996, 0.5, 2), beside(0.5, 0.5, 2)) == ("0.50004", "0.4996", "0.50")
    assert (beside(0.7496, 0.75, 2), beside(0.31, 0.5, 2), beside(1 / 3, 0.5, 2)) == ("0.7496", "0.31", "0.33")
    for value in (0.049999999, 0.0500000001, 0.75 - 1e-12):
        limit = 0.05 if value < 0.5 else 0.75
        assert (float(beside(value, limit, 2)) < limit) == (value < limit)


def test_diff_cell_without_a_difference_or_a_p() -> None:
    assert (diff_cell(None, 0.5, 0.05), diff_cell(-0.5, None, 0.05)) == ("-", "-0.50 (p -)")


def test_markdown_table_aligns_the_first_columns_left() -> None:
    assert markdown_table(["a", "b", "c"], [["x", "1", "2"]], left=2) == [
        "| a | b | c |", "|---|---|---:|", "| x | 1 | 2 |"]
