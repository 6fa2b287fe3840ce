"""The createPet body: JSON bytes to a NewPet, or a 400 that says what is wrong
(D1-D4, D10).

Two steps, one authority. msgspec decodes a valid body straight into a NewPet (the
fast path, almost every request). Any body it refuses goes to :func:`validate`, our
own explicit check of the JSON: it decides the answer, member by member, with
messages of ours, and never reads a library's error text, so an upgrade of the
decoder cannot change a message. It also accepts what the strict decoder refuses
but D3 allows (``1.0`` and ``1e3`` are integers).

Both steps take every bound from :mod:`petstore.schemas` (the struct's annotations,
and the constants this module reads), so neither restates a number of the rule.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation

import msgspec

from petstore.schemas import (
    CATEGORY_ID_MAX,
    CATEGORY_ID_MIN,
    DEFAULT_STATUS,
    NAME_MAX_LENGTH,
    NAME_MIN_LENGTH,
    NEW_PET_MEMBERS,
    NEW_PET_REQUIRED,
    NewPet,
    PetStatus,
    name_problem,
)
from petstore.server import errors

_new_pet_decoder = msgspec.json.Decoder(NewPet)
_members_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
#: The member names of a NewPet as they can be written without escapes.
_MEMBERS = tuple(f'"{member}"'.encode() for member in NEW_PET_MEMBERS)
_STATUSES = {status.value: status for status in PetStatus}
_NAME_TYPE = f"name: must be a string of {NAME_MIN_LENGTH} to {NAME_MAX_LENGTH} characters"
_CATEGORY = f"categoryId: must be a whole number from {CATEGORY_ID_MIN} to {CATEGORY_ID_MAX}"
_STATUS = f"status: must be one of {', '.join(_STATUSES)}"
_OPTIONAL = [member for member in NEW_PET_MEMBERS if member not in NEW_PET_REQUIRED]
_NOT_AN_OBJECT = (
    f"body: must be a JSON object, a NewPet: {', '.join(NEW_PET_REQUIRED)}"
    f" and optionally {', '.join(_OPTIONAL)}"
)
_NOT_A_MEMBER = f"is not a member of a NewPet ({', '.join(NEW_PET_MEMBERS)})"


def parse_new_pet(body: bytes) -> NewPet:
    """A NewPet from JSON bytes (D1-D4).

    Raises MalformedJson for a body that is empty or not UTF-8 JSON (the message says
    where: a byte, or a line and column), InvalidRequest naming the offending member
    otherwise, a member named twice (D4) included.
    """
    if not body.strip():
        raise errors.MalformedJson("the request body is empty; send a NewPet JSON object")
    if b"\\" in body or any(body.count(member) > 1 for member in _MEMBERS):
        _refuse_repeated_members(body)  # rare: any body without them has no repeats
    try:
        return _new_pet_decoder.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        pass
    # Decoding validates as it parses, so a type error can be met before a syntax
    # error further on: the syntax is judged whole first. A number is JSON whatever
    # its size (D3 judges 1e400 out of range).
    try:
        body.decode("utf-8")
        msgspec.json.decode(body, type=msgspec.Raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise errors.MalformedJson(malformed(body)) from None
    try:
        members = _members_decoder.decode(body)
    except msgspec.ValidationError:
        raise errors.InvalidRequest(_NOT_AN_OBJECT) from None
    return validate(members)


def validate(members: dict[str, msgspec.Raw]) -> NewPet:
    """The NewPet of a JSON object's ``members`` (raw JSON values), judged by D1-D4 in
    the members' order; raises InvalidRequest with the first problem, naming its
    member. A missing ``name`` is named before a missing ``categoryId``."""
    name: str | None = None
    category_id: int | None = None
    status = DEFAULT_STATUS
    for member, raw in members.items():
        if member == "name":
            name = _name(bytes(raw))
        elif member == "categoryId":
            category_id = _category_id(bytes(raw))
        elif member == "status":
            status = _status(bytes(raw))
        else:
            raise errors.InvalidRequest(f"{member}: {_NOT_A_MEMBER}")
    if name is None:
        raise errors.InvalidRequest("name: is required")
    if category_id is None:
        raise errors.InvalidRequest("categoryId: is required")
    return NewPet(name=name, category_id=category_id, status=status)


def _name(raw: bytes) -> str:
    value = msgspec.json.decode(raw) if raw[:1] == b'"' else None
    if not isinstance(value, str) or not NAME_MIN_LENGTH <= len(value) <= NAME_MAX_LENGTH:
        raise errors.InvalidRequest(_NAME_TYPE)
    problem = name_problem(value)
    if problem is not None:
        raise errors.InvalidRequest(f"name: {problem}")
    return value


def _category_id(raw: bytes) -> int:
    value = whole_number(raw)
    if value is None or not CATEGORY_ID_MIN <= value <= CATEGORY_ID_MAX:
        raise errors.InvalidRequest(_CATEGORY)
    return value


def _status(raw: bytes) -> PetStatus:
    value = msgspec.json.decode(raw) if raw[:1] == b'"' else None
    status = _STATUSES.get(value) if isinstance(value, str) else None
    if status is None:
        raise errors.InvalidRequest(_STATUS)
    return status


def whole_number(numeral: bytes) -> int | None:
    """The exact value of a JSON number numeral when it is a whole number (``7``,
    ``1.0``, ``1e3``, ``100.00``), judged in decimal, never through a float (D3); None
    for any other numeral or JSON value. A value past 20 digits is returned as
    ``2**64``: out of range, without building a huge integer from ``1e999999``."""
    if not numeral[:1].isdigit() and numeral[:1] != b"-":
        return None  # a string, literal, array or object; Decimal would take "NaN"
    try:
        value = Decimal(numeral.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError):
        return None
    if not value.is_finite() or value != value.to_integral_value():
        return None
    return int(value) if value.adjusted() < 20 else 2**64


def malformed(body: bytes) -> str:
    """The MalformedJson message for ``body``, which is not UTF-8 JSON: where it
    stops being UTF-8 (a byte offset, from 0) or JSON (line, column and byte), or the
    lone surrogate escape it holds (RFC 8259 section 8.2: no Unicode character).
    Positions come from the exceptions' attributes, never their text."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"the request body is not valid UTF-8 (byte {exc.start})"
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        at = len(text[: exc.pos].encode())
        return (
            f"the request body is not valid JSON at line {exc.lineno}, "
            f"column {exc.colno} (byte {at})"
        )
    except (ValueError, RecursionError):
        return "the request body is not valid JSON (NaN, Infinity or nesting too deep)"
    surrogate = _lone_surrogate(value)
    if surrogate is not None:
        return (
            f"the request body is JSON, but a string in it holds the lone surrogate "
            f"escape \\u{surrogate:04x}, which stands for no Unicode character"
        )
    return "the request body is not valid JSON"


