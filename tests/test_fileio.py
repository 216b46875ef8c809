"""nmt.fileio: atomic writes leave the old file or the new one, and a failed write names its file."""

from __future__ import annotations

import errno
import io
import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import torch

from nmt import fileio
from nmt.errors import NMTError
from nmt.fileio import DiskFullError, atomic_open, atomic_write_text, own_descriptor
from nmt.rundir.checkpoints import Checkpoint, load_checkpoint, save_checkpoint
from tests.helpers import FillingDisk, unwritable


class FailingDisk(io.FileIO):
    """A file on a disk that fails every write, as a failing disk does: an OSError with no file name."""

    def write(self, data: Any) -> int:
        raise OSError(errno.EIO, "Input/output error")


@pytest.mark.parametrize(("mode", "data"), [("w", "new"), ("w", "new " * 5000), ("wb", b"new"), ("wb", b"new " * 5000)])
def test_a_write_that_fails_names_the_file_and_leaves_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, data: str | bytes
) -> None:
    # through the handle, text or binary, in one write larger than the buffer or at the flush after small ones
    path = tmp_path / "summary.json"
    atomic_write_text(path, "old")
    monkeypatch.setattr(os, "fdopen", lambda fd, mode, **kwargs: FailingDisk(fd, mode))
    with pytest.raises(OSError) as error, atomic_open(path, mode) as handle:
        handle.write(data)
    assert (type(error.value), error.value.errno, error.value.strerror) == (OSError, errno.EIO, "Input/output error")
    assert error.value.filename == str(path)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_an_error_of_the_block_that_is_not_the_files_keeps_its_own_name(tmp_path: Path) -> None:
    # nmt translate -i INPUT -o out.fr: reading INPUT fails inside the block that writes out.fr
    path = tmp_path / "out.fr"
    atomic_write_text(path, "old")
    with pytest.raises(OSError) as error, atomic_open(path) as handle:
        handle.write("a translation\n")
        raise OSError(errno.EIO, "Input/output error")  # as a failing read raises it: no file name
    assert (type(error.value), error.value.errno, error.value.filename) == (OSError, errno.EIO, None)
    with pytest.raises(PermissionError) as denied, atomic_open(path) as handle:
        raise PermissionError(errno.EACCES, "Permission denied", "/some/input")
    assert (denied.value.filename, str(denied.value)) == ("/some/input", "[Errno 13] Permission denied: '/some/input'")
    other = tmp_path / "plots" / "line-000001.png"  # a nested atomic write's full disk names that file
    with pytest.raises(DiskFullError) as full, atomic_open(path) as handle:
        handle.write("a translation\n")
        with atomic_open(other, "wb") as plot:
            plot.write(b"png")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert full.value.filename == str(other)
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.fr"]


def test_a_write_that_fails_leaves_no_folder_it_made(tmp_path: Path) -> None:
    # nmt translate -i bad.txt -o new/sub/out.fr: a failed write leaves no empty new/sub/ behind
    (tmp_path / "kept").mkdir()
    for path in (tmp_path / "new" / "sub" / "out.fr", tmp_path / "kept" / "sub" / "out.fr"):
        with pytest.raises(NMTError), atomic_open(path) as handle:
            handle.write("a translation\n")
            raise NMTError("line 2 is not valid UTF-8")
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and list((tmp_path / "kept").iterdir()) == []
    atomic_write_text(tmp_path / "new" / "sub" / "out.fr", "x")  # and on success they stay
    assert (tmp_path / "new" / "sub" / "out.fr").read_text() == "x"


def test_a_symbolic_link_is_written_through_and_kept(tmp_path: Path) -> None:
    # as a shell's `>`: nmt average -o link.pt, nmt translate -o link.txt, a report file linked elsewhere
    (tmp_path / "elsewhere").mkdir()
    target = tmp_path / "elsewhere" / "out.txt"
    target.write_text("old\n", encoding="utf-8")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    atomic_write_text(link, "new\n")
    assert link.is_symlink() and target.read_text(encoding="utf-8") == "new\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]  # no temporary file left


