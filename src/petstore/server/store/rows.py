"""Rows by name, from one description: what the statements of both dialects name, and
how what they return becomes values.

A stored value is described once, by its struct: a Pet by :class:`petstore.schemas.Pet`
and :class:`petstore.schemas.NewPet`, an API key by ``store.ApiKey``. A table has a
column for each field, named as the field (``category_id``). Every statement's list
of returned columns follows from the struct (:func:`select_list`), each column named
as the struct's field is named in JSON (``category_id AS "categoryId"``), and so do an
insert's columns and named parameters (:func:`insert_columns`,
:func:`insert_values`), its parameters being the struct's own JSON-ready values
(:func:`parameters`). A row comes back as a mapping of those names, and
:func:`into` turns it into the struct by name, checking each value's type (a
status outside PetStatus raises). Nothing depends on the order of columns, and a
field added to a struct, with its column added by a migration, is written, read and
returned with no other edit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


def insert_columns(kind: type[msgspec.Struct]) -> LiteralString:
    """The columns an insert of a ``kind`` value writes: one for each field."""
    return ", ".join(field.name for field in msgspec.structs.fields(kind))


def insert_values(kind: type[msgspec.Struct], style: ParameterStyle) -> LiteralString:
    """The named parameters of :func:`insert_columns`, in the dialect's ``style``,
    each named as its field's JSON name (what :func:`parameters` gives)."""
    names = (field.encode_name for field in msgspec.structs.fields(kind))
    if style == "named":
        return ", ".join(f":{name}" for name in names)
    return ", ".join(f"%({name})s" for name in names)


def parameters(value: msgspec.Struct) -> dict[str, Any]:
    """``value``'s fields by JSON name, as values both drivers take (an enum as its
    value): the parameters of :func:`insert_values`."""
    parameters: dict[str, Any] = msgspec.to_builtins(value)
    return parameters


def into(kind: type[S], row: Row) -> S:
    """The ``kind`` value of ``row`` (columns named as :func:`select_list` names them).

    Raises msgspec.ValidationError when a column is missing or holds a value of the
    wrong type (a damaged row: the schema's constraints forbid it)."""
    return msgspec.convert(row, kind)


def all_into(kind: type[S], rows: Iterable[Row]) -> list[S]:
    """:func:`into` of each of ``rows``, in order."""
    return [msgspec.convert(row, kind) for row in rows]
