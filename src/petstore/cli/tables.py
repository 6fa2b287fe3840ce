"""Plain-text tables for the terminal, aligned by display width: an emoji or a CJK
character takes two columns (``wcwidth``), a combining mark none."""

from __future__ import annotations

from collections.abc import Sequence

from wcwidth import wcswidth


def width(text: str) -> int:
    """The columns ``text`` takes on a terminal; a character without a width (a
    control character) counts as one."""
    columns = wcswidth(text)
    return columns if columns >= 0 else len(text)


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of ``rows`` (the first is the header) in columns two spaces apart,
    each cell padded to its column's widest display width; no trailing spaces."""
    widths = [max(width(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell + " " * (w - width(cell)) for cell, w in zip(row, widths, strict=True)
        ).rstrip()
        for row in rows
    ]
