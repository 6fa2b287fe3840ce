"""Connections a pooling client reuses (D17, RFC 9112 section 9.6): an answer sent
before the request body was read whole says ``Connection: close`` and closes, every
other answer keeps the connection alive. Against real ``petstore serve`` processes."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from petstore.server.store import migrate
from tests.conftest import LiveServer, postgres_database

LARGE = b'{"name": "' + b"x" * (65 * 1024) + b'", "categoryId": 1}'


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """A live server on each backend, with its dev key."""
    root = tmp_path_factory.mktemp(f"connections-{request.param}")
    if request.param == "sqlite":
        live = LiveServer(root)
        live.start()
        yield live
        live.stop()
        return
    with postgres_database() as url:
        migrate.upgrade(url)
        live = LiveServer(root, env={"PETSTORE_DATABASE_URL": url})
        live.start()
        yield live
        live.stop()


def test_a_pooled_client_alternating_oversized_posts_and_reads_meets_no_transport_error(
    server: LiveServer,
) -> None:
    auth = {"Authorization": f"Bearer {server.dev_key}"}
    json_auth = {**auth, "Content-Type": "application/json"}
    with httpx.Client(base_url=f"{server.url}/v1", timeout=10) as client:
        for _ in range(30):
            refused = client.post("/pets", content=LARGE, headers=json_auth)
            assert refused.status_code == 413
            assert refused.headers["connection"] == "close"
            assert client.get("/pets", headers=auth).status_code == 200


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),  # no key: answered before the body
        ({"Content-Type": "text/plain"}, 415),
        ({"Content-Type": "application/json", "Idempotency-Key": "not a token"}, 400),
    ],
)
def test_an_answer_sent_before_the_body_was_read_closes_the_connection(
    server: LiveServer, headers: dict[str, str], status: int
) -> None:
    key = {} if status == 401 else {"Authorization": f"Bearer {server.dev_key}"}
    with httpx.Client(base_url=f"{server.url}/v1", timeout=10) as client:
        response = client.post(
            "/pets", content=b'{"name": "Rex", "categoryId": 1}', headers={**key, **headers}
        )
        assert response.status_code == status
        assert response.headers["connection"] == "close"
        assert client.get("/openapi.json").status_code == 200  # a new connection, no error


def test_answers_after_the_whole_body_keep_the_connection(server: LiveServer) -> None:
    auth = {"Authorization": f"Bearer {server.dev_key}", "Content-Type": "application/json"}
    with httpx.Client(base_url=f"{server.url}/v1", timeout=10) as client:
        created = client.post("/pets", content=b'{"name": "Rex", "categoryId": 1}', headers=auth)
        invalid = client.post("/pets", content=b'{"name": "Rex"}', headers=auth)
        read = client.get("/pets", headers=auth)
    assert (created.status_code, invalid.status_code, read.status_code) == (201, 400, 200)
    for response in (created, invalid, read):
        assert response.headers.get("connection", "keep-alive") != "close"
