"""What systems are scored on: a test set of references, their sources, and where they came from."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nmt.data.corpus import blank_surplus, read_lines
from nmt.errors import NMTError, counted


@dataclass(frozen=True)
class TestSet:
    """References, their sources (None when `nmt score` has no --src), and where they came from."""

    sources: list[str] | None
    references: list[str]
    origin: str  # "test split of data/prepared/... (bible, k -> l)", "--src FILE" or "--ref FILE" (shown_path)

    def describe(self) -> str:
        """What the reports say of the test set: its split or file, size and content hash."""
        digest = hashlib.sha256("\n".join([*(self.sources or []), "\t", *self.references]).encode()).hexdigest()
        return f"{self.origin}, {counted(len(self.references), 'sentence')}, sha256 {digest[:12]}"


def shown_path(path: str | Path, base: Path | None = None) -> str:
    """`path` as a report shows it: relative to the working directory, else to `base` (the report's folder),
    else its name alone; never a folder of the machine."""
    path = Path(path).resolve()
    for root in (Path.cwd(), base):
        if root is not None and path.is_relative_to(root.resolve()):
            return path.relative_to(root.resolve()).as_posix()
    return path.name


def file_test_set(src_path: Path, ref_path: Path, verb: str = "evaluate") -> TestSet:
    """Source and reference files given on the command line; neither empty (refused as nothing to `verb`, what
    the command does with them), and of the same line count."""
    sources = read_lines(src_path, "--src", "Give an existing text file to --src.")
    references = read_lines(ref_path, "--ref", "Give an existing text file to --ref.")
    for flag, path, lines in (("--src", src_path, sources), ("--ref", ref_path, references)):
        if not lines:  # said as such, as an empty HYP is, not as a count of 0 lines
            raise NMTError(f"{flag} {path} is empty: nothing to {verb}.", "Give a file with one sentence a line.")
    if len(sources) != len(references):
        raise NMTError(
            f"--src {src_path} has {counted(len(sources), 'line')} but --ref {ref_path} has {len(references)}"
            f"{blank_surplus(sources, references)}.",
            "Give one reference line per source line.",
        )
    return TestSet(sources, references, f"--src {shown_path(src_path)}")


def reference_test_set(ref_path: Path) -> TestSet:
    """References alone (`nmt score` without --src): sentences are then bucketed by reference length."""
    references = read_lines(ref_path, "--ref", "Give an existing text file to --ref.")
    if not references:
        raise NMTError(f"--ref {ref_path} is empty: nothing to score.", "Give a file with one sentence a line.")
    return TestSet(None, references, f"--ref {shown_path(ref_path)}")


def given_names(names: Sequence[str], count: int, items: str, item: str) -> list[str]:
    """--names as given, stripped: one per `item` (HYP file, RUN_DIR; `count` of them, `items` in the message),
    each usable in a file name (its NAME.hyp.txt), all different; NMTError naming the fault otherwise."""
    names = [name.strip() for name in names]
    if len(names) != count:
        raise NMTError(f"--names gives {counted(len(names), 'name')} for {count} {items}.",
                       f"Give one name per {item}, comma-separated, e.g. --names encdec,search.")
    for name in names:  # a report's file name, a table's header: no folder, no hidden file, no line break
        if not re.fullmatch(r"[\w.-]{1,100}", name) or name.startswith("."):
            raise NMTError(f"--names: {name!r} cannot name a system (it names its NAME.hyp.txt file too).",
                           "Use letters, digits, '.', '-' and '_', at most 100 of them, not starting with '.'.")
    if len(set(names)) != len(names):
        raise NMTError(f"--names {','.join(names)}: the names must differ.", "Give each system its own name.")
    return names


def unique_name(name: str, taken: set[str]) -> str:
    """`name`, or name-2, name-3, ... if it is taken; the result is added to `taken`."""
    unique, suffix = name, 2
    while unique in taken:
        unique = f"{name}-{suffix}"
        suffix += 1
    taken.add(unique)
    return unique
