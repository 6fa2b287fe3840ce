"""The wire contract: Pet, NewPet, PetStatus and Error (interface: Resources).

msgspec structs validate strictly while decoding (``1.0``, ``true`` and ``"1"`` are
not integers, D3) and encode straight to JSON bytes. The constraints below are the
same ones the OpenAPI document states.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any

import msgspec

INT64_MAX = 2**63 - 1

#: D2: a control character (Unicode category Cc) anywhere in a name.
_CONTROL = re.compile("[\u0000-\u001f\u007f-\u009f]")
#: D2: the categories of invisible characters: white space (Z*), controls, formats.
_INVISIBLE = frozenset(("Zs", "Zl", "Zp", "Cc", "Cf"))

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
CategoryId = Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX)]


class PetStatus(StrEnum):
    """An animal's availability (interface: PetStatus)."""

    AVAILABLE = "available"
    PENDING = "pending"
    SOLD = "sold"


class NewPet(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """The body of ``createPet``; unknown fields, ``id`` included, are refused (D4).

    ``status`` defaults to ``available`` (D1).
    """

    name: Name
    category_id: CategoryId
    status: PetStatus = PetStatus.AVAILABLE

    def __post_init__(self) -> None:
        # D2 beyond the length (msgspec patterns are Python's, whose `$` also matches
        # before a final newline, so the rule is checked here).
        problem = name_problem(self.name)
        if problem is not None:
            raise ValueError(problem)


def name_problem(name: str) -> str | None:
    """What makes ``name`` no NewPet name beyond its length (D2), in English, or None:
    a control character (Unicode category Cc) anywhere, or no visible character."""
    if _CONTROL.search(name):
        return "must not contain control characters"
    if name.isascii() and not name.isspace():
        return None  # an ASCII name that is not all white space has a visible character
    if all(unicodedata.category(c) in _INVISIBLE or c.isspace() for c in name):
        return "must have a visible character, not only white space or invisible characters"
    return None


class Pet(msgspec.Struct, rename="camel", gc=False):
    """An animal as returned: exactly ``id``, ``name``, ``categoryId``, ``status`` (D6).

    Not tracked by the garbage collector (``gc=False``): it holds no container, so it
    can be in no reference cycle, and a worker keeps up to 100,000 of them
    (``store.kept_pets``), which each full collection would otherwise walk."""

    id: int
    name: str
    category_id: int
    status: PetStatus


_STATUSES = {status.value: status for status in PetStatus}


def pet_from_row(row: Sequence[Any]) -> Pet:
    """The Pet of a stored ``(id, name, category_id, status)`` row (either store).

    Raises KeyError for a status outside PetStatus (the schema's CHECK forbids it)."""
    return Pet(row[0], row[1], row[2], _STATUSES[row[3]])


class Error(msgspec.Struct):
    """The body of every error response (interface: Errors; D10)."""

    code: str
    message: str
    status: int


encode = msgspec.json.Encoder().encode
