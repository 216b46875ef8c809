"""nmt.rundir.checkpoints: atomic save, safe load, and finding a run's step checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nmt.compare.runs import describe_runs
from nmt.errors import NMTError
from nmt.rundir.checkpoints import (
    latest_step_checkpoint,
    load_checkpoint,
    prune_step_checkpoints,
    save_checkpoint,
    step_checkpoint_name,
    step_checkpoints,
)
from nmt.training.rng import capture_rng
from tests.helpers import fake_run


def test_save_and_load_round_trip_and_no_temporary_left(tmp_path: Path) -> None:
    state = {"model": {"w": torch.arange(6.0).view(2, 3)}, "step": 7, "rng": capture_rng(), "best": None}
    path = tmp_path / "checkpoints" / "step_00000007.pt"
    save_checkpoint(path, state)
    loaded = load_checkpoint(path)
    assert torch.equal(loaded["model"]["w"], state["model"]["w"]) and loaded["step"] == 7 and loaded["best"] is None
    assert [p.name for p in path.parent.iterdir()] == [path.name]


@pytest.mark.parametrize("content", [b"", b"garbage bytes", None])
def test_unusable_checkpoints_are_nmt_errors_naming_the_file(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "broken.pt"
    if content is None:
        torch.save({"no": "weights"}, path)
    else:
        path.write_bytes(content)
    with pytest.raises(NMTError, match="broken.pt"):
        load_checkpoint(path)
    with pytest.raises(NMTError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")


def test_step_checkpoints_are_found_in_step_order_and_pruned(tmp_path: Path) -> None:
    assert latest_step_checkpoint(tmp_path) is None
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for step in (500, 20, 1000, 3):
        (folder / step_checkpoint_name(step)).write_bytes(b"x")
    (folder / "best.pt").write_bytes(b"x")
    (folder / ".step_00009999.pt.abc.tmp").write_bytes(b"x")
    assert [p.name for p in step_checkpoints(tmp_path)] == [
        "step_00000003.pt", "step_00000020.pt", "step_00000500.pt", "step_00001000.pt"
    ]
    assert latest_step_checkpoint(tmp_path) == folder / "step_00001000.pt"
    prune_step_checkpoints(tmp_path, 2)
    assert sorted(p.name for p in folder.glob("*.pt")) == ["best.pt", "step_00000500.pt", "step_00001000.pt"]
    prune_step_checkpoints(tmp_path, 0)
    assert len(step_checkpoints(tmp_path)) == 2


def test_evaluate_takes_checkpoint_names_for_every_run_and_a_path_for_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runs = [fake_run(Path("a")), fake_run(Path("b"))]
    for run in runs:
        (run / "checkpoints" / "averaged.pt").write_bytes(b"w")
    assert [info.checkpoint for info in describe_runs(runs, checkpoint="averaged.pt")] == [
        run / "checkpoints" / "averaged.pt" for run in runs
    ]
    # a path names one file: for one run it is used as given, for several it is refused, not reinterpreted
    path = "a/checkpoints/averaged.pt"
    assert describe_runs(runs[:1], checkpoint=path)[0].checkpoint == Path(path)
    with pytest.raises(NMTError, match=r"--checkpoint a/checkpoints/averaged.pt is one file, but 2 runs"):
        describe_runs(runs, checkpoint=path)
    with pytest.raises(NMTError, match=r"b has no b/checkpoints/step_00000009.pt \(it has: averaged.pt, best.pt\)"):
        describe_runs([runs[1]], checkpoint="step_00000009.pt")
    with pytest.raises(NMTError, match=r"--checkpoint a/averaged.pt: no such file"):
        describe_runs(runs[:1], checkpoint="a/averaged.pt")
