"""nmt.training.trainer: what a run writes, what it refuses, what it prints. (The schedule, optimisers and
patience: test_optim.py; precision: test_precision.py; the terminal's lines: test_terminal.py; the
validation pass and its subset: test_validation.py.)"""

from __future__ import annotations

import copy
import dataclasses
import errno
import hashlib
import json
import math
import os
import pty
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from nmt.cli import main
from nmt.config import Config, config_from_dict, load_config, save_config
from nmt.data.subwords import Tokenizer
from nmt.environment import source_commit
from nmt.errors import NMTError
from nmt.models import build_model, count_parameters
from nmt.rundir.checkpoints import load_checkpoint, save_checkpoint
from nmt.rundir.checks import with_absolute_paths
from nmt.special import PAD_ID
from nmt.training import trainer as trainer_module
from nmt.training.distributed import DistContext
from nmt.training.terminal import Terminal
from nmt.training.trainer import Trainer, initial_model, train
from tests.helpers import FillingDisk, reverse_task_config

TINY_MODEL = {"embedding_size": 16, "hidden_size": 32, "attention_size": 32, "maxout_size": 16}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("reverse_data")


def tiny(data_root: Path, **training: Any) -> Config:
    """A config that trains in about a second: 200 pairs of 4-8 digits, a 30k-parameter model, at a
    fixed rate (Adam 0.001, no warm-up, constant: the recipe's 100 warm-up steps outlast these runs)."""
    settings = {
        "max_steps": 6, "validate_every": 3, "checkpoint_every": 2, "log_every": 2, "keep_last": 2,
        "learning_rate": 0.001, "warmup_steps": 0, "lr_schedule": "constant",
        "valid_max_sentences": 10, "batch_tokens": 300, **training,
    }
    return reverse_task_config(data_root, n_train=200, min_len=4, max_len=8, model=TINY_MODEL, training=settings)


def with_changes(config: Config, **sections: dict[str, Any]) -> Config:
    raw = config.to_dict()
    for name, values in sections.items():
        raw[name].update(values)
    return config_from_dict(raw)


