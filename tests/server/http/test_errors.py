"""Every error, from every layer, is the Error body (D10, D17, D20), and every response
carries the security headers and a request id that is also in its log line (D18)."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

from petstore.server.app import create_app
from petstore.server.config import Settings
from tests.conformance import Conformance
from tests.conftest import FakeClock, insert_corrupt_pet, run_sql

LIMIT = 64 * 1024
JSON_HEADERS = {"Content-Type": "application/json"}
SECURITY_HEADERS = {
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "content-security-policy": "frame-ancestors 'none'",
}
_GENERATED_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
_INTERNALS = ("Traceback", "ValueError", "Exception", "sqlite", "PetStatus", "lost", "File ")


def assert_error(response: httpx2.Response, status: int, code: str) -> str:
    """The response is exactly the Error body with this status and code (D10)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].split(";")[0].strip() == "application/json"
    body = response.json()
    assert set(body) == {"code", "message", "status"}, body
    assert body["code"] == code, body
    assert body["status"] == status, body
    assert isinstance(body["message"], str)
    assert body["message"].strip()
    message: str = body["message"]
    return message


def assert_security_headers(response: httpx2.Response, *, own_policy: bool = False) -> None:
    """D18's headers; with ``own_policy`` (the docs page), a Content-Security-Policy of
    the page's own that holds D18's ``frame-ancestors 'none'`` among its directives."""
    for name, value in SECURITY_HEADERS.items():
        if own_policy and name == "content-security-policy":
            (policy,) = response.headers.get_list(name)
            assert value in policy.split("; "), policy
        else:
            assert response.headers.get_list(name) == [value], name
    assert response.headers["x-request-id"]


def assert_nothing_stored(client: TestClient, auth: dict[str, str]) -> None:
    response = client.get("/v1/pets", headers=auth)
    assert response.status_code == 200
    assert response.json() == []


def post_raw(
    client: TestClient, auth: dict[str, str], body: Any, content_type: str | None
) -> httpx2.Response:
    headers = dict(auth)
    if content_type is not None:
        headers["Content-Type"] = content_type
    return client.post("/v1/pets", content=body, headers=headers)


def padded_pet(size: int, name: str = "Rex") -> bytes:
    """A valid NewPet padded with JSON white space to exactly ``size`` bytes."""
    body = json.dumps({"name": name, "categoryId": 1}).encode()
    assert len(body) <= size
    return body[:-1] + b" " * (size - len(body)) + b"}"


def corrupt_pet(database_url: str, pet_id: int = 5) -> None:
    insert_corrupt_pet(database_url, pet_id)


def drop_pets_table(database_url: str) -> None:
    run_sql(database_url, "DROP TABLE pets")


# 404: no such path (D10, D20) ---------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/pets",
        "/store/orders",
        "/v1/store/orders",
        "/v1/pets/",
        "/v1/pets/1/extra",
        "/v1/pets/1/",
        "/v1/PETS",
        "/v2/pets",
        "/v1",
        "/v1/",
        "/v1/experimental/pets",
        "/v1/beta/pets",
        "/v1/docs/assets/missing.css",
        "/v1/docs/assets/",
    ],
)
def test_unknown_path_is_404_not_found(client: TestClient, auth: dict[str, str], path: str) -> None:
    response = client.get(path, headers=auth)
    assert_error(response, 404, "not_found")
    assert_security_headers(response)


@pytest.mark.parametrize(
    ("path", "meant"),
    [("/v1/pets/", "/v1/pets"), ("/v1/pets/7/", "/v1/pets/7"), ("/v1/docs/", "/v1/docs")],
)
def test_a_trailing_slash_404_names_the_path_without_it(
    client: TestClient, auth: dict[str, str], path: str, meant: str
) -> None:
    response = client.get(path, headers=auth)
    message = assert_error(response, 404, "not_found")
    assert message == f"no such path; did you mean {meant} (no trailing slash)?"


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
@pytest.mark.parametrize("path", ["/store/orders", "/v1/store/orders"])
def test_orders_are_not_implemented_and_404(
    client: TestClient, auth: dict[str, str], method: str, path: str
) -> None:
    response = client.request(method, path, headers=auth, json={"petId": 1})
    assert_error(response, 404, "not_found")


