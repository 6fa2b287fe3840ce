"""listPets, createPet and getPet over the real app (interface: Endpoints), and the
decisions that shape them: D1-D9, D11, D14."""

from __future__ import annotations

import itertools
import json
import re
import string
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from starlette.testclient import TestClient

from petstore.schemas import NEW_PET_MEMBERS, NEW_PET_REQUIRED
from petstore.server.app import create_app
from petstore.server.config import Settings
from tests import examples
from tests.conformance import Conformance
from tests.conftest import FakeClock, insert_corrupt_pet, run_sql

INT64_MAX = 2**63 - 1
PET_KEYS = set(examples.PET_MEMBERS)
DEPRECATION = "@1767225600"  # 2026-01-01T00:00:00Z, RFC 9745
SUNSET = "Thu, 05 Dec 2030 00:00:00 GMT"  # RFC 8594
SUNSET_INSTANT = datetime(2030, 12, 5, tzinfo=UTC)
#: The replacement named on its own: "GET /v1/pets/{petId}" does not count.
REPLACEMENT = re.compile(r"GET /v1/pets(?![/\w{])")
_NEXT = re.compile(r'<([^>]*)>\s*;\s*rel="next"')
_DEPRECATION_LINK = re.compile(r'<([^>]*)>\s*;\s*rel="deprecation"')


def create(client: TestClient, auth: dict[str, str], **fields: Any) -> dict[str, Any]:
    """Create one animal through the API and return the Pet."""
    body = {"name": "Rex", "categoryId": 1, **fields}
    response = client.post("/v1/pets", json=body, headers=auth)
    assert response.status_code == 201, response.text
    pet: dict[str, Any] = response.json()
    return pet


def listed(client: TestClient, auth: dict[str, str], query: str = "") -> list[dict[str, Any]]:
    response = client.get(f"/v1/pets{query}", headers=auth)
    assert response.status_code == 200, response.text
    pets: list[dict[str, Any]] = response.json()
    return pets


def next_url(response: httpx2.Response) -> str | None:
    """The target of ``Link: <...>; rel="next"``, or None."""
    match = _NEXT.search(response.headers.get("link", ""))
    return match.group(1) if match else None


def follow_all(
    client: TestClient, auth: dict[str, str], first: str
) -> tuple[list[list[dict[str, Any]]], list[httpx2.Response]]:
    """Every page from ``first`` on, following rel="next" until it is absent."""
    pages, responses = [], []
    url: str | None = first
    while url is not None:
        response = client.get(url, headers=auth)
        assert response.status_code == 200, response.text
        pages.append(response.json())
        responses.append(response)
        url = next_url(response)
        assert len(pages) <= 200, "rel=next never ends"
    return pages, responses


def first_cursor(client: TestClient, auth: dict[str, str], query: str = "?limit=1") -> str:
    url = next_url(client.get(f"/v1/pets{query}", headers=auth))
    assert url is not None
    (cursor,) = parse_qs(urlsplit(url).query)["cursor"]
    return cursor


