"""What the repository publishes (scripts/results/, docs/, README.md) names no folder of the machine that made it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MACHINE_FOLDERS = ("/work/", "/home/", "/tmp/", "/root/", "/Users/", "C:\\")


def test_published_files_carry_no_absolute_path() -> None:
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*"), *(ROOT / "scripts" / "results").rglob("*")]
    texts = {path: path.read_text(encoding="utf-8") for path in files if path.is_file() and path.suffix != ".png"}
    assert len(texts) > 20  # the walk sees the results
    found = [f"{path.relative_to(ROOT)}: {folder}" for path, text in texts.items() for folder in MACHINE_FOLDERS
             if folder in text]
    assert found == []
