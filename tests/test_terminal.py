"""nmt.training.terminal: durations and scores as a person reads them, and where rank 0's lines go."""

from __future__ import annotations

import io
import math

import pytest
from tqdm import tqdm

import nmt.training.terminal as terminal
from nmt.training.terminal import Terminal, format_duration, format_score, progress_bar


def test_durations_and_scores_are_rounded_for_reading() -> None:
    assert [format_duration(s) for s in (0, 41.6, 59.4, 75, 3599, 3600, 3 * 3600 + 125)] == [
        "0s", "42s", "59s", "1m15s", "59m59s", "1h00m", "3h02m"
    ]
    assert format_duration(-3) == "0s" and format_duration(math.nan) == "?" and format_duration(math.inf) == "?"
    assert format_score(0.33478099148693474, "bleu") == "0.33" and format_score(1.234567, "loss") == "1.2346"
    assert format_score(None, "bleu") == "none"


def test_lines_are_printed_by_rank_0_only_and_go_above_an_open_bar(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    above: list[str] = []
    monkeypatch.setattr(terminal, "progress_bar", lambda total, initial: tqdm(total=total, file=io.StringIO()))
    monkeypatch.setattr(terminal.tqdm, "write", lambda text, *a, **k: above.append(text))
    Terminal(is_main=False).say("from rank 1")
    main = Terminal(is_main=True)
    main.say("before")
    main.open_bar(4, 0)
    main.say("during")
    main.advance()
    assert main.bar is not None and main.bar.n == 1
    main.close_bar()
    main.say("after")
    assert above == ["during"] and capsys.readouterr().out == "before\nafter\n"
    other = Terminal(is_main=False)
    other.open_bar(4, 0)
    assert other.bar is None


def test_no_bar_where_stdout_is_no_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert progress_bar(10, 3) is None  # pytest captures stdout: no terminal
