"""Atomic file writes: a temporary file in the same folder, flushed, fsynced, then renamed.

A kill at any instant leaves either the old file or the new one, never half of one; and a folder whose files are
written together is written by one process at a time (`folder_locked`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from nmt.errors import NMTError


class DiskFullError(NMTError):
    """A write that ran out of disk space; `filename` and `strerror` as an OSError's, for callers that add
    what they know (which checkpoint is intact)."""

    filename: str
    strerror: str

    @classmethod
    def writing(cls, path: Path, written: int) -> DiskFullError:
        """The error of `path`, of which `written` bytes were written (it is removed: they are free again)."""
        folder = next(folder for folder in path.parents if folder.exists())  # atomic_open removed those it made
        strerror = (f"no space left on device: it needs more than the {_size(written)} written before the disk "
                    f"filled, and {_size(shutil.disk_usage(folder).free)} is free there")
        error = cls(f"could not write {path} ({strerror}); the file it replaces, if any, is intact.",
                    "Free space on that disk (or write elsewhere), then run the command again.")
        error.filename, error.strerror = str(path), strerror
        return error


def _size(count: int) -> str:
    """A byte count for people: 512 B, 3.2 MB."""
    exponent = min(3, (len(str(count)) - 1) // 3)
    return f"{count} B" if exponent == 0 else f"{count / 1000 ** exponent:.1f} {' kMG'[exponent]}B"


def _disk_full(error: BaseException | None) -> bool:
    """Whether `error`, or one it was raised while handling (torch.save's RuntimeError), is a full disk's."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        error = error.__context__
    return False


@contextlib.contextmanager
def errors_naming(path: str | Path) -> Iterator[None]:
    """Raise an OSError of the block again naming `path`: a full disk fails a write to an open file with
    no file name, so name the file the write was for."""
    try:
        yield
    except OSError as error:
        raise OSError(error.errno, error.strerror or str(error), str(path)) from error


class _WriterNaming(io.BufferedWriter):
    """The temporary file's buffered writer: its write and flush errors name `path` (`errors_naming`), the
    caller's block's other errors keep theirs. A text handle writes through it. A file object itself, not a
    wrapper of one, so that torch.save, savefig and shutil.copyfileobj take it as they take any file."""

    def __init__(self, raw: io.RawIOBase, path: Path) -> None:
        super().__init__(raw)
        self._path = path

    def write(self, data: Any) -> int:
        """Write `data` (buffered), an error naming the file."""
        with errors_naming(self._path):
            return super().write(data)

    def flush(self) -> None:
        """Write out the buffer, an error naming the file."""
        with errors_naming(self._path):
            super().flush()


_DESCRIPTOR = re.compile(r"/proc/(?:self|(\d+))/fd/(\d+)")


def own_descriptor(path: str | Path) -> int | None:
    """The number of this process's open descriptor that `path` names (/dev/stdout, /dev/stderr, /dev/fd/N,
    /proc/self/fd/N: links into /proc/PID/fd), else None. Such a path is a stream the caller was handed (the
    shell's `> file` or `>> file` behind stdout): written through, never replaced or truncated."""
    text = os.path.abspath(path)
    for _ in range(40):  # /dev/stdout -> /proc/self/fd/1, a link into /proc, and from there to the file behind it
        text = os.path.join(os.path.realpath(os.path.dirname(text)), os.path.basename(text))  # /dev/fd/1: /proc/PID/fd/1
        named = _DESCRIPTOR.fullmatch(text)
        if named is not None:
            return int(named[2]) if named[1] in (None, str(os.getpid())) else None
        if not os.path.islink(text):
            return None
        text = os.path.join(os.path.dirname(text), os.readlink(text))  # an absolute target replaces the whole
    return None


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside `path` ("w": text, UTF-8; "wb": binary); on success it replaces `path`, on
    error it is removed with the folders made for it. An OSError of writing it (the handle's writes, the flush,
    the rename) is raised again naming `path`, a full disk's as a DiskFullError; any other error of the block
    (reading an input, a nested write's NMTError) is raised as it is. A symbolic link is written through, as
    a shell's `>` does: the file it names is replaced, the link kept. Anything but a file there (a folder, a
    device such as /dev/null, a named pipe) is refused: renaming over it would replace it for every other
    program; so is a read-only file, which the shell's `>` would not replace either, and a path naming one of this
    process's descriptors (/dev/stdout), whose file is the shell's to write (`>>` appends to it)."""
    descriptor = own_descriptor(path)
    if descriptor is not None:
        raise NMTError(f"{path} names this process's open descriptor {descriptor} (a stream its caller gave it): a "
                       "file written there would replace the file behind it.", "Give the path of a file.")
    path = Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)
    if path.is_dir():
        raise NMTError(f"{path} is a folder, and a file is needed there.", "Give a file's path.")
    if path.exists() and not path.is_file():
        raise NMTError(f"{path} is not a regular file (a device or a named pipe): a file written there would "
                       "replace it.", "Give the path of a file.")
    if path.is_file() and not os.access(path, os.W_OK):  # the rename would need the folder's permission only
        raise NMTError(f"{path} is read-only: it is left as it is.", "Make it writable (chmod u+w) or give another path.")
    made = [folder for folder in path.parents if not folder.exists()]  # innermost first
    path.parent.mkdir(parents=True, exist_ok=True)
    with errors_naming(path):  # a folder that cannot be written: the file asked for, not the temporary one
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    # mkstemp makes owner-only files: a file replaced keeps its permissions (a private one stays private), a new
    # one gets the usual
    os.fchmod(fd, stat.S_IMODE(path.stat().st_mode) if path.is_file() else 0o666 & ~_umask())
    try:
        buffered = _WriterNaming(os.fdopen(fd, "wb", buffering=0), path)
        with buffered if "b" in mode else io.TextIOWrapper(buffered, encoding="utf-8") as handle:
            yield handle
            with errors_naming(path):
                handle.flush()
                os.fsync(handle.fileno())
                handle.close()
        with errors_naming(path):
            os.replace(tmp, path)
        _fsync_directory(path.parent)
    except BaseException as error:
        written = os.path.getsize(tmp) if os.path.exists(tmp) else 0
        Path(tmp).unlink(missing_ok=True)
        for folder in made:  # nmt translate -o new/out.fr with a bad input leaves no empty new/
            with contextlib.suppress(OSError):  # not empty: another file is written there
                folder.rmdir()
        if _disk_full(error) and not isinstance(error, NMTError):  # a nested write's DiskFullError names its file
            raise DiskFullError.writing(path, written) from error
        raise


def _umask() -> int:
    """This process's umask (reading it means setting it: set back at once)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (a no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically."""
    with atomic_open(path) as handle:
        handle.write(text)


@contextlib.contextmanager
def folder_locked(folder: Path, waiting: str) -> Iterator[bool]:
    """An exclusive lock on `folder` (through its own descriptor: no file is left) for the block, which is given
    whether the lock is held: another process locking it waits for this one, printing `waiting` on stderr first. A
    folder that cannot be read, or a filesystem without locks (some network ones), is not locked (False)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a folder that can be entered but not read
        yield False
        return
    try:
        held = True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(waiting, file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # no locks here
            held = False
        yield held
    finally:
        os.close(fd)  # and with it the lock


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_open(path, "wb") as handle:
        handle.write(data)


def json_text(value: Any) -> str:
    """`value` as the JSON files here are written: indented, non-ASCII text as itself, ending in a newline."""
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def atomic_write_json(path: str | Path, value: Any) -> None:
    """Write `value` to `path` atomically as `json_text`."""
    atomic_write_text(path, json_text(value))


def atomic_write_files(folder: Path, files: Mapping[str, bytes]) -> None:
    """Write the `files` (name -> content) into `folder`, all or none: each is written whole beside its place first
    (`atomic_open`), and only once every one is written are they renamed over their places, with Ctrl-C held back
    meanwhile. An error writing any (a full disk) leaves every file there as it was: no report of two halves."""
    with interrupts_deferred(), contextlib.ExitStack() as written:
        for name, data in files.items():
            handle = written.enter_context(atomic_open(folder / name, "wb"))
            handle.write(data)
            handle.flush()  # a full disk is met here, before any file is renamed


@contextlib.contextmanager
def staged_files(folder: Path) -> Iterator[Path]:
    """A hidden folder inside `folder` (made if need be) for the block to write files into: once the block ends
    without error they are moved into `folder`, replacing files of the same names, Ctrl-C held back meanwhile; on
    an error (or Ctrl-C) they go, and `folder` is as it was (removed again where the block made it)."""
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=folder))
    try:
        yield staging
        with interrupts_deferred():
            for path in sorted(staging.iterdir()):
                os.replace(path, folder / path.name)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if made:
            with contextlib.suppress(OSError):  # where nothing else was put there meanwhile
                folder.rmdir()
        raise
    staging.rmdir()


def refuse_unwritable(folder: str | Path, named: str, hint: str = "Give --out a folder you can write") -> None:
    """NMTError, before a command's work, where the output folder `folder` (`named`: "--out X", say) cannot be
    written: it, or the nearest folder above it where it does not exist yet, is read-only to this user; `hint`
    says what to give instead."""
    existing = next(path for path in (Path(folder), *Path(folder).parents) if path.exists())
    if existing.is_dir() and not os.access(existing, os.W_OK | os.X_OK):
        where = "it" if existing == Path(folder) else f"{existing}, where it would be made,"
        raise NMTError(f"{named}: {where} cannot be written (no permission to write there, or a read-only disk).",
                       f"{hint}; nothing was done.")


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one existing file (same device and inode: links and spellings included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): writing it cannot clobber the other
        return False


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold back Ctrl-C (SIGINT) until the block is done, so that a few renames meant to happen together
    do; the interrupt then goes to the handler before (Python's raises KeyboardInterrupt; an outer block's holds it
    back in turn, so that blocks nest), or is raised as KeyboardInterrupt where that is no function (SIGINT
    ignored: a SIGTERM passed on as Ctrl-C). Only the main thread can do this; in other threads the block runs as
    it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        if not callable(previous):
            raise KeyboardInterrupt
        previous(received[0], None)
