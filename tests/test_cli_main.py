"""nmt.cli.main's error handling: one paragraph on stderr and an exit status, never a traceback."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

import nmt.commands.prepare
import nmt.commands.score
import nmt.commands.train
import nmt.commands.translate
from nmt.cli import main
from nmt.typed_yaml import load_yaml

DISK_HINT = "Check that the path exists, is writable and that the disk has space.\n"


@pytest.mark.parametrize(
    ("error", "printed"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), "nmt prepare: error: No space left on device\n" + DISK_HINT),
        (OSError(errno.ENOSPC, "No space left on device", "/data/x.txt"),
         "nmt prepare: error: /data/x.txt: No space left on device\n" + DISK_HINT),
        # not the system's bare "Not a directory" / "Is a directory", which does not say what the command wanted
        (NotADirectoryError(errno.ENOTDIR, "Not a directory", "a.txt/b"),
         "nmt prepare: error: a.txt/b: a part of this path is a file, and a folder is needed there.\n"
         "Give a path through folders.\n"),
        (IsADirectoryError(errno.EISDIR, "Is a directory", "out"),
         "nmt prepare: error: out: this is a folder, and a file is needed there.\nGive a file's path.\n"),
        # no disk space to check where only the permissions stand in the way
        (PermissionError(errno.EACCES, "Permission denied", "out/x.txt"),
         "nmt prepare: error: out/x.txt: permission denied.\n"
         "Check who may read and write it, and its folder (ls -ld PATH), or give another path.\n"),
    ],
)
def test_an_os_error_is_one_line_naming_its_file_if_it_has_one_and_what_to_do(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: OSError, printed: str
) -> None:
    def fail(args: object) -> None:
        raise error

    monkeypatch.setattr(nmt.commands.prepare, "run", fail)
    assert main(["prepare", "any.yaml"]) == 2
    assert capsys.readouterr().err == printed


@pytest.mark.parametrize(("error", "command", "hint"), [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore"), "train", "Lower training.batch_tokens"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried "
                  "to allocate 8589934592 bytes."), "translate", "Decode fewer sentences at once"),
    (MemoryError(), "translate", "Decode fewer sentences at once"),
])
def test_running_out_of_memory_is_one_message_with_what_to_lower(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: BaseException, command: str, hint: str
) -> None:
    def fail(args: object) -> None:
        raise error

    monkeypatch.setattr(getattr(nmt.commands, command), "run", fail)
    assert main([command, "any.yaml" if command == "train" else "run"]) == 2
    err = capsys.readouterr().err
    first = str(error).splitlines()[0] if str(error) else "MemoryError"
    assert err.startswith(f"nmt {command}: error: out of memory ({first}).\n{hint}") and "Traceback" not in err


def test_another_runtime_error_is_not_called_out_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(args: object) -> None:
        raise RuntimeError("shapes do not match")

    monkeypatch.setattr(nmt.commands.translate, "run", fail)
    with pytest.raises(RuntimeError, match="shapes do not match"):
        main(["translate", "run"])


@pytest.mark.parametrize("command", [["score", "--ref", "ref.txt", "ref.txt"], ["evaluate", "run"], ["curve", "run"],
                                     ["attention-checks", "run"], ["attention-scaling", "run"],
                                     ["experiment", "any.yaml"], ["train", "any.yaml", "--run-dir"]])
def test_an_output_folder_that_is_a_file_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    # at once, not after translating or training, when the command would write its report there
    monkeypatch.chdir(tmp_path)
    Path("ref.txt").write_text("a b c\nd e f\n", encoding="utf-8")
    flag = [] if command[-1] == "--run-dir" else ["--out"]
    for out, said in (("ref.txt", "'ref.txt' is a file"), ("ref.txt/sub", "'ref.txt/sub' is inside the file ref.txt")):
        with pytest.raises(SystemExit) as exit_:
            main([*command, *flag, out])
        assert exit_.value.code == 2
        assert capsys.readouterr().err.endswith(f"{said}: give a folder (one that does not exist yet is made)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref.txt"]


@pytest.mark.parametrize("command", [["evaluate", "run"], ["translate", "run"], ["experiment", "any.yaml"],
                                     ["score", "--ref", "ref.txt", "hyp.txt"], ["prepare", "any.yaml"]])
def test_a_command_but_train_under_torchrun_is_refused_once_before_any_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    # each of torchrun's processes would run the whole command: the refusal is said by rank 0 alone
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nmt {command[0]}: error: torchrun started it in 2 processes") and err.count("\n") == 2
    assert "Run it without torchrun" in err
    monkeypatch.setenv("RANK", "1")
    assert main(command) == 2
    assert capsys.readouterr().err == ""


def test_train_under_torchrun_is_run(monkeypatch: pytest.MonkeyPatch) -> None:
    trained = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(nmt.commands.train, "run", trained.append)
    assert main(["train", "any.yaml", "--run-name", "a"]) == 0 and len(trained) == 1


def test_an_error_every_rank_raises_alike_is_said_by_rank_0_alone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error DistContext.agreed raises on every process (a refused config, a run folder in use) is one
    paragraph, not one per process interleaved; an error of one process alone is said by it."""
    from nmt.errors import NMTError

    def refused(args: object, on_every_rank: bool) -> None:
        error = NMTError("an epoch has no batches for 2 process(es) (200 training pairs).", "Use more data.")
        error.on_every_rank = on_every_rank
        raise error

    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank, on_every_rank, said in (("0", True, True), ("1", True, False), ("1", False, True)):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setattr(nmt.commands.train, "run", lambda args, every=on_every_rank: refused(args, every))
        assert main(["train", "any.yaml", "--run-name", "a"]) == 2
        err = capsys.readouterr().err
        assert err == ("nmt train: error: an epoch has no batches for 2 process(es) (200 training pairs).\nUse more "
                       "data.\n" if said else "")


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"WORLD_SIZE": "x"}, "environment variable WORLD_SIZE='x' is not a whole number 1 or more."),
        ({"WORLD_SIZE": "0"}, "environment variable WORLD_SIZE='0' is not a whole number 1 or more."),
        ({"WORLD_SIZE": "2", "RANK": "one"}, "environment variable RANK='one' is not a whole number from 0 to 1."),
        ({"WORLD_SIZE": "2", "RANK": "2"}, "environment variable RANK='2' is not a whole number from 0 to 1."),
        ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "-1"},
         "environment variable LOCAL_RANK='-1' is not a whole number 0 or more."),
        ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 is set, but RANK is not."),
    ],
)
@pytest.mark.parametrize("command", [["train", "any.yaml", "--run-name", "a"], ["score", "--ref", "r.txt", "h.txt"]])
def test_a_bad_torchrun_variable_is_named_with_what_to_do_before_any_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: dict[str, str], said: str,
    command: list[str],
) -> None:
    # not a ValueError's traceback from training, nor (the other commands) a bad WORLD_SIZE taken for 1
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ran: list[object] = []
    monkeypatch.setattr(nmt.commands.train, "run", ran.append)
    monkeypatch.setattr(nmt.commands.score, "run", ran.append)
    assert main(command) == 2 and ran == []
    assert capsys.readouterr().err == (
        f"nmt {command[0]}: error: {said}\ntorchrun sets WORLD_SIZE, RANK and LOCAL_RANK: unset them (unset "
        "WORLD_SIZE RANK LOCAL_RANK) to run in one process, or train in N processes with torchrun "
        "--nproc_per_node=N -m nmt train CONFIG.\n"
    )


