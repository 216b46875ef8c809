"""Helpers of scripts/gpu_peer.sh (OpenNMT-py 3.0.4 against ours on one GPU); standard library only.

    python scripts/gpu_peer.py fatten OUT_DIR WHEEL [WHEEL ...]   one wheel from several CPython builds of a package
    python scripts/gpu_peer.py purepy OUT_DIR WHEEL               a wheel without its compiled modules
    python scripts/gpu_peer.py train CONFIG                      onmt_train -config CONFIG, in this process
    python scripts/gpu_peer.py report OUT_DIR [--steps N ...]    gpu_peer.json and a comparison line per model

`fatten`: pyonmttok's wheels for cp310, cp311 and cp312 hold the same 37 MB library and differ only in their
extension module (`_ext.cpython-3XY-...so`, a name Python picks by its own version), so one wheel carrying all
three extension modules and the library once (24 MB instead of 3 x 17.6 MB) installs on any of those Pythons,
under the compressed tag set `cp310.cp311.cp312-cp310.cp311.cp312-PLATFORM` (PEP 425). Files present in several
wheels must be byte-identical; the dist-info's WHEEL takes the union of the tags and RECORD is written anew.
`purepy`: rapidfuzz is imported by onmt_train (its fuzzymatch transform, which these configs never use) and no
more; its wheels are 3.2 MB for each Python, while its own pure-Python fallback (fuzz_py.py, process_py.py, ...,
what it runs where its C++ modules do not load) is 0.1 MB and version-free: the wheel without its .so files,
tagged py3-none-any.
`train`: OpenNMT-py's training entry point (onmt.bin.train, what the onmt_train command runs) in this process,
which on exit (a timeout's SIGINT included) prints one line `PEER_STATS {json}`: peak GPU memory
(torch.cuda.max_memory_allocated, as scripts/benchmark.py reports ours), peak RSS, and the third-party top-level
modules the training imported.
`report`: reads OUT_DIR/peer-{transformer,gru}.log (the `train` runs' output), OUT_DIR/ours-{transformer,
rnnsearch}.json (scripts/benchmark.py's) and the install's log (--install-log), writes OUT_DIR/gpu_peer.json and prints a
comparison line per model. The peer's target tok/s is the mean of its last three report lines (as
../shared/peers/opennmt.sh takes it), ours the benchmark's (at least 30 s of steps after 3 warm-up steps; with
--quick, 2 steps).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

PEER_STATS = "PEER_STATS "
# OpenNMT-py 3.0.4's report line: "Step 40/  400; acc: 3.2; ppl: 2941.6; xent: 8.0; lr: 0.00049; 1850/2005 tok/s;  12 sec"
REPORT = re.compile(r"Step\s+(\d+)/\s*\d+;.*?(\d+)/\s*(\d+) tok/s")
# the peer model each of ours is compared with, and the least ratio ours/peer we aim for, where there is one
PAIRS = {"transformer": ("transformer", 1.5), "gru": ("rnnsearch", None)}
# analytic FLOPs per target token of the peer's GRU with attention (../shared/peers/opennmt.sh: 42.3M); the
# transformer's equal ours (the same model), whose count the benchmark reports
PEER_GRU_FLOPS_PER_TOKEN = 42.3e6


# ---- wheels ---------------------------------------------------------------------------------------
def _wheel_parts(path: Path) -> tuple[str, str, list[str], list[str], list[str]]:
    """name, version and the python, abi and platform tags of a wheel's file name (no build tag expected)."""
    name, version, py, abi, plat = path.name[: -len(".whl")].split("-")
    return name, version, py.split("."), abi.split("."), plat.split(".")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(out: Path, files: dict[str, tuple[zipfile.ZipInfo, bytes]], dist_info: str) -> Path:
    """Write `files` (name -> (zip entry to copy the attributes of, content)) as a wheel with a fresh RECORD."""
    record_name = f"{dist_info}/RECORD"
    lines = [_record_line(name, data) for name, (_, data) in files.items() if name != record_name]
    lines.append(f"{record_name},,")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as wheel:
        for name, (info, data) in files.items():
            if name == record_name:
                continue
            entry = zipfile.ZipInfo(name, date_time=info.date_time)
            entry.external_attr = info.external_attr
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, data, compresslevel=9)
        wheel.writestr(zipfile.ZipInfo(record_name, date_time=(2020, 1, 1, 0, 0, 0)), "\n".join(lines) + "\n")
    return out


