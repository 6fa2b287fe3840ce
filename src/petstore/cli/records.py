"""The records of ``petstore pets import``: a file read into NewPet documents to send.

A JSON file is one JSON array of records, or one record, or JSON lines: one document
per non-blank line. Each record is sent as written (unknown or repeated members
included), so the service judges it exactly as it would any other request (D2-D4).
A CSV file starts with the header :data:`HEADER`, NewPet's members
(``name,categoryId[,status]``; columns in any order and any case, separated by
``,``, ``;``, a tab or ``|``, found from the header); each row becomes a JSON object
of its non-empty cells, a cell of a numeric member (``categoryId``) that is a JSON
number sent as that number and anything else as a string for the service to refuse
by name. The columns follow from NewPet: a member added to it is read unasked. What
cannot be sent at all (a line that is not JSON, a row with more cells than the
header) is refused here with a reason. A file that cannot be read whole
(not UTF-8, a broken JSON array, a CSV file without its header) raises
click.UsageError. Nothing here does I/O but reading the file.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import msgspec

from petstore.schemas import NEW_PET_MEMBERS, NEW_PET_REQUIRED, NewPet


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
_OTHER_UNICODE = {
    codecs.BOM_UTF16_LE: "UTF-16",
    codecs.BOM_UTF16_BE: "UTF-16",
    codecs.BOM_UTF32_LE: "UTF-32",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One record of the file: its first ``line`` (from 1), either the NewPet
    ``document`` to send or, when it was refused before sending, the ``reason``, and
    its ``occurrence`` among the records of the file with the same document (from 1)."""

    line: int
    document: bytes | None
    reason: str = ""
    occurrence: int = 1

    @property
    def idempotency_key(self) -> str:
        """The Idempotency-Key of this record (D16): a SHA-256 of its document and its
        occurrence among identical documents, so that importing the file again, with
        the same API key within 24 hours, adds nothing twice, and adding, removing or
        editing other records of the file changes no key but theirs."""
        digest = hashlib.sha256(b"%d:" % self.occurrence + (self.document or b""))
        return digest.hexdigest()


def read_records(path: Path) -> list[Record]:
    """Every record of ``path``: CSV when its name ends in ``.csv``, JSON else; [] for
    a file with nothing but white space. Raises click.UsageError when the file as a
    whole cannot be imported (see the module docstring)."""
    data = path.read_bytes()
    for bom, encoding in _OTHER_UNICODE.items():
        if data.startswith(bom):
            raise click.UsageError(f"{path.name} is {encoding} text: {_convert(path, encoding)}")
    data = data.removeprefix(codecs.BOM_UTF8)
    if not data.strip():
        return []
    records = _csv_rows(path, data) if path.suffix.lower() == ".csv" else _json(path, data)
    return _numbered(records)


def _convert(path: Path, encoding: str) -> str:
    target = f"{path.stem}-utf8{path.suffix}"
    command = f"iconv -f {encoding} -t UTF-8 {path.name} > {target}"
    return f"the importer reads UTF-8 only; convert it first, e.g. {command}"


def _numbered(records: list[Record]) -> list[Record]:
    """``records`` with each one's occurrence among identical documents."""
    seen: Counter[bytes] = Counter()
    numbered = []
    for record in records:
        if record.document is not None:
            seen[record.document] += 1
            record = Record(
                line=record.line, document=record.document, occurrence=seen[record.document]
            )
        numbered.append(record)
    return numbered