def test_unknown_path_is_404_without_a_key_too(client: TestClient) -> None:
    assert_error(client.get("/v1/store/orders"), 404, "not_found")


# 405 (D10) --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allowed", "not_allowed"),
    [
        ("PUT", "/v1/pets", {"GET", "POST"}, "PUT"),
        ("DELETE", "/v1/pets", {"GET", "POST"}, "DELETE"),
        ("PATCH", "/v1/pets", {"GET", "POST"}, "PATCH"),
        ("OPTIONS", "/v1/pets", {"GET", "POST"}, "OPTIONS"),
        ("POST", "/v1/pets/1", {"GET"}, "POST"),
        ("PUT", "/v1/pets/1", {"GET"}, "PUT"),
        ("DELETE", "/v1/pets/1", {"GET"}, "DELETE"),
        ("PATCH", "/v1/pets/1", {"GET"}, "PATCH"),
        ("POST", "/v1/openapi.json", {"GET"}, "POST"),
        ("POST", "/healthz", {"GET"}, "POST"),
        ("POST", "/v1/docs", {"GET"}, "POST"),
        ("DELETE", "/v1/docs/assets/swagger-ui.css", {"GET"}, "DELETE"),
    ],
)
def test_method_not_on_an_existing_path_is_405_with_allow(
    client: TestClient,
    auth: dict[str, str],
    method: str,
    path: str,
    allowed: set[str],
    not_allowed: str,
) -> None:
    response = client.request(method, path, headers=auth, json={"name": "Rex", "categoryId": 1})
    assert_error(response, 405, "method_not_allowed")
    allow = {m.strip() for m in response.headers["allow"].split(",")}
    assert allowed <= allow
    assert not_allowed not in allow
    assert_security_headers(response)
    assert_nothing_stored(client, auth)


# 400 malformed_json / invalid_request ------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"name": "Rex", "categoryId": 1', id="truncated-object"),
        pytest.param(b'{"name": "Rex"', id="truncated-after-name"),
        pytest.param(b'{"name": "Re', id="truncated-in-string"),
        pytest.param(b"{", id="open-brace"),
        pytest.param(b'{"name": "R\xffx", "categoryId": 1}', id="invalid-utf8-in-string"),
        pytest.param(b'\xff{"name": "Rex", "categoryId": 1}', id="invalid-utf8-outside"),
        pytest.param(b'{"name": "\xc3", "categoryId": 1}', id="truncated-utf8-sequence"),
        pytest.param(b'\xef\xbb\xbf{"name": "Rex", "categoryId": 1}', id="utf8-bom"),
        pytest.param(b'{"name": "Rex", "categoryId": 1} x', id="trailing-garbage"),
        pytest.param(b'{"name": "Rex", "categoryId": 1}}', id="trailing-brace"),
        pytest.param(b'{"name": "Rex", "categoryId": 1} {}', id="two-documents"),
        pytest.param(b"{'name': 'Rex', 'categoryId': 1}", id="single-quotes"),
        pytest.param(b'{"name": "Rex", "categoryId": NaN}', id="nan"),
        pytest.param(b'{"name": "Rex", "categoryId": 1,}', id="trailing-comma"),
        pytest.param(b'{"name": "Rex" /* c */, "categoryId": 1}', id="comment"),
        pytest.param(b"", id="empty"),
        pytest.param(b"   \r\n\t ", id="only-white-space"),
        pytest.param(b'{"name": 1,', id="truncated-after-a-wrongly-typed-field"),
        pytest.param(b'{"id": 1', id="truncated-after-an-unknown-field"),
        pytest.param(b"[1,", id="truncated-array"),
        pytest.param(
            b'{"name": "Rex", "categoryId": 0} garbage',
            id="trailing-garbage-after-an-invalid-value",
        ),
    ],
)
def test_body_that_is_not_json_is_400_malformed_json(
    client: TestClient, auth: dict[str, str], body: bytes
) -> None:
    response = post_raw(client, auth, body, "application/json")
    assert_error(response, 400, "malformed_json")
    assert_security_headers(response)
    assert_nothing_stored(client, auth)