def assert_error(response: httpx2.Response, status: int, code: str) -> str:
    """The response is the Error body with this status and code; returns the message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].split(";")[0] == "application/json"
    body = response.json()
    assert set(body) == {"code", "message", "status"}
    assert body["code"] == code
    assert body["status"] == status
    assert isinstance(body["message"], str)
    assert body["message"]
    message: str = body["message"]
    return message


def insert_pets_directly(database_url: str, count: int, status: str = "available") -> None:
    """Bulk rows straight into the test database (valid rows, fewer round trips)."""
    values = ", ".join(f"('pet {i}', 1, ?)" for i in range(count))
    sql = f"INSERT INTO pets (name, category_id, status) VALUES {values}"  # noqa: S608
    run_sql(database_url, sql, [status] * count)


# Interface: the three operations ---------------------------------------------------


def test_created_pet_is_returned_with_an_assigned_id(
    client: TestClient, auth: dict[str, str]
) -> None:
    response = client.post(
        "/v1/pets", json={"name": "Rex", "categoryId": 3, "status": "pending"}, headers=auth
    )
    assert response.status_code == 201
    assert response.headers["content-type"] == "application/json"
    pet = response.json()
    assert pet == examples.pet(pet["id"], "Rex", 3, "pending")
    assert isinstance(pet["id"], int)
    assert pet["id"] >= 1


def test_get_pet_returns_the_created_pet(client: TestClient, auth: dict[str, str]) -> None:
    create(client, auth, name="Other")
    pet = create(client, auth, name="Rex", categoryId=7, status="sold")
    response = client.get(f"/v1/pets/{pet['id']}", headers=auth)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == pet


def test_list_of_an_empty_store_is_an_empty_array_without_link(
    client: TestClient, auth: dict[str, str]
) -> None:
    response = client.get("/v1/pets", headers=auth)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == []
    assert "link" not in response.headers


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/v1/pets"), ("POST", "/v1/pets"), ("GET", "/v1/pets/1")]
)
def test_every_operation_without_a_key_is_401(
    client: TestClient, auth: dict[str, str], method: str, path: str
) -> None:
    create(client, auth)
    response = client.request(method, path, json={"name": "Rex", "categoryId": 1})
    assert_error(response, 401, "unauthorized")
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert listed(client, auth) == [examples.pet(1, "Rex", 1)]


@pytest.mark.parametrize(
    ("body", "field"),
    [({"categoryId": 1}, "name"), ({"name": "Rex"}, "categoryId"), ({}, "name")],
)
def test_create_without_a_required_field_is_400_naming_it(
    client: TestClient, auth: dict[str, str], body: dict[str, Any], field: str
) -> None:
    message = assert_error(client.post("/v1/pets", json=body, headers=auth), 400, "invalid_request")
    assert field in message
    assert listed(client, auth) == []


# D1 default status ------------------------------------------------------------------


def test_pet_created_without_status_is_available_everywhere(
    client: TestClient, auth: dict[str, str]
) -> None:
    response = client.post("/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=auth)
    assert response.status_code == 201
    pet = response.json()
    assert pet["status"] == "available"
    assert client.get(f"/v1/pets/{pet['id']}", headers=auth).json()["status"] == "available"
    assert [p["status"] for p in listed(client, auth)] == ["available"]
    assert [p["id"] for p in listed(client, auth, "?status=available")] == [pet["id"]]


@pytest.mark.parametrize("status", ["available", "pending", "sold"])
def test_pet_created_with_a_status_keeps_it(
    client: TestClient, auth: dict[str, str], status: str
) -> None:
    pet = create(client, auth, status=status)
    assert pet["status"] == status
    assert client.get(f"/v1/pets/{pet['id']}", headers=auth).json()["status"] == status


@pytest.mark.parametrize("status", ["lost", "AVAILABLE", "Available", "", " available", None, 1])
def test_create_with_an_unknown_status_is_400_naming_status(
    client: TestClient, auth: dict[str, str], status: object
) -> None:
    response = client.post(
        "/v1/pets", json={"name": "Rex", "categoryId": 1, "status": status}, headers=auth
    )
    assert "status" in assert_error(response, 400, "invalid_request")
    assert listed(client, auth) == []


# D2 name ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("R", id="one-character"),
        pytest.param("x" * 100, id="100-ascii"),
        pytest.param("é" * 100, id="100-latin1"),
        pytest.param("\U0001f436" * 100, id="100-emoji-astral"),
        pytest.param("名" * 100, id="100-cjk"),
        pytest.param("\U0001f468\u200d\U0001f469\u200d\U0001f467", id="zwj-family-emoji"),
        pytest.param("\u2764\ufe0f", id="emoji-presentation-selector"),
        pytest.param(
            "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f", id="tag-flag"
        ),
        pytest.param("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", id="persian-zwnj"),
        pytest.param("\u05e9\u05dc\u05d5\u05dd Rex", id="right-to-left-script"),
        pytest.param("  Rex  ", id="surrounding-spaces-kept"),
        pytest.param("REX rex ReX", id="case-kept"),
        pytest.param("e\u0301", id="decomposed-not-normalized"),
        pytest.param("\u00e9", id="precomposed"),
        pytest.param("Rex \u3000 Max", id="inner-ideographic-space"),
        pytest.param('O\'Brien "Bo" <b>&amp;', id="quotes-and-markup"),
        pytest.param("C:\\pets\\Rex \\u00e9 \\", id="backslashes-kept-not-unescaped"),
    ],
)
def test_valid_name_is_stored_and_returned_exactly_as_sent(
    client: TestClient, auth: dict[str, str], name: str
) -> None:
    pet = create(client, auth, name=name)
    assert pet["name"] == name
    assert client.get(f"/v1/pets/{pet['id']}", headers=auth).json()["name"] == name
    assert [p["name"] for p in listed(client, auth)] == [name]


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty"),
        pytest.param("x" * 101, id="101-ascii"),
        pytest.param("\U0001f436" * 101, id="101-emoji"),
        pytest.param("é" * 101, id="101-latin1"),
        pytest.param(" ", id="space"),
        pytest.param("     ", id="spaces"),
        pytest.param("\u00a0", id="no-break-space"),
        pytest.param("\u3000", id="ideographic-space"),
        pytest.param("\u2003\u2009", id="em-and-thin-space"),
        pytest.param("\u2028", id="line-separator"),
        pytest.param(" \u3000\u00a0\u202f ", id="mixed-unicode-spaces"),
        pytest.param("\u0000", id="nul"),
        pytest.param("Rex\u0000", id="trailing-nul"),
        pytest.param("Rex\nMax", id="newline"),
        pytest.param("Rex\n", id="trailing-newline"),
        pytest.param("Rex\tMax", id="tab"),
        pytest.param("Rex\r", id="carriage-return"),
        pytest.param("\u001f", id="unit-separator"),
        pytest.param("Rex\u007f", id="delete"),
        pytest.param("Rex\u0085", id="next-line-c1"),
        pytest.param("\u009f", id="last-c1"),
        pytest.param("\u200b", id="zero-width-space-alone"),
        pytest.param("\u200b\u200c\u200d", id="zero-width-characters-only"),
        pytest.param("\u2060\ufeff", id="word-joiner-and-bom"),
        pytest.param(" \u200b\u00a0", id="spaces-and-zero-width"),
        pytest.param("\u00ad", id="soft-hyphen-alone"),
        # Issue 53 (N6): these were 201.
        pytest.param("\u3164", id="hangul-filler"),
        pytest.param("\u2800", id="braille-blank"),
        pytest.param("\ufe0f", id="variation-selector-alone"),
        pytest.param("\u0301", id="lone-combining-mark"),
        pytest.param("Rex\u202egnp.exe", id="right-to-left-override-inside"),
        pytest.param("Rex\u2067Max\u2069", id="bidi-isolate-inside"),
        pytest.param("Rex\u200fMax", id="right-to-left-mark-inside"),
        pytest.param("\u200bRex\u200b", id="visible-between-zero-width"),
        pytest.param("Re\u00adx", id="soft-hyphen-inside"),
        pytest.param("Rex\u3164", id="hangul-filler-inside"),
        pytest.param("Rex\u2028Max", id="line-separator-inside"),
        pytest.param("Rex\U000e0001", id="language-tag"),
    ],
)
def test_invalid_name_is_400_naming_name(
    client: TestClient, auth: dict[str, str], name: str
) -> None:
    response = client.post("/v1/pets", json={"name": name, "categoryId": 1}, headers=auth)
    assert "name" in assert_error(response, 400, "invalid_request")
    assert listed(client, auth) == []


@pytest.mark.parametrize("name", [5, None, True, ["Rex"], {"first": "Rex"}])
def test_name_that_is_not_a_string_is_400(
    client: TestClient, auth: dict[str, str], name: object
) -> None:
    response = client.post("/v1/pets", json={"name": name, "categoryId": 1}, headers=auth)
    assert "name" in assert_error(response, 400, "invalid_request")


# D3 categoryId --------------------------------------------------------------------------


@pytest.mark.parametrize("category_id", [1, 2, 10**12, INT64_MAX])
def test_category_id_in_int64_range_is_accepted_exactly(
    client: TestClient, auth: dict[str, str], category_id: int
) -> None:
    pet = create(client, auth, categoryId=category_id)
    assert pet["categoryId"] == category_id
    assert client.get(f"/v1/pets/{pet['id']}", headers=auth).json()["categoryId"] == category_id


@pytest.mark.parametrize(
    "category_id",
    [True, False, 1.5, 0.0, "1", None, 0, -1, -(2**63), 2**63, 2**64, [1], {"id": 1}],
)
def test_invalid_category_id_is_400_naming_category_id(
    client: TestClient, auth: dict[str, str], category_id: object
) -> None:
    response = client.post(
        "/v1/pets", json={"name": "Rex", "categoryId": category_id}, headers=auth
    )
    assert "categoryId" in assert_error(response, 400, "invalid_request")
    assert listed(client, auth) == []


@pytest.mark.parametrize(
    ("numeral", "stored"),
    [
        ("1.0", 1),
        ("1e0", 1),
        ("1e3", 1000),
        ("1E+3", 1000),
        ("100.00", 100),
        ("12.5e1", 125),
        ("9223372036854775807.0", INT64_MAX),
        ("922337203685477580.7e1", INT64_MAX),
    ],
)
def test_category_id_numeral_of_a_whole_number_is_stored_as_that_integer(
    client: TestClient, auth: dict[str, str], numeral: str, stored: int
) -> None:
    """D3: JSON Schema's ``type: integer`` is about the value, not its spelling."""
    response = client.post(
        "/v1/pets",
        content=f'{{"name": "Rex", "categoryId": {numeral}}}'.encode(),
        headers={**auth, "Content-Type": "application/json"},
    )
    assert response.status_code == 201, response.text
    assert response.json()["categoryId"] == stored
    assert response.content.count(str(stored).encode()) >= 1
    assert (
        client.get(f"/v1/pets/{response.json()['id']}", headers=auth).json()["categoryId"] == stored
    )


