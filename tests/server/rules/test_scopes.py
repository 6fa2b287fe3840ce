"""Scopes (D21) and per-key rate limits (D22) over the real app, on both backends."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from petstore.server.app import create_app
from petstore.server.config import Settings
from petstore.server.rules import keys
from petstore.server.store import migrate
from tests.conftest import NOW, postgres_database, run_sql

REX = {"name": "Rex", "categoryId": 1}
CHALLENGE = 'Bearer realm="petstore", error="insufficient_scope", scope="{scope}"'


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_forbidden(response: object, scope: str) -> None:
    assert response.status_code == 403, response.text  # type: ignore[attr-defined]
    assert response.json() == {  # type: ignore[attr-defined]
        "code": "forbidden",
        "message": f"this API key lacks the {scope} scope",
        "status": 403,
    }
    assert response.headers["www-authenticate"] == CHALLENGE.format(scope=scope)  # type: ignore[attr-defined]


def test_a_read_only_key_lists_and_gets_but_cannot_create(
    client: TestClient, make_key: Callable[..., str], auth: dict[str, str], database_url: str
) -> None:
    pet = client.post("/v1/pets", json=REX, headers=auth).json()
    reader = bearer(make_key("report", scopes=["pets:read"]))
    assert client.get("/v1/pets", headers=reader).json() == [pet]
    assert client.get(f"/v1/pets/{pet['id']}", headers=reader).json() == pet
    assert_forbidden(client.post("/v1/pets", json=REX, headers=reader), "pets:write")
    assert run_sql(database_url, "SELECT count(*) AS n FROM pets") == [{"n": 1}]


def test_a_write_only_key_creates_but_cannot_read(
    client: TestClient, make_key: Callable[..., str]
) -> None:
    writer = bearer(make_key("feeder", scopes=["pets:write"]))
    pet = client.post("/v1/pets", json=REX, headers=writer)
    assert pet.status_code == 201
    assert_forbidden(client.get("/v1/pets", headers=writer), "pets:read")
    assert_forbidden(client.get(f"/v1/pets/{pet.json()['id']}", headers=writer), "pets:read")


def test_a_forbidden_create_is_refused_before_its_body_is_read_and_is_not_counted(
    client: TestClient, make_key: Callable[..., str]
) -> None:
    """The 403 comes before the body (an oversized one is not 413) and before the
    rate limit, so it says Connection: close (D17) and spends none of the budget."""
    reader = bearer(make_key("report", scopes=["pets:read"]))
    huge = b'{"name": "' + b"x" * 70_000 + b'", "categoryId": 1}'
    response = client.post(
        "/v1/pets", content=huge, headers={**reader, "Content-Type": "application/json"}
    )
    assert_forbidden(response, "pets:write")
    assert response.headers["connection"] == "close"
    assert "ratelimit" not in response.headers
    listed = client.get("/v1/pets", headers=reader)
    first = int(listed.headers["ratelimit"].split("r=")[1].split(";")[0])
    limit = int(listed.headers["ratelimit-policy"].split("q=")[1].split(";")[0])
    assert first == limit - 1  # the 403 took nothing


def test_a_key_with_its_own_rate_limit_is_limited_alone(
    client: TestClient, make_key: Callable[..., str], auth: dict[str, str]
) -> None:
    """D22: a key created with 3/minute gets its 429 on the fourth request; another
    key is unaffected; each sees its own quota in RateLimit-Policy."""
    small = bearer(make_key("small", rate_limit="3/minute"))
    answers = [client.get("/v1/pets", headers=small) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert {a.headers["ratelimit-policy"] for a in answers} == {'"key";q=3;w=60'}
    assert [a.headers["ratelimit"].split(";")[1] for a in answers] == ["r=2", "r=1", "r=0", "r=0"]
    other = client.get("/v1/pets", headers=auth)
    assert other.status_code == 200
    assert other.headers["ratelimit-policy"] == '"default";q=600;w=60'


@pytest.mark.parametrize("scopes", [["pets:read"], ["pets:write"]])
def test_a_key_without_the_scope_is_403_even_when_its_budget_is_spent(
    client: TestClient, make_key: Callable[..., str], scopes: list[str]
) -> None:
    """Scope before budget: a key that may not do something hears that, not 429."""
    key = bearer(make_key("narrow", scopes=scopes, rate_limit="1/minute"))
    allowed = ("GET", "/v1/pets") if scopes == ["pets:read"] else ("POST", "/v1/pets")
    refused = ("POST", "/v1/pets") if scopes == ["pets:read"] else ("GET", "/v1/pets")
    for _ in range(2):
        client.request(*allowed, json=REX, headers=key)
    missing = "pets:write" if scopes == ["pets:read"] else "pets:read"
    assert_forbidden(client.request(*refused, json=REX, headers=key), missing)


def test_keys_made_before_scopes_existed_keep_both_and_the_default_limit(
    backend: str, tmp_path: Path
) -> None:
    """Migration 0003 is safe during a rolling deploy: a key the previous release
    made (or still makes, without the new columns) can list and create."""
    with ExitStack() as stack:
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path / 'previous.db'}"
        else:
            url = stack.enter_context(postgres_database())
        migrate.upgrade(url, to="0002")
        key = keys.generate()
        run_sql(
            url,
            "INSERT INTO api_keys (name, prefix, key_hash, created_at) VALUES (?, ?, ?, ?)",
            ("previous", keys.visible_prefix(key), keys.hash_key(key), NOW.isoformat()),
        )
        migrate.upgrade(url)
        client = stack.enter_context(TestClient(create_app(Settings(database_url=url))))
        assert client.post("/v1/pets", json=REX, headers=bearer(key)).status_code == 201
        listed = client.get("/v1/pets", headers=bearer(key))
        assert listed.status_code == 200
        assert listed.headers["ratelimit-policy"] == '"default";q=600;w=60'
