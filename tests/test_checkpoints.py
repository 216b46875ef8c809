"""nmt.rundir.checkpoints: the checkpoint format (`Checkpoint`), atomic save, safe load, and finding a run's
step checkpoints."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from nmt.cli import main
from nmt.compare.runs import describe_runs
from nmt.errors import NMTError
from nmt.rundir.checkpoints import (
    Checkpoint,
    latest_step_checkpoint,
    load_checkpoint,
    prune_step_checkpoints,
    resolve_checkpoint,
    save_checkpoint,
    step_checkpoint_name,
    step_checkpoints,
)
from nmt.rundir.loading import load_run
from nmt.training.rng import capture_rng
from tests.helpers import fake_run

# The keys checkpoint files have had since step checkpoints could resume: files written before the format
# became the `Checkpoint` dataclass must still load, and new ones must be readable by older code.
WEIGHT_KEYS = {"model", "step", "score", "metric", "config", "src_vocab_size", "tgt_vocab_size"}
TRAINING_KEYS = {
    "optimizer", "schedule", "scaler", "epoch", "position", "best_score", "best_step", "bad_validations",
    "log_acc", "elapsed_s", "rng", "last_validation", "world_size",
}


def step_state() -> dict[str, Any]:
    """A step checkpoint's content as the loop wrote it before the dataclass (a flat dict of those keys)."""
    return {
        "model": {"w": torch.arange(6.0).view(2, 3)}, "step": 7, "score": math.nan, "metric": "bleu",
        "config": {"model": {"hidden_size": 4}}, "src_vocab_size": 25, "tgt_vocab_size": 26,
        "optimizer": {"state": {}, "param_groups": []}, "schedule": {"scale": 1.0, "best": None, "bad_validations": 0},
        "scaler": {}, "epoch": 2, "position": 3, "best_score": None, "best_step": 0, "bad_validations": 1,
        "log_acc": {"loss": 1.5, "tokens": 10.0, "seconds": 0.25}, "elapsed_s": 4.5, "rng": [capture_rng(torch.device("cpu"))],
        "last_validation": None, "world_size": 1,
    }


