"""`nmt average`: the mean of a run's periodic checkpoints, usable by translate and evaluate."""

from __future__ import annotations

import dataclasses
import re
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from nmt.cli import main
from nmt.compare.runs import describe_runs
from nmt.decoding.translator import Translator
from nmt.errors import NMTError
from nmt.rundir import averaging
from nmt.rundir.averaging import average_checkpoints
from nmt.rundir.checkpoints import describe_checkpoint, load_checkpoint, save_checkpoint
from nmt.training.trainer import train
from tests.helpers import reverse_task_config, unwritable

TINY_MODEL = {"embedding_size": 16, "hidden_size": 32, "attention_size": 32, "maxout_size": 16}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny run that keeps its checkpoints of steps 2, 4 and 6."""
    root = tmp_path_factory.mktemp("average")
    config = reverse_task_config(root / "data", n_train=200, min_len=4, max_len=8, model=TINY_MODEL, training={
        "max_steps": 6, "validate_every": 3, "checkpoint_every": 2, "log_every": 2, "keep_last": 0,
        "valid_max_sentences": 10, "batch_tokens": 300,
    })
    train(config, root / "run")
    return root / "run"


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["model"]


def test_the_last_two_are_averaged_and_translate_and_evaluate_take_it(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["average", str(run), "--last", "2"]) == 0
    averaged = run / "checkpoints" / "averaged.pt"
    assert "averaged.pt (step 6, the average of steps 4, 6)" in capsys.readouterr().out
    four, six = _weights(run / "checkpoints" / "step_00000004.pt"), _weights(run / "checkpoints" / "step_00000006.pt")
    mean = _weights(averaged)
    assert set(mean) == set(six)
    for key in six:
        assert mean[key].dtype == six[key].dtype
        torch.testing.assert_close(mean[key], (four[key] + six[key]) / 2)
    assert any(not torch.equal(mean[key], six[key]) for key in six)  # not just the newest copied
    lines = ["1 2 3 4", "5 6 7 8 9"]
    assert len(Translator.from_run(run, checkpoint=averaged).translate(lines)) == 2
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["translate", str(run), "-i", str(source), "-o", str(tmp_path / "out.txt"),
                 "--checkpoint", str(averaged)]) == 0
    assert len((tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()) == 2
    (info,) = describe_runs([run], checkpoint="averaged.pt")
    assert info.checkpoint == averaged
    # by step list, to another file; the run's own names are refused
    out = average_checkpoints(run, steps=[2, 6], output=tmp_path / "two-six.pt")
    assert describe_checkpoint(out) == "two-six.pt (step 6, the average of steps 2, 6)"
    with pytest.raises(NMTError, match="that name is the run's own"):
        average_checkpoints(run, last=2, output=run / "checkpoints" / "best.pt")


def test_a_checkpoint_of_the_current_folder_is_taken_as_dot_slash_name(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # --checkpoint ./avg.pt (as the docs and the error for avg.pt say) is that file, not RUN/checkpoints/avg.pt,
    # for nmt translate, nmt evaluate and Translator.from_run alike
    monkeypatch.chdir(tmp_path)
    average_checkpoints(run, last=2, output="avg.pt")
    (tmp_path / "in.txt").write_text("1 2 3 4\n", encoding="utf-8")
    assert main(["translate", str(run), "-i", "in.txt", "-o", "out.txt", "--checkpoint", "./avg.pt"]) == 0
    assert main(["evaluate", str(run), "--src", "in.txt", "--ref", "in.txt", "--out", "eval", "--checkpoint",
                 "./avg.pt"]) == 0
    assert "checkpoint avg.pt (step 6, the average of steps 4, 6)" in capsys.readouterr().err
    assert len(Translator.from_run(run, "./avg.pt").translate(["1 2 3 4"])) == 1


def test_the_command_it_suggests_finds_the_file(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # -o avg.pt: a bare avg.pt given to --checkpoint would be looked up in RUN/checkpoints/
    monkeypatch.chdir(tmp_path)
    assert main(["average", str(run), "--last", "2", "-o", "avg.pt"]) == 0
    suggested = capsys.readouterr().out.splitlines()[-1]
    assert suggested == f"use it with: nmt translate {run} --checkpoint ./avg.pt"
    Path("in.txt").write_text("1 2 3 4\n", encoding="utf-8")
    assert main(["translate", str(run), "-i", "in.txt", "-o", "out.txt", *suggested.split()[-2:]]) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--last", "5"], r"--last 5: .* has 3 periodic checkpoint\(s\) \(steps: 2, 4, 6\)"),
        (["--last", "1"], r"averaging needs at least 2 checkpoints"),
        (["--steps", "2,3"], r"has no checkpoint of step 3 \(it has: 2, 4, 6\)"),
        (["--steps", "4,4"], r"at least 2 different steps"),
    ],
)
def test_user_errors(run: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(["average", str(run), *argv, "-o", str(run / "other.pt")]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (run / "other.pt").exists()


def test_an_output_of_a_dash_is_refused_as_stdout_is_meant(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["average", str(run), "--last", "2", "-o", "-"]) == 2
    assert capsys.readouterr().err == ("nmt average: error: -o -: a checkpoint is not written to stdout.\n"
                                       "Give a file's path (e.g. -o averaged.pt).\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ("20,,40", "expected comma-separated step numbers, got '20,,40' (an empty item between commas)"),
        ("0,4", "expected comma-separated step numbers of 1 or more, got '0,4'"),
        ("-2,4", "expected comma-separated step numbers of 1 or more, got '-2,4'"),
    ],
)
def test_a_step_list_with_an_empty_item_or_a_step_under_1_is_refused_by_the_parser(
    run: Path, capsys: pytest.CaptureFixture[str], steps: str, message: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["average", str(run), f"--steps={steps}", "-o", str(run / "other.pt")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith(f"nmt average: error: argument --steps: {message}\n")
    assert not (run / "other.pt").exists()


def test_best_checkpoint_names_its_step_and_metric(run: Path) -> None:
    text = describe_checkpoint(run / "checkpoints" / "best.pt")
    assert re.fullmatch(r"best\.pt \(step [36], best validation bleu \d+\.\d\d.*\)", text)


def test_a_run_dir_that_is_no_run_is_named_as_such_not_as_one_without_checkpoints(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("x\n", encoding="utf-8")
    (tmp_path / "empty").mkdir()
    step = run / "checkpoints" / "step_00000002.pt"
    for given, message in (
        (tmp_path / "missing", f"{tmp_path / 'missing'} does not exist.\nGive as RUN_DIR a folder that `nmt train` "
                               "wrote"),
        (tmp_path / "notes.txt", f"{tmp_path / 'notes.txt'} is a file, not a run directory.\nGive as RUN_DIR"),
        (tmp_path / "empty", f"{tmp_path / 'empty'} is not a training run (no config.yaml).\nPass the folders"),
        # a checkpoint: its run is named, with no --checkpoint, which nmt average does not take
        (step, f"{step} is a file, not a run directory.\nGive its run folder, {run}.\n"),
    ):
        assert main(["average", str(given), "--last", "2", "-o", str(tmp_path / "avg.pt")]) == 2
        assert capsys.readouterr().err.startswith(f"nmt average: error: {message}")
    assert not (tmp_path / "avg.pt").exists()


def test_an_output_that_is_a_file_of_the_run_is_refused_and_left_as_it_was(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a file is written through its link: a link to a step checkpoint would replace that checkpoint
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    checkpoints = copy / "checkpoints"
    (checkpoints / "latest.pt").symlink_to("step_00000006.pt")
    (checkpoints / "settings.pt").symlink_to("../config.yaml")
    (checkpoints / "averaged.pt").unlink(missing_ok=True)  # an earlier test's
    (checkpoints / "averaged.pt").symlink_to("best.pt")  # the default output
    before = {path: path.read_bytes() for path in copy.rglob("*") if path.is_file()}
    for output, message in (
        (copy / "config.yaml", f"-o {copy / 'config.yaml'} is the run's {copy / 'config.yaml'}, which every command "
                               "that reads the run needs: it would be replaced."),
        (checkpoints / "settings.pt", f"-o {checkpoints / 'settings.pt'} is the run's {copy / 'config.yaml'}"),
        (checkpoints / "latest.pt", f"-o {checkpoints / 'latest.pt'}: the file it links to, "
                                    f"{checkpoints / 'step_00000006.pt'}, is the run's own"),
    ):
        assert main(["average", str(copy), "--last", "2", "-o", str(output)]) == 2
        assert capsys.readouterr().err.startswith(f"nmt average: error: {message}")
    assert main(["average", str(copy), "--last", "2"]) == 2
    assert capsys.readouterr().err == (
        f"nmt average: error: {checkpoints / 'averaged.pt'} (without -o): the file it links to, "
        f"{checkpoints / 'best.pt'}, is the run's own (best.pt, step_*.pt, interrupted_*.pt), which training and "
        "resume read.\nGive -o a file that is no link to one of them; nothing was written.\n"
    )
    assert {path: path.read_bytes() for path in copy.rglob("*") if path.is_file()} == before


def test_an_output_that_is_another_run_s_own_file_is_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    shutil.copytree(run, other)
    before = {path: path.read_bytes() for path in other.rglob("*") if path.is_file()}
    for name in ("config.yaml", "summary.json", "tokenizer/tokenizer.json"):
        assert main(["average", str(run), "--last", "2", "-o", str(other / name)]) == 2
        assert capsys.readouterr().err == (
            f"nmt average: error: -o {other / name} is {name} of the run {other}, which nmt wrote and reads: it would "
            "be replaced.\nWrite it outside the run's own files (beside its folder, say); nothing was written.\n")
    assert {path: path.read_bytes() for path in other.rglob("*") if path.is_file()} == before


def test_an_output_that_is_a_file_but_no_checkpoint_is_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # -o in.en for -i in.en (a translate habit): the user's text was replaced by a zip archive
    text = tmp_path / "in.en"
    text.write_text("a sentence\n", encoding="utf-8")
    assert main(["average", str(run), "--last", "2", "-o", str(text)]) == 2
    assert capsys.readouterr().err.startswith(
        f"nmt average: error: -o {text} is a file that is no checkpoint: it would be replaced.\n")
    assert text.read_text(encoding="utf-8") == "a sentence\n"
    # an earlier average of this run: replaced, as averaging again does
    output = tmp_path / "avg.pt"
    assert main(["average", str(run), "--last", "2", "-o", str(output)]) == 0
    first = output.read_bytes()
    assert main(["average", str(run), "--last", "3", "-o", str(output)]) == 0
    assert output.read_bytes() != first
    # a zip archive that is no checkpoint (a document), a checkpoint no average wrote (another toolkit's .pt, a copy
    # of a training checkpoint), an average of a run with other models: each kept
    document = tmp_path / "thesis.docx"
    with zipfile.ZipFile(document, "w") as archive:
        archive.writestr("word/document.xml", "<w:document/>")
    tensor = tmp_path / "embeddings.pt"
    torch.save({"weight": torch.ones(2)}, tensor)
    copied = tmp_path / "best-copy.pt"
    shutil.copy(run / "checkpoints" / "best.pt", copied)
    other_models = tmp_path / "other-models.pt"
    averaged = load_checkpoint(output)
    save_checkpoint(other_models, dataclasses.replace(averaged, tokenizer_sha256={"spm.model": "0" * 64}))
    for kept, what in ((document, "no checkpoint"), (tensor, "no checkpoint"),
                       (copied, "a checkpoint that no `nmt average` wrote"), (other_models, "an average of another run's")):
        before = kept.read_bytes()
        assert main(["average", str(run), "--last", "2", "-o", str(kept)]) == 2
        assert capsys.readouterr().err.startswith(f"nmt average: error: -o {kept} is a file that is {what}: it would "
                                                  "be replaced.\n")
        assert kept.read_bytes() == before


def test_an_output_in_another_run_s_checkpoints_folder_is_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """There an average of this run would pass for one of that run's (whose translate refuses it, or not where
    their models and settings agree: two runs of one experiment)."""
    other = tmp_path / "other"
    shutil.copytree(run, other)
    target = other / "checkpoints" / "averaged.pt"
    assert main(["average", str(other), "--last", "2"]) == 0
    before = target.read_bytes()
    assert main(["average", str(run), "--last", "2", "-o", str(target)]) == 2
    assert capsys.readouterr().err == (
        f"nmt average: error: -o {target} is in the checkpoints/ folder of another run, {other}: an average of {run} "
        f"there would pass for one of that run's.\nWrite it in {run / 'checkpoints'} or outside any run; nothing was "
        "written.\n")
    assert target.read_bytes() == before


def test_an_output_in_a_prepared_data_folder_is_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the splits, models and cached alignments that runs read: a file written there was a split lost (nmt evaluate
    # then found test.src of 2 lines beside test.tgt's 3,011), or a file the next rebuild deletes
    prepared = tmp_path / "prepared"
    (prepared / "alignments").mkdir(parents=True)
    for name in ("prepared.json", "test.src", "alignments/links.json"):
        (prepared / name).write_text(f"{name}\n", encoding="utf-8")
    for name in ("test.src", "alignments/links.json", "new.pt"):
        assert main(["average", str(run), "--last", "2", "-o", str(prepared / name)]) == 2
        assert capsys.readouterr().err == (
            f"nmt average: error: -o {prepared / name} is in the prepared data folder {prepared}: its splits and "
            "models are what runs read, and `nmt prepare` replaces the folder whole when it prepares it again.\n"
            "Write it outside that folder (beside it, say); nothing was written.\n")
    assert sorted(str(p.relative_to(prepared)) for p in prepared.rglob("*")) == [
        "alignments", "alignments/links.json", "prepared.json", "test.src"]
    assert (prepared / "test.src").read_text(encoding="utf-8") == "test.src\n"


def test_an_output_folder_that_cannot_be_written_is_refused_before_any_checkpoint_is_read(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ro").mkdir()
    unwritable(monkeypatch, tmp_path / "ro")
    monkeypatch.setattr(averaging, "load_checkpoint", lambda path: pytest.fail(f"{path} was read"))
    output = tmp_path / "ro" / "avg.pt"
    assert main(["average", str(run), "--last", "2", "-o", str(output)]) == 2
    assert capsys.readouterr().err == (
        f"nmt average: error: the folder of -o {output}: it cannot be written (no permission to write there, or a "
        "read-only disk).\nGive -o a file in a folder you can write; nothing was done.\n"
    )
    assert list((tmp_path / "ro").iterdir()) == []


def test_a_run_interrupted_before_its_first_periodic_checkpoint_is_said_to_need_resuming(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # its checkpoints: best.pt and the interruption's; training.keep_last has nothing to do with it
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("step_*.pt", "averaged.pt"))
    shutil.copy(run / "checkpoints" / "step_00000002.pt", copy / "checkpoints" / "interrupted_00000001.pt")
    for argv in (["--last", "2"], ["--steps", "2,4"]):
        assert main(["average", str(copy), *argv]) == 2
        assert capsys.readouterr().err == (
            f"nmt average: error: {copy} has no periodic checkpoint (checkpoints/step_*.pt) to average: its training "
            "stopped (or validated best) at step 1, before its first one, and left checkpoints/interrupted_00000001.pt, "
            f"which is for --resume only.\nContinue the run with `nmt train CONFIG --run-dir {copy} --resume` (CONFIG: "
            "the one it was trained with; for a run of `nmt experiment`, run the same experiment again): it saves a "
            "step_*.pt every training.checkpoint_every steps.\n"
        )
    assert sorted(path.name for path in (copy / "checkpoints").iterdir()) == ["best.pt", "interrupted_00000001.pt"]


def test_a_last_above_the_checkpoints_of_an_interrupted_run_says_it_can_be_resumed(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--last N above the periodic checkpoints of a run interrupted after them says that the run was interrupted
    and how to continue it (which makes more of them), not only that training.keep_last decides their number."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("averaged.pt"))
    shutil.copy(run / "checkpoints" / "step_00000006.pt", copy / "checkpoints" / "interrupted_00000007.pt")
    assert main(["average", str(copy), "--last", "4"]) == 2
    assert capsys.readouterr().err == (
        f"nmt average: error: --last 4: {copy} has 3 periodic checkpoint(s) (steps: 2, 4, 6), and its training "
        "stopped (or validated best) at step 7 (checkpoints/interrupted_00000007.pt, for --resume only).\nContinue "
        "the run with "
        f"`nmt train CONFIG --run-dir {copy} --resume` (CONFIG: the one it was trained with; for a run of `nmt "
        "experiment`, run the same experiment again): it saves a step_*.pt every training.checkpoint_every steps, "
        "and keeps the newest training.keep_last of them (0 keeps all; a --resume may raise it with --set "
        "training.keep_last=N); or use --last 3.\n"
    )
    assert not (copy / "checkpoints" / "averaged.pt").exists()


def test_a_last_above_the_checkpoints_says_how_many_there_are_and_offers_no_last_it_would_refuse(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--last N above a run's periodic checkpoints offers the --last that fits where 2 or more are there, and
    where only one is (training.keep_last: 1, say) no smaller --last, which under 2 is refused."""
    assert main(["average", str(run), "--last", "5", "-o", str(tmp_path / "avg.pt")]) == 2
    assert capsys.readouterr().err.endswith("train one that keeps more to average more; or use --last 3.\n")
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("step_00000002.pt", "step_00000004.pt", "averaged.pt"))
    assert main(["average", str(copy), "--last", "2"]) == 2
    assert capsys.readouterr().err == (
        f"nmt average: error: --last 2: {copy} has 1 periodic checkpoint(s) (steps: 6).\nA run writes one every "
        "training.checkpoint_every steps and keeps the newest training.keep_last of them (0 keeps all): train one "
        "that keeps more to average more.\n"
    )
    assert not (copy / "checkpoints" / "averaged.pt").exists()


