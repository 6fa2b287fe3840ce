"""Request parsing: every value a client sends, from text to a typed value or a 400
that names what was wrong (D8, D10).

One function per input: the query parameters of listPets, the ``petId`` path
segment, the ``Idempotency-Key`` and ``Content-Type`` headers (the NewPet body has
its own module, :mod:`.newpet`). Each takes the raw text (None when absent) and
raises ``errors.*``.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import parse_qsl

from petstore.schemas import INT64_MAX, PetStatus
from petstore.server import errors
from petstore.server.rules.pagination import LIMIT_DEFAULT, LIMIT_MAX, LIMIT_MIN

#: The most digits a ``limit`` in range has, leading zeros aside.
_LIMIT_DIGITS = len(str(LIMIT_MAX))
#: D16: the longest Idempotency-Key header accepted.
IDEMPOTENCY_KEY_MAX = 255
# RFC 8941: a token, or the inside of a string (printable ASCII, \" and \\ escaped).
_TOKEN = re.compile(r"[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*")
_STRING = re.compile(r'"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])+)"')


def query(query_string: bytes) -> dict[str, str]:
    """The parameters of a raw query string; the last value of a repeated name wins
    (D8; Starlette's ``query_params`` semantics), blank values kept."""
    return dict(parse_qsl(query_string.decode("latin-1"), keep_blank_values=True))


#: The longest query string :func:`list_query` remembers: every listPets query a
#: client makes (a status, a limit and a cursor) is under it, so the cache holds at
#: most 256 of these, whatever is sent.
REMEMBERED_QUERY_BYTES = 256


def list_query(query_string: bytes) -> tuple[PetStatus | None, int, str | None]:
    """listPets' ``status``, ``limit`` and ``cursor`` from its raw query string (D8):
    :func:`parse_status` and :func:`parse_limit` of :func:`query`, the cursor as sent
    (None when absent). Raises InvalidRequest as they do.

    The 256 query strings of at most :data:`REMEMBERED_QUERY_BYTES` parsed last are
    remembered (``functools.lru_cache``; an error is never remembered): a client
    polling a page sends the same one again and again."""
    if len(query_string) > REMEMBERED_QUERY_BYTES:
        return _list_query(query_string)
    return _remembered_list_query(query_string)


def _list_query(query_string: bytes) -> tuple[PetStatus | None, int, str | None]:
    params = query(query_string)
    return (
        parse_status(params.get("status")),
        parse_limit(params.get("limit")),
        params.get("cursor"),
    )


_remembered_list_query = functools.lru_cache(maxsize=256)(_list_query)


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
    """``limit`` from the query: a decimal integer from ``LIMIT_MIN`` to ``LIMIT_MAX``
    (1-100), ``LIMIT_DEFAULT`` (20) when absent: the page size rule of
    :mod:`petstore.server.rules.pagination` (D8). Raises InvalidRequest naming
    ``limit`` otherwise."""
    if raw is None:
        return LIMIT_DEFAULT
    value = None if raw.startswith("-") else _decimal(raw, max_digits=_LIMIT_DIGITS)
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
        raise errors.InvalidRequest(f"status: must be one of {allowed}, got {raw[:40]!r}") from None


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
    if raw == "application/json":
        return  # what nearly every client sends: nothing to take apart
    media_type, *params = (raw or "").lower().split(";")
    charsets = [p.split("=", 1)[1].strip(' "') for p in params if p.strip().startswith("charset=")]
    if media_type.strip() != "application/json" or any(c != "utf-8" for c in charsets):
        raise errors.UnsupportedMediaType("the request body must be application/json (UTF-8)")
