"""nmt/rundir/checks.py and writing.py: what a run folder must (not) hold for a new run or a resume, config.yaml with
absolute data paths, which config changes a resume accepts, log.jsonl cut back for a resume, summary.json."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from nmt.config import Config, config_from_dict, load_config
from nmt.errors import NMTError
from nmt.rundir.checkpoints import CHECKPOINT_DIR, interrupted_checkpoint_name, step_checkpoint_name
from nmt.rundir.checks import (
    RESUMABLE_KEYS,
    check_run_dir,
    check_schedule_kept,
    check_validation_bleu_kept,
    config_differences,
    learning_differences,
)
from nmt.rundir.folders import RUN_MARKERS, read_summary
from nmt.rundir.writing import RunLog, write_config, write_summary


def _config(tmp_path: Path, **training: object) -> Config:
    return config_from_dict({"data": {"dir": str(tmp_path / "prepared")}, "training": dict(training)})


def _listing(folder: Path) -> list[tuple[str, bytes | None]]:
    return sorted((str(p.relative_to(folder)), p.read_bytes() if p.is_file() else None) for p in folder.rglob("*"))


def test_a_new_run_refuses_a_folder_holding_what_a_run_writes_and_names_all_of_it(tmp_path: Path) -> None:
    config, run_dir = _config(tmp_path), tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("mine\n")  # files a run never writes are no obstacle
    (run_dir / "plots").mkdir()
    assert check_run_dir(run_dir, config, resume=False) is None
    write_config(config, run_dir)  # the same config: not another run, but a run all the same
    for name in RUN_MARKERS:
        if "." not in name:  # the folders: checkpoints, tokenizer, ...
            (run_dir / name).mkdir()
        elif name not in ("config.yaml", "summary.json"):
            (run_dir / name).write_text("x\n")
    before = _listing(run_dir)
    partial = [name for name in RUN_MARKERS if name != "summary.json"]
    with pytest.raises(NMTError) as error:
        check_run_dir(run_dir, config, resume=False)
    assert error.value.message == f"{run_dir} already holds a partial run ({', '.join(partial)})."
    assert "Add --resume" in error.value.hint and "nothing was overwritten" in error.value.hint
    write_summary(run_dir, {"final_step": 3})
    with pytest.raises(NMTError) as error:
        check_run_dir(run_dir, config, resume=False)
    assert error.value.message == f"{run_dir} already holds a finished run ({', '.join(RUN_MARKERS)})."
    assert _listing(run_dir) == sorted([*before, ("summary.json", (run_dir / "summary.json").read_bytes())])


def test_a_new_run_refuses_another_runs_config_naming_the_keys_that_differ(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_config(_config(tmp_path, seed=2), run_dir)
    other = config_from_dict({"data": {"dir": str(tmp_path / "prepared")}, "model": {"hidden_size": 32}})
    with pytest.raises(NMTError, match=r"holds another run \(its config.yaml differs in: model.hidden_size, training.seed\)"):
        check_run_dir(run_dir, other, resume=False)
    for mine in ("model: [\n", "my notes\n"):  # a YAML error; no mapping of sections
        (run_dir / "config.yaml").write_text(mine)
        with pytest.raises(NMTError, match=r"run holds a config.yaml that is no run's \(\S+config.yaml.*\): a run trained "
                                           "there would write its own over it"):
            check_run_dir(run_dir, other, resume=False)
        assert (run_dir / "config.yaml").read_text() == mine


def test_resume_accepts_the_resumable_keys_only_and_never_goes_back(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(NMTError, match="there is no run to resume"):
        check_run_dir(run_dir, _config(tmp_path), resume=True)
    run_dir.mkdir()
    # constant: a run at its max_steps may be extended (check_schedule_kept)
    write_config(_config(tmp_path, max_steps=600, lr_schedule="constant"), run_dir)
    assert check_run_dir(run_dir, _config(tmp_path, max_steps=600, lr_schedule="constant"), resume=True) is None
    (run_dir / CHECKPOINT_DIR).mkdir()
    for step in (300, 600):
        (run_dir / CHECKPOINT_DIR / step_checkpoint_name(step)).write_bytes(b"")
    longer = config_from_dict({
        "data": {"dir": str(tmp_path / "prepared")},
        "training": {"max_steps": 900, "lr_schedule": "constant", "threads": 1, "validate_every": 50},
        "decoding": {"beam_size": 2},
        "evaluation": {"bootstrap_samples": 40},
    })
    assert check_run_dir(run_dir, longer, resume=True) == run_dir / CHECKPOINT_DIR / "step_00000600.pt"
    with pytest.raises(NMTError, match=r"differs from the one .* in: model.hidden_size, training.learning_rate\. ") as error:
        check_run_dir(run_dir, config_from_dict({
            "data": {"dir": str(tmp_path / "prepared")}, "model": {"hidden_size": 32},
            "training": {"max_steps": 600, "lr_schedule": "constant", "learning_rate": 0.1},
        }), resume=True)
    assert "training.max_steps" in error.value.hint
    with pytest.raises(NMTError, match=r"already at step 600, past training.max_steps 500"):
        check_run_dir(run_dir, _config(tmp_path, max_steps=500, lr_schedule="constant"), resume=True)


def test_resume_of_a_trained_run_without_its_step_checkpoints_is_refused_not_started_over(tmp_path: Path) -> None:
    """Its best.pt or summary.json say it trained: from step 0 it would replace its log and best.pt. A run killed
    before its first checkpoint has neither, and starts over."""
    run_dir = tmp_path / "run"
    (run_dir / CHECKPOINT_DIR).mkdir(parents=True)
    config = _config(tmp_path, max_steps=600, lr_schedule="constant")
    write_config(config, run_dir)
    (run_dir / "log.jsonl").write_text('{"event": "train", "step": 50}\n', encoding="utf-8")
    assert check_run_dir(run_dir, config, resume=True) is None
    for trained in (run_dir / CHECKPOINT_DIR / "best.pt", run_dir / "summary.json"):
        trained.write_bytes(b"")
        with pytest.raises(NMTError, match=r"--resume: the run in \S+ has trained \(checkpoints/best.pt|summary.json"):
            check_run_dir(run_dir, config, resume=True)
    (run_dir / CHECKPOINT_DIR / step_checkpoint_name(300)).write_bytes(b"")
    assert check_run_dir(run_dir, config, resume=True) == run_dir / CHECKPOINT_DIR / step_checkpoint_name(300)


def test_a_changed_max_steps_is_refused_for_a_cosine_run_that_has_trained(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    saved = _config(tmp_path, max_steps=600).training
    (run_dir / CHECKPOINT_DIR).mkdir(parents=True)
    check_schedule_kept(run_dir, saved, _config(tmp_path, max_steps=900).training, "r", "")  # no step trained yet
    (run_dir / CHECKPOINT_DIR / step_checkpoint_name(300)).write_bytes(b"")
    for schedule in ("constant", "inverse_sqrt"):  # they read no max_steps: an unfinished run may get another
        check_schedule_kept(run_dir, saved, _config(tmp_path, max_steps=900, lr_schedule=schedule).training, "r", "")
    for steps in (900, 450):  # cosine, unfinished: either way the rest of its schedule would move
        with pytest.raises(NMTError, match=rf"^run x trained 300 steps of a cosine schedule laid over "
                                           rf"training.max_steps 600; continuing it with {steps} would lay the rest "
                                           rf"over {steps}, so its learning rate would jump at step 300"):
            check_schedule_kept(run_dir, saved, _config(tmp_path, max_steps=steps).training, "run x", "the hint")
    check_schedule_kept(run_dir, saved, _config(tmp_path, max_steps=200).training, "r", "")  # check_not_past's
    (run_dir / CHECKPOINT_DIR / interrupted_checkpoint_name(600)).write_bytes(b"")  # stopped in its last validation
    check_schedule_kept(run_dir, saved, _config(tmp_path, max_steps=900, lr_schedule="constant").training, "r", "")
    check_schedule_kept(run_dir, saved, saved, "r", "")
    with pytest.raises(NMTError, match=r"^run x finished at training.max_steps 600; continuing it to 900 would "
                                       r"stretch its cosine schedule") as error:
        check_schedule_kept(run_dir, saved, _config(tmp_path, max_steps=900).training, "run x", "the hint")
    assert error.value.hint == "the hint"


def test_a_cosine_run_one_step_in_is_said_to_have_trained_1_step(tmp_path: Path) -> None:
    """The refusal counts a single step trained in the singular, as "300 steps" in the plural."""
    run_dir = tmp_path / "run"
    (run_dir / CHECKPOINT_DIR).mkdir(parents=True)
    (run_dir / CHECKPOINT_DIR / step_checkpoint_name(1)).write_bytes(b"")
    with pytest.raises(NMTError, match=r"^run x trained 1 step of a cosine schedule laid over training.max_steps 3"):
        check_schedule_kept(run_dir, _config(tmp_path, max_steps=3).training, _config(tmp_path, max_steps=2).training,
                            "run x", "")


def test_what_a_resume_may_change_is_what_cannot_change_the_learning(tmp_path: Path) -> None:
    base = _config(tmp_path)
    changed = config_from_dict({
        "data": {"dir": str(tmp_path / "elsewhere")},
        "training": {"max_steps": 5, "patience": 3, "device": "cpu", "keep_last": 1},
        "decoding": {"beam_size": 1, "length_penalty": "none"},
        "evaluation": {"min_bucket_sentences": 3, "bootstrap_samples": 70},
        "runs": {"other": {}},
    })
    assert "runs" not in config_differences(base, changed)  # the experiment's run list is not this run's
    assert set(config_differences(base, changed)) <= RESUMABLE_KEYS
    assert learning_differences(base, changed) == []
    learning = config_from_dict({"data": {"dir": str(tmp_path / "prepared"), "vocab_size": 100},
                                 "training": {"seed": 9, "max_words": 30}, "model": {"attention": "none"}})
    assert learning_differences(base, learning) == ["data.vocab_size", "model.attention", "training.max_words",
                                                    "training.seed"]
    # where validations halve the rate (lr_patience), when they come is part of what is learned
    assert learning_differences(base, _config(tmp_path, validate_every=50)) == []
    halving = {"lr_schedule": "constant", "lr_patience": 1}
    assert learning_differences(_config(tmp_path, **halving), _config(tmp_path, **halving, validate_every=50)) == [
        "training.validate_every"]
    # so are the halvings' factor and score, which without it change nothing learned
    decay = {"lr_decay_factor": 0.7, "lr_decay_metric": "loss"}
    assert learning_differences(base, _config(tmp_path, **decay)) == []
    assert learning_differences(_config(tmp_path, **halving), _config(tmp_path, **halving, **decay)) == [
        "training.lr_decay_factor", "training.lr_decay_metric"]
    # validation's BLEU settings are checked against the log's record (check_validation_bleu_kept), not config.yaml
    char = config_from_dict({**base.to_dict(), "evaluation": {"tokenize": "char", "lowercase": True}})
    assert learning_differences(base, char) == []
    # the translator's cut of long inputs: validation reads no such limit
    cut = config_from_dict({**base.to_dict(), "decoding": {"max_input_tokens": 100}})
    assert learning_differences(base, cut) == []


def test_config_yaml_records_absolute_data_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = config_from_dict({"data": {"source": "files", "dir": "data/prepared", "files": {"train": "corpus/train"}}})
    write_config(config, tmp_path / "run")
    written = load_config(tmp_path / "run" / "config.yaml")
    train = written.data.sources["files"]["train"]
    assert (written.data.dir, train) == (str(tmp_path / "data/prepared"), str(tmp_path / "corpus/train"))
    assert written.model == config.model and written.training == config.training
    assert config_differences(config, written) == []  # a relative and an absolute path to one folder are alike


def test_the_log_is_cut_back_to_the_resumed_step_dropping_a_half_written_line(tmp_path: Path) -> None:
    log = RunLog(tmp_path / "log.jsonl")
    log.truncate_after(5)  # no log yet: nothing to cut, nothing written
    assert not log.path.exists()
    for step in (10, 20, 30):
        log.write({"step": step, "loss": step / 10})
    log.write({"event": "start"})  # an event without a step counts as step 0
    with open(log.path, "a", encoding="utf-8") as handle:
        handle.write('{"step": null}\n{"step": 40, "lo')  # a line that is no event; then killed while writing
    log.truncate_after(20)
    events = [json.loads(line) for line in log.path.read_text(encoding="utf-8").splitlines()]
    assert events == [{"step": 10, "loss": 1.0}, {"step": 20, "loss": 2.0}, {"event": "start"}]


def test_each_log_event_is_on_disk_when_write_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced, fsync = [], os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_size), fsync(fd)))
    RunLog(tmp_path / "log.jsonl").write({"step": 1})
    assert synced == [len('{"step": 1}\n')]  # the whole line written when synced


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_a_log_write_on_a_full_disk_names_the_log() -> None:
    with pytest.raises(OSError) as error:
        RunLog(Path("/dev/full")).write({"step": 1})  # every write there fails as a full disk's: no file name
    assert (error.value.errno, error.value.filename) == (errno.ENOSPC, "/dev/full")


def test_the_summary_reads_back_and_is_none_until_written(tmp_path: Path) -> None:
    assert read_summary(tmp_path) is None
    write_summary(tmp_path, {"final_step": 900, "best_bleu": 12.5})
    assert read_summary(tmp_path) == {"final_step": 900, "best_bleu": 12.5}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"final_step": 9', r"summary.json is unreadable \("),  # cut short: a disk filled mid-write
        (b"\xff\xfe not utf-8", r"summary.json is unreadable \("),
        (b"[1, 2]", r"summary.json is not a run summary \(it holds no JSON object\)"),
    ],
)
def test_a_damaged_summary_is_an_error_naming_it_and_the_way_to_rewrite_it(
    tmp_path: Path, content: bytes, message: str
) -> None:
    (tmp_path / "summary.json").write_bytes(content)
    with pytest.raises(NMTError, match=message) as error:
        read_summary(tmp_path)
    assert str(tmp_path / "summary.json") in error.value.message and "--resume" in error.value.hint


def test_resume_of_a_run_that_lost_its_config_says_it_cannot_be_resumed_rather_than_to_drop_resume(
    tmp_path: Path,
) -> None:
    # "Drop --resume to start a new run there" sent the user to a refusal that said "Add --resume": a loop
    run_dir = tmp_path / "run"
    (run_dir / CHECKPOINT_DIR).mkdir(parents=True)
    (run_dir / CHECKPOINT_DIR / step_checkpoint_name(4)).write_bytes(b"weights")
    (run_dir / "log.jsonl").write_text("{}\n", encoding="utf-8")
    before = sorted((p.relative_to(run_dir), p.read_bytes() if p.is_file() else b"") for p in run_dir.rglob("*"))
    with pytest.raises(NMTError) as error:
        check_run_dir(run_dir, _config(tmp_path), resume=True)
    assert error.value.message == (f"--resume: {run_dir / 'config.yaml'} does not exist, so the run in {run_dir} "
                                   "(log.jsonl, checkpoints) cannot be resumed: what it was trained with is lost.")
    assert error.value.hint == ("Train it again in another --run-dir (or remove those files to train one there); "
                                "nothing was changed.")
    with pytest.raises(NMTError, match=r"already holds a partial run \(log.jsonl, checkpoints\)"):
        check_run_dir(run_dir, _config(tmp_path), resume=False)  # as the hint says: not there
    assert sorted((p.relative_to(run_dir), p.read_bytes() if p.is_file() else b"") for p in run_dir.rglob("*")) == before


def test_an_experiments_folder_is_refused_as_a_run_dir_with_or_without_resume(tmp_path: Path) -> None:
    """--run-dir OUT of `nmt experiment` (its config.yaml, timings.json and runs/NAME) is refused, with --resume
    too, which took the experiment's config.yaml (the same settings but for `runs`) for a run's and trained a
    run there, writing its config.yaml over the experiment's; one cut off before its first run is refused too."""
    config, out = _config(tmp_path), tmp_path / "exp"
    write_config(config, out)
    (out / "timings.json").write_text("{}\n", encoding="utf-8")
    before = _listing(out)
    for resume in (False, True):
        with pytest.raises(NMTError) as error:
            check_run_dir(out, config, resume=resume)
        assert error.value.message == (f"--run-dir {out} is an experiment's folder: a run trained there would write "
                                       "its own config.yaml over the experiment's. Nothing was written.")
        assert error.value.hint.endswith(f"an experiment's runs are in {out}/runs/NAME, and running the experiment "
                                         "again continues them.")
    write_config(config, out / "runs" / "rnnsearch")
    with pytest.raises(NMTError, match=r"runs are in .*/runs/NAME \(rnnsearch\), and running"):
        check_run_dir(out, config, resume=True)
    assert [entry for entry in _listing(out) if not entry[0].startswith("runs")] == before


