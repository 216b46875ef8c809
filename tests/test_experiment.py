"""nmt/compare/experiment.py without training: the step timings it keeps, and what --force may delete
(whole experiments: tests/system/test_experiment.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt.compare.experiment import Timings, run_experiment
from nmt.errors import NMTError
from tests.helpers import CONFIGS


def test_force_only_deletes_experiment_folders(tmp_path: Path) -> None:
    precious = tmp_path / "notes"
    precious.mkdir()
    (precious / "thesis.tex").write_text("keep me", encoding="utf-8")
    with pytest.raises(NMTError, match=r"--force would delete .*notes, which is not an experiment folder"):
        run_experiment(CONFIGS / "quick.yaml", [], precious, force=True)
    assert (precious / "thesis.tex").read_text(encoding="utf-8") == "keep me"


@pytest.mark.parametrize("text", ['{"prepare": 1', '[1, 2]', '{"prepare": null}', '{"prepare": "soon"}'])
def test_unreadable_timings_is_a_user_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "timings.json").write_text(text, encoding="utf-8")
    with pytest.raises(NMTError, match=r"timings.json is not the step timings") as error:
        Timings(tmp_path / "timings.json")
    assert "Delete it" in error.value.hint


def test_timings_read_back_what_they_recorded(tmp_path: Path) -> None:
    Timings(tmp_path / "timings.json").record("prepare", 12.345)
    assert Timings(tmp_path / "timings.json").seconds == {"prepare": 12.3}
    timings = Timings(tmp_path / "timings.json")
    timings.record("evaluate", 2.0)
    timings.forget("prepare")
    assert Timings(tmp_path / "timings.json").seconds == {"evaluate": 2.0}
