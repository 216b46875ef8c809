"""What the repository publishes (scripts/results/, docs/, README.md) names no folder of the machine that made it,
and its Markdown links lead somewhere."""

from __future__ import annotations

import re
from collections import Counter
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


def _heading_anchors(page: str) -> set[str]:
    """The anchors GitHub gives a Markdown page's headings: lower case, punctuation but - and _ dropped,
    spaces as -, and -1, -2, ... after the second, third, ... heading of the same anchor."""
    seen: Counter[str] = Counter()
    anchors = set()
    prose = re.sub(r"^```.*?^```", "", page, flags=re.MULTILINE | re.DOTALL)  # a shell comment is no heading
    for heading in re.findall(r"^#+ (.+)$", prose, re.MULTILINE):
        anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(f"{anchor}-{seen[anchor]}" if seen[anchor] else anchor)
        seen[anchor] += 1
    return anchors


def test_published_links_lead_to_a_file_and_heading() -> None:
    pages = [ROOT / "README.md", ROOT / "data" / "README.md", *(ROOT / "docs").glob("*.md")]
    broken = []
    for page in pages:
        for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", link):  # https:, mailto:
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.relative_to(ROOT)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in _heading_anchors(target.read_text(encoding="utf-8")):
                broken.append(f"{page.relative_to(ROOT)}: {link} (no such heading)")
    assert len(pages) > 4
    assert broken == []