@pytest.mark.parametrize(
    ("body", "where"),
    [
        pytest.param(
            b'{"name": "Rex", "categoryId": 1,}', "line 1, column 33 (byte 32)", id="comma"
        ),
        pytest.param(
            b'{\n  "name": "Rex",\n  "categoryId": }', "line 3, column 17 (byte 35)", id="line"
        ),
        pytest.param(b'{"name": "R\xc3\xa9\xffx"}', "byte 13", id="utf8"),
    ],
)
def test_malformed_json_says_where(
    client: TestClient, auth: dict[str, str], body: bytes, where: str
) -> None:
    response = post_raw(client, auth, body, "application/json")
    assert where in assert_error(response, 400, "malformed_json")


def test_a_lone_surrogate_is_called_what_it_is_not_invalid_utf8(
    client: TestClient, auth: dict[str, str]
) -> None:
    body = b'{"name": "Rex\\ud800", "categoryId": 1}'
    message = assert_error(post_raw(client, auth, body, "application/json"), 400, "malformed_json")
    assert "lone surrogate" in message
    assert "\\ud800" in message
    assert "UTF-8" not in message


def test_name_with_a_lone_surrogate_is_400_and_stores_nothing(
    client: TestClient, auth: dict[str, str]
) -> None:
    body = b'{"name": "Rex\\ud800", "categoryId": 1}'
    response = post_raw(client, auth, body, "application/json")
    assert response.status_code == 400
    assert response.json()["code"] in {"malformed_json", "invalid_request"}
    assert_nothing_stored(client, auth)


@pytest.mark.parametrize(
    "body",
    [b"[]", b'[{"name": "Rex", "categoryId": 1}]', b'"Rex"', b"1", b"1.5", b"null", b"true"],
)
def test_json_that_is_not_an_object_is_400_invalid_request(
    client: TestClient, auth: dict[str, str], body: bytes
) -> None:
    response = post_raw(client, auth, body, "application/json")
    assert_error(response, 400, "invalid_request")
    assert_nothing_stored(client, auth)


@pytest.mark.parametrize(
    "body",
    [
        {"name": "", "categoryId": 1},
        {"name": "Rex", "categoryId": 0},
        {"name": "Rex", "categoryId": 1, "id": 1},
        {"name": "Rex", "categoryId": 1, "status": "lost"},
        {"categoryId": 1},
        {},
    ],
)
def test_invalid_new_pet_is_400_invalid_request_and_changes_nothing(
    client: TestClient, auth: dict[str, str], body: dict[str, Any]
) -> None:
    response = client.post("/v1/pets", json=body, headers=auth)
    assert_error(response, 400, "invalid_request")
    assert_security_headers(response)
    assert_nothing_stored(client, auth)


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/v1/pets?limit=0", "invalid_request"),
        ("/v1/pets?status=lost", "invalid_request"),
        ("/v1/pets?cursor=forged", "invalid_request"),
        ("/v1/pets/abc", "invalid_request"),
    ],
)
def test_bad_parameters_are_400_error_bodies(
    client: TestClient, auth: dict[str, str], path: str, code: str
) -> None:
    assert_error(client.get(path, headers=auth), 400, code)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic dXNlcjpwYXNz"}],
)
@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/pets"), ("POST", "/v1/pets")])
def test_unauthenticated_request_is_401_error_body(
    client: TestClient, auth: dict[str, str], headers: dict[str, str], method: str, path: str
) -> None:
    response = client.request(method, path, headers=headers, json={"name": "Rex", "categoryId": 1})
    assert_error(response, 401, "unauthorized")
    assert_security_headers(response)
    assert_nothing_stored(client, auth)


# 415 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "application/json; charset=latin-1",
        "application/json; charset=iso-8859-1",
        "application/json; charset=utf-16",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "text/json",
        "application/jsonx",
        "application/xml",
    ],
)
def test_body_that_is_not_application_json_is_415(
    client: TestClient, auth: dict[str, str], content_type: str | None
) -> None:
    response = post_raw(client, auth, b'{"name": "Rex", "categoryId": 1}', content_type)
    assert_error(response, 415, "unsupported_media_type")
    assert_security_headers(response)
    assert_nothing_stored(client, auth)


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        'application/json; charset="utf-8"',
        "Application/JSON",
    ],
)
def test_application_json_in_utf8_is_accepted(
    client: TestClient, auth: dict[str, str], content_type: str
) -> None:
    response = post_raw(client, auth, '{"name": "Rëx", "categoryId": 1}'.encode(), content_type)
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "Rëx"