@pytest.mark.parametrize(
    "numeral",
    [
        "1.5",
        "9223372036854775808.0",
        "9223372036854775807.5",
        "92233720368547758.08e2",
        "0.0",
        "-1.0",
        "1e-1",
        "1e400",
        "1e999999999",
    ],
)
def test_category_id_numeral_that_is_not_a_whole_int64_is_400(
    client: TestClient, auth: dict[str, str], numeral: str
) -> None:
    """D3, judged exactly: 2**63 written with a fraction is out of range, not rounded in."""
    response = client.post(
        "/v1/pets",
        content=f'{{"name": "Rex", "categoryId": {numeral}}}'.encode(),
        headers={**auth, "Content-Type": "application/json"},
    )
    assert "categoryId" in assert_error(response, 400, "invalid_request")
    assert listed(client, auth) == []


# D4 unknown fields ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"id": 1}, "id"),
        ({"id": 99}, "id"),
        ({"category_id": 1}, "category_id"),
        ({"Name": "Max"}, "Name"),
        ({"tags": []}, "tags"),
        ({"photoUrls": None}, "photoUrls"),
    ],
)
def test_unknown_field_is_400_naming_it(
    client: TestClient, auth: dict[str, str], extra: dict[str, Any], field: str
) -> None:
    body = {"name": "Rex", "categoryId": 1, **extra}
    message = assert_error(client.post("/v1/pets", json=body, headers=auth), 400, "invalid_request")
    assert field in message
    assert listed(client, auth) == []


@pytest.mark.parametrize(
    ("body", "member"),
    [
        (b'{"name": "A", "name": "B", "categoryId": 1}', "name"),
        (b'{"name": "A", "categoryId": 1, "categoryId": 2}', "categoryId"),
        (b'{"name": "A", "categoryId": 1, "status": "sold", "status": "sold"}', "status"),
        (b'{"name": "A", "n\\u0061me": "B", "categoryId": 1}', "name"),
    ],
)
def test_a_member_named_twice_is_400_naming_it(
    client: TestClient, auth: dict[str, str], body: bytes, member: str
) -> None:
    """D4: RFC 8259 leaves repeated names to each parser; we refuse them. (A member
    that is not a NewPet's is refused, named, whether repeated or not.)"""
    response = client.post(
        "/v1/pets", content=body, headers={**auth, "Content-Type": "application/json"}
    )
    message = assert_error(response, 400, "invalid_request")
    assert message.startswith(f"{member}:")
    assert "more than once" in message
    assert listed(client, auth) == []


