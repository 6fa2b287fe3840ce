"""Request parsing: every value a client sends, from text to a typed value or a 400
that names what was wrong (D8, D10).

One function per input: the query parameters of listPets, the ``petId`` path
segment, the ``Idempotency-Key`` and ``Content-Type`` headers, and the NewPet body.
Each takes the raw text (None when absent) and raises ``errors.*``.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from urllib.parse import parse_qsl

import msgspec

from petstore.schemas import INT64_MAX, NewPet, PetStatus
from petstore.server import errors

LIMIT_MIN, LIMIT_MAX, LIMIT_DEFAULT = 1, 100, 20
#: D16: the longest Idempotency-Key header accepted.
IDEMPOTENCY_KEY_MAX = 255
# RFC 8941: a token, or the inside of a string (printable ASCII, \" and \\ escaped).
_TOKEN = re.compile(r"[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*")
_STRING = re.compile(r'"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])+)"')
_new_pet_decoder = msgspec.json.Decoder(NewPet)
_members_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_FIELD_RE = re.compile(r"`\$\.(\w+)`|field `(\w+)`")
#: The member names of a NewPet as they can be written without escapes.
_MEMBERS = (b'"name"', b'"categoryId"', b'"status"')


def query(query_string: bytes) -> dict[str, str]:
    """The parameters of a raw query string; the last value of a repeated name wins
    (Starlette's ``query_params`` semantics), blank values kept."""
    return dict(parse_qsl(query_string.decode("latin-1"), keep_blank_values=True))


def _decimal(raw: str, *, max_digits: int) -> int | None:
    """The value of an optionally signed ASCII decimal numeral of at most
    ``max_digits`` significant digits, else None. Leading zeros are allowed; the
    length is checked first because ``int()`` of thousands of digits is slow (and
    refused past 4,300)."""
    sign, digits = (-1, raw[1:]) if raw.startswith("-") else (1, raw)
    significant = digits.lstrip("0") or "0"
    if not (digits.isascii() and digits.isdigit()) or len(significant) > max_digits:
        return None
    return sign * int(significant)


def parse_limit(raw: str | None) -> int:
    """``limit`` from the query: a decimal integer 1-100, 20 when absent (D8)."""
    if raw is None:
        return LIMIT_DEFAULT
    value = None if raw.startswith("-") else _decimal(raw, max_digits=3)
    if value is None or not LIMIT_MIN <= value <= LIMIT_MAX:
        raise errors.InvalidRequest(
            f"limit: must be an integer from {LIMIT_MIN} to {LIMIT_MAX}, got {raw[:40]!r}"
        )
    return value


def parse_status(raw: str | None) -> PetStatus | None:
    """``status`` from the query: a PetStatus, or None when absent (D8)."""
    if raw is None:
        return None
    try:
        return PetStatus(raw)
    except ValueError:
        allowed = ", ".join(s.value for s in PetStatus)
        raise errors.InvalidRequest(f"status: must be one of {allowed}") from None


def parse_pet_id(raw: str) -> int:
    """``petId`` from the path: any int64 (D11; 0 and negatives are then 404)."""
    if len(raw) <= 18 and raw.isdigit() and raw.isascii():
        return int(raw)  # the usual id: plain digits, well inside int64
    value = _decimal(raw, max_digits=19)
    if value is None or not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise errors.InvalidRequest(f"petId: must be a 64-bit integer, got {raw[:40]!r}")
    return value


def parse_idempotency_key(raw: str | None) -> str | None:
    """The key of an ``Idempotency-Key`` header (D16): a non-empty structured-field
    string (RFC 8941) or a bare token, the header at most 255 characters; None when
    the header is absent."""
    if raw is None:
        return None
    value = raw.strip(" ")
    if len(value) > IDEMPOTENCY_KEY_MAX:
        raise errors.InvalidRequest(f"Idempotency-Key: at most {IDEMPOTENCY_KEY_MAX} characters")
    string = _STRING.fullmatch(value)
    if string is not None:
        return re.sub(r"\\(.)", r"\1", string.group(1))
    if _TOKEN.fullmatch(value):
        return value
    raise errors.InvalidRequest(
        'Idempotency-Key: must be a quoted string ("...") or a token of printable ASCII'
    )


def check_json_content_type(raw: str | None) -> None:
    """Accept a ``Content-Type`` of ``application/json``, with no charset or
    ``charset=utf-8``; raise UnsupportedMediaType (415) for anything else."""
    media_type, *params = (raw or "").lower().split(";")
    charsets = [p.split("=", 1)[1].strip(' "') for p in params if p.strip().startswith("charset=")]
    if media_type.strip() != "application/json" or any(c != "utf-8" for c in charsets):
        raise errors.UnsupportedMediaType("the request body must be application/json (UTF-8)")


def parse_new_pet(body: bytes) -> NewPet:
    """A NewPet from JSON bytes (D1-D4). Raises MalformedJson for a body that is
    empty or not UTF-8 JSON, InvalidRequest naming the offending field otherwise,
    a member named twice (D4) included."""
    if not body.strip():
        raise errors.MalformedJson("the request body is empty; send a NewPet JSON object")
    if b"\\" in body or any(body.count(member) > 1 for member in _MEMBERS):
        _refuse_repeated_members(body)  # rare: any body without them has no repeats
    try:
        return _new_pet_decoder.decode(body)
    except msgspec.ValidationError as exc:
        # Decoding validates as it parses, so a type error can be met before a syntax
        # error further on; a body that is not JSON at all is malformed_json (D10).
        # Syntax only: a number is JSON whatever its size (D3 judges 1e400 out of range).
        try:
            body.decode("utf-8")
            msgspec.json.decode(body, type=msgspec.Raw)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            raise errors.MalformedJson("the request body is not valid UTF-8 JSON") from None
        if "got `float` - at `$.categoryId`" in str(exc):
            members = _members_decoder.decode(body)  # the numeral as written
            whole = _whole_number(bytes(members["categoryId"]))
            if whole is not None:  # D3: 1.0 and 1e3 are integers in JSON Schema
                members["categoryId"] = msgspec.Raw(str(whole).encode())
                return parse_new_pet(msgspec.json.encode(members))
        raise errors.InvalidRequest(_for_people(str(exc))) from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise errors.MalformedJson("the request body is not valid UTF-8 JSON") from None


def _for_people(problem: str) -> str:
    """The decoder's ``problem`` with a NewPet as an English message that starts with
    the member it is about (D10): ``categoryId: must be a whole number from 1 to
    9223372036854775807``, never the library's backticked types."""
    match = _FIELD_RE.search(problem)
    member = next((g for g in match.groups() if g), "body") if match else "body"
    if "missing required field" in problem:
        return f"{member}: is required"
    if "unknown field" in problem:
        return f"{member}: is not a member of a NewPet (name, categoryId, status)"
    if member == "categoryId":
        return f"categoryId: must be a whole number from 1 to {INT64_MAX}"
    if member == "status":
        return f"status: must be one of {', '.join(s.value for s in PetStatus)}"
    if member == "name":
        if problem.startswith("must"):  # NewPet's own D2 checks, already in English
            return f"name: {problem.split(' - at ', 1)[0]}"
        return "name: must be a string of 1 to 100 characters"
    return "body: must be a JSON object, a NewPet: name, categoryId and optionally status"


def _whole_number(numeral: bytes) -> int | None:
    """The exact value of a JSON number numeral when it is a whole number (``1.0``,
    ``1e3``, ``100.00``), judged in decimal, never through a float (D3); None for
    any other numeral. A value past 20 digits is returned as ``2**64``: out of
    range, without building a huge integer from ``1e999999``."""
    try:
        value = Decimal(numeral.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError):
        return None
    if not value.is_finite() or value != value.to_integral_value():
        return None
    return int(value) if value.adjusted() < 20 else 2**64


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
