"""nmt.errors: the user-facing exception keeps its message and hint wherever it travels (Exception's own
pickling carries the attributes, so child processes and ranks can pass it as it is)."""

from __future__ import annotations

import multiprocessing
import pickle

from nmt.errors import NMTError, counted


def _fail() -> None:
    raise NMTError("data.vocab_size 9 is too small for 40 characters.", "Raise data.vocab_size.")


def test_an_error_prints_its_facts_then_what_to_do() -> None:
    assert str(NMTError("file x, line 3: empty.", "Delete the line.")) == "file x, line 3: empty. Delete the line."
    assert str(NMTError("no hint.")) == "no hint."


def test_an_error_crosses_a_pickle_with_its_hint() -> None:
    copy = pickle.loads(pickle.dumps(NMTError("what went wrong", "what to do")))
    assert isinstance(copy, NMTError) and (copy.message, copy.hint) == ("what went wrong", "what to do")


def test_an_error_raised_in_a_spawned_child_reaches_the_parent_whole() -> None:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        try:
            pool.apply(_fail)
        except NMTError as error:
            assert error.hint == "Raise data.vocab_size." and "vocab_size 9" in error.message
        else:
            raise AssertionError("the child's NMTError did not reach the parent")


def test_a_count_is_singular_for_one_only() -> None:
    """`counted` words a count as messages need it: "has 1 line", "0 lines", "2 sentences"."""
    assert [counted(n, "line") for n in (0, 1, 2)] == ["0 lines", "1 line", "2 lines"]
