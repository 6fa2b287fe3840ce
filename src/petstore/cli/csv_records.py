"""The CSV files of ``petstore pets import``: rows read into NewPet documents.

A CSV file starts with the header :data:`HEADER`, NewPet's members
(``name,categoryId[,status]``; columns in any order and any case, separated by
``,``, ``;``, a tab or ``|``, found from the header); each row becomes a JSON object
of its non-empty cells, a cell of a numeric member (``categoryId``) that is a JSON
number sent as that number and anything else as a string for the service to refuse
by name. The columns follow from NewPet: a member added to it is read unasked. A row
with more cells than the header is refused here with a reason.
"""

from __future__ import annotations

import csv
import io
import re

import click
import msgspec

from petstore.schemas import NEW_PET_MEMBERS, NEW_PET_REQUIRED, NewPet

#: A row read: its first line (from 1), and the NewPet document to send or, when it
#: cannot be sent, None and the reason.
Row = tuple[int, bytes | None, str]


def _members() -> tuple[msgspec.inspect.Field, ...]:
    """NewPet's members as msgspec describes them: names and types."""
    info = msgspec.inspect.type_info(NewPet)
    assert isinstance(info, msgspec.inspect.StructType)
    return info.fields


def _bare(kind: msgspec.inspect.Type) -> msgspec.inspect.Type:
    """``kind`` without what wraps it: its extra metadata, and of alternatives
    (``int | None``) the first that is not None."""
    while True:
        if isinstance(kind, msgspec.inspect.Metadata):
            kind = kind.type
        elif isinstance(kind, msgspec.inspect.UnionType):
            kind = next(t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType))
        else:
            return kind


_MEMBERS = _members()
#: The header a CSV file must start with: NewPet's members as sent, those that may be
#: left out in brackets (``name,categoryId[,status]``).
HEADER = ",".join(NEW_PET_REQUIRED) + "".join(
    f"[,{member}]" for member in NEW_PET_MEMBERS if member not in NEW_PET_REQUIRED
)
#: Header cell, in lower case -> NewPet member: each member as sent or by its Python
#: name (``categoryid``, ``category_id``: ``categoryId``).
_COLUMNS = {
    name.lower(): field.encode_name
    for field in _MEMBERS
    for name in (field.encode_name, field.name)
}
#: The members whose cell is sent as a JSON number when it is one (``categoryId``).
_NUMBERS = frozenset(
    field.encode_name
    for field in _MEMBERS
    if isinstance(_bare(field.type), msgspec.inspect.IntType | msgspec.inspect.FloatType)
)
#: The members of free text, whose cells are sent as written, white space and all
#: (the service judges it, D2); every other cell is sent stripped.
_TEXT = frozenset(
    field.encode_name
    for field in _MEMBERS
    if isinstance(_bare(field.type), msgspec.inspect.StrType)
)
_DELIMITERS = ",;\t|"
#: A JSON number (RFC 8259 section 6): such a categoryId cell is sent as a number.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _columns(name: str, header: list[str], first_line: str) -> list[str]:
    """The NewPet member of each column of ``header`` (``first_line`` as written, for
    the messages). Raises click.UsageError when it is not the header."""
    cells = [cell.strip() for cell in header]
    members = [_COLUMNS.get(cell.lower(), "") for cell in cells]
    if not set(NEW_PET_REQUIRED) & set(members):
        raise click.UsageError(
            f"{name} has no header: its first line must be {HEADER} (it is {first_line!r})"
        )
    for cell, member in zip(cells, members, strict=True):
        if not member or members.count(member) > 1:
            raise click.UsageError(f"{name}: header column {cell!r} is unknown or repeated")
    if not set(NEW_PET_REQUIRED) <= set(members):
        raise click.UsageError(f"{name}: the header {first_line!r} lacks a column of {HEADER}")
    return members


def csv_rows(name: str, text: str) -> list[Row]:
    """A row per line after the header of ``text``, the file ``name``'s content; rows
    of empty cells only are skipped. Raises click.UsageError when the header is not
    :data:`HEADER`'s or the file is not CSV this reads."""
    first_line = text.lstrip("\r\n").splitlines()[0]
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(first_line, _DELIMITERS)
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=dialect.delimiter)
    header = next((row for row in reader if any(cell.strip() for cell in row)), [])
    columns = _columns(name, header, first_line)
    rows: list[Row] = []
    end = reader.line_num  # the line a row ends on (a quoted cell may span lines)
    try:
        for row in reader:
            first, end = end + 1, reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) > len(columns):
                reason = f"row has {len(row)} cells, the header has {len(columns)}"
                rows.append((first, None, reason))
                continue
            body: dict[str, object] = {}
            for member, cell in zip(columns, row, strict=False):  # a short row: cells absent
                if not cell.strip():
                    continue
                if member in _NUMBERS and _JSON_NUMBER.fullmatch(cell.strip()):
                    body[member] = msgspec.Raw(cell.strip().encode())
                else:
                    body[member] = cell if member in _TEXT else cell.strip()
            rows.append((first, msgspec.json.encode(body), ""))
    except csv.Error as exc:
        raise click.UsageError(f"{name} is not CSV this importer can read: {exc}") from None
    return rows