def test_a_replaced_file_keeps_its_permissions_and_a_new_one_gets_the_usual(tmp_path: Path) -> None:
    """`nmt translate -o private.txt` over a file of mode 600 left it readable by all (the temporary file's mode)."""
    private = tmp_path / "private.txt"
    private.write_text("old\n", encoding="utf-8")
    private.chmod(0o600)
    atomic_write_text(private, "new\n")
    assert private.read_text(encoding="utf-8") == "new\n" and private.stat().st_mode & 0o777 == 0o600
    umask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "fresh.txt", "x\n")
    finally:
        os.umask(umask)
    assert (tmp_path / "fresh.txt").stat().st_mode & 0o777 == 0o644


def test_a_folder_a_device_or_a_pipe_is_refused_not_replaced(tmp_path: Path) -> None:
    # renaming a finished file over /dev/null (nmt average -o /dev/null, as root) or a FIFO would replace it
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "folder").mkdir()
    with pytest.raises(NMTError, match=r"pipe is not a regular file \(a device or a named pipe\)") as error:
        atomic_write_text(tmp_path / "pipe", "x")
    assert error.value.hint == "Give the path of a file."
    with pytest.raises(NMTError, match=r"folder is a folder, and a file is needed there\."):
        atomic_write_text(tmp_path / "folder", "x")
    with pytest.raises(NMTError, match=r"null is not a regular file"):  # refused before anything is written
        atomic_write_text(Path(os.devnull), "x")
    assert (tmp_path / "pipe").is_fifo() and (tmp_path / "folder").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "pipe"]


def test_a_read_only_file_is_refused_not_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rename needs only the folder's permission: a read-only file (`nmt translate -o` over a finished
    translation kept read-only) would be replaced, where the shell's `>` refuses. Root may write any file, as
    root's `>` does; here the check of a non-root user is played by os.access."""
    kept = tmp_path / "kept.txt"
    kept.write_text("the finished translation\n", encoding="utf-8")
    kept.chmod(0o444)
    atomic_write_text(tmp_path / "other.txt", "x")  # a writable one is written
    writable = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == kept else writable(path, mode))
    with pytest.raises(NMTError, match=r"kept\.txt is read-only: it is left as it is\.") as error:
        atomic_write_text(kept, "x")
    assert error.value.hint == "Make it writable (chmod u+w) or give another path."
    assert kept.read_text(encoding="utf-8") == "the finished translation\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt", "other.txt"]


def test_a_full_disk_names_the_file_and_the_space_it_needs_and_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "step_00000004.pt"
    save_checkpoint(path, Checkpoint({"w": torch.ones(2)}, 2))
    monkeypatch.setattr(os, "fdopen", lambda fd, mode, **kwargs: FillingDisk(fd, mode))
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: shutil._ntuple_diskusage(10**9, 10**9, 1234))
    with pytest.raises(DiskFullError) as error:  # the real torch.save: it raises a RuntimeError over the OSError
        save_checkpoint(path, Checkpoint({"w": torch.zeros(4000)}, 4))
    assert re.fullmatch(rf"could not write {re.escape(str(path))} \(no space left on device: it needs more than the "
                        r"\d+ B written before the disk filled, and 1.2 kB is free there\); the file it replaces, if "
                        r"any, is intact.", error.value.message)
    assert error.value.filename == str(path) and "Free space on that disk" in error.value.hint
    monkeypatch.undo()
    assert load_checkpoint(path).step == 2 and [p.name for p in tmp_path.iterdir()] == [path.name]
    # into folders made for it, removed again: the free space is that of the folder they were made in
    monkeypatch.setattr(os, "fdopen", lambda fd, mode, **kwargs: FillingDisk(fd, mode))
    new = tmp_path / "new" / "sub" / "out.fr"
    with pytest.raises(DiskFullError) as error:
        atomic_write_text(new, "a translation\n" * 1000)
    assert error.value.message.startswith(f"could not write {new} (no space left on device: it needs more than the ")
    assert error.value.filename == str(new) and [p.name for p in tmp_path.iterdir()] == [path.name]
    assert fileio._size(999) == "999 B" and fileio._size(23_456_789) == "23.5 MB"