def _wheel_metadata(tags: list[tuple[str, str, str]], old: str) -> str:
    """The WHEEL file `old` with its Tag lines replaced by `tags`."""
    kept = [line for line in old.splitlines() if not line.startswith("Tag:")]
    return "\n".join(kept + [f"Tag: {py}-{abi}-{plat}" for py, abi, plat in tags]) + "\n"


def fatten(out_dir: Path, wheels: list[Path]) -> Path:
    """One wheel holding every file of `wheels` (builds of one name and version for different CPython
    versions, same platform tags): shared files once (they must be identical), each build's own modules."""
    parts = [_wheel_parts(w) for w in wheels]
    if len({(p[0], p[1]) for p in parts}) != 1:
        raise SystemExit(f"fatten: not one name and version: {[w.name for w in wheels]}")
    platforms = {tuple(p[4]) for p in parts}
    if len(platforms) != 1:
        raise SystemExit(f"fatten: the wheels' platform tags differ: {sorted(platforms)}")
    name, version = parts[0][0], parts[0][1]
    dist_info = f"{name}-{version}.dist-info"
    files: dict[str, tuple[zipfile.ZipInfo, bytes]] = {}
    tags: list[tuple[str, str, str]] = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                if info.is_dir() or info.filename in (f"{dist_info}/RECORD", f"{dist_info}/WHEEL"):
                    continue
                data = z.read(info)
                if info.filename in files and files[info.filename][1] != data:
                    raise SystemExit(f"fatten: {info.filename} differs between the wheels ({wheel.name})")
                files.setdefault(info.filename, (info, data))
            wheel_info = z.getinfo(f"{dist_info}/WHEEL")
            wheel_text = z.read(wheel_info).decode()
            tags += [
                tuple(line.split(":", 1)[1].strip().split("-"))  # type: ignore[misc]
                for line in wheel_text.splitlines()
                if line.startswith("Tag:")
            ]
    tags = sorted(set(tags))
    files[f"{dist_info}/WHEEL"] = (wheel_info, _wheel_metadata(tags, wheel_text).encode())
    pys = ".".join(sorted({p for part in parts for p in part[2]}))
    abis = ".".join(sorted({a for part in parts for a in part[3]}))
    out_dir.mkdir(parents=True, exist_ok=True)
    return _write_wheel(
        out_dir / f"{name}-{version}-{pys}-{abis}-{'.'.join(parts[0][4])}.whl", files, dist_info
    )


def purepy(out_dir: Path, wheel: Path) -> Path:
    """`wheel` without its compiled modules (.so), tagged py3-none-any."""
    name, version, *_ = _wheel_parts(wheel)
    dist_info = f"{name}-{version}.dist-info"
    files: dict[str, tuple[zipfile.ZipInfo, bytes]] = {}
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.is_dir() or info.filename.endswith(".so") or info.filename == f"{dist_info}/RECORD":
                continue
            data = z.read(info)
            if info.filename == f"{dist_info}/WHEEL":
                text = data.decode().replace("Root-Is-Purelib: false", "Root-Is-Purelib: true")
                data = _wheel_metadata([("py3", "none", "any")], text).encode()
            files[info.filename] = (info, data)
    out_dir.mkdir(parents=True, exist_ok=True)
    return _write_wheel(out_dir / f"{name}-{version}-py3-none-any.whl", files, dist_info)


