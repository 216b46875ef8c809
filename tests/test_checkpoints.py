"""nmt.rundir.checkpoints: atomic save/load, RNG capture, checkpoint discovery and `load_run`."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt.data.batching import make_source_batch
from nmt.decoding.search import greedy_search
from nmt.errors import NMTError
from nmt.rundir.checkpoints import (
    capture_rng,
    latest_step_checkpoint,
    load_checkpoint,
    load_run,
    prune_step_checkpoints,
    resolve_device,
    restore_rng,
    save_checkpoint,
    step_checkpoint_name,
    step_checkpoints,
)
from tests.synthetic import reverse_pairs


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


def test_rng_states_are_restored_exactly() -> None:
    state = capture_rng()
    first = (random.random(), float(np.random.rand()), torch.rand(3))
    random.random(), np.random.rand(), torch.rand(5)
    restore_rng(state)
    second = (random.random(), float(np.random.rand()), torch.rand(3))
    assert first[:2] == second[:2] and torch.equal(first[2], second[2])


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


def test_resolve_device() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(NMTError, match="no CUDA"):
            resolve_device("cuda")


def test_load_run_gives_a_working_model(trained_reverse_run: Path) -> None:
    run = load_run(trained_reverse_run, device="cpu")
    assert run.checkpoint.name == "best.pt" and not run.model.training
    best = torch.load(run.checkpoint, weights_only=True)
    assert run.step == best["step"]
    pairs = reverse_pairs(50, 5, 10, seed=99)
    src, lengths = make_source_batch([run.tokenizer.encode_src(s) for s, _ in pairs])
    outputs = [run.tokenizer.decode_tgt(o) for o in greedy_search(run.model, src, lengths, lengths + 5)]
    assert sum(out == ref for out, (_, ref) in zip(outputs, pairs, strict=True)) >= 25
    explicit = sorted((trained_reverse_run / "checkpoints").glob("step_*.pt"))[0]
    assert load_run(trained_reverse_run, checkpoint=explicit, device="cpu").step == int(explicit.stem[5:])


def test_load_run_errors(trained_reverse_run: Path, tmp_path: Path) -> None:
    with pytest.raises(NMTError, match="run directory not found"):
        load_run(tmp_path / "nope")
    copy = tmp_path / "copy"
    shutil.copytree(trained_reverse_run, copy)
    for path in (copy / "checkpoints").iterdir():
        path.unlink()
    with pytest.raises(NMTError, match="has no checkpoint"):
        load_run(copy)
    shutil.copy(trained_reverse_run / "checkpoints" / "best.pt", copy / "checkpoints" / "step_00000001.pt")
    assert load_run(copy, device="cpu").checkpoint.name == "step_00000001.pt"
    (copy / "config.yaml").write_text((copy / "config.yaml").read_text().replace("hidden_size: 64", "hidden_size: 48"))
    with pytest.raises(NMTError, match="does not fit the model") as error:
        load_run(copy, device="cpu")
    # which sizes differ, not torch's message cut off at "Error(s) in loading state_dict for Seq2Seq:"
    assert "model.hidden_size 64 in the checkpoint, 48 in the config" in error.value.message
    assert "more weights of other sizes" in error.value.message and "Error(s)" not in error.value.message
    (copy / "config.yaml").unlink()
    with pytest.raises(NMTError, match="config.yaml is missing"):
        load_run(copy)