def _no_constant(name: str) -> object:
    raise ValueError(name)  # NaN, Infinity, -Infinity: Python's json takes them, JSON does not


def _lone_surrogate(value: object) -> int | None:
    """The code point of a surrogate in any string (member names included) of the
    decoded JSON ``value``, or None. Walks with a stack of its own, never by recursion:
    json.loads accepts nesting deeper than a recursive walk could follow before
    Python's recursion limit, and a RecursionError here would be a 500."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            found = next((ord(c) for c in item if "\ud800" <= c <= "\udfff"), None)
            if found is not None:
                return found
        elif isinstance(item, dict):
            pending.extend(reversed([*item.keys(), *item.values()]))
        elif isinstance(item, list):
            pending.extend(reversed(item))
    return None


def _refuse_repeated_members(body: bytes) -> None:
    """Raise InvalidRequest naming a member that an object of the JSON ``body`` names
    twice (D4: RFC 8259 leaves the meaning to each parser, so a proxy could read
    another animal than ours). A body that is not JSON is left to the decoder."""
    repeated: list[str] = []

    def members(pairs: list[tuple[str, object]]) -> dict[str, object]:
        found = dict(pairs)
        if len(found) < len(pairs):
            names = [name for name, _ in pairs]
            repeated.extend(name for name in found if names.count(name) > 1)
        return found

    try:
        json.loads(body, object_pairs_hook=members)
    except (ValueError, RecursionError):
        return
    if repeated:
        raise errors.InvalidRequest(f"{repeated[0]}: this member is named more than once")