def events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_a_label_smoothed_loss_is_logged_as_such_without_a_perplexity(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # exp of a label-smoothed loss is no perplexity, and was logged beside validation's real one as if it were
    train(tiny(data_root, max_steps=4, label_smoothing=0.1), tmp_path / "run")
    train_events = [e for e in events(tmp_path / "run") if e["event"] == "train"]
    assert train_events and all("ppl" not in e and e["label_smoothing"] == 0.1 for e in train_events)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert lines and all(" (label-smoothed) " in line and " ppl " not in line for line in lines)


def test_a_model_too_big_for_memory_says_to_make_it_smaller(data_root: Path, tmp_path: Path) -> None:
    """A GRU of 4 x 10^6 units asks for 192 TB, past any machine's address space (so refused whatever the kernel's
    overcommit): the message names the model's sizes, not the batch size (the out-of-memory advice of a training
    step), and nothing of the run is trained."""
    # and one whose bytes torch cannot even count (past 2^63: "Storage size calculation overflowed")
    for size in ({"hidden_size": 4 * 10**6}, {"embedding_size": 2**63 - 1}):
        with pytest.raises(NMTError) as error:
            train(with_changes(tiny(data_root), model=size), tmp_path / "run")
        assert error.value.message.startswith("the model does not fit in memory on cpu (")
        assert error.value.hint.startswith("Make it smaller: model.hidden_size, model.embedding_size, model.layers")
        assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_runs_threads_are_its_own(data_root: Path, tmp_path: Path) -> None:
    """training.threads sets torch's threads for the run alone: an experiment trains its runs one after another in
    one process (--jobs 1), where the next run's default (0: as they are) had been this run's 1."""
    outside, seen = torch.get_num_threads(), []
    run = trainer_module.Trainer.run
    try:
        torch.set_num_threads(2)  # the process's own, other than the run's 1
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(trainer_module.Trainer, "run", lambda self: (seen.append(torch.get_num_threads()), run(self))[1])
            train(tiny(data_root, max_steps=2, threads=1), tmp_path / "one")
            assert (seen, torch.get_num_threads()) == ([1], 2)
            train(tiny(data_root, max_steps=2, threads=0), tmp_path / "default")
        assert seen == [1, 2] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(outside)


def test_a_run_writes_the_documented_run_directory(data_root: Path, tmp_path: Path) -> None:
    config = tiny(data_root, max_steps=12, learning_rate=0.01, validate_every=6, checkpoint_every=4, log_every=4)
    run = tmp_path / "run"
    summary = train(config, run)

    assert load_config(run / "config.yaml") == with_absolute_paths(config)  # data paths made absolute
    env = json.loads((run / "environment.json").read_text())
    assert env["torch"] == torch.__version__ and env["device"] == "cpu" and env["cpu_count"] >= 1
    tokenizer = Tokenizer.load(run / "tokenizer")
    assert tokenizer.encode_src("1 2 3") == Tokenizer.load(data_root / "prepared").encode_src("1 2 3")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "best.pt", "step_00000008.pt", "step_00000012.pt"
    ]
    log = events(run)
    train_events = [e for e in log if e["event"] == "train"]
    valid_events = [e for e in log if e["event"] == "valid"]
    assert [e["step"] for e in train_events] == [4, 8, 12]
    assert [e["step"] for e in valid_events] == [6, 12]
    assert train_events[-1]["loss"] < train_events[0]["loss"]
    for e in train_events:
        assert e["ppl"] == pytest.approx(math.exp(e["loss"])) and e["tgt_tokens_per_s"] > 0 and e["lr"] == 0.01
    assert all("nrefs:1" in e["bleu_signature"] and 0 <= e["valid_bleu"] <= 100 for e in valid_events)

    on_disk = json.loads((run / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    assert summary["final_step"] == 12 and summary["stopped_by"] == "max_steps"
    assert (summary["device"], summary["precision"]) == ("cpu", "fp32")  # the precision used, not the one asked for
    model = build_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    assert summary["parameters"] == count_parameters(model)
    best = torch.load(run / "checkpoints" / "best.pt", weights_only=True)
    assert best["step"] == summary["best_step"] and best["score"] == summary["best_score"]
    assert best["score"] == max(e["valid_bleu"] for e in valid_events)


def test_a_trainer_starts_from_initial_model_whatever_was_drawn_before(data_root: Path, tmp_path: Path) -> None:
    config = tiny(data_root)
    torch.rand(3)  # draws before either: the seed comes just before the build
    trainer = Trainer(config, tmp_path / "run", resume=False, ctx=DistContext(0, 1, torch.device("cpu")))
    trainer.lock.release()
    torch.rand(5)
    initial = initial_model(config, trainer.tokenizer.src_vocab_size, trainer.tokenizer.tgt_vocab_size)
    built = trainer.model.state_dict()
    assert initial.state_dict().keys() == built.keys()
    assert all(torch.equal(value, built[name]) for name, value in initial.state_dict().items())


def test_a_step_s_gradient_is_that_of_the_label_smoothed_cross_entropy_per_target_token(
    data_root: Path, tmp_path: Path
) -> None:
    """One update's gradient, by hand: the mean over the step's real target tokens of cross-entropy with label
    smoothing 0.1 (the logits of every position, padding left out), from the weights before the update."""
    config = with_changes(tiny(data_root), training={"label_smoothing": 0.1, "clip_grad_norm": 0.0})
    trainer = Trainer(config, tmp_path / "run", resume=False, ctx=DistContext(0, 1, torch.device("cpu")))
    trainer.lock.release()
    before = copy.deepcopy(trainer.model)
    batch, step_tokens = trainer._next_batch()
    trainer._train_step(batch, step_tokens)
    logits = before(batch.src, batch.src_lengths, batch.tgt_in)  # batch x tgt_len x vocab
    real = batch.tgt_out != PAD_ID
    assert step_tokens == int(real.sum())
    loss = F.cross_entropy(logits[real], batch.tgt_out[real], label_smoothing=0.1, reduction="sum") / step_tokens
    loss.backward()
    for (name, expected), got in zip(before.named_parameters(), trainer.model.parameters(), strict=True):
        torch.testing.assert_close(got.grad, expected.grad, msg=name)


def test_progress_lines_are_rounded_and_carry_elapsed_time_and_eta(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train(tiny(data_root, max_steps=6, validate_every=3, log_every=2), tmp_path / "run")
    out = capsys.readouterr().out
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(steps) == 3 and all(re.search(r" elapsed \d+s eta (\d+s|\?)$", line) for line in steps)
    assert steps[-1].endswith("eta 0s")
    for line in out.splitlines():
        if "best bleu" in line:  # "best bleu 0.33", never a long float
            assert re.search(r"best bleu \d+\.\d\d at step [1-9]", line), line
    assert re.search(r"finished at step 6 \(max_steps\) after \d+s; best bleu \d+\.\d\d at step", out)
    train(tiny(data_root, max_steps=2, validate_every=5), tmp_path / "short")
    finished = capsys.readouterr().out.splitlines()[-1]  # the last step is validated even off the grid
    assert re.search(r"finished at step 2 \(max_steps\) after \d+s; best bleu \d+\.\d\d at step 2;", finished)


def test_an_explicit_half_precision_on_the_cpu_says_it_trains_in_fp32_and_records_it(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = train(tiny(data_root, max_steps=2, validate_every=5, precision="fp16"), tmp_path / "fp16")
    lines = capsys.readouterr().out.splitlines()
    warning = "warning: training.precision fp16 applies on CUDA only: on cpu this run trains in fp32"
    assert [line for line in lines if line.startswith("warning:")] == [
        f"{warning} (auto chooses per device without a warning)."]
    assert lines.index(next(line for line in lines if line.startswith("warning:"))) < 3  # at the start
    assert summary["precision"] == "fp32"
    assert json.loads((tmp_path / "fp16" / "summary.json").read_text())["precision"] == "fp32"
    # auto, which may fall back, does so silently; the summary still says what it trained in
    summary = train(tiny(data_root, max_steps=2, validate_every=5, precision="auto"), tmp_path / "auto")
    assert "warning:" not in capsys.readouterr().out and summary["precision"] == "fp32"


def test_recomputed_attention_asked_of_a_model_without_additive_attention_says_it_has_no_effect(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixed = with_changes(tiny(data_root, max_steps=2, validate_every=5, recompute_attention=True), model={"attention": "none"})
    train(fixed, tmp_path / "fixed")
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")] == [
        "warning: training.recompute_attention applies to additive attention (RNNsearch's); RNNencdec has no additive "
        "attention, so the setting has no effect."]
    train(tiny(data_root, max_steps=2, validate_every=5, recompute_attention=True), tmp_path / "additive")
    assert "warning:" not in capsys.readouterr().out


def test_in_a_terminal_of_unset_size_the_bar_shows_below_the_step_lines_and_is_closed_once(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pseudo-terminal whose size was never set reports 0 columns (as in some containers and CI runners).
    master, replica = pty.openpty()
    received: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side is closed
                return
            if not chunk:
                return
            received.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    with open(replica, "w", encoding="utf-8") as terminal, monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", terminal)
        train(tiny(data_root, max_steps=6, validate_every=3, log_every=2), tmp_path / "run")
    reader.join()
    os.close(master)
    written = b"".join(received).decode("utf-8")
    drawn = [piece for piece in re.split(r"[\r\n]", written) if re.search(r"\d+%\|.*\| \d/6 \[", piece)]
    assert drawn and all(len(piece) == 80 for piece in drawn)  # the fallback width, not an empty bar
    screen = visible_lines(written)
    assert [line.split()[1] for line in screen if line.startswith("step ")] == ["2/6", "4/6", "6/6"]
    assert [line.split(":")[0] for line in screen if line.startswith("validation")] == [
        "validation at step 3", "validation at step 6"
    ]
    assert not [line for line in screen if "/6 [" in line]  # the bar is gone, not left or drawn twice
    # each validation shows its own bar of sentences below the steps', gone once it is done
    assert len([piece for piece in re.split(r"[\r\n]", written) if re.search(r"^validating: .*\| 0/10 \[", piece)]) == 2
    assert not [line for line in screen if "validating" in line]
    assert [line for line in screen if line][-1].startswith("finished at step 6 (max_steps)")


def visible_lines(written: str) -> list[str]:
    """What a terminal shows of `written`: a carriage return goes back to the start of the line, and ESC [A
    (tqdm's way back from a second bar below the first) up a line."""
    screen: list[list[str]] = [[]]
    row = column = 0
    for piece in re.split(r"(\x1b\[A)", written):
        if piece == "\x1b[A":
            row = max(row - 1, 0)
            continue
        for char in piece:
            if char == "\n":
                row, column = row + 1, 0
                screen.extend([] for _ in range(row + 1 - len(screen)))
            elif char == "\r":
                column = 0
            else:
                screen[row][column:column + 1] = [char]
                column += 1
    return ["".join(line).rstrip() for line in screen]


def test_existing_runs_are_never_overwritten(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder that holds a run is refused, and changed in nothing; the refusal comes before any output (not
    after the model's size line, as if training had begun)."""
    config = tiny(data_root, max_steps=2)
    run = tmp_path / "run"
    train(config, run)
    before = snapshot(run)
    capsys.readouterr()
    with pytest.raises(NMTError, match="already holds a finished run.*") as same:
        train(config, run)
    assert "--resume" in same.value.hint
    with pytest.raises(NMTError, match=r"holds another run .*model\.hidden_size"):
        train(with_changes(config, model={"hidden_size": 48}), run)
    (run / "summary.json").unlink()
    with pytest.raises(NMTError, match="partial run"):
        train(config, run)
    assert capsys.readouterr().out == ""
    before.pop("summary.json")
    assert snapshot(run) == before


def test_resume_refuses_a_changed_config_but_accepts_the_allowed_keys(data_root: Path, tmp_path: Path) -> None:
    config = tiny(data_root, max_steps=2)
    run = tmp_path / "run"
    train(config, run)
    changed = with_changes(config, training={"learning_rate": 0.5}, data={"vocab_size": 30})
    with pytest.raises(NMTError, match=r"data\.vocab_size, training\.learning_rate"):
        train(changed, run, resume=True)
    # validation's BLEU as the log records it (its best score is on that scale), whatever config.yaml says
    lowercased = with_changes(config, training={"max_steps": 4}, evaluation={"lowercase": True})
    with pytest.raises(NMTError, match=r"--resume: \S+: the run was validated with BLEU nrefs:1\|case:mixed") as error:
        train(lowercased, run, resume=True)
    assert error.value.hint.startswith("Continue it with evaluation.tokenize 13a and evaluation.lowercase false;")
    longer = with_changes(config, training={"max_steps": 4, "log_every": 1, "validate_every": 4, "patience": 3})
    summary = train(longer, run, resume=True)
    assert summary["final_step"] == 4
    assert load_config(run / "config.yaml").training.max_steps == 4
    assert [e["step"] for e in events(run) if e["event"] == "train"] == [2, 3, 4]
    before = snapshot(run)
    with pytest.raises(NMTError, match=r"already at step 4, past training\.max_steps 3") as shorter:
        train(with_changes(longer, training={"max_steps": 3}), run, resume=True)
    assert "another --run-dir" in shorter.value.hint
    assert snapshot(run) == before


def test_a_resumed_run_keeps_each_sessions_environment(data_root: Path, tmp_path: Path) -> None:
    config = tiny(data_root, max_steps=2)
    run = tmp_path / "run"
    train(config, run)
    first = json.loads((run / "environment.json").read_text())
    assert first["from_step"] == 0 and "earlier_sessions" not in first
    first["nmt_commit"] = "0123abc"  # as if the first session trained at another commit
    (run / "environment.json").write_text(json.dumps(first))
    for steps in (4, 6):
        train(with_changes(config, training={"max_steps": steps}), run, resume=True)
    env = json.loads((run / "environment.json").read_text())
    assert env["from_step"] == 4 and env["nmt_commit"] == source_commit()
    assert [session["from_step"] for session in env["earlier_sessions"]] == [0, 2]
    assert env["earlier_sessions"][0] == first


def test_resume_refuses_to_stretch_a_finished_cosine_schedule_and_changes_nothing(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `nmt train --resume --set training.max_steps=500` on a finished 400-step cosine run, in small
    config = tiny(data_root, max_steps=2, lr_schedule="cosine")
    config_path, run = tmp_path / "config.yaml", tmp_path / "run"
    save_config(config, config_path)
    train(config, run)
    before = snapshot(run)
    longer = ["train", str(config_path), "--run-dir", str(run), "--resume", "--set", "training.max_steps=4"]
    assert main(longer) == 2
    err = capsys.readouterr().err
    assert f"nmt train: error: {run} finished at training.max_steps 2; continuing it to 4 would stretch its " \
           "cosine schedule, so the learning rate, near 0 at step 2, would rise again" in err
    assert "Resume it with training.max_steps 2, or train a new run for 4 steps in another --run-dir" in err
    assert snapshot(run) == before  # config.yaml and the checkpoints as they were
    (run / "summary.json").unlink()  # as if stopped in its last validation: the checkpoint says it got there
    assert main(longer) == 2
    assert "would stretch its cosine schedule" in capsys.readouterr().err


def test_resume_needs_a_run(data_root: Path, tmp_path: Path) -> None:
    with pytest.raises(NMTError, match="no run to resume"):
        train(tiny(data_root), tmp_path / "empty", resume=True)


def test_unwritable_run_dir_is_refused(data_root: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(NMTError, match="cannot write to the run directory"):
        train(tiny(data_root, max_steps=1), blocker / "run")
    with pytest.raises(NMTError, match="not a directory"):
        train(tiny(data_root, max_steps=1), blocker)


def test_resume_refuses_training_data_that_changed_under_the_same_tokenizer(data_root: Path, tmp_path: Path) -> None:
    """The same sentences in another order train the same sentencepiece models, which the tokenizer's check
    compares: the run would go on with other batches than one trained straight through. environment.json
    records the splits' sha256; a run whose record lacks them (an earlier nmt's) resumes as before."""
    config = tiny(data_root, max_steps=2)
    run = tmp_path / "run"
    train(config, run)
    prepared = Path(load_config(run / "config.yaml").data.dir)
    recorded = json.loads((run / "environment.json").read_text())["training_data"]
    assert recorded == {name: hashlib.sha256((prepared / name).read_bytes()).hexdigest()
                        for name in ("train.src", "train.tgt", "valid.src", "valid.tgt")}
    originals = {name: (prepared / name).read_text(encoding="utf-8") for name in ("train.src", "train.tgt")}
    for name, text in originals.items():  # the lines reversed, both sides alike
        (prepared / name).write_text("\n".join(reversed(text.splitlines())) + "\n", encoding="utf-8")
    longer = with_changes(config, training={"max_steps": 4})
    with pytest.raises(NMTError, match=r"--resume: the prepared data in \S+ differs from what the run in \S+ has "
                                       r"trained on \(train.src, train.tgt\)"):
        train(longer, run, resume=True)
    environment = json.loads((run / "environment.json").read_text())
    del environment["training_data"]  # as an earlier nmt wrote it
    (run / "environment.json").write_text(json.dumps(environment), encoding="utf-8")
    assert train(longer, run, resume=True)["final_step"] == 4


def test_a_file_beside_the_tokenizer_s_own_changes_nothing_on_resume(data_root: Path, tmp_path: Path) -> None:
    """A run copied from a Mac brings .DS_Store into its tokenizer/: no part of the tokenizer, no refusal."""
    config = tiny(data_root, max_steps=2, validate_every=1)
    run = tmp_path / "run"
    train(config, run)
    (run / "tokenizer" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    longer = dataclasses.replace(config, training=dataclasses.replace(config.training, max_steps=3))
    assert train(longer, run, resume=True)["final_step"] == 3


def test_corrupt_checkpoint_and_changed_tokenizer_refuse_resume(data_root: Path, tmp_path: Path) -> None:
    config = tiny(data_root, max_steps=2, validate_every=1)
    run = tmp_path / "run"
    train(config, run)
    kept = {name: (run / name).read_bytes() for name in ("summary.json", "config.yaml", "log.jsonl")}

    def assert_previous_run_intact() -> None:
        assert {name: (run / name).read_bytes() for name in kept} == kept

    manifest = run / "tokenizer" / "tokenizer.json"
    original = manifest.read_bytes()
    manifest.write_bytes(original + b"\n")
    with pytest.raises(NMTError, match="tokenizer.*differs.*tokenizer.json"):
        train(config, run, resume=True)
    assert_previous_run_intact()
    manifest.write_bytes(original)
    latest = run / "checkpoints" / "step_00000002.pt"
    intact = latest.read_bytes()
    latest.write_bytes(intact[:100])
    with pytest.raises(NMTError, match="step_00000002.pt is unreadable or corrupt") as error:
        train(config, run, resume=True)
    assert error.value.hint.startswith("The training state is in that file only (the run's older step_*.pt hold its "
                                       "weights): the run cannot be resumed.")
    assert_previous_run_intact()
    weights_only = run / "checkpoints" / "step_00000003.pt"
    weights_only.write_bytes((run / "checkpoints" / "best.pt").read_bytes())
    with pytest.raises(NMTError, match="step_00000003.pt is not a resumable checkpoint"):
        train(with_changes(config, training={"max_steps": 3}), run, resume=True)
    assert_previous_run_intact()
    weights_only.unlink()
    latest.write_bytes(intact)
    assert train(config, run, resume=True)["final_step"] == 2


def test_resume_with_another_number_of_processes_is_refused(data_root: Path, tmp_path: Path) -> None:
    config = tiny(data_root, max_steps=2)
    run = tmp_path / "run"
    train(config, run)
    summary = (run / "summary.json").read_bytes()
    latest = run / "checkpoints" / "step_00000002.pt"
    checkpoint = load_checkpoint(latest)
    assert checkpoint.training is not None and checkpoint.training.world_size == 1
    save_checkpoint(latest, dataclasses.replace(
        checkpoint, training=dataclasses.replace(checkpoint.training, world_size=2)
    ))
    with pytest.raises(NMTError, match=r"saved by a run with 2 process\(es\) but this run has 1") as error:
        train(config, run, resume=True)
    assert "--nproc_per_node=2" in error.value.hint
    assert (run / "summary.json").read_bytes() == summary


def test_divergence_stops_without_saving_the_bad_state(data_root: Path, tmp_path: Path) -> None:
    config = tiny(data_root, max_steps=30, learning_rate=1e30, clip_grad_norm=0.0, checkpoint_every=1,
                  validate_every=100)
    run = tmp_path / "run"
    with pytest.raises(NMTError, match="training diverged at step") as error:
        train(config, run)
    assert "Last good checkpoint" in error.value.message
    for path in (run / "checkpoints").glob("step_*.pt"):
        weights = torch.load(path, weights_only=True)["model"]
        assert all(torch.isfinite(w).all() for w in weights.values()), path
    assert not (run / "summary.json").exists()


def test_early_stopping_when_the_score_stops_improving(data_root: Path, tmp_path: Path) -> None:
    # A learning rate this small leaves the model unchanged, so the second score cannot beat the first.
    config = tiny(data_root, max_steps=20, learning_rate=1e-12, validate_every=1, patience=1,
                  early_stopping_metric="loss")
    summary = train(config, tmp_path / "run")
    assert summary["stopped_by"] == "early_stopping"
    assert summary["final_step"] == 2 and summary["best_step"] == 1
    assert (tmp_path / "run" / "checkpoints" / "step_00000002.pt").is_file()


def test_early_stopping_on_a_validation_bleu_plateau_before_the_cap(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """BLEU, the default metric: a model that cannot move scores the same BLEU at every validation, so after
    the first, `patience` validations in a row fail to improve on it and the run stops there, long before
    max_steps, and says so (an equal score is no improvement). Its log lines give the time to that step
    beside the time to max_steps, the step it turned out to be."""
    config = tiny(data_root, max_steps=200, learning_rate=1e-12, validate_every=2, checkpoint_every=50,
                  patience=3, early_stopping_metric="bleu", lr_schedule="inverse_sqrt", warmup_steps=4, log_every=1)
    run = tmp_path / "run"
    summary = train(config, run)
    logged = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert len(logged) == 8 and all(line.endswith(" at step 8 if no validation improves") for line in logged)
    valid = [e for e in events(run) if e["event"] == "valid"]
    assert [e["step"] for e in valid] == [2, 4, 6, 8]
    assert len({e["valid_bleu"] for e in valid}) == 1  # the plateau
    assert (summary["stopped_by"], summary["final_step"], summary["best_step"]) == ("early_stopping", 8, 2)
    assert json.loads((run / "summary.json").read_text())["stopped_by"] == "early_stopping"
    assert (run / "checkpoints" / "step_00000008.pt").is_file()  # resumable where it stopped
    unpatient = tiny(data_root, max_steps=8, learning_rate=1e-12, validate_every=2, patience=0,
                     lr_schedule="inverse_sqrt", warmup_steps=4)
    assert train(unpatient, tmp_path / "capped")["stopped_by"] == "max_steps"  # patience 0: never early


def test_a_time_limit_ends_the_run_as_its_cap_does_and_a_larger_one_continues_it(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """training.max_minutes: the clock (here one second a step) reaching it ends training before the next
    step, with the last step validated and checkpointed, and summary.json saying max_minutes; a resume with
    a larger limit trains on to it."""
    monkeypatch.setattr(Trainer, "_elapsed", lambda self: float(self.step))
    config = tiny(data_root, max_steps=50, max_minutes=3 / 60, validate_every=2, checkpoint_every=50)
    run = tmp_path / "run"
    summary = train(config, run)
    assert (summary["stopped_by"], summary["final_step"]) == ("max_minutes", 3)
    assert [e["step"] for e in events(run) if e["event"] == "valid"] == [2, 3]  # step 3 validated off the grid
    assert (run / "checkpoints" / "step_00000003.pt").is_file()
    assert json.loads((run / "summary.json").read_text())["stopped_by"] == "max_minutes"
    longer = tiny(data_root, max_steps=50, max_minutes=6 / 60, validate_every=2, checkpoint_every=50)
    assert (train(longer, run, resume=True)["stopped_by"], read_final_step(run)) == ("max_minutes", 6)
    assert train(tiny(data_root, max_steps=4, validate_every=2), tmp_path / "no-limit")["stopped_by"] == "max_steps"
    with pytest.raises(NMTError, match="training.max_minutes"):
        tiny(data_root, max_minutes=-1.0)


def test_the_time_limit_counts_training_not_the_data_loading_before_it(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading the data (preparing it, the first time: a download and sentencepiece) is no training time: a
    limit shorter than it still trains (the clock jumps two minutes while the data loads)."""
    load, clock = trainer_module.load_training_data, [time.monotonic()]

    def slow_to_load(*args: Any) -> Any:
        data = load(*args)
        clock[0] += 120
        return data

    monkeypatch.setattr(trainer_module, "load_training_data", slow_to_load)
    monkeypatch.setattr(trainer_module.time, "monotonic", lambda: clock[0] + time.perf_counter())
    summary = train(tiny(data_root, max_steps=4, max_minutes=1, validate_every=2), tmp_path / "run")
    assert (summary["stopped_by"], summary["final_step"]) == ("max_steps", 4)


def read_final_step(run_dir: Path) -> int:
    return json.loads((run_dir / "summary.json").read_text())["final_step"]


def test_tensorboard_without_the_package_is_a_clear_error(data_root: Path, tmp_path: Path) -> None:
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("tensorboard is installed")
    with pytest.raises(NMTError, match="tensorboard") as error:
        train(tiny(data_root, tensorboard=True), tmp_path / "run")
    assert "pip install tensorboard" in error.value.hint
    assert not (tmp_path / "run").exists()


def test_the_last_step_is_validated_and_checkpointed_off_the_validation_grid(data_root: Path, tmp_path: Path) -> None:
    # max_steps 7 is no multiple of validate_every 3: the model of step 7 must still be validated and
    # compete for best.pt, and the last checkpoint must record that validation.
    config = tiny(data_root, max_steps=7, validate_every=3, checkpoint_every=2, keep_last=0, learning_rate=0.01,
                  early_stopping_metric="loss")
    run = tmp_path / "run"
    summary = train(config, run)
    valid = [e for e in events(run) if e["event"] == "valid"]
    assert [e["step"] for e in valid] == [3, 6, 7]
    assert summary["last_validation"]["step"] == 7 and summary["final_step"] == 7
    assert summary["best_score"] == min(e["valid_loss"] for e in valid)
    best = load_checkpoint(run / "checkpoints" / "best.pt")
    assert best.step == summary["best_step"] and best.score == summary["best_score"] and best.training is None
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*.pt")) == [
        "step_00000002.pt", "step_00000004.pt", "step_00000006.pt", "step_00000007.pt"
    ]
    last = load_checkpoint(run / "checkpoints" / "step_00000007.pt")
    assert last.training is not None and last.training.last_validation is not None
    assert last.training.last_validation["step"] == 7 and last.training.best_step == summary["best_step"]
    # resuming the finished run validates nothing again
    train(config, run, resume=True)
    assert [e["step"] for e in events(run) if e["event"] == "valid"] == [3, 6, 7]


def test_older_step_checkpoints_keep_the_weights_only_and_the_run_resumes_from_the_newest(
    data_root: Path, tmp_path: Path
) -> None:
    config = tiny(data_root, max_steps=6, checkpoint_every=2, keep_last=0)
    run = tmp_path / "run"
    train(config, run)
    folder = run / "checkpoints"
    older, newest = folder / "step_00000004.pt", folder / "step_00000006.pt"
    assert [p.name for p in sorted(folder.glob("step_*.pt"))] == ["step_00000002.pt", older.name, newest.name]
    assert load_checkpoint(folder / "step_00000002.pt").training is None and load_checkpoint(older).training is None
    assert load_checkpoint(newest).training is not None
    # Adam's two moments: the newest is about 3x the weights, the others about 1x (best.pt's size)
    assert older.stat().st_size < 1.1 * (folder / "best.pt").stat().st_size < 0.5 * newest.stat().st_size
    longer = with_changes(config, training={"max_steps": 8})
    assert train(longer, run, resume=True)["final_step"] == 8
    assert load_checkpoint(newest).training is None and load_checkpoint(folder / "step_00000008.pt").training is not None


def test_a_full_disk_names_the_file_and_the_intact_checkpoint_to_resume_from(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tiny(data_root, max_steps=6, checkpoint_every=2, validate_every=3)
    config_path = tmp_path / "config.yaml"
    save_config(config, config_path)
    run = tmp_path / "run"
    real_save = torch.save

    def disk_fills_at_step_4(state: dict[str, Any], handle: Any) -> None:
        if "optimizer" in state and state["step"] == 4:
            handle = FillingDisk(handle.fileno(), "wb", closefd=False)  # torch.save then raises a RuntimeError
        real_save(state, handle)

    monkeypatch.setattr(torch, "save", disk_fills_at_step_4)
    assert main(["train", str(config_path), "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "::" not in err and "Traceback" not in err
    assert f"nmt train: error: could not write {run}/checkpoints/step_00000004.pt at step 4 " \
           "(no space left on device: it needs more than the " in err
    # step 3's validation, the best, was checkpointed (for --resume only) before best.pt
    assert f"{run}/checkpoints/interrupted_00000003.pt (step 3) is intact" in err
    assert "--resume: it continues from step 3" in err
    names = ["best.pt", "interrupted_00000003.pt", "step_00000002.pt"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == names  # no half file
    monkeypatch.setattr(torch, "save", real_save)
    assert main(["train", str(config_path), "--run-dir", str(run), "--resume"]) == 0
    assert json.loads((run / "summary.json").read_text())["final_step"] == 6


def test_a_reader_leaving_stdout_is_no_disk_error(data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`nmt train ... | head`: the broken pipe reaches nmt's quiet exit (status 141) as it is, not as a full disk."""
    config = tiny(data_root, max_steps=6, checkpoint_every=2, validate_every=3)

    say = Terminal.say

    def reader_gone_by_the_validation(self: Terminal, text: str) -> None:
        if text.startswith("validation at step"):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        say(self, text)

    monkeypatch.setattr(Terminal, "say", reader_gone_by_the_validation)
    with pytest.raises(BrokenPipeError):
        train(config, tmp_path / "run")


def test_the_logged_throughput_counts_training_time_not_checkpoint_writing(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tgt_tokens_per_s is the interval's target tokens over the time spent training them: a checkpoint written
    in the interval (here one a step, each taking a second to write) is left out, as a validation is."""
    write_step = trainer_module.write_step

    def slow_write(*args: Any, **kwargs: Any) -> Any:
        time.sleep(1.0)
        return write_step(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "write_step", slow_write)
    trainer_module.train(tiny(data_root, max_steps=4, checkpoint_every=1, validate_every=100), tmp_path / "run")
    rates = [e["tgt_tokens_per_s"] for e in events(tmp_path / "run") if e["event"] == "train"]
    # two steps of at most 300 target tokens a log line: counting the two seconds of writing, under 300 tok/s
    assert len(rates) == 2 and min(rates) > 1500, rates
