"""nmt.cli.main's error handling: one paragraph on stderr and an exit status, never a traceback."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

import nmt.commands.prepare
from nmt.cli import main

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


def test_a_file_where_a_folder_is_needed_and_the_reverse_are_said_in_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # not the system's bare "File exists" / "Is a directory", which does not say what the command wanted
    ref = tmp_path / "ref.txt"
    ref.write_text("a b c\nd e f\n", encoding="utf-8")
    assert main(["score", "--ref", str(ref), str(ref), "--out", str(ref)]) == 2
    assert capsys.readouterr().err == (
        f"nmt score: error: {ref}: this is a file, and a folder is needed there.\n"
        "Give a folder's path (or one not there yet).\n"
    )
    assert main(["score", "--ref", str(ref), str(ref), "--out", str(ref / "sub")]) == 2
    assert capsys.readouterr().err == (
        f"nmt score: error: {ref / 'sub'}: a part of this path is a file, and a folder is needed there.\n"
        "Give a path through folders.\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref.txt"]