def test_a_run_dir_inside_another_run_is_refused(tmp_path: Path) -> None:
    """--run-dir RUN/tokenizer wrote a run's files among RUN's sentencepiece models, and RUN could not be resumed
    (its tokenizer copy "differed"); any folder below a run is refused, through links too, and nothing is written."""
    config, run = _config(tmp_path), tmp_path / "run"
    write_config(config, run)
    (run / "tokenizer").mkdir()
    (tmp_path / "link").symlink_to(run / "tokenizer")
    for inside in (run / "tokenizer", run / "checkpoints" / "new", tmp_path / "link" / "x"):
        with pytest.raises(NMTError) as error:
            check_run_dir(inside, config, resume=False)
        assert error.value.message == f"--run-dir {inside} lies in the run {run}, which it would damage. Nothing was written."
    assert sorted(path.name for path in run.rglob("*")) == ["config.yaml", "tokenizer"]
    assert check_run_dir(tmp_path / "beside", config, resume=False) is None


def test_a_run_dir_around_other_runs_is_refused(tmp_path: Path) -> None:
    """A run trained in a folder that holds runs (`--run-dir runs` beside runs/a) would hold them inside its own,
    where resuming them is refused: refused, naming them, before anything is written; a run's own folders and the
    runs below one of them, a link or a hidden folder are not looked into."""
    config = _config(tmp_path)
    for inner in ("runs/a", "runs/group/b", "runs/.hidden/c", "runs/a/tokenizer/d", "elsewhere/e"):
        write_config(config, tmp_path / inner)
        (tmp_path / inner / "tokenizer").mkdir()
    (tmp_path / "runs" / "link").symlink_to(tmp_path / "elsewhere")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(NMTError) as error:
        check_run_dir(tmp_path / "runs", config, resume=False)
    assert error.value.message == (
        f"--run-dir {tmp_path / 'runs'} holds 2 runs ({tmp_path / 'runs/a'}, {tmp_path / 'runs/group/b'}): a run "
        "trained there would hold them inside its own folder, where they could no longer be resumed. Nothing was "
        "written.")
    with pytest.raises(NMTError, match=r"holds 1 run \(.*/group/b\): .* would hold it inside"):
        check_run_dir(tmp_path / "runs" / "group", config, resume=False)
    assert sorted(tmp_path.rglob("*")) == before
    assert check_run_dir(tmp_path / "runs" / "new", config, resume=False) is None
    assert check_run_dir(tmp_path / "runs" / "a", config, resume=True) is None  # the run itself, resumed


