"""nmt.cli.main's error handling: one paragraph on stderr and an exit status, never a traceback."""

from __future__ import annotations

import errno

import pytest

import nmt.commands.prepare
from nmt.cli import main


@pytest.mark.parametrize(
    ("error", "printed"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), "nmt prepare: error: No space left on device\n"),
        (OSError(errno.ENOSPC, "No space left on device", "/data/x.txt"),
         "nmt prepare: error: /data/x.txt: No space left on device\n"),
    ],
)
def test_an_os_error_is_one_line_naming_its_file_if_it_has_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: OSError, printed: str
) -> None:
    def fail(args: object) -> None:
        raise error

    monkeypatch.setattr(nmt.commands.prepare, "run", fail)
    assert main(["prepare", "any.yaml"]) == 2
    assert capsys.readouterr().err.startswith(printed)
