"""The createPet body: JSON bytes to a NewPet, or a 400 that says what is wrong
(D1-D4, D10).

One validator: the NewPet struct (``petstore.schemas``). msgspec decodes a valid body
straight into it (almost every request). A body it refuses is taken apart here only
to say which member fails and why, in messages of ours: each member is decoded with
its own field's type, and its problem told from that type's bounds
(``msgspec.inspect``); the checks a type cannot say are the struct's own
(``schemas.NEW_PET_CHECKS``). No library's error text is read, so an upgrade of the
decoder cannot change a message, and a member added to NewPet is judged and
explained with no edit here. An integer member also takes what the strict decoder
refuses but D3 allows: a whole number written ``1.0`` or ``1e3``, judged exactly.
"""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec

from petstore import text as characters
from petstore.schemas import NEW_PET_CHECKS, NEW_PET_MEMBERS, NEW_PET_REQUIRED, NewPet
from petstore.server import errors

_new_pet_decoder = msgspec.json.Decoder(NewPet)
_members_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
#: The member names of a NewPet as they can be written without escapes.
_MEMBERS = tuple(f'"{member}"'.encode() for member in NEW_PET_MEMBERS)
_OPTIONAL = [member for member in NEW_PET_MEMBERS if member not in NEW_PET_REQUIRED]
_NOT_AN_OBJECT = (
    f"body: must be a JSON object, a NewPet: {', '.join(NEW_PET_REQUIRED)}"
    f" and optionally {', '.join(_OPTIONAL)}"
)
_NOT_A_MEMBER = f"is not a member of a NewPet ({', '.join(NEW_PET_MEMBERS)})"
#: The most characters of a member name a client chose that a message echoes.
SHOWN_NAME_CHARS = 40


def _shown(name: str) -> str:
    """A member name the client chose, as a message shows it: cut to
    :data:`SHOWN_NAME_CHARS` characters and escaped (:func:`petstore.text.printable`),
    so that it can neither fill the message nor drive the terminal that prints it."""
    return characters.printable(name, limit=SHOWN_NAME_CHARS)


def _expected(kind: msgspec.inspect.Type) -> str:
    """What a value of ``kind`` must be, in English, from its bounds."""
    if isinstance(kind, msgspec.inspect.StrType):
        if kind.min_length is not None and kind.max_length is not None:
            return f"a string of {kind.min_length} to {kind.max_length} characters"
        return "a string"
    if isinstance(kind, msgspec.inspect.IntType):
        low = kind.ge if kind.ge is not None else None if kind.gt is None else kind.gt + 1
        high = kind.le if kind.le is not None else None if kind.lt is None else kind.lt - 1
        if low is not None and high is not None:
            return f"a whole number from {low} to {high}"
        return "a whole number"
    if isinstance(kind, msgspec.inspect.EnumType):
        return f"one of {', '.join(str(member.value) for member in kind.cls)}"
    if isinstance(kind, msgspec.inspect.BoolType):
        return "true or false"
    if isinstance(kind, msgspec.inspect.FloatType):
        return "a number"
    if isinstance(kind, msgspec.inspect.NoneType):
        return "null"
    if isinstance(kind, msgspec.inspect.UnionType):
        return " or ".join(_expected(each) for each in kind.types)
    return "a JSON value of the member's type"


class _Member:
    """One NewPet member: its field's type, decoder and message, and the struct's name
    for it (its attribute)."""

    def __init__(self, field: msgspec.structs.FieldInfo) -> None:
        self.attribute = field.name
        self.decoder = msgspec.json.Decoder(field.type)
        self.kind = msgspec.inspect.type_info(field.type)
        self.refusal = f"{field.encode_name}: must be {_expected(self.kind)}"

    def value(self, raw: bytes) -> Any:
        """The member's value of the JSON ``raw``; raises InvalidRequest otherwise."""
        try:
            return self.decoder.decode(raw)
        except msgspec.ValidationError:
            pass
        whole = whole_number(raw) if isinstance(self.kind, msgspec.inspect.IntType) else None
        if whole is not None:  # D3: 1.0 and 1e3 are integers, judged exactly
            try:
                return self.decoder.decode(str(whole).encode())
            except msgspec.ValidationError:
                pass
        raise errors.InvalidRequest(self.refusal)


_BY_MEMBER = {field.encode_name: _Member(field) for field in msgspec.structs.fields(NewPet)}


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
    """The NewPet of a JSON object's ``members`` (raw JSON values), judged by the
    NewPet struct member by member, in the members' order; raises InvalidRequest with
    the first problem, naming its member. Missing required members are named in the
    struct's order."""
    values: dict[str, Any] = {}
    for member, raw in members.items():
        known = _BY_MEMBER.get(member)
        if known is None:
            raise errors.InvalidRequest(f"{_shown(member)}: {_NOT_A_MEMBER}")
        value = known.value(bytes(raw))
        check = NEW_PET_CHECKS.get(member)
        problem = None if check is None else check(value)
        if problem is not None:
            raise errors.InvalidRequest(f"{member}: {problem}")
        values[known.attribute] = value
    for member in NEW_PET_REQUIRED:
        if _BY_MEMBER[member].attribute not in values:
            raise errors.InvalidRequest(f"{member}: is required")
    return NewPet(**values)


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
    """The code point of the first surrogate in any string (member names included)
    of the decoded JSON ``value``, or None. The value is encoded again by the json
    module's C encoder, whose UTF-8 encoding stops at the first lone surrogate: a
    Python walk of 20,000 small objects took 15-35 ms of the event loop, this takes
    about 2. A value nested too deep to encode is left unnamed (None)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return ord(exc.object[exc.start])
    except RecursionError:
        pass
    return None


def _refuse_repeated_members(body: bytes) -> None:
    """Raise InvalidRequest naming a member that an object of the JSON ``body`` names
    twice (D4: RFC 8259 leaves the meaning to each parser, so a proxy could read
    another animal than ours). A body that is not JSON is left to the decoder."""
    repeated: list[str] = []

    def members(pairs: list[tuple[str, object]]) -> dict[str, object]:
        found = dict(pairs)
        if len(found) < len(pairs):
            counts = Counter(name for name, _ in pairs)
            repeated.extend(name for name in found if counts[name] > 1)
        return found

    try:
        json.loads(body, object_pairs_hook=members)
    except (ValueError, RecursionError):
        return
    if repeated:
        raise errors.InvalidRequest(f"{_shown(repeated[0])}: this member is named more than once")