def test_an_input_file_that_cannot_be_read_is_named_as_the_input_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Root reads any file whatever its mode: the refusal is the system's, imitated."""
    config, ref = tmp_path / "c.yaml", tmp_path / "ref.txt"
    config.write_text("training: {max_steps: 5}\n", encoding="utf-8")
    ref.write_text("a\n", encoding="utf-8")
    read_bytes = Path.read_bytes

    def refuse(path: Path) -> bytes:
        if path.name in ("c.yaml", "ref.txt"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    unreadable = "Make it readable for you (ls -l shows who may read it; chmod u+r FILE if it is yours), or give another file.\n"
    assert main(["prepare", str(config)]) == 2
    assert capsys.readouterr().err == f"nmt prepare: error: config file {config} cannot be read: permission denied.\n{unreadable}"
    assert main(["score", str(ref), "--ref", str(ref), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"nmt score: error: --ref {ref} cannot be read: permission denied.\n{unreadable}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("training: &t\n  max_steps: *t\n",
         "an alias (*name) stands inside its own anchor (&name): the value would hold itself"),
        ("training:\n  max_steps: " + "[" * 3000 + "]" * 3000 + "\n",
         "it nests too deeply to read (a config nests no more than 32 levels)"),
        ("training:\n  max_steps: " + "[" * 31 + "]" * 31 + "\n",  # 33 with training's and the file's
         "it nests more than 32 levels of mappings and lists (a config needs 3 or 4)"),
    ],
)
def test_a_config_that_holds_itself_or_nests_too_deeply_is_refused_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, said: str
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(text, encoding="utf-8")
    assert main(["prepare", str(config)]) == 2
    assert capsys.readouterr().err == f"nmt prepare: error: {config}: {said}.\nCorrect it there (configs/quick.yaml shows a config's few levels).\n"
    assert main(["score", "x", "--ref", "x", "--out", str(tmp_path / "o"), "--set", "evaluation.lowercase=" + "[" * 600]) == 2
    assert capsys.readouterr().err == ("nmt score: error: --set evaluation.lowercase=...: it nests too deeply to read "
                                       "(a config nests no more than 32 levels).\n")


