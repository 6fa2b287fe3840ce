"""Hypothesis properties of the hostile-input paths (issue 4, item 4): NewPet
validation over HTTP (D1-D4, D10), the query and path parsers (D8, D11), the
Idempotency-Key parser (D16), the key format (D13), signed cursors (D9) and bearer
parsing (D12).

Every oracle here is written from the decisions, not from the code it checks.
"""

from __future__ import annotations

import base64
import json
import re
import string
import sys
import unicodedata
from collections.abc import Callable
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

import hypothesis
import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from petstore.schemas import PetStatus
from petstore.server import errors
from petstore.server.config import Settings
from petstore.server.http import parsing
from petstore.server.rules import keys
from petstore.server.rules.pagination import CursorSigner
from tests.conftest import run_sql

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
STATUSES = ("available", "pending", "sold")


def properties(max_examples: int) -> hypothesis.settings:
    """Hypothesis settings for this module: bounded, no deadline (the database varies)."""
    return hypothesis.settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


@pytest.fixture
def settings(database_url: str) -> Settings:
    """The real settings, with a rate limit and a failed-authentication limit no
    property run can reach (both are tested elsewhere; here a 429 would hide the
    answer under test)."""
    return Settings(
        database_url=database_url,
        rate_limit="1000000/minute",
        auth_failure_limit="1000000/minute",
    )


# --- oracles, from the decisions ------------------------------------------------------

