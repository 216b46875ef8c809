"""A shared folder (the prepared data of `nmt prepare`) replaced whole: built beside its place and swapped in,
so that an interrupted or failed build leaves the previous folder or the new one, never half of one; and one
build at a time in a parent folder, so that two processes preparing the same data (two trainings started
together) build it once.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from nmt.fileio import errors_naming, folder_locked, interrupts_deferred


@contextlib.contextmanager
def one_build_at_a_time(directory: Path) -> Iterator[None]:
    """A lock on `directory`'s parent for the block: a second builder waits for the first, then finds the folder
    built, rather than build it again under it (`folder_locked`). Once the lock is held no other build runs there,
    so what a build of `directory` killed outright (kill -9, a power cut) left beside it is removed."""
    parent = directory.parent
    with folder_locked(parent, f"waiting for another nmt prepare in {parent} to finish ...") as held:
        if held:
            _remove_abandoned(directory)
        yield


def _remove_abandoned(directory: Path) -> None:
    """Remove the hidden folders `build_and_swap_in` makes beside `directory`, naming each on stderr: a build folder
    (mkdtemp's name: the prefix and 8 characters of its alphabet), and an old one holding nothing but `prev`. A
    folder of the user's with a like name and other contents stays."""
    made = re.compile(rf"\.{re.escape(directory.name)}\.(build|old)-[a-z0-9_]{{8}}")
    for left in sorted(directory.parent.iterdir()):
        kind = made.fullmatch(left.name)
        if kind is None or not left.is_dir() or left.is_symlink():
            continue
        if kind.group(1) == "old" and {p.name for p in left.iterdir()} - {"prev"}:
            continue
        print(f"removing {left}: left by a build of {directory} that was killed", file=sys.stderr)
        shutil.rmtree(left, ignore_errors=True)


def build_and_swap_in(directory: Path, build: Callable[[Path], None]) -> None:
    """`build(folder)` into a new folder beside `directory`, then swapped in for it: the previous folder or
    the new one is there whatever happens (Ctrl-C waits for the swap), and what is left of either is removed."""
    with errors_naming(directory):  # a folder that cannot be written: `directory`, not the temporary one
        tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.build-"))
    old = None
    try:
        build(tmp)
        # mkdtemp/mkstemp make everything private; the prepared data is shared by every run.
        tmp.chmod(0o755)
        for path in tmp.iterdir():
            path.chmod(0o644)
        # Ctrl-C between the two renames would leave no folder at all: it waits until both are done.
        with interrupts_deferred():
            if directory.exists():
                old = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.old-"))
                os.replace(directory, old / "prev")
            os.replace(tmp, directory)
    finally:
        with interrupts_deferred():  # a Ctrl-C here would leave half a folder behind
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
