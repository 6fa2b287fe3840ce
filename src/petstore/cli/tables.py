"""Plain-text tables for the terminal, aligned by display width: an emoji or a CJK
character takes two columns (``wcwidth``), a combining mark none. A cell's control,
bidi control and invisible characters are shown escaped
(:func:`petstore.text.printable`, what every message of the command is shown
through): a value a client stored (a key's name, an animal's) can neither move the
cursor, colour the terminal, hide in its row nor break or reorder it.

A table is fitted to the terminal's width only when it is written to one; to a pipe
or a file every value is written whole, so a script can find a row by any cell
(as gh, kubectl and docker do). ``--wide`` (or ``--no-trunc``) asks for whole values
on a terminal too (:func:`wide_option`, :func:`fit_width`).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

import click
from wcwidth import wcswidth

from petstore.text import ELLIPSIS, printable

F = TypeVar("F", bound=Callable[..., object])
#: A shortened cell keeps at least this many columns, its ellipsis included.
MIN_COLUMNS = 8


def width(text: str) -> int:
    """The columns ``text`` takes on a terminal; a character without a width (a
    control character) counts as one."""
    columns = wcswidth(text)
    return columns if columns >= 0 else len(text)


def wide_option(command: F) -> F:
    """The ``--wide``/``--no-trunc`` flag of a command that prints a table: whole
    values even on a terminal. The command receives it as ``wide``."""
    return click.option(
        "--wide",
        "--no-trunc",
        "wide",
        is_flag=True,
        help="Whole values, also on a terminal (to a pipe they always are).",
    )(command)


def fit_width(*, wide: bool) -> int | None:
    """The width a table must fit: the terminal's (``COLUMNS``, else the terminal's
    own size) when standard output is a terminal and ``wide`` is not asked; None
    (whole values) otherwise."""
    if wide or not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def shorten(text: str, columns: int) -> str:
    """``text`` cut to at most ``columns`` display columns, ending in an ellipsis
    when cut."""
    if width(text) <= columns:
        return text
    while text and width(text + ELLIPSIS) > columns:
        text = text[:-1]
    return text + ELLIPSIS


def table(
    rows: Sequence[Sequence[str]], *, fit: int | None = None, shrink: Sequence[int] = ()
) -> list[str]:
    """The lines of ``rows`` (the first is the header) in columns two spaces apart,
    each cell escaped (:func:`petstore.text.printable`) and padded to its column's widest display
    width; no trailing spaces.

    With ``fit`` (a terminal's width), the columns numbered in ``shrink`` are cut
    with an ellipsis, the widest first, until a line fits or each is down to
    :data:`MIN_COLUMNS`; header cells are never cut. Without it, nothing is cut."""
    rows = [rows[0], *([printable(cell) for cell in row] for row in rows[1:])]
    widths = [max(width(row[i]) for row in rows) for i in range(len(rows[0]))]
    if fit is not None:
        floor = {i: max(MIN_COLUMNS, width(rows[0][i])) for i in shrink}
        while sum(widths) + 2 * (len(widths) - 1) > fit:
            candidates = [i for i in shrink if widths[i] > floor[i]]
            if not candidates:
                break
            widest = max(candidates, key=lambda i: widths[i])
            over = sum(widths) + 2 * (len(widths) - 1) - fit
            widths[widest] = max(floor[widest], widths[widest] - over)
        rows = [rows[0], *([shorten(c, widths[i]) for i, c in enumerate(r)] for r in rows[1:])]
    return [
        "  ".join(
            cell + " " * (w - width(cell)) for cell, w in zip(row, widths, strict=True)
        ).rstrip()
        for row in rows
    ]
