"""scripts/gpu_peer.py: the wheels it builds for the GPU machine and the report it writes there."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from gpu_peer import fatten, purepy, read_peer_log, report

WHEEL = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n"


def make_wheel(folder: Path, py: str, files: dict[str, bytes], version: str = "1.0") -> Path:
    """A wheel of package `pkg` for CPython `py` (e.g. cp311) holding `files`."""
    path = folder / f"pkg-{version}-{py}-{py}-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"pkg-{version}.dist-info/METADATA", "Name: pkg\n")
        z.writestr(f"pkg-{version}.dist-info/WHEEL", WHEEL.format(tag=f"{py}-{py}-manylinux_2_17_x86_64"))
        z.writestr(f"pkg-{version}.dist-info/RECORD", "stale\n")
    return path


def check_record(wheel: Path) -> dict[str, bytes]:
    """Every file's RECORD line matches its bytes; returns the files."""
    with zipfile.ZipFile(wheel) as z:
        files = {name: z.read(name) for name in z.namelist()}
    record = next(name for name in files if name.endswith(".dist-info/RECORD"))
    listed = {}
    for line in files[record].decode().splitlines():
        name, digest, size = line.rsplit(",", 2)
        listed[name] = (digest, size)
    assert set(listed) == set(files)
    for name, data in files.items():
        if name == record:
            assert listed[name] == ("", "")
            continue
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert listed[name] == (f"sha256={expected}", str(len(data)))
    return files


def test_fatten_keeps_shared_files_once_and_every_build(tmp_path: Path) -> None:
    shared = {"pkg/__init__.py": b"x = 1\n", "pkg.libs/libcore.so": b"\x7fELF core"}
    wheels = [
        make_wheel(tmp_path, py, {**shared, f"pkg/_ext.cpython-{py[2:]}-x86_64-linux-gnu.so": py.encode()})
        for py in ("cp310", "cp311", "cp312")
    ]
    fat = fatten(tmp_path / "out", wheels)
    assert fat.name == "pkg-1.0-cp310.cp311.cp312-cp310.cp311.cp312-manylinux_2_17_x86_64.whl"
    files = check_record(fat)
    exts = sorted(name for name in files if "_ext" in name)
    assert exts == [f"pkg/_ext.cpython-{v}-x86_64-linux-gnu.so" for v in ("310", "311", "312")]
    assert files["pkg.libs/libcore.so"] == b"\x7fELF core"
    tags = [
        line for line in files["pkg-1.0.dist-info/WHEEL"].decode().splitlines() if line.startswith("Tag:")
    ]
    assert tags == [f"Tag: {py}-{py}-manylinux_2_17_x86_64" for py in ("cp310", "cp311", "cp312")]


def test_fatten_refuses_what_does_not_merge(tmp_path: Path) -> None:
    a = make_wheel(tmp_path, "cp310", {"pkg/__init__.py": b"a"})
    b = make_wheel(tmp_path, "cp311", {"pkg/__init__.py": b"b"})
    with pytest.raises(SystemExit, match="differs"):
        fatten(tmp_path / "out", [a, b])
    other = make_wheel(tmp_path, "cp312", {"pkg/__init__.py": b"a"}, version="2.0")
    with pytest.raises(SystemExit, match="not one name and version"):
        fatten(tmp_path / "out", [a, other])


def test_purepy_drops_compiled_modules(tmp_path: Path) -> None:
    wheel = make_wheel(
        tmp_path, "cp312", {"pkg/__init__.py": b"", "pkg/fast.cpython-312-x86_64-linux-gnu.so": b"so"}
    )
    pure = purepy(tmp_path / "out", wheel)
    assert pure.name == "pkg-1.0-py3-none-any.whl"
    files = check_record(pure)
    assert not [name for name in files if name.endswith(".so")]
    meta = files["pkg-1.0.dist-info/WHEEL"].decode()
    assert "Root-Is-Purelib: true" in meta and "Tag: py3-none-any" in meta and "cp312" not in meta


PEER_LOG = """[2026-12-05 00:11:50,123 INFO] Step 5/  400; acc: 1.0; ppl: 9000.0; xent: 9.1; lr: 0.00001; sents: 100; bsz: 800/ 900/20;  90/ 99 tok/s;   5 sec;
[2026-12-05 00:11:55,123 INFO] Step 10/  400; acc: 2.0; ppl: 8000.0; xent: 9.0; lr: 0.00002; sents: 100; bsz: 800/ 900/20; 1000/1100 tok/s;  10 sec;
[2026-12-05 00:12:00,123 INFO] Step 15/  400; acc: 3.0; ppl: 7000.0; xent: 8.9; lr: 0.00003; sents: 100; bsz: 800/ 900/20; 1100/1200 tok/s;  15 sec;
[2026-12-05 00:12:05,123 INFO] Step 20/  400; acc: 4.0; ppl: 6000.0; xent: 8.8; lr: 0.00004; sents: 100; bsz: 800/ 900/20; 1200/1300 tok/s;  20 sec;
Traceback (most recent call last):
KeyboardInterrupt
PEER_STATS {"peak_rss_mb": 1000.0, "peak_device_mb": 512.5, "third_party_modules": ["onmt", "pyonmttok", "torch"]}
"""