def test_a_body_of_thousands_of_members_one_repeated_is_400_at_once(
    client: TestClient, auth: dict[str, str]
) -> None:
    """Issue 60 (P1): 7,600 members, one repeated, and an escape took 0.98 s of the
    worker's event loop; the check now costs time linear in the members
    (tests/server/http/test_linear_cost.py), a few milliseconds here."""
    names = ["".join(t) for t in itertools.product(string.ascii_letters, repeat=3)][:7_600]
    members = [f'"{name}":1' for name in names] + ['"aaa":2', '"\\u0061":1']
    body = ("{" + ",".join(members) + "}").encode()
    assert 60_000 < len(body) < 64 * 1024
    response = client.post(
        "/v1/pets", content=body, headers={**auth, "Content-Type": "application/json"}
    )
    assert assert_error(response, 400, "invalid_request") == (
        "aaa: this member is named more than once"
    )


@pytest.mark.parametrize(
    ("member", "shown"),
    [
        ("\x1b[31mRED\x1b]0;pwned\x07", "\\x1b[31mRED\\x1b]0;pwned\\x07"),
        ("\u202egnp.exe", "\\u202egnp.exe"),
        ("a" * 1_000, "a" * 40 + "…"),
    ],
)
def test_a_member_name_the_client_chose_is_echoed_cut_and_escaped(
    client: TestClient, auth: dict[str, str], member: str, shown: str
) -> None:
    """Issue 60 (P5): the message names the member, never with a terminal's control
    or bidi characters as themselves, and at most 40 characters of it."""
    named = json.dumps(member)
    for body in (
        f'{{{named}: 1, "name": "x", "categoryId": 1}}',
        f'{{"name": "x", {named}: 1, {named}: 2, "categoryId": 1}}',
    ):
        response = client.post(
            "/v1/pets", content=body, headers={**auth, "Content-Type": "application/json"}
        )
        message = assert_error(response, 400, "invalid_request")
        assert message.startswith(f"{shown}: "), message
    assert listed(client, auth) == []


@pytest.mark.parametrize(
    "body",
    [
        b'{"name": "name", "categoryId": 1}',
        b'{"name": "\\"status\\" \\"status\\"", "categoryId": 1}',
        b'{"name": "\\u00e9", "categoryId": 1}',
    ],
)
def test_a_member_name_written_inside_a_value_is_not_a_repeat(
    client: TestClient, auth: dict[str, str], body: bytes
) -> None:
    response = client.post(
        "/v1/pets", content=body, headers={**auth, "Content-Type": "application/json"}
    )
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"name": "Rex", "categoryId": "1"},
            f"categoryId: must be a whole number from 1 to {INT64_MAX}",
        ),
        (
            {"name": "Rex", "categoryId": 0},
            f"categoryId: must be a whole number from 1 to {INT64_MAX}",
        ),
        (
            {"name": "Rex", "categoryId": 1, "status": "lost"},
            "status: must be one of available, pending, sold",
        ),
        ({"name": 7, "categoryId": 1}, "name: must be a string of 1 to 100 characters"),
        ({"name": "x" * 101, "categoryId": 1}, "name: must be a string of 1 to 100 characters"),
        ({"categoryId": 1}, "name: is required"),
        ({"name": "Rex"}, "categoryId: is required"),
        (
            {"name": "Rex", "categoryId": 1, "id": 4},
            f"id: is not a member of a NewPet ({', '.join(NEW_PET_MEMBERS)})",
        ),
        (
            ["Rex", 1],
            "body: must be a JSON object, a NewPet: name, categoryId and optionally "
            + ", ".join(member for member in NEW_PET_MEMBERS if member not in NEW_PET_REQUIRED),
        ),
    ],
)
def test_validation_messages_are_english_naming_the_member(
    client: TestClient, auth: dict[str, str], body: object, message: str
) -> None:
    """D10: a message for people, starting with the member, no library type names."""
    response = client.post("/v1/pets", json=body, headers=auth)
    assert assert_error(response, 400, "invalid_request") == message


# D5 ids ---------------------------------------------------------------------------------


def test_ids_are_positive_and_increasing(client: TestClient, auth: dict[str, str]) -> None:
    ids = [create(client, auth, name=f"pet {i}")["id"] for i in range(6)]
    assert all(isinstance(i, int) and 1 <= i <= INT64_MAX for i in ids)
    assert ids == sorted(set(ids))


