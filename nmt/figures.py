"""What every figure nmt draws shares: its text drawn as written, and its PNG rendered before any file of a report
is written (a figure that fails to render leaves no report half written)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@contextlib.contextmanager
def text_as_written() -> Iterator[None]:
    """Text made in the block (run names, file paths, sentences) is drawn as written; also a decorator. By default
    matplotlib reads text between two '$' as mathematics: '$5 or $6' came out in italics, and '$^$' failed."""
    import matplotlib  # here: commands that draw nothing load none

    with matplotlib.rc_context({"text.parse_math": False}):
        yield


def png_bytes(figure: Figure, dpi: int) -> bytes:
    """`figure` rendered as a PNG."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