# 413 (D17) ----------------------------------------------------------------------------------


def test_body_over_64_kib_is_413_payload_too_large(
    client: TestClient, auth: dict[str, str]
) -> None:
    response = post_raw(client, auth, padded_pet(LIMIT + 1), "application/json")
    assert_error(response, 413, "payload_too_large")
    assert_security_headers(response)
    assert_nothing_stored(client, auth)


def test_body_of_one_mebibyte_is_413(client: TestClient, auth: dict[str, str]) -> None:
    response = post_raw(client, auth, b"[" + b"1," * (512 * 1024) + b"1]", "application/json")
    assert_error(response, 413, "payload_too_large")
    assert_nothing_stored(client, auth)


def test_body_of_exactly_64_kib_is_accepted(client: TestClient, auth: dict[str, str]) -> None:
    body = padded_pet(LIMIT)
    assert len(body) == LIMIT
    response = post_raw(client, auth, body, "application/json")
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "Rex"


def test_body_just_under_the_limit_with_an_invalid_name_is_400_not_413(
    client: TestClient, auth: dict[str, str]
) -> None:
    body = json.dumps({"name": "x" * (LIMIT - 100), "categoryId": 1}).encode()
    assert len(body) < LIMIT
    message = assert_error(post_raw(client, auth, body, "application/json"), 400, "invalid_request")
    assert "name" in message
    assert_nothing_stored(client, auth)


def _chunks(total: int, size: int = 8 * 1024) -> Iterator[bytes]:
    body = padded_pet(total)
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_chunked_body_over_64_kib_without_content_length_is_413(
    client: TestClient, auth: dict[str, str]
) -> None:
    response = post_raw(client, auth, _chunks(LIMIT + 1), "application/json")
    assert "content-length" not in response.request.headers
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert_error(response, 413, "payload_too_large")
    assert_nothing_stored(client, auth)


def test_chunked_body_within_the_limit_is_accepted(
    client: TestClient, auth: dict[str, str]
) -> None:
    response = post_raw(client, auth, _chunks(LIMIT), "application/json")
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert response.status_code == 201, response.text


def test_body_limit_is_the_configured_one(
    database_url: str, auth: dict[str, str], clock: FakeClock, conformance: Conformance
) -> None:
    settings = Settings(database_url=database_url, max_body_bytes=2048)
    with TestClient(create_app(settings, clock=clock), raise_server_exceptions=False) as client:
        client.event_hooks["response"] = [conformance.check]
        assert post_raw(client, auth, padded_pet(2048), "application/json").status_code == 201
        response = post_raw(client, auth, padded_pet(2049), "application/json")
        assert_error(response, 413, "payload_too_large")


# 500 and 503 --------------------------------------------------------------------------------


