"""The wire contract: Pet, NewPet, PetStatus and Error (interface: Resources).

msgspec structs validate while decoding and encode straight to JSON bytes. Decoding
is strict (``true`` and ``"1"`` are no integers); D3's whole numbers written ``1.0``
or ``1e3`` are read exactly by the server's parser (``server.http.newpet``).

Each rule of the contract is written here once and read from here by everything that
judges or states it: a NewPet is valid when it decodes into the NewPet struct, whose
types carry the bounds and whose :data:`NEW_PET_CHECKS` carry what a type cannot say
(the server's parser, ``server.http.newpet``, only names the member that fails);
listPets' page size is re-exported by ``server.rules.pagination`` as its rule, read
by ``server.http.parsing`` and by the ``pets`` command, which is client code and may
not import the server. The served OpenAPI document (``openapi.yaml``) is written by
hand for people; a test (``tests/server/http/test_openapi.py``) checks its NewPet, Pet, Name,
CategoryId, PetStatus and ``limit`` against these constants and structs.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any

import msgspec

from petstore import text

INT64_MAX = 2**63 - 1

#: D2: the length of a name in Unicode code points, both ends included.
NAME_MIN_LENGTH, NAME_MAX_LENGTH = 1, 100
#: D3: the values of a categoryId, both ends included: the positive int64 values.
CATEGORY_ID_MIN, CATEGORY_ID_MAX = 1, INT64_MAX
#: listPets' page size ``limit`` (interface: List animals, Limits; D8): an integer
#: from LIMIT_MIN to LIMIT_MAX, LIMIT_DEFAULT when the request names none.
LIMIT_MIN, LIMIT_MAX, LIMIT_DEFAULT = 1, 100, 20

#: D2: a control character (Unicode category Cc) anywhere in a name.
_CONTROL = re.compile(f"[{text.CONTROLS}]")
#: D2: the bidi controls, refused anywhere in a name (:data:`petstore.text.BIDI_CONTROLS`).
_BIDI_CONTROL = re.compile(f"[{text.BIDI_CONTROLS}]")
#: D2: refused anywhere in a name besides: what is drawn as nothing or breaks a line
#: (:data:`petstore.text.INVISIBLE`).
_INVISIBLE_REFUSED = re.compile(f"[{text.INVISIBLE}]")
#: D2: the categories of characters not visible by themselves: white space (Z*),
#: controls, formats, and the combining marks, which are drawn on the character
#: before them.
_INVISIBLE = frozenset(("Zs", "Zl", "Zp", "Cc", "Cf", "Mn", "Mc", "Me"))

Name = Annotated[str, msgspec.Meta(min_length=NAME_MIN_LENGTH, max_length=NAME_MAX_LENGTH)]
CategoryId = Annotated[int, msgspec.Meta(ge=CATEGORY_ID_MIN, le=CATEGORY_ID_MAX)]


class PetStatus(StrEnum):
    """An animal's availability (interface: PetStatus)."""

    AVAILABLE = "available"
    PENDING = "pending"
    SOLD = "sold"


#: D1: the status of a NewPet sent without one.
DEFAULT_STATUS = PetStatus.AVAILABLE


class NewPet(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """The body of ``createPet``; unknown fields, ``id`` included, are refused (D4).

    ``status`` defaults to ``available`` (D1).
    """

    name: Name
    category_id: CategoryId
    status: PetStatus = DEFAULT_STATUS

    def __post_init__(self) -> None:
        """Raises ValueError, ``<member>: <problem>``, for the first member that a
        type cannot judge whole (:data:`NEW_PET_CHECKS`)."""
        for member, check in NEW_PET_CHECKS.items():
            problem = check(getattr(self, _NEW_PET_FIELDS[member]))
            if problem is not None:
                raise ValueError(f"{member}: {problem}")


#: D4: the members of a NewPet as sent, in order; no other member is accepted.
NEW_PET_MEMBERS = tuple(field.encode_name for field in msgspec.structs.fields(NewPet))
_NEW_PET_FIELDS = {field.encode_name: field.name for field in msgspec.structs.fields(NewPet)}
#: D4: the members a NewPet must have (``status`` may be left out, D1).
NEW_PET_REQUIRED = tuple(
    field.encode_name for field in msgspec.structs.fields(NewPet) if field.required
)


_NOT_VISIBLE = (
    "must have a visible character, not only white space, invisible characters or combining marks"
)


def name_problem(name: str) -> str | None:
    """What makes ``name`` no NewPet name beyond its length (D2), in English, or None:
    a control character (Unicode category Cc), a bidi control or an invisible
    character that is neither white space nor a joiner or selector
    (:data:`_INVISIBLE_REFUSED`) anywhere, or no visible character (only white
    space, formats and combining marks)."""
    if _CONTROL.search(name):
        return "must not contain control characters"
    if name.isascii():
        return None if not name.isspace() else _NOT_VISIBLE
    found = _BIDI_CONTROL.search(name)
    if found:
        return f"must not contain bidi control characters ({_code_point(found[0])})"
    found = _INVISIBLE_REFUSED.search(name)
    if found:
        character = _code_point(found[0])
        return f"must not contain invisible, blank or line-breaking characters ({character})"
    if all(unicodedata.category(c) in _INVISIBLE for c in name):
        return _NOT_VISIBLE
    return None


def _code_point(character: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``: a character named in an error message."""
    return f"U+{ord(character):04X} {unicodedata.name(character, '')}".rstrip()


#: The checks of a NewPet's members that their types cannot express, by member: each
#: gives the problem with a valid value of the member's type, in English, or None.
#: NewPet runs them after decoding; ``server.http.newpet`` names the member they fail.
NEW_PET_CHECKS: dict[str, Callable[[Any], str | None]] = {"name": name_problem}


class Pet(msgspec.Struct, rename="camel", gc=False):
    """An animal as returned: exactly ``id``, ``name``, ``categoryId``, ``status`` (D6).

    Not tracked by the garbage collector (``gc=False``): it holds no container, so it
    can be in no reference cycle, and the collections that every request's
    allocations start need not walk it (a list page holds up to 100)."""

    id: int
    name: str
    category_id: int
    status: PetStatus


class Error(msgspec.Struct):
    """The body of every error response (interface: Errors; D10)."""

    code: str
    message: str
    status: int


encode = msgspec.json.Encoder().encode