def test_id_of_the_deleted_newest_row_is_never_reused(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    ids = [create(client, auth, name=f"pet {i}")["id"] for i in range(3)]
    run_sql(database_url, "DELETE FROM pets WHERE id = ?", [max(ids)])
    new = create(client, auth, name="after delete")
    assert new["id"] > max(ids)


def test_ids_are_not_reused_after_every_row_is_deleted(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    ids = [create(client, auth, name=f"pet {i}")["id"] for i in range(3)]
    run_sql(database_url, "DELETE FROM pets")
    assert listed(client, auth) == []
    new = create(client, auth, name="after delete")
    assert new["id"] > max(ids)
    assert client.get(f"/v1/pets/{max(ids)}", headers=auth).status_code == 404


# D6 exact keys --------------------------------------------------------------------------


def test_pet_responses_carry_exactly_four_keys(client: TestClient, auth: dict[str, str]) -> None:
    created = client.post("/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=auth).json()
    assert set(created) == PET_KEYS
    assert set(client.get(f"/v1/pets/{created['id']}", headers=auth).json()) == PET_KEYS
    create(client, auth, status="sold")
    assert [set(p) for p in listed(client, auth)] == [PET_KEYS, PET_KEYS]


# D7 order -------------------------------------------------------------------------------


def test_list_is_in_ascending_id_order(client: TestClient, auth: dict[str, str]) -> None:
    statuses = ["sold", "available", "pending", "available", "sold", "pending", "available"]
    created = [create(client, auth, name=f"pet {i}", status=s) for i, s in enumerate(statuses)]
    assert listed(client, auth) == sorted(created, key=lambda p: p["id"])


@pytest.mark.parametrize("status", ["available", "pending", "sold"])
def test_status_filter_returns_only_that_status_in_ascending_id_order(
    client: TestClient, auth: dict[str, str], status: str
) -> None:
    statuses = ["sold", "available", "pending", "available", "sold", "pending", "available"]
    created = [create(client, auth, name=f"pet {i}", status=s) for i, s in enumerate(statuses)]
    expected = [p for p in created if p["status"] == status]
    assert listed(client, auth, f"?status={status}") == expected


# D8 parameters --------------------------------------------------------------------------


def test_limit_defaults_to_20(client: TestClient, auth: dict[str, str], database_url: str) -> None:
    insert_pets_directly(database_url, 21)
    response = client.get("/v1/pets", headers=auth)
    assert response.status_code == 200
    assert [p["id"] for p in response.json()] == list(range(1, 21))
    url = next_url(response)
    assert url is not None
    assert parse_qs(urlsplit(url).query)["limit"] == ["20"]


@pytest.mark.parametrize("limit", [1, 2, 50, 99, 100])
def test_limit_within_1_to_100_returns_that_many(
    client: TestClient, auth: dict[str, str], database_url: str, limit: int
) -> None:
    insert_pets_directly(database_url, 101)
    response = client.get(f"/v1/pets?limit={limit}", headers=auth)
    assert response.status_code == 200
    assert [p["id"] for p in response.json()] == list(range(1, limit + 1))
    assert next_url(response) is not None


@pytest.mark.parametrize(
    "limit",
    [
        "abc",
        "1.5",
        "",
        "0",
        "101",
        "-1",
        "1000000000000000000000",
        " 5",
        "1e1",
        "0x10",
        "\u0663",
        "%FF",
    ],
)
def test_limit_that_is_not_an_integer_from_1_to_100_is_400_naming_limit(
    client: TestClient, auth: dict[str, str], limit: str
) -> None:
    create(client, auth)
    message = assert_error(
        client.get(f"/v1/pets?limit={limit}", headers=auth), 400, "invalid_request"
    )
    assert "limit" in message


def test_the_last_of_a_repeated_query_parameter_wins(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    """D8: ``?limit=1&limit=3`` is ``limit=3``; ``status`` alike."""
    insert_pets_directly(database_url, 5)
    response = client.get("/v1/pets?limit=1&limit=3", headers=auth)
    assert [p["id"] for p in response.json()] == [1, 2, 3]
    response = client.get("/v1/pets?limit=abc&limit=2", headers=auth)
    assert [p["id"] for p in response.json()] == [1, 2]
    assert assert_error(
        client.get("/v1/pets?limit=2&limit=0", headers=auth), 400, "invalid_request"
    )
    response = client.get("/v1/pets?status=sold&status=available", headers=auth)
    assert len(response.json()) == 5
    assert client.get("/v1/pets?status=available&status=sold", headers=auth).json() == []


def test_a_repeated_content_type_or_idempotency_key_is_400_naming_it(
    client: TestClient, auth: dict[str, str]
) -> None:
    json = ("Content-Type", "application/json")
    for name, twice in (
        ("Content-Type", [json, ("Content-Type", "text/plain")]),
        ("Idempotency-Key", [json, ("Idempotency-Key", "k1"), ("Idempotency-Key", "k2")]),
    ):
        response = client.post(
            "/v1/pets", content=b'{"name":"Rex","categoryId":1}', headers=[*auth.items(), *twice]
        )
        assert assert_error(response, 400, "invalid_request").startswith(f"{name}: ")
    assert listed(client, auth) == []


def test_limit_above_100_is_400(client: TestClient, auth: dict[str, str]) -> None:
    message = assert_error(client.get("/v1/pets?limit=101", headers=auth), 400, "invalid_request")
    assert "limit" in message


@pytest.mark.parametrize("status", ["lost", "", "AVAILABLE", "available ", "sold,pending"])
def test_unknown_status_filter_is_400_naming_status(
    client: TestClient, auth: dict[str, str], status: str
) -> None:
    response = client.get("/v1/pets", params={"status": status}, headers=auth)
    assert "status" in assert_error(response, 400, "invalid_request")


def test_unknown_status_filter_is_echoed_as_a_bad_limit_is(
    client: TestClient, auth: dict[str, str]
) -> None:
    response = client.get("/v1/pets", params={"status": "lost"}, headers=auth)
    message = assert_error(response, 400, "invalid_request")
    assert message == "status: must be one of available, pending, sold, got 'lost'"


@pytest.mark.parametrize("query", ["?foo=bar", "?page=2&offset=5", "?sort=-id", "?LIMIT=abc"])
def test_unknown_query_parameters_are_ignored(
    client: TestClient, auth: dict[str, str], query: str
) -> None:
    pets = [create(client, auth, name=f"pet {i}") for i in range(3)]
    response = client.get(f"/v1/pets{query}", headers=auth)
    assert response.status_code == 200
    assert response.json() == pets


# D9 pagination --------------------------------------------------------------------------


def test_next_link_is_an_absolute_url_keeping_limit_and_status(
    client: TestClient, auth: dict[str, str]
) -> None:
    for i in range(4):
        create(client, auth, name=f"pet {i}", status="pending")
    response = client.get("/v1/pets?limit=2&status=pending", headers=auth)
    assert response.status_code == 200
    assert len(response.json()) == 2
    link = response.headers["link"]
    assert re.fullmatch(r'<[^>]+>\s*;\s*rel="next"', link), link
    url = urlsplit(next_url(response) or "")
    assert (url.scheme, url.netloc, url.path) == ("http", "testserver", "/v1/pets")
    query = parse_qs(url.query, keep_blank_values=True)
    assert query["limit"] == ["2"]
    assert query["status"] == ["pending"]
    assert len(query["cursor"]) == 1
    assert query["cursor"][0]


def test_next_link_without_status_filter_adds_none(
    client: TestClient, auth: dict[str, str]
) -> None:
    for i in range(3):
        create(client, auth, name=f"pet {i}")
    url = next_url(client.get("/v1/pets?limit=1", headers=auth))
    assert url is not None
    query = parse_qs(urlsplit(url).query)
    assert set(query) == {"limit", "cursor"}
    assert query["limit"] == ["1"]


@pytest.mark.parametrize(("count", "limit"), [(25, 1), (25, 7), (25, 10), (25, 25), (30, 10)])
def test_following_next_returns_every_animal_exactly_once(
    client: TestClient, auth: dict[str, str], count: int, limit: int
) -> None:
    statuses = ["available", "pending", "sold"]
    created = [create(client, auth, name=f"pet {i}", status=statuses[i % 3]) for i in range(count)]
    pages, responses = follow_all(client, auth, f"/v1/pets?limit={limit}")
    assert [p for page in pages for p in page] == created
    assert [len(page) for page in pages] == [min(limit, count - i) for i in range(0, count, limit)]
    assert "link" not in responses[-1].headers
    assert all(next_url(r) is not None for r in responses[:-1])


@pytest.mark.parametrize("status", ["available", "pending", "sold"])
def test_following_next_with_status_returns_every_such_animal_exactly_once(
    client: TestClient, auth: dict[str, str], status: str
) -> None:
    statuses = ["available", "pending", "sold", "sold", "pending"]
    created = [create(client, auth, name=f"pet {i}", status=statuses[i % 5]) for i in range(23)]
    pages, responses = follow_all(client, auth, f"/v1/pets?limit=2&status={status}")
    assert [p for page in pages for p in page] == [p for p in created if p["status"] == status]
    assert "link" not in responses[-1].headers
    for response in responses[:-1]:
        assert parse_qs(urlsplit(next_url(response) or "").query)["status"] == [status]


def test_last_page_has_no_link_when_count_is_a_multiple_of_limit(
    client: TestClient, auth: dict[str, str]
) -> None:
    for i in range(4):
        create(client, auth, name=f"pet {i}")
    pages, responses = follow_all(client, auth, "/v1/pets?limit=2")
    assert [len(page) for page in pages] == [2, 2]
    assert "link" not in responses[-1].headers


def test_pages_stay_correct_while_animals_are_added(
    client: TestClient, auth: dict[str, str]
) -> None:
    created = [create(client, auth, name=f"first {i}") for i in range(5)]
    first = client.get("/v1/pets?limit=3", headers=auth)
    assert first.json() == created[:3]
    created += [create(client, auth, name=f"added {i}") for i in range(4)]
    url = next_url(first)
    assert url is not None
    second = client.get(url, headers=auth)
    assert second.json() == created[3:6]
    created += [create(client, auth, name=f"later {i}", status="sold") for i in range(2)]
    pages, _ = follow_all(client, auth, next_url(second) or "")
    seen = [*first.json(), *second.json(), *(p for page in pages for p in page)]
    assert seen == created
    assert len({p["id"] for p in seen}) == 11


def test_a_page_asked_again_is_the_same_and_a_last_page_shows_new_animals(
    client: TestClient, auth: dict[str, str]
) -> None:
    # A page that more animals follow is kept in memory once read (KeptPages); a
    # last page never is, so what is created next shows at once.
    created = [create(client, auth, name=f"first {i}") for i in range(4)]
    for _ in range(3):
        first = client.get("/v1/pets?limit=2", headers=auth)
        assert first.json() == created[:2]
    url = next_url(first)
    assert url is not None
    last = client.get(url, headers=auth)
    assert last.json() == created[2:4]
    assert next_url(last) is None
    created.append(create(client, auth, name="added"))
    again = client.get(url, headers=auth)
    assert again.json() == created[2:4]
    after = next_url(again)
    assert after is not None
    assert client.get(after, headers=auth).json() == created[4:]
    assert client.get("/v1/pets?limit=2", headers=auth).json() == created[:2]


def _flip_middle(cursor: str) -> str:
    i = len(cursor) // 2
    return cursor[:i] + ("B" if cursor[i] == "A" else "A") + cursor[i + 1 :]


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(_flip_middle, id="flip-a-character"),
        pytest.param(lambda c: c[:-1], id="drop-last-character"),
        pytest.param(lambda c: c[: len(c) // 2], id="truncate-half"),
        pytest.param(lambda c: c + "A", id="append-character"),
        pytest.param(lambda c: c + "==", id="padded"),
        pytest.param(lambda c: c[::-1], id="reversed"),
        pytest.param(lambda c: "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHI", id="random"),
        pytest.param(lambda c: "", id="empty"),
        pytest.param(lambda c: "!!!", id="not-base64url"),
        pytest.param(lambda c: "A" * 100, id="long"),
    ],
)
def test_tampered_cursor_is_400_naming_cursor(
    client: TestClient, auth: dict[str, str], tamper: Any
) -> None:
    for i in range(3):
        create(client, auth, name=f"pet {i}")
    cursor = first_cursor(client, auth)
    forged = tamper(cursor)
    assert forged != cursor
    response = client.get("/v1/pets", params={"limit": 1, "cursor": forged}, headers=auth)
    assert "cursor" in assert_error(response, 400, "invalid_request")


@pytest.mark.parametrize(
    ("issued_with", "used_with"),
    [
        ("available", "sold"),
        ("available", "pending"),
        ("available", None),
        (None, "available"),
        ("sold", "available"),
    ],
)
def test_cursor_used_with_a_different_status_is_400(
    client: TestClient, auth: dict[str, str], issued_with: str | None, used_with: str | None
) -> None:
    for status in ["available", "pending", "sold"] * 2:
        create(client, auth, status=status)
    query = "?limit=1" + (f"&status={issued_with}" if issued_with else "")
    cursor = first_cursor(client, auth, query)
    params = {"limit": "1", "cursor": cursor}
    if used_with is not None:
        params["status"] = used_with
    response = client.get("/v1/pets", params=params, headers=auth)
    assert "cursor" in assert_error(response, 400, "invalid_request")


def test_cursor_from_a_deployment_with_another_secret_is_400(
    client: TestClient,
    auth: dict[str, str],
    database_url: str,
    clock: FakeClock,
    conformance: Conformance,
) -> None:
    for i in range(3):
        create(client, auth, name=f"pet {i}")
    other = Settings(database_url=database_url, cursor_secret="another-secret-" + "x" * 32)
    with TestClient(create_app(other, clock=clock), raise_server_exceptions=False) as elsewhere:
        elsewhere.event_hooks["response"] = [conformance.check]
        foreign = first_cursor(elsewhere, auth)
        assert elsewhere.get(f"/v1/pets?limit=1&cursor={foreign}", headers=auth).status_code == 200
    assert client.get(f"/v1/pets?limit=1&cursor={first_cursor(client, auth)}", headers=auth).json()
    response = client.get(f"/v1/pets?limit=1&cursor={foreign}", headers=auth)
    assert "cursor" in assert_error(response, 400, "invalid_request")


def test_cursor_may_be_followed_with_another_limit(
    client: TestClient, auth: dict[str, str]
) -> None:
    created = [create(client, auth, name=f"pet {i}") for i in range(5)]
    cursor = first_cursor(client, auth)
    response = client.get(f"/v1/pets?limit=10&cursor={cursor}", headers=auth)
    assert response.status_code == 200
    assert response.json() == created[1:]
    assert "link" not in response.headers


# D11 petId --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pet_id",
    [
        "abc",
        "1.5",
        "1e3",
        "0x1",
        "9223372036854775808",
        "-9223372036854775809",
        "99999999999999999999999",
        "-",
        "%20",
        "\u0661",
        "true",
        "+1",
    ],
)
def test_pet_id_that_is_not_an_int64_is_400_naming_pet_id(
    client: TestClient, auth: dict[str, str], pet_id: str
) -> None:
    create(client, auth)
    message = assert_error(client.get(f"/v1/pets/{pet_id}", headers=auth), 400, "invalid_request")
    assert "petId" in message


@pytest.mark.parametrize(
    "pet_id", ["0", "-1", "999", "2", str(INT64_MAX), str(-(2**63)), "-9223372036854775807"]
)
def test_int64_pet_id_without_an_animal_is_404(
    client: TestClient, auth: dict[str, str], pet_id: str
) -> None:
    create(client, auth)
    assert_error(client.get(f"/v1/pets/{pet_id}", headers=auth), 404, "not_found")


# D14 deprecation of getPet ------------------------------------------------------------------


def assert_deprecation_headers(response: httpx2.Response) -> str:
    """The D14 headers are present; returns the rel="deprecation" target."""
    assert response.headers["deprecation"] == DEPRECATION
    assert response.headers["sunset"] == SUNSET
    match = _DEPRECATION_LINK.search(response.headers.get("link", ""))
    assert match, response.headers.get("link")
    return match.group(1)


@pytest.mark.parametrize(
    ("pet_id", "authorization", "status"),
    [
        pytest.param("1", "valid", 200, id="200"),
        pytest.param("abc", "valid", 400, id="400"),
        pytest.param("1", None, 401, id="401-no-key"),
        pytest.param("1", "Bearer petstore_not-a-key", 401, id="401-bad-key"),
        pytest.param("999", "valid", 404, id="404"),
        pytest.param("0", "valid", 404, id="404-zero"),
    ],
)
def test_every_get_pet_response_carries_deprecation_sunset_and_link(
    client: TestClient,
    auth: dict[str, str],
    pet_id: str,
    authorization: str | None,
    status: int,
) -> None:
    create(client, auth)
    headers = (
        auth
        if authorization == "valid"
        else ({"Authorization": authorization} if authorization else {})
    )
    response = client.get(f"/v1/pets/{pet_id}", headers=headers)
    assert response.status_code == status
    assert_deprecation_headers(response)


def test_deprecation_link_targets_a_page_naming_the_replacement(
    client: TestClient, auth: dict[str, str]
) -> None:
    pet = create(client, auth)
    target = assert_deprecation_headers(client.get(f"/v1/pets/{pet['id']}", headers=auth))
    assert urlsplit(target).scheme in {"http", "https"}, "an absolute URL"
    page = client.get(target)  # no key: the docs need none (D12)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert REPLACEMENT.search(page.text), page.text
    assert "status" in page.text


def test_get_pet_one_second_before_the_sunset_is_200(
    client: TestClient, auth: dict[str, str], clock: FakeClock
) -> None:
    pet = create(client, auth)
    clock.set(SUNSET_INSTANT - timedelta(seconds=1))
    response = client.get(f"/v1/pets/{pet['id']}", headers=auth)
    assert response.status_code == 200
    assert response.json() == pet
    assert_deprecation_headers(response)


@pytest.mark.parametrize(
    "now",
    [SUNSET_INSTANT, SUNSET_INSTANT + timedelta(microseconds=1), datetime(2031, 6, 1, tzinfo=UTC)],
)
def test_get_pet_from_the_sunset_on_is_410_gone_naming_the_replacement(
    client: TestClient, auth: dict[str, str], clock: FakeClock, now: datetime
) -> None:
    pet = create(client, auth)
    clock.set(now)
    response = client.get(f"/v1/pets/{pet['id']}", headers=auth)
    message = assert_error(response, 410, "gone")
    assert REPLACEMENT.search(message), message
    assert_deprecation_headers(response)
    assert listed(client, auth) == [pet], "the replacement still works"


@pytest.mark.parametrize(
    ("epoch", "gone"),
    [
        (SUNSET_INSTANT.timestamp() - 0.001, False),
        (SUNSET_INSTANT.timestamp(), True),
        (datetime(2031, 6, 1, tzinfo=UTC).timestamp(), True),
    ],
)
def test_the_sunset_check_turns_at_the_sunset(
    client: TestClient, auth: dict[str, str], clock: FakeClock, epoch: float, gone: bool
) -> None:
    # One check, on the injected clock, whatever the clock is.
    pet = create(client, auth)
    clock.set(datetime.fromtimestamp(epoch, UTC))
    response = client.get(f"/v1/pets/{pet['id']}", headers=auth)
    if gone:
        message = assert_error(response, 410, "gone")
        assert re.search(r"removed on Thu, 05 Dec 2030 00:00:00 GMT", message)
    else:
        assert response.status_code == 200


def test_get_pet_of_a_missing_animal_after_the_sunset_is_410(
    client: TestClient, auth: dict[str, str], clock: FakeClock
) -> None:
    clock.set(SUNSET_INSTANT)
    assert_error(client.get("/v1/pets/999", headers=auth), 410, "gone")


@pytest.mark.parametrize(
    ("deprecation_date", "header"),
    [
        (datetime(2027, 6, 1, tzinfo=UTC), "@1811808000"),
        (datetime(2027, 6, 1, 2, 0, tzinfo=timezone(timedelta(hours=2))), "@1811808000"),
        (datetime(2026, 1, 1, tzinfo=UTC), DEPRECATION),
    ],
)
def test_deprecation_date_is_a_setting(
    database_url: str,
    auth: dict[str, str],
    clock: FakeClock,
    conformance: Conformance,
    deprecation_date: datetime,
    header: str,
) -> None:
    settings = Settings(database_url=database_url, deprecation_date=deprecation_date)
    with TestClient(create_app(settings, clock=clock), raise_server_exceptions=False) as client:
        client.event_hooks["response"] = [conformance.check]
        pet = create(client, auth)
        for response in (
            client.get(f"/v1/pets/{pet['id']}", headers=auth),
            client.get("/v1/pets/999", headers=auth),
        ):
            assert response.headers["deprecation"] == header
            assert response.headers["sunset"] == SUNSET


@pytest.mark.own_database
def test_get_pet_503_still_carries_deprecation_headers(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    pet = create(client, auth)
    run_sql(database_url, "DROP TABLE pets")
    response = client.get(f"/v1/pets/{pet['id']}", headers=auth)
    assert_error(response, 503, "unavailable")
    assert_deprecation_headers(response)


@pytest.mark.own_database
def test_get_pet_500_still_carries_deprecation_headers(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    insert_corrupt_pet(database_url, 5)
    response = client.get("/v1/pets/5", headers=auth)
    assert_error(response, 500, "internal_error")
    assert_deprecation_headers(response)


def test_a_key_with_its_own_limit_is_named_the_key_policy(
    client: TestClient, make_key: Callable[..., str], auth: dict[str, str]
) -> None:
    """D22: the RateLimit fields of a key with its own limit name the "key" policy;
    the service's limit is the "default" one, also for a request without a valid key."""
    own = {"Authorization": f"Bearer {make_key('own', rate_limit='3/minute')}"}
    response = client.get("/v1/pets", headers=own)
    assert response.headers["ratelimit-policy"] == '"key";q=3;w=60'
    assert response.headers["ratelimit"].startswith('"key";r=2;t=')
    response = client.get("/v1/pets", headers=auth)
    assert response.headers["ratelimit-policy"] == '"default";q=600;w=60'
    assert response.headers["ratelimit"].startswith('"default";r=')
    response = client.get("/v1/pets", headers={"Authorization": "Bearer petstore_nope"})
    assert response.status_code == 401
    assert response.headers.get_list("ratelimit-policy") == ['"default";q=600;w=60']
