"""The records of ``petstore pets import``: a file read into NewPet documents to send.

A JSON-lines file gives one document per non-blank line, sent as written (unknown
or repeated members included), so the service judges it exactly as it would any
other request (D2-D4). A CSV file starts with the header ``name,categoryId[,status]``
(columns in any order); each row becomes a JSON object of its non-empty cells, a
``categoryId`` that is a JSON number sent as that number and anything else as a
string for the service to refuse by name. What cannot be sent at all (a line that
is not JSON, a row with more cells than the header) is refused here with a reason.
Nothing here does I/O but reading the file.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import click
import msgspec

#: The header a CSV file must start with.
HEADER = "name,categoryId[,status]"
#: Header cell -> NewPet member (``category_id`` is read as ``categoryId``).
_COLUMNS = {
    "name": "name",
    "categoryId": "categoryId",
    "category_id": "categoryId",
    "status": "status",
}
#: A JSON number (RFC 8259 section 6): such a categoryId cell is sent as a number.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


@dataclass(frozen=True, slots=True)
class Record:
    """One record of the file: its first ``line`` (from 1), and either the NewPet
    ``document`` to send or, when it was refused before sending, the ``reason``."""

    line: int
    document: bytes | None
    reason: str = ""

    @property
    def idempotency_key(self) -> str:
        """The Idempotency-Key of this record: derived from its line and document, so
        importing the same file again adds nothing twice (D16)."""
        digest = hashlib.sha256(f"{self.line}:".encode() + (self.document or b""))
        return digest.hexdigest()


def read_records(path: Path) -> list[Record]:
    """Every record of ``path``: CSV when its name ends in ``.csv``, JSON lines else.

    Raises click.UsageError when the file as a whole cannot be imported: a CSV whose
    first line is not the header, or that is not UTF-8 text or not CSV.
    """
    if path.suffix.lower() != ".csv":
        return list(_json_lines(path.read_bytes()))
    try:
        with path.open(encoding="utf-8-sig", newline="") as text:
            return list(_csv_rows(path.name, text))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise click.UsageError(f"{path.name} is not a UTF-8 CSV file: {exc}") from None


def _json_lines(data: bytes) -> Iterator[Record]:
    """A record per non-blank line (split at \\n, \\r\\n or \\r; a leading BOM dropped)."""
    for number, line in enumerate(data.removeprefix(codecs.BOM_UTF8).splitlines(), 1):
        document = line.strip()
        if not document:
            continue
        try:
            json.loads(document.decode("utf-8"))
        except UnicodeDecodeError as exc:
            yield Record(number, None, f"not UTF-8 text (byte {exc.start + 1} of the line)")
        except json.JSONDecodeError as exc:
            yield Record(number, None, f"not JSON: {exc.msg} at column {exc.colno}")
        except (ValueError, RecursionError) as exc:  # an integer of 4300 digits and more
            reason = str(exc) or "nested too deeply"
            yield Record(number, None, f"not JSON this importer can read: {reason}")
        else:
            yield Record(number, document)


def _columns(name: str, header: list[str] | None) -> list[str]:
    """The NewPet member of each column of ``header``. Raises click.UsageError when
    it is not the header (absent, lacking name or categoryId, or another column)."""
    cells = [cell.strip() for cell in header or []]
    members = [_COLUMNS.get(cell, "") for cell in cells]
    found = ",".join(cells)
    if not {"name", "categoryId"} & set(members):
        raise click.UsageError(
            f"{name} has no header: its first line must be {HEADER} (it is {found!r})"
            if found
            else f"{name} is empty: a CSV file starts with the header {HEADER}"
        )
    for cell, member in zip(cells, members, strict=True):
        if not member or members.count(member) > 1:
            raise click.UsageError(f"{name}: header column {cell!r} is unknown or repeated")
    if not {"name", "categoryId"} <= set(members):
        raise click.UsageError(f"{name}: the header {found!r} lacks a column of {HEADER}")
    return members


def _csv_rows(name: str, text: TextIO) -> Iterator[Record]:
    """A record per row after the header; rows of empty cells only are skipped."""
    reader = csv.reader(text)
    columns = _columns(name, next(reader, None))
    end = reader.line_num  # the line a row ends on (a quoted cell may span lines)
    for row in reader:
        first, end = end + 1, reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) > len(columns):
            reason = f"row has {len(row)} cells, the header has {len(columns)}"
            yield Record(first, None, reason)
            continue
        body: dict[str, object] = {}
        for member, cell in zip(columns, row, strict=False):  # a short row: cells absent
            if not cell.strip():
                continue
            if member == "categoryId" and _JSON_NUMBER.fullmatch(cell.strip()):
                body[member] = msgspec.Raw(cell.strip().encode())
            else:
                body[member] = cell if member == "name" else cell.strip()
        yield Record(first, msgspec.json.encode(body))
