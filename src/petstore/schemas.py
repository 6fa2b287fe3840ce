"""The wire contract: Pet, NewPet, PetStatus and Error (interface: Resources).

msgspec structs validate strictly while decoding (``1.0``, ``true`` and ``"1"`` are
not integers, D3) and encode straight to JSON bytes.

Each bound of the contract is written here once, as a constant, and read from here
by everything that judges or states it: the NewPet struct below, the fast NewPet
parser of the server (``server.http.newpet``), listPets' page size (re-exported by
``server.rules.pagination`` as its rule, read by ``server.http.parsing``) and the
``pets`` command, which is client code and may not import the server. The served
OpenAPI document (``openapi.yaml``) is written by hand for people; a test
(``tests/test_openapi.py``) checks its NewPet, Name, CategoryId, PetStatus and
``limit`` against these constants and this struct.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any

import msgspec

INT64_MAX = 2**63 - 1

#: D2: the length of a name in Unicode code points, both ends included.
NAME_MIN_LENGTH, NAME_MAX_LENGTH = 1, 100
#: D3: the values of a categoryId, both ends included: the positive int64 values.
CATEGORY_ID_MIN, CATEGORY_ID_MAX = 1, INT64_MAX
#: listPets' page size ``limit`` (interface: List animals, Limits; D8): an integer
#: from LIMIT_MIN to LIMIT_MAX, LIMIT_DEFAULT when the request names none.
LIMIT_MIN, LIMIT_MAX, LIMIT_DEFAULT = 1, 100, 20

#: D2: a control character (Unicode category Cc) anywhere in a name.
_CONTROL = re.compile("[\u0000-\u001f\u007f-\u009f]")
#: D2: the bidi controls (Unicode's Bidi_Control), which reorder what is shown around
#: them (U+202E RIGHT-TO-LEFT OVERRIDE), refused anywhere in a name.
_BIDI_CONTROL = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: D2: refused anywhere in a name besides: the line and paragraph separators, the
#: blank symbols (U+2800 BRAILLE PATTERN BLANK, U+1D159 MUSICAL SYMBOL NULL NOTEHEAD)
#: and the default-ignorable code points (Unicode's Default_Ignorable_Code_Point,
#: drawn as nothing: U+200B ZERO WIDTH SPACE, U+3164 HANGUL FILLER, U+00AD SOFT
#: HYPHEN, ...) except those that join or select within a visible sequence: the
#: joiners U+200C and U+200D (emoji ZWJ sequences, Persian and Indic words), the
#: variation selectors (U+FE0F of emoji) and the tag characters of emoji flags.
_INVISIBLE_REFUSED = re.compile(
    "[\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180e\u200b\u2028\u2029\u2060-\u2065"
    "\u206a-\u206f\u2800\u3164\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3"
    "\U0001d159\U0001d173-\U0001d17a\U000e0000-\U000e001f\U000e0080-\U000e00ff"
    "\U000e01f0-\U000e0fff]"
)
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
        # D2 beyond the length (msgspec patterns are Python's, whose `$` also matches
        # before a final newline, so the rule is checked here).
        problem = name_problem(self.name)
        if problem is not None:
            raise ValueError(problem)


#: D4: the members of a NewPet as sent, in order; no other member is accepted.
NEW_PET_MEMBERS = tuple(field.encode_name for field in msgspec.structs.fields(NewPet))
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
