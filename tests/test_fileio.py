"""nmt.fileio: atomic writes leave the old file or the new one, and a failed write names its file."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from nmt.fileio import atomic_open, atomic_write_text


def test_a_write_that_fails_names_the_file_and_leaves_the_previous_one(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    atomic_write_text(path, "old")
    with pytest.raises(OSError) as error, atomic_open(path) as handle:
        handle.write("new, half of it")
        raise OSError(errno.ENOSPC, "No space left on device")  # as a full disk raises it: no file name
    assert (error.value.errno, error.value.strerror) == (errno.ENOSPC, "No space left on device")
    assert error.value.filename == str(path)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]
    with pytest.raises(PermissionError) as denied, atomic_open(path) as handle:
        raise PermissionError(errno.EACCES, "Permission denied", "/some/inner/file")
    assert denied.value.filename == str(path)  # the file this write was for, in its own kind of error