def _json(path: Path, data: bytes) -> list[Record]:
    """A JSON array's elements, one document over several lines, or else JSON lines
    (whose lines that are not UTF-8 are refused one by one)."""
    array = data.lstrip().startswith(b"[")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        if array:
            raise click.UsageError(
                f"{path.name} is not UTF-8 text: {_convert(path, 'LATIN1')}"
            ) from None
        return list(_json_lines(data))
    start = len(text) - len(text.lstrip())
    if _is_json(text.strip().split("\n", 1)[0]):  # the first line is a record
        return list(_json_lines(data))
    if array:
        return _json_array(path, text, start)
    if _is_json(text):
        return [Record(line=text.count("\n", 0, start) + 1, document=text.strip().encode())]
    return list(_json_lines(data))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _json_array(path: Path, text: str, start: int) -> list[Record]:
    """The elements of the JSON array at ``text[start]``, each sent as written.
    Raises click.UsageError, before any record is sent, when the file is not that
    one valid JSON array."""
    decoder = json.JSONDecoder()
    try:
        _, end = decoder.raw_decode(text, start)  # the whole array: read, or refused whole
    except json.JSONDecodeError as exc:
        raise click.UsageError(
            f"{path.name} starts a JSON array but is not valid JSON ({exc.msg} at line "
            f"{exc.lineno} column {exc.colno}); nothing was imported"
        ) from None
    except RecursionError:
        raise click.UsageError(
            f"{path.name}: JSON nested too deeply; nothing was imported"
        ) from None
    if text[end:].strip():
        raise click.UsageError(
            f"{path.name}: something follows the JSON array; nothing was imported"
        )
    records = []
    position = _skip_space(text, start + 1)
    while text[position] != "]":
        _, element_end = decoder.raw_decode(text, position)
        line = text.count("\n", 0, position) + 1
        records.append(Record(line=line, document=text[position:element_end].encode()))
        position = _skip_space(text, element_end)
        position = _skip_space(text, position + 1) if text[position] == "," else position
    return records


def _skip_space(text: str, position: int) -> int:
    while text[position] in " \t\r\n":
        position += 1
    return position


def _json_lines(data: bytes) -> Iterator[Record]:
    """A record per non-blank line (split at \\n, \\r\\n or \\r)."""
    for number, line in enumerate(data.splitlines(), 1):
        document = line.strip()
        if not document:
            continue
        try:
            json.loads(document.decode("utf-8"))
        except UnicodeDecodeError as exc:
            reason = f"not UTF-8 text (byte {exc.start + 1} of the line); convert the file "
            yield Record(
                line=number,
                document=None,
                reason=reason + "to UTF-8, e.g. with iconv -f LATIN1 -t UTF-8",
            )
        except json.JSONDecodeError as exc:
            yield Record(
                line=number, document=None, reason=f"not JSON: {exc.msg} at column {exc.colno}"
            )
        except (ValueError, RecursionError) as exc:  # an integer of 4300 digits and more
            reason = str(exc) or "nested too deeply"
            yield Record(
                line=number, document=None, reason=f"not JSON this importer can read: {reason}"
            )
        else:
            yield Record(line=number, document=document)


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


def _csv_rows(path: Path, data: bytes) -> list[Record]:
    """A record per row after the header; rows of empty cells only are skipped."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise click.UsageError(
            f"{path.name} is not UTF-8 text (line {line} holds byte 0x{data[exc.start]:02x}): "
            + _convert(path, "LATIN1")
        ) from None
    first_line = text.lstrip("\r\n").splitlines()[0]
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(first_line, _DELIMITERS)
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=dialect.delimiter)
    header = next((row for row in reader if any(cell.strip() for cell in row)), [])
    columns = _columns(path.name, header, first_line)
    records = []
    end = reader.line_num  # the line a row ends on (a quoted cell may span lines)
    try:
        for row in reader:
            first, end = end + 1, reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) > len(columns):
                reason = f"row has {len(row)} cells, the header has {len(columns)}"
                records.append(Record(line=first, document=None, reason=reason))
                continue
            body: dict[str, object] = {}
            for member, cell in zip(columns, row, strict=False):  # a short row: cells absent
                if not cell.strip():
                    continue
                if member in _NUMBERS and _JSON_NUMBER.fullmatch(cell.strip()):
                    body[member] = msgspec.Raw(cell.strip().encode())
                else:
                    body[member] = cell if member in _TEXT else cell.strip()
            records.append(Record(line=first, document=msgspec.json.encode(body)))
    except csv.Error as exc:
        raise click.UsageError(f"{path.name} is not CSV this importer can read: {exc}") from None
    return records