# ---- the peer's training --------------------------------------------------------------------------
def _peer_stats() -> dict[str, Any]:
    import resource

    stats: dict[str, Any] = {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        stats["peak_device_mb"] = torch.cuda.max_memory_allocated() / 2**20
        stats["peak_device_reserved_mb"] = torch.cuda.max_memory_reserved() / 2**20
    stdlib = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    top = {name.split(".")[0] for name in list(sys.modules)}
    stats["third_party_modules"] = sorted(n for n in top if n not in stdlib and not n.startswith("_"))
    return stats


def train(config: Path) -> None:
    """Run onmt_train -config CONFIG here; print PEER_STATS at exit, however training ends."""
    import atexit

    atexit.register(lambda: print(PEER_STATS + json.dumps(_peer_stats()), flush=True))
    from onmt.bin.train import main as onmt_train  # the onmt_train console script's function

    sys.argv = ["onmt_train", "-config", str(config)]
    onmt_train()


# ---- the report -----------------------------------------------------------------------------------
def read_peer_log(path: Path) -> dict[str, Any]:
    """The peer's report lines (step, source and target tok/s), its PEER_STATS and the log's tail."""
    if not path.is_file():
        return {"ran": False, "error": f"no log {path.name}: the peer was not started"}
    text = path.read_text(encoding="utf-8", errors="replace")
    reports = [(int(m[1]), int(m[2]), int(m[3])) for m in REPORT.finditer(text)]
    stats: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith(PEER_STATS):
            stats = json.loads(line[len(PEER_STATS) :])
    result: dict[str, Any] = {"ran": bool(reports), "report_lines": len(reports)}
    if reports:
        result["steps_reached"] = reports[-1][0]
    # the first report's interval holds the peer's start-up (CUDA's, the first batches'), as our warm-up does:
    # never averaged in, so at least two reports are needed, and the last three after the first are taken
    if len(reports) >= 2:
        last = reports[1:][-3:]
        result["tgt_tokens_per_s"] = sum(r[2] for r in last) / len(last)
        result["last_reports"] = [{"step": s, "src_tok_s": a, "tgt_tok_s": b} for s, a, b in last]
    elif reports:
        result["error"] = "one report line only, whose interval holds the peer's start-up: give it more time (PEER_S)"
    result.update({k: v for k, v in stats.items() if k != "third_party_modules"})
    result["imported_modules"] = stats.get("third_party_modules")
    # gpu_peer.sh stops a run at its time limit with SIGINT: a KeyboardInterrupt there is no failure
    result["stopped_by_time_limit"] = "KeyboardInterrupt" in text
    if not reports or ("Traceback" in text and not result["stopped_by_time_limit"]):
        result["error"] = "\n".join(text.splitlines()[-12:])
    return result


def read_ours(path: Path, run: str) -> dict[str, Any]:
    if not path.is_file():
        return {"ran": False, "error": f"no {path.name}: the benchmark did not finish (see ours.log)"}
    report = json.loads(path.read_text(encoding="utf-8"))
    train = report["train"][run]
    keep = (
        "tgt_tokens_per_s",
        "precision",
        "batch_tokens",
        "steps",
        "seconds",
        "flops_per_token",
        "mfu",
        "optimizer_fused",
        "peak_rss_mb",
        "peak_device_mb",
    )
    return {
        "ran": True,
        "run": run,
        **{k: train[k] for k in keep if k in train},
        "torch": report.get("torch"),
        "machine": report.get("machine"),
    }


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def report(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out_dir
    log: Path = args.install_log or out / "install.log"
    install = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    installed = "PEER_INSTALLED" in install
    models: dict[str, Any] = {}
    lines = []
    for peer_model, (our_run, goal) in PAIRS.items():
        peer = read_peer_log(out / f"peer-{peer_model}.log") if installed else {"ran": False}
        ours = read_ours(out / f"ours-{our_run}.json", our_run)
        entry: dict[str, Any] = {"peer": peer, "ours": ours, "goal_ratio": goal}
        p, o = peer.get("tgt_tokens_per_s"), ours.get("tgt_tokens_per_s")
        entry["ratio"] = o / p if p and o else None
        if peer_model == "gru" and p and o and ours.get("flops_per_token"):
            entry["useful_gflops"] = {
                "ours": o * ours["flops_per_token"] / 1e9,
                "peer": p * PEER_GRU_FLOPS_PER_TOKEN / 1e9,
            }
            entry["flops_ratio"] = entry["useful_gflops"]["ours"] / entry["useful_gflops"]["peer"]
        models[peer_model] = entry
        mem = f"peak GPU memory ours / peer {_fmt(ours.get('peak_device_mb'))} / {_fmt(peer.get('peak_device_mb'))} MB"
        if "peak_device_mb" not in ours and "peak_device_mb" not in peer:
            mem = f"peak RSS ours / peer {_fmt(ours.get('peak_rss_mb'))} / {_fmt(peer.get('peak_rss_mb'))} MB"
        ratio = (
            "-"
            if entry["ratio"] is None
            else f"{entry['ratio']:.2f}" + (f" (goal >= {goal})" if goal else "")
        )
        if "flops_ratio" in entry:
            ratio += f", useful FLOP/s ratio {entry['flops_ratio']:.2f}"
        lines.append(
            f"{peer_model}: OpenNMT-py {_fmt(p)} target tok/s ({args.peer_precision}), ours ({our_run}) {_fmt(o)} "
            f"({ours.get('precision', '-')}): ratio ours/peer {ratio}; {mem}"
        )
    ran = any(m["peer"].get("ran") for m in models.values())
    result = {
        "issue": 42,
        "device": args.device,
        "gpu": args.gpu or None,
        "python": args.python_version,
        "torch": args.torch_version,
        "batch_tokens": args.batch_tokens,
        "peer_steps": args.steps,
        "peer": {
            "toolkit": "OpenNMT-py 3.0.4",
            "installed": installed,
            "ran": ran,
            "precision": args.peer_precision,
            **({} if installed else {"error": "\n".join(install.splitlines()[-15:]) or f"no {log}"}),
        },
        "models": models,
        "notes": [
            "peer tok/s: mean of its last three report lines (non-padding target tokens per second over each "
            "report interval, data loading included); ours: scripts/benchmark.py's timed steps",
            "gru: the peer's biGRU 2x256 + GRU 512 + MLP attention (42.3 MFLOP per target token) against ours "
            "RNNsearch at the bench sizes (encoder 2x512), not the same model: the useful FLOP/s ratio is the fair one",
        ],
    }
    (out / "gpu_peer.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print("\n".join(lines))
    if not installed:
        print("OpenNMT-py was not installed: " + result["peer"]["error"].splitlines()[-1])
    elif not ran:
        print(
            "OpenNMT-py was installed but trained no report line (the peer-*.log files, gpu_peer.json's errors)"
        )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("fatten")
    p.add_argument("out_dir", type=Path)
    p.add_argument("wheels", type=Path, nargs="+")
    p = sub.add_parser("purepy")
    p.add_argument("out_dir", type=Path)
    p.add_argument("wheel", type=Path)
    p = sub.add_parser("train")
    p.add_argument("config", type=Path)
    p = sub.add_parser("report")
    p.add_argument("out_dir", type=Path)
    p.add_argument(
        "--install-log", type=Path, default=None, help="install_peer's output (default OUT_DIR/install.log)"
    )
    p.add_argument("--device", default="")
    p.add_argument("--gpu", default="")
    p.add_argument("--python-version", default=sys.version.split()[0])
    p.add_argument("--torch-version", default="")
    p.add_argument("--batch-tokens", type=int, default=0)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--peer-precision", default="fp32")
    args = parser.parse_args(argv)
    if args.command == "fatten":
        print(fatten(args.out_dir, args.wheels))
    elif args.command == "purepy":
        print(purepy(args.out_dir, args.wheel))
    elif args.command == "train":
        train(args.config)
    else:
        report(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
