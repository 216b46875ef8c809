"""scripts/search_ops.py: the operators a step of search runs, counted on the CPU (issue 42's launch bound)."""

from __future__ import annotations

import pytest

from search_ops import count  # scripts/search_ops.py (pyproject.toml puts scripts/ on the tests' path)


@pytest.mark.slow  # the profiler
def test_the_model_step_costs_the_same_in_either_search_and_beam_search_keeps_more_books() -> None:
    greedy_steps, greedy = count("rnnsearch", "greedy", "cpu", sentences=4, beam=3)
    beam_steps, beam = count("rnnsearch", "beam", "cpu", sentences=4, beam=3)
    assert 1 < greedy_steps <= 41 and 1 < beam_steps <= 41  # the limit: 40 tokens, then EOS
    assert greedy["decode_step"] == beam["decode_step"] > 20  # one GRU step with attention: tens of operators
    assert greedy["encode"] == beam["encode"] > 0
    assert 0 < greedy["search"] < beam["search"] < beam["decode_step"]