def test_validation_bleu_is_kept_as_the_log_records_it_tokenizers_with_versions_included(tmp_path: Path) -> None:
    """sacrebleu names ja-mecab with its dictionary's version: evaluation.tokenize ja-mecab continues such a run,
    and another tokenizer is refused naming the one to give; a log without a signature, or an older one, passes."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    signature = "nrefs:1|case:mixed|eff:no|tok:ja-mecab-0.996-IPA|smooth:exp|version:2.6.0"
    (run_dir / "log.jsonl").write_text(
        json.dumps({"event": "valid", "step": 3, "bleu_signature": signature}) + "\nnot json\n", encoding="utf-8")
    mecab = config_from_dict({"evaluation": {"tokenize": "ja-mecab"}})
    check_validation_bleu_kept(run_dir, mecab, "run")
    with pytest.raises(NMTError, match=r"^run: the run was validated with BLEU nrefs:1\|case:mixed") as error:
        check_validation_bleu_kept(run_dir, Config(), "run")
    assert error.value.hint.startswith("Continue it with evaluation.tokenize ja-mecab and evaluation.lowercase false;")
    (run_dir / "log.jsonl").write_text(json.dumps({"event": "valid", "bleu_signature": "BLEU+case.mixed+tok.13a"}) + "\n")
    check_validation_bleu_kept(run_dir, mecab, "run")  # sacrebleu 1.x's form: nothing to compare
