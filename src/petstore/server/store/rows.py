"""Rows by name, from one description: what the statements of both dialects name, and
how what they return becomes values.

A stored value is described once, by its struct: a Pet by :class:`petstore.schemas.Pet`
and :class:`petstore.schemas.NewPet`, an API key by ``store.ApiKey``. A table has a
column for each field, named as the field (``category_id``). Every statement's list
of returned columns follows from the struct (:func:`select_list`), each column named
as the struct's field is named in JSON (``category_id AS "categoryId"``), and so do a
NewPet insert's columns and named parameters (:func:`column_list`,
:func:`parameter_list`), a value's parameters being its fields by column name
(:func:`parameters`; many values at once as one JSON array of those,
:func:`parameters_json`). A row comes back as a mapping of the names its statement
gave the columns, and :func:`into` turns it into the struct by name, checking each
value's type (a status outside PetStatus raises). Nothing depends on the order of
columns, and a field added to Pet and NewPet, with its column added by a migration,
is written, read and returned with no other edit. An API key's insert, whose values
the store computes (a hash, a prefix), names its columns in each dialect.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, LiteralString, TypeVar

import msgspec

S = TypeVar("S", bound=msgspec.Struct)

#: A row as both drivers return it: each column by the name the statement gave it.
Row = Mapping[str, Any]
#: How a dialect writes a named parameter: SQLite's ``:name``, psycopg's ``%(name)s``.
ParameterStyle = Literal["named", "pyformat"]


def select_list(kind: type[msgspec.Struct]) -> LiteralString:
    """The columns of ``kind``'s fields, each named as the field's JSON name (quoted
    where it differs): what a ``SELECT`` or ``RETURNING`` of such values lists."""
    return ", ".join(
        field.name if field.name == field.encode_name else f'{field.name} AS "{field.encode_name}"'
        for field in msgspec.structs.fields(kind)
    )


def column_list(kind: type[msgspec.Struct], prefix: str = "") -> LiteralString:
    """The columns of ``kind``'s fields (each after ``prefix``, a table's name and a
    dot, say): what an insert of such a value writes."""
    return ", ".join(prefix + field.name for field in msgspec.structs.fields(kind))


def parameter_list(kind: type[msgspec.Struct], style: ParameterStyle) -> LiteralString:
    """The named parameters of :func:`column_list`, in the dialect's ``style``, each
    named as its column (what :func:`parameters` gives)."""
    names = (field.name for field in msgspec.structs.fields(kind))
    if style == "named":
        return ", ".join(f":{name}" for name in names)
    return ", ".join(f"%({name})s" for name in names)


def parameters(value: msgspec.Struct) -> dict[str, Any]:
    """``value``'s fields by column name: the parameters of :func:`parameter_list`.
    Both drivers take each value as it is (a PetStatus is a ``str``)."""
    return msgspec.structs.asdict(value)


def parameters_json(values: Sequence[msgspec.Struct]) -> str:
    """``values`` as one JSON array of :func:`parameters`, in order: a statement
    takes any number of them as one parameter (SQLite's ``json_each``, PostgreSQL's
    ``json_populate_recordset``)."""
    return msgspec.json.encode([parameters(value) for value in values]).decode()


def into(kind: type[S], row: Row) -> S:
    """The ``kind`` value of ``row`` (columns named as :func:`select_list` names them).

    Raises msgspec.ValidationError when a column is missing or holds a value of the
    wrong type (a damaged row: the schema's constraints forbid it)."""
    return msgspec.convert(row, kind)


def all_into(kind: type[S], rows: Iterable[Row]) -> list[S]:
    """:func:`into` of each of ``rows``, in order."""
    return [into(kind, row) for row in rows]