def test_a_checkpoint_name_outside_a_runs_checkpoints_folder_is_the_users_to_write(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o best.pt (or step_*.pt) in a folder of the user's is written: only in a run's checkpoints/ folder, this
    run's or another's, do training and resume read those names, and there they stay refused."""
    outside = tmp_path / "x" / "best.pt"
    outside.parent.mkdir()
    assert main(["average", str(run), "--last", "2", "-o", str(outside)]) == 0
    assert describe_checkpoint(outside) == "best.pt (step 6, the average of steps 4, 6)"
    assert average_checkpoints(run, last=2, output=tmp_path / "x" / "step_00000006.pt").is_file()
    other = tmp_path / "other"
    shutil.copytree(run, other, ignore=shutil.ignore_patterns("averaged.pt"))
    before = (other / "checkpoints" / "best.pt").read_bytes()
    assert main(["average", str(run), "--last", "2", "-o", str(other / "checkpoints" / "best.pt")]) == 2
    assert capsys.readouterr().err.startswith(
        f"nmt average: error: -o {other / 'checkpoints' / 'best.pt'}: that name is a checkpoint name of the run "
        f"{other} (best.pt, step_*.pt, interrupted_*.pt), which training and resume read.\n"
    )
    assert (other / "checkpoints" / "best.pt").read_bytes() == before
    with pytest.raises(NMTError, match="that name is the run's own"):  # one the run has not written yet too
        average_checkpoints(run, last=2, output=run / "checkpoints" / "step_00000099.pt")
    assert not (run / "checkpoints" / "step_00000099.pt").exists()