#: D2 white space: what str.isspace() calls white space, plus U+FEFF.
WHITE_SPACE = "".join(c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()) + "\ufeff"
CONTROL = "".join(c for c in map(chr, range(0x100)) if unicodedata.category(c) == "Cc")
#: D2: a name made only of these (white space, Unicode Z*, Cc, Cf, M*) is not a name.
INVISIBLE_CATEGORIES = {"Zs", "Zl", "Zp", "Cc", "Cf", "Mn", "Mc", "Me"}
#: Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt), as ranges.
DEFAULT_IGNORABLE = [
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
    (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
]  # fmt: skip
#: D2: the default-ignorable characters a name may hold: joiners, variation
#: selectors (Mongolian ones included) and the tags of emoji flags.
KEPT_IGNORABLE = [
    (0x200C, 0x200D), (0xFE00, 0xFE0F), (0x180B, 0x180D), (0x180F, 0x180F),
    (0xE0100, 0xE01EF), (0xE0020, 0xE007F),
]  # fmt: skip
#: D2: Unicode's Bidi_Control.
BIDI_CONTROL = [(0x061C, 0x061C), (0x200E, 0x200F), (0x202A, 0x202E), (0x2066, 0x2069)]
#: D2: the line and paragraph separators and the blank symbols.
BLANK = [(0x2028, 0x2029), (0x2800, 0x2800), (0x1D159, 0x1D159)]


def within(character: str, ranges: list[tuple[int, int]]) -> bool:
    return any(low <= ord(character) <= high for low, high in ranges)


def is_invisible(character: str) -> bool:
    return character in WHITE_SPACE or unicodedata.category(character) in INVISIBLE_CATEGORIES


def is_refused_anywhere(character: str) -> bool:
    """D2: a control, a bidi control, a blank or a default-ignorable character that
    is not a joiner or selector."""
    if unicodedata.category(character) == "Cc" or within(character, BIDI_CONTROL + BLANK):
        return True
    return within(character, DEFAULT_IGNORABLE) and not within(character, KEPT_IGNORABLE)


def is_category_id(value: object) -> bool:
    """D3: a JSON number whose exact value is a whole number from 1 to 2**63 - 1."""
    if type(value) is float:
        value = Decimal(repr(value))  # the numeral json.dumps writes, exactly
    if type(value) is Decimal:
        if value != value.to_integral_value():
            return False
        value = int(value) if value.adjusted() < 20 else 2**64
    return type(value) is int and 1 <= value <= INT64_MAX


def is_valid_new_pet(value: object) -> bool:
    """D1-D4: an object with name and categoryId, optionally status, nothing else."""
    if type(value) is not dict or not {"name", "categoryId"} <= value.keys():
        return False
    if not value.keys() <= {"name", "categoryId", "status"}:
        return False
    name, category_id = value["name"], value["categoryId"]
    if type(name) is not str or not 1 <= len(name) <= 100:
        return False
    if all(is_invisible(c) for c in name):
        return False
    if any(is_refused_anywhere(c) for c in name):
        return False
    if not is_category_id(category_id):
        return False
    return "status" not in value or value["status"] in STATUSES


class NotJson(Exception):
    """The oracle's verdict that bytes are not RFC 8259 JSON in UTF-8."""


class Unclear(Exception):
    """Syntactically JSON, but past what implementations must accept (RFC 8259 sec. 6,
    8.2): numbers beyond a double, lone surrogate escapes, huge integers."""


def _reject_constant(name: str) -> object:
    raise NotJson(name)  # NaN and Infinity are Python's, not JSON


class RepeatedMember(Exception):
    """The oracle's verdict that a JSON object names a member twice (D4: refused)."""


def _has_surrogate(value: object) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    return False


def parse_json(body: bytes) -> object:
    """The JSON value of ``body``; raises NotJson or Unclear."""
    repeated = []

    def members(pairs: list[tuple[str, object]]) -> dict[str, object]:
        names = [name for name, _ in pairs]
        repeated.extend(name for name in names if names.count(name) > 1)
        return dict(pairs)

    try:
        text = body.decode("utf-8")  # strict: no BOM sniffing, no UTF-16
        # Numbers with a fraction or exponent exactly, as D3 judges them.
        value = json.loads(
            text, parse_constant=_reject_constant, parse_float=Decimal, object_pairs_hook=members
        )
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotJson(str(exc)) from None
    except (ValueError, RecursionError) as exc:  # int digit limit, deep nesting
        raise Unclear(str(exc)) from None
    if _has_surrogate(value):
        raise Unclear("lone surrogate")
    if repeated:
        raise RepeatedMember(repeated[0])
    return value


# --- strategies -----------------------------------------------------------------------

#: Any code point a JSON text or an HTTP client can carry (no lone surrogates).
characters = st.characters(exclude_categories=["Cs"])
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
names = st.one_of(
    st.text(max_size=105),
    st.text(min_size=95, max_size=105),
    st.text(alphabet=WHITE_SPACE, min_size=1, max_size=5),
    st.text(alphabet=st.sampled_from(WHITE_SPACE) | st.sampled_from(CONTROL), max_size=4).flatmap(
        lambda junk: st.text(min_size=1, max_size=4).map(lambda t: junk + t)
    ),
    st.sampled_from(["Rex", " Rex ", "\ufeff", "\u00a0", "\u200b", "😀" * 100, "😀" * 101]),
    st.sampled_from(
        ["\u3164", "\u2800", "\ufe0f", "\u0301", "a\u202eb", "\u2764\ufe0f", "e\u0301"]
    ),
)
category_ids = st.one_of(
    st.integers(min_value=-3, max_value=3),
    st.integers(min_value=INT64_MAX - 2, max_value=INT64_MAX + 2),
    st.integers(min_value=INT64_MIN, max_value=2**64),
    st.sampled_from([True, False, None, 1.0, 1.5, "1", [1], {"id": 1}]),
)
pet_like = st.fixed_dictionaries(
    {"name": names, "categoryId": category_ids},
    optional={
        "status": st.sampled_from([*STATUSES, "Available", "lost", "", None, 1]),
        "id": st.integers(min_value=1, max_value=10),
    },
)
valid_pets = st.fixed_dictionaries(
    {
        "name": st.text(min_size=1, max_size=100).filter(
            lambda n: is_valid_new_pet({"name": n, "categoryId": 1})
        ),
        "categoryId": st.integers(min_value=1, max_value=INT64_MAX),
    },
    optional={"status": st.sampled_from(STATUSES)},
)
json_bodies = st.one_of(json_values, pet_like, valid_pets)


@st.composite
def mutated(draw: st.DrawFn, source: st.SearchStrategy[bytes]) -> bytes:
    """``source`` bytes with a few bytes replaced, inserted or deleted."""
    data = bytearray(draw(source))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        at = draw(st.integers(min_value=0, max_value=len(data)))
        edit = draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = draw(st.integers(min_value=0, max_value=255) | st.sampled_from(b'"\\{}[],:0 '))
        if edit == "insert" or not data:
            data.insert(at, byte)
        elif edit == "replace":
            data[min(at, len(data) - 1)] = byte
        else:
            del data[min(at, len(data) - 1)]
    return bytes(data)


valid_pet_bytes = st.builds(json.dumps, valid_pets, ensure_ascii=st.booleans()).map(str.encode)
body_bytes = st.one_of(st.binary(max_size=200), mutated(valid_pet_bytes))


# --- NewPet validation over HTTP ------------------------------------------------------


def count_pets(database_url: str) -> int:
    return int(run_sql(database_url, "SELECT count(*) AS n FROM pets")[0]["n"])


def post_pet(
    client: TestClient, auth: dict[str, str], body: bytes, database_url: str, expected_pets: int
) -> tuple[int, dict[str, Any]]:
    """POST ``body``; checks the invariants every answer has, returns status and body."""
    response = client.post(
        "/v1/pets", content=body, headers={**auth, "Content-Type": "application/json"}
    )
    assert response.status_code < 500, (body, response.text)
    assert response.status_code in (201, 400), (body, response.text)
    stored = count_pets(database_url)
    hypothesis.event(f"answered {response.status_code}")
    if response.status_code == 400:
        assert stored == expected_pets, "a refused body stores nothing"
        assert response.json()["code"] in ("invalid_request", "malformed_json")
    else:
        assert stored == expected_pets + 1
    return response.status_code, response.json()


def check_created(value: dict[str, Any], pet: dict[str, Any]) -> None:
    """D1, D2, D6: the Pet echoes what was sent, exactly."""
    assert pet["name"] == value["name"]
    assert pet["categoryId"] == value["categoryId"]
    assert pet["status"] == value.get("status", "available")
    assert type(pet["id"]) is int
    assert pet["id"] >= 1


def test_any_json_value_is_201_exactly_when_it_is_a_valid_new_pet(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    stored = count_pets(database_url)

    @properties(max_examples=300)
    @given(value=json_bodies, ascii_only=st.booleans())
    def post_any_value(value: object, ascii_only: bool) -> None:
        nonlocal stored
        body = json.dumps(value, ensure_ascii=ascii_only).encode()
        status, answer = post_pet(client, auth, body, database_url, stored)
        if is_valid_new_pet(value):
            assert status == 201, (value, answer)
            assert isinstance(value, dict)
            check_created(value, answer)
            stored += 1
        else:
            assert status == 400, value
            # The body is JSON, so the refusal is about its content (D10).
            assert answer["code"] == "invalid_request", (value, answer)

    post_any_value()


def post_bytes_and_check(
    client: TestClient, auth: dict[str, str], database_url: str, body: bytes, stored: int
) -> int:
    """POST ``body`` and hold the answer to the oracle; returns the new number of pets."""
    try:
        value = parse_json(body)
    except NotJson:
        expected_codes: tuple[str, ...] = ("malformed_json",)
    except Unclear:
        expected_codes = ("malformed_json", "invalid_request")
    except RepeatedMember:
        expected_codes = ("invalid_request",)
    else:
        if is_valid_new_pet(value):
            status, answer = post_pet(client, auth, body, database_url, stored)
            assert status == 201, (body, answer)
            assert isinstance(value, dict)
            check_created(value, answer)
            return stored + 1
        expected_codes = ("invalid_request",)
    status, answer = post_pet(client, auth, body, database_url, stored)
    assert status == 400, body
    assert answer["code"] in expected_codes, (body, answer)
    return stored


utf8_bodies = st.one_of(
    st.text(max_size=100).map(str.encode),
    valid_pet_bytes,
    mutated(valid_pet_bytes).map(lambda b: b.decode("utf-8", "replace").encode()),
)


def test_any_utf8_body_is_201_exactly_when_it_is_a_valid_new_pet(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    stored = count_pets(database_url)

    @properties(max_examples=250)
    @given(body=utf8_bodies)
    @example(body=b"")
    @example(body=b" \r\n\t")
    @example(body=b'\xef\xbb\xbf{"name":"Rex","categoryId":1}')
    @example(body=b'{"name":"\\ud800","categoryId":1}')
    @example(body=b'{"name":"\\ud83d\\ude00","categoryId":1}')
    @example(body=b'{"name":"Rex","categoryId":1e400}')
    @example(body=b'{"name":"Rex","categoryId":NaN}')
    @example(body=b'{"name":"Rex","categoryId":1}garbage')
    @example(body=b'{"name":"Rex\\u0000","categoryId":1}')
    @example(body=b'{"name":"Rex","categoryId":1,"name":"Tom"}')
    def post_any_text(body: bytes) -> None:
        nonlocal stored
        stored = post_bytes_and_check(client, auth, database_url, body, stored)

    post_any_text()


#: A body refused for its content (unknown field) before the decoder meets bad UTF-8.
BAD_UTF8_AFTER_INVALID_FIELD = b'{"":"","\x80"'


def test_any_bytes_are_201_exactly_when_they_are_a_valid_new_pet(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    stored = count_pets(database_url)

    @properties(max_examples=200)
    @given(body=body_bytes)
    @example(body=BAD_UTF8_AFTER_INVALID_FIELD)
    @example(body='{"name":"Rex","categoryId":1}'.encode("utf-16"))
    @example(body=b'{"name":"R\xffx","categoryId":1}')
    def post_any_bytes(body: bytes) -> None:
        nonlocal stored
        stored = post_bytes_and_check(client, auth, database_url, body, stored)

    post_any_bytes()


@pytest.mark.parametrize(
    "body",
    [
        BAD_UTF8_AFTER_INVALID_FIELD,
        b'{"name":1,"categoryId":"\xff"}',
        b'{"id":1,"name":"R\xe9x","categoryId":1}',
        b'["\xc3"]',
    ],
)
def test_invalid_utf8_after_a_validation_error_is_malformed_json(
    client: TestClient, auth: dict[str, str], database_url: str, body: bytes
) -> None:
    response = client.post(
        "/v1/pets", content=body, headers={**auth, "Content-Type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "malformed_json"
    assert count_pets(database_url) == 0


def test_deeply_nested_json_is_400_not_500(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    @properties(max_examples=10)
    @given(
        depth=st.integers(min_value=1000, max_value=10_000),
        opener=st.sampled_from(["[", '{"a":']),
        wrap=st.booleans(),
        closed=st.booleans(),
    )
    def post_deep(depth: int, opener: str, wrap: bool, closed: bool) -> None:
        closer = "]" if opener == "[" else "}"
        nested = opener * depth + ("1" + closer * depth if closed else "")
        body = f'{{"name":{nested},"categoryId":1}}' if wrap else nested
        response = client.post(
            "/v1/pets", content=body.encode(), headers={**auth, "Content-Type": "application/json"}
        )
        assert response.status_code == 400, (depth, opener, wrap, closed, response.text)
        assert response.json()["code"] in ("invalid_request", "malformed_json")

    post_deep()
    assert count_pets(database_url) == 0


# --- query and path parameters (D8, D11) ----------------------------------------------

hostile_text = st.one_of(
    st.text(),
    st.text(alphabet="0123456789+-_ .e\u0660\u00b2\uff11", max_size=25),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(
        ["", " 1", "1 ", "+1", "01", "007", "1_0", "1.0", "\u0663", "\u00b2", "\uff11"]
    ),
)


def decimal(raw: str, *, signed: bool) -> int | None:
    """The integer a plain ASCII decimal numeral stands for, or None."""
    pattern = r"-?[0-9]+" if signed else r"[0-9]+"
    if re.fullmatch(pattern, raw, flags=re.ASCII) is None:
        return None
    return int(raw)


def outcome(parse: Callable[[str], object], raw: str) -> tuple[str, object]:
    try:
        return "ok", parse(raw)
    except errors.InvalidRequest as exc:
        return "invalid", exc.message


@properties(max_examples=400)
@given(raw=hostile_text)
def test_parse_limit_accepts_exactly_the_integers_1_to_100(raw: str) -> None:
    number = decimal(raw, signed=False)
    expected = number if number is not None and 1 <= number <= 100 else None
    result, value = outcome(parsing.parse_limit, raw)
    if expected is None:
        assert result == "invalid"
        assert isinstance(value, str)
        assert value.startswith("limit")
    else:
        assert (result, value) == ("ok", expected)


def test_parse_limit_defaults_to_20() -> None:
    assert parsing.parse_limit(None) == 20


@properties(max_examples=200)
@given(
    raw=st.one_of(hostile_text, st.sampled_from(STATUSES), st.sampled_from(STATUSES).map(str.upper))
)
def test_parse_status_accepts_exactly_a_pet_status(raw: str) -> None:
    result, value = outcome(parsing.parse_status, raw)
    if raw in STATUSES:
        assert (result, value) == ("ok", PetStatus(raw))
    else:
        assert result == "invalid"
        assert isinstance(value, str)
        assert value.startswith("status")


@properties(max_examples=400)
@given(
    raw=st.one_of(
        hostile_text,
        st.integers(min_value=INT64_MIN - 3, max_value=INT64_MIN + 3).map(str),
        st.integers(min_value=INT64_MAX - 3, max_value=INT64_MAX + 3).map(str),
    )
)
def test_parse_pet_id_accepts_exactly_an_int64(raw: str) -> None:
    number = decimal(raw, signed=True)
    result, value = outcome(parsing.parse_pet_id, raw)
    if number is not None and INT64_MIN <= number <= INT64_MAX:
        assert (result, value) == ("ok", number)
    else:
        assert result == "invalid"
        assert isinstance(value, str)
        assert value.startswith("petId")


# A leading non-zero digit: "000…05" is 5, a valid limit, however long.
long_numerals = st.integers(min_value=4301, max_value=20_000).flatmap(
    lambda n: st.builds(
        str.__add__,
        st.sampled_from("123456789"),
        st.text(alphabet="0123456789", min_size=n - 1, max_size=n - 1),
    )
)


@properties(max_examples=5)
@given(raw=long_numerals, parse=st.sampled_from([parsing.parse_limit, parsing.parse_pet_id]))
def test_a_numeral_of_thousands_of_digits_is_invalid_request(
    raw: str, parse: Callable[[str], object]
) -> None:
    assert outcome(parse, raw)[0] == "invalid"


@pytest.mark.parametrize("path", ["/v1/pets?limit=", "/v1/pets/"])
def test_a_parameter_of_thousands_of_digits_is_400(
    client: TestClient, auth: dict[str, str], path: str
) -> None:
    response = client.get(path + "1" * 5000, headers=auth)
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "invalid_request"


# --- Idempotency-Key (D16) ------------------------------------------------------------

sf_string_content = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E))
tokens = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from(string.ascii_letters + "*"),
    st.text(alphabet=string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~:/", max_size=60),
)


def sf_string(content: str) -> str:
    """RFC 8941 sec. 4.1.6: serialize a String."""
    return '"' + content.replace("\\", "\\\\").replace('"', '\\"') + '"'


@properties(max_examples=400)
@given(raw=st.one_of(st.text(), sf_string_content.map(sf_string), tokens))
def test_parse_key_raises_nothing_but_invalid_request(raw: str) -> None:
    message: str | None
    try:
        key = parsing.parse_idempotency_key(raw)
    except errors.InvalidRequest as exc:
        message = exc.message
    else:
        message = None
    if message is not None:
        assert message.startswith("Idempotency-Key")
        return
    assert isinstance(key, str)
    assert key
    assert len(raw.strip(" ")) <= parsing.IDEMPOTENCY_KEY_MAX


@properties(max_examples=300)
@given(content=sf_string_content.filter(bool), spaces=st.sampled_from(["", " ", "  "]))
def test_parse_key_round_trips_structured_field_strings(content: str, spaces: str) -> None:
    header = spaces + sf_string(content) + spaces
    if len(sf_string(content)) > parsing.IDEMPOTENCY_KEY_MAX:
        with pytest.raises(errors.InvalidRequest):
            parsing.parse_idempotency_key(header)
    else:
        assert parsing.parse_idempotency_key(header) == content


@properties(max_examples=200)
@given(token=tokens)
def test_parse_key_keeps_a_bare_token_as_it_is(token: str) -> None:
    assert parsing.parse_idempotency_key(token) == token


def test_parse_key_of_no_header_is_none() -> None:
    assert parsing.parse_idempotency_key(None) is None


# --- API key format (D13) -------------------------------------------------------------

BASE64URL = string.ascii_letters + string.digits + "-_"
well_formed_keys = st.text(alphabet=BASE64URL, min_size=43, max_size=43).map(
    lambda tail: "petstore_" + tail
)


@st.composite
def near_keys(draw: st.DrawFn) -> str:
    """A well-formed key with one character changed, inserted or deleted."""
    key = draw(well_formed_keys)
    at = draw(st.integers(min_value=0, max_value=len(key) - 1))
    char = draw(characters)
    edit = draw(st.sampled_from(["replace", "insert", "delete", "case"]))
    if edit == "replace":
        return key[:at] + char + key[at + 1 :]
    if edit == "insert":
        return key[:at] + char + key[at:]
    if edit == "delete":
        return key[:at] + key[at + 1 :]
    return key.upper()


def is_well_formed_key(key: str) -> bool:
    """D13: the type prefix and 43 base64url characters (32 random bytes)."""
    tail = key.removeprefix("petstore_")
    return key.startswith("petstore_") and len(tail) == 43 and all(c in BASE64URL for c in tail)


@properties(max_examples=500)
@given(key=st.one_of(st.text(), well_formed_keys, near_keys(), well_formed_keys.map(str.strip)))
@example(key="petstore_" + "A" * 43 + "\n")
def test_visible_prefix_is_given_exactly_for_well_formed_keys(key: str) -> None:
    prefix = keys.visible_prefix(key)
    if is_well_formed_key(key):
        assert prefix == key[:17]
    else:
        assert prefix is None


def test_generated_keys_are_well_formed() -> None:
    assert all(is_well_formed_key(keys.generate()) for _ in range(200))


# --- signed cursors (D9) --------------------------------------------------------------

statuses = st.sampled_from([None, *PetStatus])
#: Secrets as the configuration gives them (an environment variable holds no NUL):
#: HMAC pads short keys with zero bytes, so b"k" and b"k\0" are the same key.
cursor_secrets = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), min_size=1, max_size=80
).map(str.encode)
int64s = st.one_of(
    st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
    st.sampled_from([INT64_MIN, -1, 0, 1, INT64_MAX]),
)


def refused(signer: CursorSigner, cursor: str, status: PetStatus | None) -> bool:
    """True when the cursor is answered InvalidRequest; any other exception escapes."""
    try:
        signer.last_id(cursor, status=status)
    except errors.InvalidRequest as exc:
        message = exc.message
    else:
        return False
    assert message.startswith("cursor")
    return True


@properties(max_examples=300)
@given(secret=cursor_secrets, last_id=int64s, status=statuses)
def test_a_cursor_round_trips(secret: bytes, last_id: int, status: PetStatus | None) -> None:
    signer = CursorSigner(secret)
    cursor = signer.issue(last_id=last_id, status=status)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", cursor)
    assert signer.last_id(cursor, status=status) == last_id


@st.composite
def tampered(draw: st.DrawFn, cursor: str) -> str:
    """``cursor`` altered in one of the ways a client could alter it."""
    how = draw(
        st.sampled_from(["bit", "replace", "insert", "delete", "truncate", "append", "repad"])
    )
    if how == "bit":
        raw = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        bit = draw(st.integers(min_value=0, max_value=len(raw) * 8 - 1))
        raw[bit // 8] ^= 1 << (bit % 8)
        return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    at = draw(st.integers(min_value=0, max_value=len(cursor) - 1))
    char = draw(characters | st.sampled_from(BASE64URL + "+/="))
    if how == "replace":
        return cursor[:at] + char + cursor[at + 1 :]
    if how == "insert":
        return cursor[:at] + char + cursor[at:]
    if how == "delete":
        return cursor[:at] + cursor[at + 1 :]
    if how == "truncate":
        return cursor[:at]
    if how == "append":
        return cursor + draw(st.text(min_size=1, max_size=8))
    return cursor + "=" * draw(st.integers(min_value=1, max_value=3))


@properties(max_examples=500)
@given(data=st.data(), secret=cursor_secrets, last_id=int64s, status=statuses)
def test_any_tampering_with_a_cursor_is_refused(
    data: st.DataObject, secret: bytes, last_id: int, status: PetStatus | None
) -> None:
    signer = CursorSigner(secret)
    cursor = signer.issue(last_id=last_id, status=status)
    altered = data.draw(tampered(cursor))
    hypothesis.assume(altered != cursor)
    assert refused(signer, altered, status), (cursor, altered)


@properties(max_examples=200)
@given(data=st.data(), secret=cursor_secrets, last_id=int64s, status=statuses)
def test_a_cursor_of_another_secret_is_refused(
    data: st.DataObject, secret: bytes, last_id: int, status: PetStatus | None
) -> None:
    other = data.draw(cursor_secrets.filter(lambda o: o != secret), label="other secret")
    cursor = CursorSigner(other).issue(last_id=last_id, status=status)
    assert refused(CursorSigner(secret), cursor, status)


@properties(max_examples=200)
@given(data=st.data(), secret=cursor_secrets, last_id=int64s, status=statuses)
def test_a_cursor_used_with_another_status_is_refused(
    data: st.DataObject, secret: bytes, last_id: int, status: PetStatus | None
) -> None:
    other = data.draw(statuses.filter(lambda o: o is not status), label="other status")
    signer = CursorSigner(secret)
    assert refused(signer, signer.issue(last_id=last_id, status=status), other)


@properties(max_examples=500)
@given(
    secret=cursor_secrets,
    text=st.one_of(st.text(), st.text(alphabet=BASE64URL + "=+/", min_size=30, max_size=40)),
    status=statuses,
)
def test_arbitrary_text_as_a_cursor_is_refused(
    secret: bytes, text: str, status: PetStatus | None
) -> None:
    assert refused(CursorSigner(secret), text, status)


def test_a_tampered_cursor_over_http_is_400_naming_cursor(
    client: TestClient, auth: dict[str, str]
) -> None:
    for name in ("Rex", "Tom"):
        created = client.post("/v1/pets", json={"name": name, "categoryId": 1}, headers=auth)
        assert created.status_code == 201
    first = client.get("/v1/pets", params={"limit": 1}, headers=auth)
    link = re.search(r"<([^>]*)>", first.headers["link"])
    assert link is not None
    cursor = parse_qs(urlsplit(link.group(1)).query)["cursor"][0]
    assert (
        client.get("/v1/pets", params={"limit": 1, "cursor": cursor}, headers=auth).json()[0][
            "name"
        ]
        == "Tom"
    )

    @properties(max_examples=200)
    @given(data=st.data(), status=statuses)
    def list_with_tampered(data: st.DataObject, status: PetStatus | None) -> None:
        altered = data.draw(tampered(cursor) | st.text())
        hypothesis.assume(altered != cursor or status is not None)
        params = {"limit": "1", "cursor": altered}
        if status is not None:
            params["status"] = status.value
        response = client.get("/v1/pets", params=params, headers=auth)
        assert response.status_code == 400, (altered, response.text)
        error = response.json()
        assert error["code"] == "invalid_request"
        assert "cursor" in error["message"]

    list_with_tampered()


# --- bearer parsing over HTTP (D12) ---------------------------------------------------

printable = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=120)


def test_any_authorization_value_but_the_key_is_401(client: TestClient, api_key: str) -> None:
    real = f"Bearer {api_key}"

    @st.composite
    def near_real(draw: st.DrawFn) -> str:
        value = draw(
            st.sampled_from([real, real.lower(), "bearer " + api_key, "BEARER " + api_key])
        )
        at = draw(st.integers(min_value=0, max_value=len(value)))
        char = draw(st.characters(min_codepoint=0x20, max_codepoint=0x7E))
        edit = draw(st.sampled_from(["replace", "insert", "delete", "spaces", "prefix"]))
        if edit == "replace":
            return value[:at] + char + value[at + 1 :]
        if edit == "insert":
            return value[:at] + char + value[at:]
        if edit == "delete":
            return value[:at] + value[at + 1 :]
        if edit == "spaces":
            return value.replace(" ", " " * draw(st.integers(min_value=1, max_value=4)))
        return draw(printable) + value

    accepted = re.compile(r"(?i:bearer) +" + re.escape(api_key) + r" *")

    @properties(max_examples=300)
    @given(value=st.one_of(printable, near_real(), printable.map(lambda t: "Bearer " + t)))
    def authorize(value: str) -> None:
        response = client.get("/v1/pets", headers={"Authorization": value})
        if accepted.fullmatch(value):
            assert response.status_code == 200, (value, response.text)
            return
        assert response.status_code == 401, (value, response.text)
        assert response.json()["code"] == "unauthorized"
        assert response.headers["www-authenticate"].startswith('Bearer realm="petstore"')
        assert api_key not in response.text

    authorize()