def test_an_old_step_checkpoint_loads_and_round_trips_with_the_same_keys(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints" / "step_00000007.pt"
    path.parent.mkdir()
    torch.save(step_state(), path)
    loaded = load_checkpoint(path)
    assert torch.equal(loaded.model["w"], torch.arange(6.0).view(2, 3)) and loaded.step == 7
    assert (loaded.src_vocab_size, loaded.tgt_vocab_size, loaded.metric) == (25, 26, "bleu")
    assert loaded.training is not None and loaded.averaged_steps is None
    assert (loaded.training.epoch, loaded.training.position, loaded.training.bad_validations) == (2, 3, 1)
    assert loaded.training.log_acc == {"loss": 1.5, "tokens": 10.0, "seconds": 0.25}
    assert loaded.training.best_score is None and loaded.training.world_size == 1
    assert set(loaded.to_dict()) == WEIGHT_KEYS | TRAINING_KEYS
    save_checkpoint(path, loaded)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    again = load_checkpoint(path)
    assert set(torch.load(path, weights_only=True)) == WEIGHT_KEYS | TRAINING_KEYS
    assert again.training is not None and again.training.rng[0]["python"] == loaded.training.rng[0]["python"]
    assert torch.equal(again.training.rng[0]["torch"], loaded.training.rng[0]["torch"])
    assert again.training.epoch == 2 and again.score is not None and math.isnan(again.score)


def test_weights_only_checkpoints_keep_their_keys_and_have_no_training_state(tmp_path: Path) -> None:
    best = Checkpoint({"w": torch.ones(2)}, 5, config={}, src_vocab_size=3, tgt_vocab_size=4, score=12.5, metric="bleu")
    assert set(best.to_dict()) == WEIGHT_KEYS
    averaged = Checkpoint({"w": torch.ones(2)}, 6, averaged_steps=[4, 6])
    assert averaged.to_dict().keys() == {"model", "step", "averaged_steps"}
    save_checkpoint(tmp_path / "best.pt", best)
    loaded = load_checkpoint(tmp_path / "best.pt")
    assert loaded.training is None and (loaded.step, loaded.score, loaded.src_vocab_size) == (5, 12.5, 3)
    torch.save({"model": {"w": torch.ones(2)}, "step": 0}, tmp_path / "bare.pt")  # the least translation needs
    assert load_checkpoint(tmp_path / "bare.pt").config is None


@pytest.mark.parametrize("content", [b"", b"garbage bytes", None])
def test_unusable_checkpoints_are_nmt_errors_naming_the_file(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "broken.pt"
    if content is None:
        torch.save({"no": "weights"}, path)
    else:
        path.write_bytes(content)
    with pytest.raises(NMTError, match="broken.pt"):
        load_checkpoint(path)


def test_a_file_that_is_no_checkpoint_is_not_to_be_deleted_and_a_folder_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # --checkpoint may name any file, the user's own: the hint says "delete it" only of a damaged checkpoint,
    # and torch's advice to its callers (weights_only=False) is not passed on
    monkeypatch.chdir(tmp_path)
    run = fake_run(Path("run"))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n", encoding="utf-8")
    with pytest.raises(NMTError) as error:
        load_checkpoint(notes)
    assert error.value.message == f"checkpoint {notes} is unreadable or corrupt (UnpicklingError: Weights only load failed)."
    assert error.value.hint == (
        "If it is a run's checkpoint, it is damaged: delete it and use another of the run's "
        "(checkpoints/step_*.pt), or retrain; else give a checkpoint that nmt train or nmt average wrote."
    )
    assert notes.read_text(encoding="utf-8") == "my notes\n"
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(NMTError, match=r"empty.pt is unreadable or corrupt \(EOFError\)\. If"):
        load_checkpoint(tmp_path / "empty.pt")
    # found, then pruned by its run's training (keep_last) before it was read: not called damaged
    def pruned_meanwhile(path: Path, **options: Any) -> Any:
        path.unlink()
        return path.read_bytes()  # FileNotFoundError, as torch.load's own open

    monkeypatch.setattr(torch, "load", pruned_meanwhile)
    with pytest.raises(NMTError, match=r"empty.pt was removed while it was read \(a run in training deletes") as error:
        load_checkpoint(tmp_path / "empty.pt")
    assert error.value.hint == "Run the command again: it takes the checkpoints there are now."
    # a folder given as --checkpoint (often the run itself) is named as one, with the file meant as example
    with pytest.raises(NMTError) as error:
        describe_runs([run], checkpoint=str(tmp_path / "run"))
    assert (error.value.message, error.value.hint) == (
        f"checkpoint={tmp_path / 'run'} is a folder, not a checkpoint file.",
        f"Give a .pt file, e.g. {tmp_path / 'run' / 'checkpoints' / 'best.pt'}, or a bare file name of the run's "
        "checkpoints/ folder.",
    )
    assert main(["evaluate", "run", "--checkpoint", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.startswith(f"nmt evaluate: error: --checkpoint {tmp_path / 'run'} is a folder, not")


def test_a_name_is_the_runs_file_and_a_path_with_a_folder_even_dot_slash_is_taken_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run = fake_run(Path("run"))
    (run / "checkpoints" / "averaged.pt").write_bytes(b"the run's")
    Path("averaged.pt").write_bytes(b"the current folder's")
    assert resolve_checkpoint(run, "averaged.pt") == run / "checkpoints" / "averaged.pt"
    # "./" kept (pathlib would drop it), so that the path resolved again (evaluate's translating) is this file too
    assert resolve_checkpoint(run, "./averaged.pt") == tmp_path / "averaged.pt"
    assert resolve_checkpoint(run, resolve_checkpoint(run, "./averaged.pt")) == tmp_path / "averaged.pt"
    assert resolve_checkpoint(run, str(tmp_path / "averaged.pt")) == tmp_path / "averaged.pt"
    with pytest.raises(NMTError, match=r"^checkpoint=./missing.pt: no such file"):  # named as a Python argument
        resolve_checkpoint(run, "./missing.pt")
    with pytest.raises(NMTError, match=r"^--checkpoint ./missing.pt: no such file"):  # as the command's flag
        resolve_checkpoint(run, "./missing.pt", "--checkpoint ")
    with pytest.raises(NMTError) as error:
        resolve_checkpoint(run, "missing.pt")
    assert "e.g. ./missing.pt for one in the current folder" in error.value.hint


def test_a_missing_checkpoint_is_an_nmt_error(tmp_path: Path) -> None:
    with pytest.raises(NMTError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"step": ...}, r"step_00000007.pt is not a complete nmt checkpoint: it lacks step"),
        ({"rng": ..., "world_size": ...}, r"step_00000007.pt is not a complete nmt checkpoint: it lacks rng, world_size"),
    ],
)
def test_a_truncated_or_foreign_checkpoint_names_the_file_and_the_key(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    state = {key: value for key, value in {**step_state(), **change}.items() if value is not ...}  # ...: dropped
    path = tmp_path / "step_00000007.pt"
    torch.save(state, path)
    with pytest.raises(NMTError, match=message):
        load_checkpoint(path)


def test_a_content_that_is_no_dict_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "step_00000007.pt"  # (named by the errors only: from_dict reads no file)
    with pytest.raises(NMTError, match="step_00000007.pt is not an nmt checkpoint"):
        Checkpoint.from_dict([1, 2], path)


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
    for name in ("interrupted_00001000.pt", "interrupted_00000999.pt"):  # the periodic one wins a tie, whatever
        (folder / name).write_bytes(b"x")                                # order the folder lists them in
        assert latest_step_checkpoint(tmp_path) == folder / "step_00001000.pt"
        (folder / name).unlink()
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
    with pytest.raises(NMTError, match=r"^checkpoint=a/checkpoints/averaged.pt is one file, but 2 runs"):
        describe_runs(runs, checkpoint=path)
    (tmp_path / "averaged.pt").write_bytes(b"w")  # ./NAME.pt: one file too, not each run's NAME.pt
    with pytest.raises(NMTError, match=r"^--checkpoint ./averaged.pt is one file, but 2 runs"):
        describe_runs(runs, checkpoint="./averaged.pt", option="--checkpoint ")
    with pytest.raises(NMTError, match=r"b has no b/checkpoints/step_00000009.pt \(it has: averaged.pt, best.pt\)"):
        describe_runs([runs[1]], checkpoint="step_00000009.pt")
    with pytest.raises(NMTError, match=r"^checkpoint=a/averaged.pt: no such file"):
        describe_runs(runs[:1], checkpoint="a/averaged.pt")


@pytest.mark.parametrize("command", ["evaluate", "attention-checks", "attention-scaling"])
def test_one_checkpoint_file_for_several_runs_is_named_as_the_argument_in_python_and_as_the_flag(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal of one checkpoint file for two runs says checkpoint= to a caller of the Python function and
    --checkpoint on the command line, the rest of the message the same."""
    from nmt.compare.attention_checks import attention_checks
    from nmt.compare.attention_scaling import scaling_statistics
    from nmt.compare.evaluate import evaluate_runs

    monkeypatch.chdir(tmp_path)
    runs = [fake_run(Path("a"), attention="dot"), fake_run(Path("b"), attention="dot")]
    path = "a/checkpoints/best.pt"
    library = {"evaluate": evaluate_runs, "attention-checks": attention_checks, "attention-scaling": scaling_statistics}
    with pytest.raises(NMTError) as error:
        library[command](runs, checkpoint=path)
    assert error.value.message == f"checkpoint={path} is one file, but 2 runs are evaluated."
    assert main([command, *map(str, runs), "--checkpoint", path]) == 2
    assert f"error: --checkpoint {path} is one file, but 2 runs are evaluated." in capsys.readouterr().err


def test_another_runs_checkpoint_with_other_sentencepiece_models_is_refused(
    trained_reverse_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the same sizes, so its weights would load and translate every piece as another, exit code 0; with
    # evaluate's cached translations, without even being loaded
    twin, other = tmp_path / "twin", tmp_path / "other"
    shutil.copytree(trained_reverse_run, twin)
    shutil.copytree(trained_reverse_run, other)
    info = other / "tokenizer" / "tokenizer.json"
    info.write_text(info.read_text() + "\n")  # as another prepared corpus' models would, they differ
    assert load_run(trained_reverse_run, twin / "checkpoints" / "best.pt", device="cpu").step > 0  # same models
    (twin / "tokenizer" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")  # from a Mac: no part of the tokenizer
    assert load_run(trained_reverse_run, twin / "checkpoints" / "best.pt", device="cpu").step > 0
    with pytest.raises(NMTError) as error:
        load_run(trained_reverse_run, other / "checkpoints" / "best.pt", device="cpu")
    assert error.value.message == (
        f"{other / 'checkpoints' / 'best.pt'} is a checkpoint of the run {other}, whose sentencepiece models "
        f"({other / 'tokenizer'}) differ from those of {trained_reverse_run}: its weights would read every piece as another."
    )
    assert f"Use it with its own run ({other}, checkpoint best.pt)" in error.value.hint
    out = tmp_path / "evaluation"
    assert main(["evaluate", str(trained_reverse_run), "--checkpoint", str(other / "checkpoints" / "best.pt"),
                 "--out", str(out), "--device", "cpu"]) == 2
    assert "differ from those of" in capsys.readouterr().err and not out.exists()
    with pytest.raises(NMTError, match="differ from those of"):
        describe_runs([trained_reverse_run], checkpoint=str(other / "checkpoints" / "best.pt"))


def test_a_checkpoint_trained_with_other_sentencepiece_models_is_refused_wherever_it_lies(
    trained_reverse_run: Path, tmp_path: Path
) -> None:
    """A checkpoint records the sha256 of the models it was trained with: one outside any run (nmt average -o
    FILE of another run) is refused by the run whose models differ; one recording none (older) is taken."""
    best = load_checkpoint(trained_reverse_run / "checkpoints" / "best.pt")
    assert best.tokenizer_sha256 == json.loads((trained_reverse_run / "tokenizer" / "tokenizer.json").read_text())["sha256"]
    elsewhere = tmp_path / "elsewhere.pt"
    save_checkpoint(elsewhere, dataclasses.replace(best, tokenizer_sha256={"spm.model": "0" * 64}))
    with pytest.raises(NMTError) as error:
        load_run(trained_reverse_run, elsewhere, device="cpu")
    assert error.value.message.startswith(f"{elsewhere} was trained with other sentencepiece models than those of "
                                          f"{trained_reverse_run}")
    save_checkpoint(elsewhere, dataclasses.replace(best, tokenizer_sha256=None))
    assert load_run(trained_reverse_run, elsewhere, device="cpu").step == best.step
