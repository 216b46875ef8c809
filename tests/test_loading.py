"""nmt.rundir.loading: `load_run` and `resolve_device`."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch

from nmt.data.batching import make_source_batch
from nmt.decoding.search import greedy_search
from nmt.errors import NMTError
from nmt.rundir.checkpoints import load_checkpoint, save_checkpoint
from nmt.rundir.loading import load_run, resolve_device
from tests.synthetic import reverse_pairs


def test_resolve_device() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(NMTError, match="no CUDA") as error:
            resolve_device("cuda")
        # the way back to the CPU for commands with --device and for train / experiment, which have --set only
        assert "--device cpu" in error.value.hint and "--set training.device=cpu" in error.value.hint
    with pytest.raises(NMTError) as error:
        resolve_device("gpu")
    assert error.value.message == "device 'gpu' is not a device torch knows."
    assert error.value.hint == "Use auto, cpu, cuda or cuda:N."


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
    with pytest.raises(NMTError, match="nope does not exist"):
        load_run(tmp_path / "nope")
    config = tmp_path / "quick.yaml"
    config.write_text("model: {}\n")
    with pytest.raises(NMTError, match="quick.yaml is a config file, not a run directory") as error:
        load_run(config)
    assert f"nmt train {config} --run-name NAME" in error.value.hint
    # a file that exists is named as such, not "does not exist"; a checkpoint file points to its run folder
    notes = tmp_path / "notes.txt"
    notes.write_text("x\n")
    with pytest.raises(NMTError, match=r"notes.txt is a file, not a run directory\.") as error:
        load_run(notes)
    assert "nmt train" in error.value.hint
    best = trained_reverse_run / "checkpoints" / "best.pt"
    with pytest.raises(NMTError, match=r"best.pt is a file, not a run directory\.") as error:
        load_run(best)
    assert error.value.hint == f"Give its run folder, {trained_reverse_run}, and the checkpoint's name with checkpoint=best.pt."
    copy = tmp_path / "copy"
    shutil.copytree(trained_reverse_run, copy)
    for path in (copy / "checkpoints").iterdir():
        path.unlink()
    with pytest.raises(NMTError, match="has no checkpoint"):
        load_run(copy)
    shutil.copy(trained_reverse_run / "checkpoints" / "best.pt", copy / "checkpoints" / "step_00000001.pt")
    assert load_run(copy, device="cpu").checkpoint.name == "step_00000001.pt"
    saved = (copy / "config.yaml").read_text()
    (copy / "config.yaml").write_text(saved.replace("dropout: 0.0", "dropout: 0.3"))  # training's alone: loads
    assert load_run(copy, device="cpu").config.model.dropout == 0.3
    (copy / "config.yaml").write_text(saved.replace("hidden_size: 64", "hidden_size: 48"))
    with pytest.raises(NMTError, match=r"step_00000001.pt was trained as another model than \S+config.yaml describes "
                                       r"\(model.hidden_size 64 in the checkpoint, 48 in the config\)") as error:
        load_run(copy, device="cpu")
    # a checkpoint that records no config (an earlier nmt's): which sizes differ, not torch's message cut off at
    # "Error(s) in loading state_dict for Seq2Seq:"
    checkpoint = load_checkpoint(copy / "checkpoints" / "step_00000001.pt")
    checkpoint.config = None
    save_checkpoint(copy / "checkpoints" / "step_00000001.pt", checkpoint)
    with pytest.raises(NMTError, match="does not fit the model") as error:
        load_run(copy, device="cpu")
    assert "more weights of other sizes" in error.value.message and "Error(s)" not in error.value.message
    (copy / "config.yaml").unlink()
    with pytest.raises(NMTError, match=r"copy is not a training run \(no config.yaml\)"):
        load_run(copy)
    without_tokenizer = tmp_path / "without-tokenizer"
    shutil.copytree(trained_reverse_run, without_tokenizer, ignore=shutil.ignore_patterns("tokenizer"))
    with pytest.raises(NMTError, match=r"tokenizer/tokenizer.json not found") as error:  # a run copied without it
        load_run(without_tokenizer, device="cpu")
    assert error.value.hint.startswith("The run folder is incomplete: nmt train copies the prepared sentencepiece")


def test_a_bare_checkpoint_name_is_looked_up_in_the_runs_checkpoints_folder(
    trained_reverse_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nmt.cli import main

    monkeypatch.chdir(tmp_path)  # a folder without the file: the name is the run's, not the current folder's
    step = sorted((trained_reverse_run / "checkpoints").glob("step_*.pt"))[0]
    loaded = load_run(trained_reverse_run, checkpoint=Path(step.name), device="cpu")
    assert loaded.checkpoint == step and loaded.step == int(step.stem[5:])
    (tmp_path / "in.txt").write_text("1 2 3\n")
    assert main(["translate", str(trained_reverse_run), "--checkpoint", step.name, "-i", "in.txt", "-o", "out.txt",
                 "--device", "cpu"]) == 0
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 1
    # a path with a folder part stays a path, here relative to the current folder
    (tmp_path / "mine").mkdir()
    shutil.copy(step, tmp_path / "mine" / step.name)
    assert load_run(trained_reverse_run, checkpoint=Path("mine") / step.name, device="cpu").checkpoint == Path(
        "mine", step.name
    )
    with pytest.raises(NMTError, match=r"^checkpoint=averaged.pt: .* has no .*checkpoints/averaged.pt \(it has: best.pt, step_"):
        load_run(trained_reverse_run, checkpoint=Path("averaged.pt"), device="cpu")


def test_a_checkpoint_with_nan_weights_is_refused_naming_them(trained_reverse_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "diverged"
    shutil.copytree(trained_reverse_run, copy)
    best = copy / "checkpoints" / "best.pt"
    checkpoint = load_checkpoint(best)
    name = next(iter(checkpoint.model))
    checkpoint.model[name].view(-1)[0] = math.nan
    save_checkpoint(best, checkpoint)
    with pytest.raises(NMTError) as error:
        load_run(copy, checkpoint="best.pt", device="cpu")
    assert error.value.message == f"{best}: NaN or infinite values in 1 weight tensor of the model ({name}): it would translate nothing."
    assert error.value.hint.startswith("The run diverged before this checkpoint was saved: use an earlier one (checkpoint=step_N.pt")