def test_a_folder_that_cannot_be_written_names_the_file_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nmt translate -o, nmt score --out, nmt average -o into a read-only folder: the error names the path the
    # user gave, not the temporary file (FOLDER/.out.fr.7qghxtb4.tmp)
    unwritable(monkeypatch, tmp_path)
    with pytest.raises(PermissionError) as denied:
        atomic_write_text(tmp_path / "out.fr", "x")
    assert (denied.value.filename, denied.value.errno) == (str(tmp_path / "out.fr"), errno.EACCES)
    assert list(tmp_path.iterdir()) == []


def test_blocks_that_hold_back_ctrl_c_nest() -> None:
    """A Ctrl-C in an inner block waits for the outer one to end too (atomic_write_files inside a report's block):
    what the outer block does after the inner one is done, and then KeyboardInterrupt is raised."""
    done = []
    with pytest.raises(KeyboardInterrupt), fileio.interrupts_deferred():
        with fileio.interrupts_deferred():
            signal.raise_signal(signal.SIGINT)
            done.append("inner")
        done.append("outer")
    assert done == ["inner", "outer"]


def test_staged_files_arrive_all_at_the_end_or_none(tmp_path: Path) -> None:
    """What the block writes shows in the folder only once it ends without error, replacing files of the same
    names; an error leaves the folder as it was, and a folder it made is gone again."""
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "line-000001.png").write_text("earlier", encoding="utf-8")
    (plots / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(RuntimeError, match="line 3"), fileio.staged_files(plots) as staging:
        (staging / "line-000001.png").write_text("new", encoding="utf-8")
        assert (plots / "line-000001.png").read_text(encoding="utf-8") == "earlier"  # not yet
        raise RuntimeError("line 3 is not UTF-8")
    assert sorted(path.name for path in plots.iterdir()) == ["line-000001.png", "notes.txt"]
    assert (plots / "line-000001.png").read_text(encoding="utf-8") == "earlier"
    with fileio.staged_files(plots) as staging:
        for number in (1, 2):
            (staging / f"line-00000{number}.png").write_text(f"new {number}", encoding="utf-8")
    assert sorted(path.name for path in plots.iterdir()) == ["line-000001.png", "line-000002.png", "notes.txt"]
    assert (plots / "line-000001.png").read_text(encoding="utf-8") == "new 1"
    fresh = tmp_path / "new" / "plots"
    with pytest.raises(KeyboardInterrupt), fileio.staged_files(fresh) as staging:
        (staging / "line-000001.png").write_text("new", encoding="utf-8")
        raise KeyboardInterrupt
    assert not fresh.exists()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
def test_a_path_naming_one_of_this_process_s_descriptors_is_told_and_never_replaced(tmp_path: Path) -> None:
    """/dev/stdout behind a shell's `> file` resolves to that file: replacing it (atomic_open's rename) lost what the
    shell's `>>` had appended to, and left the shell's descriptor on a deleted file. Such paths are told apart."""
    behind = tmp_path / "behind.txt"
    behind.write_text("EARLIER\n", encoding="utf-8")
    with open(behind, "ab") as handle:
        fd = handle.fileno()
        (tmp_path / "link").symlink_to(f"/dev/fd/{fd}")
        for path in (f"/dev/fd/{fd}", f"/proc/self/fd/{fd}", f"/proc/{os.getpid()}/fd/{fd}", tmp_path / "link"):
            assert own_descriptor(path) == fd
            with pytest.raises(NMTError, match=f"names this process's open descriptor {fd} "), atomic_open(path) as out:
                out.write("lost")
        assert own_descriptor("/dev/stdout") == 1 and own_descriptor("/dev/stderr") == 2
    assert behind.read_text(encoding="utf-8") == "EARLIER\n"
    for other in (behind, tmp_path / "new.txt", "/proc/1/fd/1", "/dev/null", tmp_path):
        assert own_descriptor(other) is None
