"""scripts/search_ops.py: the operators a step of search runs, counted on the CPU (on a GPU each is a kernel
launch, and launches bound a step); scripts/search_time.py: what it searches."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt.config import load_config
from tests.helpers import CONFIGS, TINY_TRANSFORMER, shortened

from search_ops import count  # scripts/search_ops.py (pyproject.toml puts scripts/ on the tests' path)
from search_time import time_search  # scripts/search_time.py


@pytest.mark.slow  # the profiler
def test_the_model_step_costs_the_same_in_either_search_and_beam_search_keeps_more_books() -> None:
    greedy_steps, greedy = count("rnnsearch", "greedy", "cpu", sentences=4, beam=3)
    beam_steps, beam = count("rnnsearch", "beam", "cpu", sentences=4, beam=3)
    assert 1 < greedy_steps <= 41 and 1 < beam_steps <= 41  # the limit: 40 tokens, then EOS
    # one GRU step with attention: about 30 operators that do work (51 counted no-ops too: 16 conjugate checks...)
    assert 20 < greedy["decode_step"] == beam["decode_step"] < 40
    assert greedy["encode"] == beam["encode"] > 0
    assert 0 < greedy["search"] < beam["search"]


def test_search_time_searches_the_longest_test_sources_within_their_limits(tmp_path: Path) -> None:
    overrides = [*shortened(tmp_path), *(f"runs.transformer-50.model.{key}={value}" for key, value in TINY_TRANSFORMER.items())]
    config = load_config(CONFIGS / "converged.yaml", overrides).for_run("transformer-50")
    seconds, outputs, lengths = time_search(config, sentences=5, beam=3)
    test_lengths = sorted((len(src.split()) + 1 for src in (tmp_path / "test.src").read_text().splitlines()), reverse=True)
    assert seconds > 0 and len(outputs) == 5 and lengths == test_lengths[:5]  # one piece a digit, then EOS
    assert all(len(out) <= n + 2 for out, n in zip(outputs, lengths, strict=True))
    assert time_search(config, sentences=5, beam=3)[1] == outputs  # seeded: the same model each time