def test_a_config_sharing_an_anchor_nests_as_deep_as_it_is_written() -> None:
    """Aliases of one anchor, measured once each: 32 levels pass however often each is used."""
    nested = "[" * 29 + "1" + "]" * 29
    data = load_yaml(f"a: &a {nested}\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n")  # c: 1 + 1 + 29 + the file's 1
    assert data["c"][2][1] is data["a"]


def test_a_training_interrupted_before_its_run_is_written_is_not_sent_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while the data loads: no run folder, so --resume would find nothing; once the run is written, it would."""
    import nmt.training.trainer

    def interrupted(config: object, run_dir: Path, resume: bool = False) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(nmt.training.trainer, "train", interrupted)
    config = tmp_path / "c.yaml"
    config.write_text("training: {max_steps: 2}\n", encoding="utf-8")
    run_dir = tmp_path / "run"
    assert main(["train", str(config), "--run-dir", str(run_dir)]) == 130
    assert capsys.readouterr().err == (f"{run_dir}: stopped before the run was written; the same command starts it "
                                       "again.\nnmt train: interrupted.\n")
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("training: {max_steps: 2}\n", encoding="utf-8")
    assert main(["train", str(config), "--run-dir", str(run_dir), "--resume"]) == 130
    assert capsys.readouterr().err.startswith(f"{run_dir}: the same command with --resume continues it from its last")


def test_a_config_every_process_reads_alike_is_refused_once_and_an_interrupt_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key misspelt, a run name unknown, a config file missing: every process of the job meets it, and each
    said it, interleaved; so did Ctrl-C's "interrupted"."""
    config = tmp_path / "c.yaml"
    config.write_text("runs: {a: {}}\n", encoding="utf-8")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for argv, said in ((["train", str(config), "--set", "training.bogus=1"], "unknown key 'training.bogus'"),
                       (["train", str(config), "--run-name", "nope"], "nope"),
                       (["train", str(tmp_path / "missing.yaml"), "--run-name", "a"], "config file not found")):
        for rank in ("0", "1"):
            monkeypatch.setenv("RANK", rank)
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert (said in err and err.startswith("nmt train: error:")) if rank == "0" else err == "", (argv, err)

    def interrupted(args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(nmt.commands.train, "run", interrupted)
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        assert main(["train", str(config), "--run-name", "a"]) == 130
        assert (capsys.readouterr().err == "nmt train: interrupted.\n") == (rank == "0")


def test_a_process_whose_peer_ended_says_so_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 0 failed to write its log (a full disk) and said so; rank 1, waiting in a gloo collective, printed a
    traceback of "Connection reset by peer" that hid it. Outside torchrun such an error is not ours to word."""
    def gone(args: object) -> None:
        raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection reset by peer")

    monkeypatch.setattr(nmt.commands.train, "run", gone)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert main(["train", "any.yaml", "--run-name", "a"]) == 1
    assert capsys.readouterr().err == (
        "nmt train: error: rank 1: another process of the job ended, which said why above "
        "([../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection reset by peer).\n")
    for name in ("WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name)
    with pytest.raises(RuntimeError, match="Connection reset by peer"):
        main(["train", "any.yaml", "--run-name", "a"])