@pytest.mark.own_database
@pytest.mark.parametrize("path", ["/v1/pets/5", "/v1/pets", "/v1/pets?limit=100"])
def test_unexpected_fault_is_500_internal_error_without_internals(
    client: TestClient, auth: dict[str, str], database_url: str, path: str
) -> None:
    client.post("/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=auth)
    corrupt_pet(database_url)
    response = client.get(path, headers=auth)
    assert_error(response, 500, "internal_error")
    for internal in _INTERNALS:
        assert internal not in response.text, internal
    assert_security_headers(response)


@pytest.mark.own_database
def test_fault_in_one_row_leaves_other_reads_working(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    pet = client.post("/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=auth).json()
    corrupt_pet(database_url)
    assert client.get("/v1/pets/5", headers=auth).status_code == 500
    assert client.get("/v1/pets?status=available", headers=auth).json() == [pet]
    assert client.get(f"/v1/pets/{pet['id']}", headers=auth).json() == pet


@pytest.mark.own_database
def test_database_without_its_tables_is_503_unavailable_with_retry_after(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    assert client.get("/v1/pets", headers=auth).status_code == 200
    drop_pets_table(database_url)
    for response in (
        client.get("/v1/pets", headers=auth),
        client.post("/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=auth),
        client.get("/v1/pets/1", headers=auth),
    ):
        assert_error(response, 503, "unavailable")
        assert response.headers["retry-after"].isdigit()
        assert "no such table" not in response.text
        assert "sqlite" not in response.text.lower()
        assert_security_headers(response)


# D18 headers on every response ------------------------------------------------------------


def _send(client: TestClient, auth: dict[str, str], kind: str) -> httpx2.Response:
    pet = {"name": "Rex", "categoryId": 1}
    requests: dict[str, Callable[[], httpx2.Response]] = {
        "list-200": lambda: client.get("/v1/pets", headers=auth),
        "create-201": lambda: client.post("/v1/pets", json=pet, headers=auth),
        "get-404": lambda: client.get("/v1/pets/999", headers=auth),
        "list-400": lambda: client.get("/v1/pets?limit=0", headers=auth),
        "list-401": lambda: client.get("/v1/pets"),
        "path-404": lambda: client.get("/nowhere"),
        "pets-405": lambda: client.delete("/v1/pets", headers=auth),
        "create-413": lambda: post_raw(client, auth, padded_pet(LIMIT + 1), "application/json"),
        "create-415": lambda: post_raw(client, auth, b"{}", "text/plain"),
        "docs": lambda: client.get("/v1/docs"),
        "docs-init": lambda: client.get("/v1/docs/init.js"),
        "docs-asset": lambda: client.get("/v1/docs/assets/swagger-ui.css"),
        "deprecations": lambda: client.get("/v1/docs/deprecations"),
        "openapi": lambda: client.get("/v1/openapi.json"),
        "healthz": lambda: client.get("/healthz"),
        "readyz": lambda: client.get("/readyz"),
    }
    return requests[kind]()


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("list-200", 200),
        ("create-201", 201),
        ("get-404", 404),
        ("list-400", 400),
        ("list-401", 401),
        ("path-404", 404),
        ("pets-405", 405),
        ("create-413", 413),
        ("create-415", 415),
        ("docs", 200),
        ("docs-init", 200),
        ("docs-asset", 200),
        ("deprecations", 200),
        ("openapi", 200),
        ("healthz", 200),
        ("readyz", 200),
    ],
)
def test_every_response_carries_the_security_headers(
    client: TestClient, auth: dict[str, str], kind: str, status: int
) -> None:
    response = _send(client, auth, kind)
    assert response.status_code == status
    assert_security_headers(response, own_policy=kind == "docs")


@pytest.mark.own_database
def test_500_carries_the_security_headers(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    corrupt_pet(database_url)
    response = client.get("/v1/pets", headers=auth)
    assert response.status_code == 500
    assert_security_headers(response)


@pytest.mark.own_database
def test_503_carries_the_security_headers(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    drop_pets_table(database_url)
    response = client.get("/v1/pets", headers=auth)
    assert response.status_code == 503
    assert_security_headers(response)


# D18 X-Request-ID ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_id",
    [
        "abc-123",
        "0f8fad5b-d9cb-469f-a165-70867728950e",
        "req.1:2@host/x+y=z_",
        "a",
        "a" * 128,
    ],
)
@pytest.mark.parametrize("path", ["/v1/pets", "/nowhere", "/healthz"])
def test_sane_client_request_id_is_echoed(
    client: TestClient, auth: dict[str, str], request_id: str, path: str
) -> None:
    response = client.get(path, headers={**auth, "X-Request-ID": request_id})
    assert response.headers.get_list("x-request-id") == [request_id]


@pytest.mark.parametrize(
    "request_id",
    [
        pytest.param("a" * 129, id="too-long"),
        pytest.param("a" * 1000, id="far-too-long"),
        pytest.param("has space", id="space"),
        pytest.param('has"quote', id="double-quote"),
        pytest.param("it's", id="single-quote"),
        pytest.param("<script>", id="markup"),
        pytest.param("a;b", id="semicolon"),
        pytest.param("", id="empty"),
    ],
)
def test_insane_client_request_id_is_replaced_by_a_new_one(
    client: TestClient, auth: dict[str, str], request_id: str
) -> None:
    response = client.get("/v1/pets", headers={**auth, "X-Request-ID": request_id})
    assert response.status_code == 200
    (echoed,) = response.headers.get_list("x-request-id")
    assert echoed != request_id
    assert _GENERATED_ID.fullmatch(echoed), echoed


def test_request_id_is_fresh_for_each_request_without_one(
    client: TestClient, auth: dict[str, str]
) -> None:
    ids = [client.get("/v1/pets", headers=auth).headers["x-request-id"] for _ in range(3)]
    ids.append(client.get("/nowhere").headers["x-request-id"])
    assert len(set(ids)) == 4
    assert all(_GENERATED_ID.fullmatch(i) for i in ids), ids


def _records(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger]


@pytest.mark.parametrize(
    ("path", "status"), [("/v1/pets", 200), ("/v1/pets?limit=0", 400), ("/nowhere", 404)]
)
def test_sent_request_id_is_in_the_access_log_line(
    client: TestClient,
    auth: dict[str, str],
    caplog: pytest.LogCaptureFixture,
    path: str,
    status: int,
) -> None:
    caplog.set_level(logging.INFO, logger="petstore.access")
    response = client.get(path, headers={**auth, "X-Request-ID": "trace-me-42"})
    assert response.status_code == status
    assert response.headers["x-request-id"] == "trace-me-42"
    lines = [
        r
        for r in _records(caplog, "petstore.access")
        if getattr(r, "request_id", None) == "trace-me-42"
    ]
    assert len(lines) == 1
    assert str(status) in lines[0].getMessage()


def test_generated_request_id_is_in_the_access_log_line(
    client: TestClient, auth: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="petstore.access")
    first = client.get("/v1/pets", headers=auth).headers["x-request-id"]
    second = client.get("/v1/pets", headers={**auth, "X-Request-ID": "a b"}).headers["x-request-id"]
    logged = [getattr(r, "request_id", None) for r in _records(caplog, "petstore.access")]
    assert first in logged
    assert second in logged
    assert "a b" not in logged


@pytest.mark.own_database
def test_request_id_of_a_500_is_in_its_log_lines(
    client: TestClient,
    auth: dict[str, str],
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="petstore")
    corrupt_pet(database_url)
    response = client.get("/v1/pets", headers={**auth, "X-Request-ID": "fault-1"})
    assert response.status_code == 500
    assert response.headers["x-request-id"] == "fault-1"
    names = {r.name for r in caplog.records if getattr(r, "request_id", None) == "fault-1"}
    assert names == {"petstore.access", "petstore.error"}


# 503 unavailable within the request timeout (D25) -----------------------------------------


@contextmanager
def pets_table_locked(database_url: str) -> Iterator[None]:
    """Another connection holds the database's write lock on the pets (SQLite) or
    the pets table itself (PostgreSQL) until the block ends: a store call that
    writes a pet waits as long."""
    if database_url.startswith("sqlite"):
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.rollback()
            conn.close()
        return
    import psycopg

    with psycopg.connect(database_url) as pg:
        pg.execute("LOCK TABLE pets IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            pg.rollback()


def test_a_request_the_database_does_not_answer_in_time_is_503_within_the_timeout(
    database_url: str, auth: dict[str, str]
) -> None:
    settings = Settings(database_url=database_url, request_timeout_seconds=1)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        with pets_table_locked(database_url):
            started = time.monotonic()
            response = client.post("/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=auth)
            took = time.monotonic() - started
            message = assert_error(response, 503, "unavailable")
            assert "within 1 s" in message
            assert response.headers["retry-after"].isdigit()
            assert_security_headers(response)
            assert 0.7 <= took < 1.5, took  # the database would have made it wait 5 s
        # The instance goes on answering once the database does.
        time.sleep(0.2)
        response = client.post("/v1/pets", json={"name": "Max", "categoryId": 2}, headers=auth)
        assert response.status_code == 201, response.text
        assert "Max" in [pet["name"] for pet in client.get("/v1/pets", headers=auth).json()]
