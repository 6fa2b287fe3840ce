"""The records of ``petstore pets import``: a file read into NewPet documents to send.

A JSON file is one JSON array of records, or one record, or JSON lines: one document
per non-blank line. Each record is sent as written (unknown or repeated members
included), so the service judges it exactly as it would any other request (D2-D4).
A CSV file starts with a header of NewPet's members, each row a record
(:mod:`petstore.cli.csv_records`). What
cannot be sent at all (a line that is not JSON, a row with more cells than the
header) is refused here with a reason. A file that cannot be read whole
(not UTF-8, a broken JSON array, a CSV file without its header) raises
click.UsageError. Nothing here does I/O but reading the file.
"""

from __future__ import annotations

import codecs
import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click

from petstore.cli.csv_records import csv_rows

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
    records = _csv(path, data) if path.suffix.lower() == ".csv" else _json(path, data)
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


def _csv(path: Path, data: bytes) -> list[Record]:
    """The records of a CSV file (:mod:`petstore.cli.csv_records`)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise click.UsageError(
            f"{path.name} is not UTF-8 text (line {line} holds byte 0x{data[exc.start]:02x}): "
            + _convert(path, "LATIN1")
        ) from None
    return [
        Record(line=line, document=document, reason=reason)
        for line, document, reason in csv_rows(path.name, text)
    ]
