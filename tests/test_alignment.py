"""eflomal word alignment, its symmetrisation and the argmax agreement counts (nmt/analysis/alignment.py)."""

from __future__ import annotations

import sys

import pytest

from nmt.analysis.alignment import (
    Agreement,
    agreement_per_bucket,
    align_words,
    grow_diag_final_and,
    parse_links,
    symmetrise,
)
from nmt.errors import NMTError
from tests.synthetic import reversal_links, reverse_pairs


def test_parse_links_reads_pharaoh_source_target() -> None:
    assert parse_links("0-1 2-2\n") == {(0, 1), (2, 2)}
    assert parse_links("") == set()


def test_grow_diag_final_and_grows_from_the_intersection() -> None:
    forward = {(0, 0), (1, 1), (2, 1)}
    reverse = {(0, 0), (1, 1), (3, 3)}
    # (2, 1) neighbours (1, 1) and its source word 2 is unaligned: grown; (3, 3) joins at final-and
    assert grow_diag_final_and(forward, reverse) == {(0, 0), (1, 1), (2, 1), (3, 3)}
    assert symmetrise(forward, reverse, "intersection") == {(0, 0), (1, 1)}
    # "diag": (1, 1) touches (0, 0) only diagonally, and its target word 1 is aligned by (3, 1), so that
    # final-and would not add it; grown, since its source word 1 is unaligned
    assert grow_diag_final_and({(0, 0), (3, 1), (1, 1)}, {(0, 0), (3, 1)}) == {(0, 0), (3, 1), (1, 1)}


def test_final_and_needs_both_words_unaligned() -> None:
    # (0, 2) is far from every intersection link and its source word 0 is already aligned: left out
    assert grow_diag_final_and({(0, 0), (0, 2)}, {(0, 0)}) == {(0, 0)}


def test_agreement_counts_only_linked_target_words() -> None:
    counts = Agreement()
    # 3 source words; target word 1 is unlinked, word 2's argmax is the EOS column (index 3)
    counts.add([0, 1, 3], {(0, 0), (2, 2)}, n_src=3)
    summary = counts.summary()
    assert (summary["target_words"], summary["agreement"], summary["argmax_on_eos"]) == (2, 0.5, 0.5)
    assert summary["chance"] == pytest.approx(0.25)  # one linked word among 3 words + EOS
    assert Agreement().summary()["agreement"] is None
    total = Agreement(skipped=1)
    total.merge(counts)
    total.merge(Agreement(counted=1, agree=1, chance=0.5, sentences=1, skipped=2))
    assert (total.counted, total.agree, total.chance, total.on_eos, total.sentences) == (3, 2, 1.0, 1, 2)
    assert total.skipped == 3


def test_the_diagonal_is_the_source_word_at_the_same_relative_position() -> None:
    # 4 source words, 2 target words: word j's diagonal is source word round(j * 4 / 2), 0 then 2
    on = Agreement()
    on.add([3, 3], {(0, 0), (2, 1)}, n_src=4)
    assert (on.summary()["diagonal"], on.summary()["agreement"]) == (1.0, 0.0)  # whatever the argmax
    off = Agreement()
    off.add([3, 3], {(0, 0), (1, 1)}, n_src=4)
    assert off.summary()["diagonal"] == 0.5
    # 2 source words, 4 target words: j=3 gives round(1.5) = 2, the EOS column, taken back to the last word
    longer = Agreement()
    longer.add([0, 0, 0, 0], {(1, 3)}, n_src=2)
    assert longer.diagonal == 1


def test_agreement_per_bucket_sums_to_the_total_and_counts_the_skipped() -> None:
    argmaxes = [[0], None, [1, 0], None]
    links = [{(0, 0)}, set(), {(1, 0), (0, 1)}, {(0, 0)}]
    per_bucket, total = agreement_per_bucket(argmaxes, links, [1, 1, 2, 3], members=[0, 0, 1, 1], n_buckets=3)
    counts = [(b.sentences, b.skipped, b.counted, b.agree) for b in per_bucket]
    assert counts == [(1, 1, 1, 1), (1, 1, 2, 2), (0, 0, 0, 0)]
    assert (total.sentences, total.skipped, total.counted, total.agree) == (2, 2, 3, 3)


def test_eflomal_recovers_the_reversal() -> None:
    pytest.importorskip("eflomal", reason="pip install eflomal (the align extra) to run the aligner")
    pairs = reverse_pairs(300, 5, 12, seed=3)
    sources = [s for s, _ in pairs]
    for method in ("grow-diag-final-and", "intersection"):
        links = align_words(sources, [t for _, t in pairs], method)  # type: ignore[arg-type]
        gold = reversal_links(sources)
        # chance for a link is about 1 / 8.5 (lengths 5-12); eflomal finds the reversal itself
        right = sum(len(f & g) for f, g in zip(links, gold, strict=True))
        assert right > 0.9 * sum(map(len, links)) and right > 0.9 * sum(map(len, gold))


def test_missing_eflomal_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "eflomal", None)  # import eflomal now raises ImportError
    with pytest.raises(NMTError) as caught:
        align_words(["a b"], ["b a"])
    assert "pip install eflomal" in (caught.value.hint or "")
