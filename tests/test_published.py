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


def _headings(page: str) -> list[tuple[int, str]]:
    """A Markdown page's headings in order, each as (level, the anchor GitHub gives it): lower case,
    punctuation but - and _ dropped, spaces as -, and -1, -2, ... after the second, third, ... heading of the
    same anchor."""
    seen: Counter[str] = Counter()
    headings = []
    prose = re.sub(r"^```.*?^```", "", page, flags=re.MULTILINE | re.DOTALL)  # a shell comment is no heading
    for hashes, heading in re.findall(r"^(#+) (.+)$", prose, re.MULTILINE):
        anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        headings.append((len(hashes), f"{anchor}-{seen[anchor]}" if seen[anchor] else anchor))
        seen[anchor] += 1
    return headings


def _heading_anchors(page: str) -> set[str]:
    return {anchor for _, anchor in _headings(page)}


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


def test_a_contents_list_names_every_section_in_order() -> None:
    """A page's "Contents:" list (docs/results.md's, written by hand) links each of its ## and ### headings, in
    the page's order and indented by level: a section added without its entry fails here."""
    pages = [page for page in (ROOT / "docs").glob("*.md") if "\nContents:\n" in page.read_text(encoding="utf-8")]
    assert pages  # docs/results.md has one
    for page in pages:
        text = page.read_text(encoding="utf-8")
        listed = re.findall(r"^( *)- \[.*\]\(#([^)]+)\)$", text.split("\nContents:\n", 1)[1].split("\n\n#", 1)[0],
                            re.MULTILINE)
        sections = [(level, anchor) for level, anchor in _headings(text) if level in (2, 3)]
        assert [(2 + len(indent) // 2, anchor) for indent, anchor in listed] == sections, page.name
