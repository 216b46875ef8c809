"""Word alignment with eflomal, symmetrised, and how often attention's argmax agrees with it.

eflomal (Östling & Tiedemann 2016) aligns the whitespace words of each pair in both directions by Gibbs
sampling over the whole corpus; the two directions are symmetrised by grow-diag-final-and (Koehn et al.
2005, Moses' default) or by their intersection (fewer, surer links). A link is (source word index, target
word index), both from 0. Nothing here imports torch: the attention side hands over argmaxes.
"""

from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from types import ModuleType
from typing import Literal

from nmt.errors import NMTError

Link = tuple[int, int]  # (source word, target word)
Symmetrisation = Literal["grow-diag-final-and", "intersection"]
INSTALL_HINT = "Install the aligner: pip install eflomal (or pip install 'nmt[align]'); it builds with Cython."
_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def parse_links(line: str) -> set[Link]:
    """'0-1 2-2' (Pharaoh format, source-target) -> {(0, 1), (2, 2)}."""
    return {(int(src), int(tgt)) for src, tgt in (token.split("-") for token in line.split())}


def grow_diag_final_and(forward: set[Link], reverse: set[Link]) -> set[Link]:
    """Koehn et al.'s symmetrisation: start from the intersection, add union links next to (also
    diagonally) an aligned link whose source or target word is still unaligned, then (final-and)
    union links whose source AND target words are both unaligned."""
    union = forward | reverse
    links = forward & reverse
    aligned_src = {i for i, _ in links}
    aligned_tgt = {j for _, j in links}
    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in _NEIGHBOURS:
                new = (i + di, j + dj)
                if new in union and new not in links and (new[0] not in aligned_src or new[1] not in aligned_tgt):
                    links.add(new)
                    aligned_src.add(new[0])
                    aligned_tgt.add(new[1])
                    grown = True
    for direction in (forward, reverse):
        for i, j in sorted(direction):
            if i not in aligned_src and j not in aligned_tgt:
                links.add((i, j))
                aligned_src.add(i)
                aligned_tgt.add(j)
    return links


def symmetrise(forward: set[Link], reverse: set[Link], method: Symmetrisation) -> set[Link]:
    """The links of one sentence pair from its two directional alignments."""
    return forward & reverse if method == "intersection" else grow_diag_final_and(forward, reverse)


def aligner_installed() -> bool:
    """Whether eflomal can be imported (without importing it)."""
    return importlib.util.find_spec("eflomal") is not None


def require_aligner() -> ModuleType:
    """The eflomal module, or an NMTError saying how to install it."""
    try:
        import eflomal
    except ImportError:
        raise NMTError("the word aligner eflomal is not installed.", INSTALL_HINT) from None
    return eflomal


def align_words(
    sources: Sequence[str], targets: Sequence[str], method: Symmetrisation = "grow-diag-final-and"
) -> list[set[Link]]:
    """Symmetrised eflomal links of every pair (whitespace words). Pairs with an empty side get none.

    eflomal samples: its links can differ slightly between calls (it takes no seed).
    """
    eflomal = require_aligner()
    keep = [i for i, (s, t) in enumerate(zip(sources, targets, strict=True)) if s.split() and t.split()]
    result: list[set[Link]] = [set() for _ in sources]
    if not keep:
        return result
    with tempfile.TemporaryDirectory() as tmp:
        fwd_path, rev_path = Path(tmp) / "fwd", Path(tmp) / "rev"
        eflomal.Aligner().align(
            *([" ".join(side[i].split()) + "\n" for i in keep] for side in (sources, targets)),
            links_filename_fwd=str(fwd_path),
            links_filename_rev=str(rev_path),
            quiet=True,
        )
        forward, reverse = (path.read_text(encoding="utf-8").splitlines() for path in (fwd_path, rev_path))
    # zip(strict=True) refuses link files of another length than the pairs
    for index, fwd_line, rev_line in zip(keep, forward, reverse, strict=True):
        result[index] = symmetrise(parse_links(fwd_line), parse_links(rev_line), method)
    return result


@dataclass
class Agreement:
    """Counts over target words the aligner links at all: how many there were (`counted`), how many had
    attention's argmax on a linked source word (`agree`), the expected count of a uniformly random choice
    among the source words and the EOS (`chance`, the sum of links / (source words + 1)), the count of the
    word on the diagonal (`diagonal`: source word round(j * n_src / n_tgt), at most the last), and how many
    argmaxes fell on the source EOS; over how many sentences, and how many were skipped (no argmaxes: a
    side was empty, or its pieces' words were not the aligner's whitespace words)."""

    counted: int = 0
    agree: int = 0
    chance: float = 0.0
    diagonal: int = 0
    on_eos: int = 0
    sentences: int = 0
    skipped: int = 0

    def add(self, argmax: Sequence[int], links: set[Link], n_src: int) -> None:
        """One sentence: argmax[j] is the source word (n_src: the EOS) attention picks for target word j."""
        self.sentences += 1
        n_tgt = len(argmax)
        linked: dict[int, set[int]] = {}
        for i, j in links:
            linked.setdefault(j, set()).add(i)
        for j, best in enumerate(argmax):
            sources = linked.get(j)
            if not sources:
                continue
            self.counted += 1
            self.agree += best in sources
            self.on_eos += best >= n_src
            self.chance += len(sources) / (n_src + 1)  # the EOS column is a choice too
            self.diagonal += min(round(j * n_src / max(n_tgt, 1)), n_src - 1) in sources

    def merge(self, other: Agreement) -> None:
        """Add another set of counts to this one."""
        for count in fields(self):
            setattr(self, count.name, getattr(self, count.name) + getattr(other, count.name))

    def summary(self) -> dict[str, float | int | None]:
        """Rates (None without counted words) and counts, for JSON."""
        rate = (lambda x: x / self.counted) if self.counted else (lambda x: None)
        return {
            "agreement": rate(self.agree),
            "chance": rate(self.chance),
            "diagonal": rate(self.diagonal),
            "argmax_on_eos": rate(self.on_eos),
            "target_words": self.counted,
            "sentences": self.sentences,
        }


def agreement_per_bucket(
    argmaxes: Sequence[Sequence[int] | None], links: Sequence[set[Link]], n_src: Sequence[int],
    members: Sequence[int], n_buckets: int,
) -> tuple[list[Agreement], Agreement]:
    """The counts of each bucket, and over all pairs: pair i (in bucket members[i], with n_src[i] source
    words) adds argmaxes[i] against links[i]; a pair without argmaxes (None) is counted as skipped."""
    per_bucket = [Agreement() for _ in range(n_buckets)]
    for i, argmax in enumerate(argmaxes):
        if argmax is None:
            per_bucket[members[i]].skipped += 1
        else:
            per_bucket[members[i]].add(argmax, links[i], n_src[i])
    total = Agreement()
    for part in per_bucket:
        total.merge(part)
    return per_bucket, total