def test_peer_log_mean_of_last_three_reports(tmp_path: Path) -> None:
    (tmp_path / "peer.log").write_text(PEER_LOG)
    peer = read_peer_log(tmp_path / "peer.log")
    assert peer["ran"] and peer["report_lines"] == 4 and peer["steps_reached"] == 20
    assert peer["tgt_tokens_per_s"] == pytest.approx(1200.0)  # (1100 + 1200 + 1300) / 3, target side
    assert peer["peak_device_mb"] == 512.5 and peer["imported_modules"] == ["onmt", "pyonmttok", "torch"]
    assert peer["stopped_by_time_limit"] and "error" not in peer  # the time limit's SIGINT is no failure
    # the first report's interval holds the start-up: never in the mean, however few reports there are
    lines = PEER_LOG.splitlines()
    (tmp_path / "short.log").write_text("\n".join([*lines[:3], *lines[4:]]))
    assert read_peer_log(tmp_path / "short.log")["tgt_tokens_per_s"] == pytest.approx(1150.0)  # (1100 + 1200) / 2
    (tmp_path / "one.log").write_text("\n".join([lines[0], *lines[4:]]))
    one = read_peer_log(tmp_path / "one.log")
    assert "tgt_tokens_per_s" not in one and "start-up" in one["error"]
    (tmp_path / "failed.log").write_text(
        "Traceback (most recent call last):\nRuntimeError: CUDA out of memory\n"
    )
    failed = read_peer_log(tmp_path / "failed.log")
    assert not failed["ran"] and "CUDA out of memory" in failed["error"]
    assert not read_peer_log(tmp_path / "absent.log")["ran"]


def ours_json(run: str, tok_s: float) -> dict:
    train = {
        "tgt_tokens_per_s": tok_s,
        "precision": "bfloat16",
        "flops_per_token": 50e6,
        "peak_device_mb": 300.0,
    }
    return {"train": {run: train}, "torch": "2.11.0", "machine": {}}


def report_args(out: Path, install_log: Path) -> argparse.Namespace:
    return argparse.Namespace(
        out_dir=out,
        install_log=install_log,
        device="cuda",
        gpu="NVIDIA H200",
        python_version="3.12.3",
        torch_version="2.11.0",
        batch_tokens=8000,
        steps=400,
        peer_precision="fp16",
    )


def test_report_pairs_each_peer_model_with_ours(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "install.log").write_text("PEER_INSTALLED\n")
    (tmp_path / "peer-transformer.log").write_text(PEER_LOG)
    (tmp_path / "ours-transformer.json").write_text(json.dumps(ours_json("transformer", 2400.0)))
    (tmp_path / "ours-rnnsearch.json").write_text(json.dumps(ours_json("rnnsearch", 846.0)))
    result = report(report_args(tmp_path, tmp_path / "install.log"))
    assert result == json.loads((tmp_path / "gpu_peer.json").read_text())
    assert result["peer"]["installed"] and result["peer"]["ran"] and result["gpu"] == "NVIDIA H200"
    transformer = result["models"]["transformer"]
    assert transformer["ratio"] == pytest.approx(2.0) and transformer["goal_ratio"] == 1.5
    assert not result["models"]["gru"]["peer"]["ran"] and result["models"]["gru"]["ratio"] is None
    printed = capsys.readouterr().out
    assert (
        "transformer: OpenNMT-py 1,200 target tok/s (fp16), ours (transformer) 2,400 (bfloat16): ratio ours/peer 2.00 (goal >= 1.5)"
        in printed
    )
    assert "peak GPU memory ours / peer 300 / 512 MB" in printed


def test_report_says_what_stopped_the_install(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "install.log").write_text(
        "Looking in links: .peer/wheels\nERROR: No matching distribution found for pyonmttok==1.38.1\n"
    )
    (tmp_path / "ours-transformer.json").write_text(json.dumps(ours_json("transformer", 2400.0)))
    result = report(report_args(tmp_path, tmp_path / "install.log"))
    assert not result["peer"]["installed"] and not result["peer"]["ran"]
    assert "No matching distribution found for pyonmttok" in result["peer"]["error"]
    assert result["models"]["transformer"]["ours"]["tgt_tokens_per_s"] == 2400.0
    assert "not installed: ERROR: No matching distribution" in capsys.readouterr().out
