"""D25 in the store: every PostgreSQL and Redis connection notices a dead peer
within seconds, a database that does not answer is 503 within the bound (never a
hung request), and a create whose COMMIT outcome is unknown is 503 and settled,
without a duplicate, by the client's retry with the same Idempotency-Key (D16).

The faults are made by a loopback proxy between the app and the suite's own servers
(tests/tcpproxy.py): it stops forwarding, as a paused or cut-off host does, or cuts
a connection at the moment its COMMIT passes."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from starlette.testclient import TestClient

from petstore.server.app import create_app
from petstore.server.config import Settings
from petstore.server.store import migrate
from petstore.server.store.postgres_pool import PostgresDatabase
from tests.conftest import FakeClock, redis_url, run_sql
from tests.tcpproxy import Cut, TcpProxy

#: The PostgreSQL store's default bound (seconds): pool, connect, statement, client.
STORE_TIMEOUT = 5.0
REX = b'{"name": "Rex", "categoryId": 1}'


@pytest.fixture(scope="module")
def backend() -> str:
    """These faults are between hosts: PostgreSQL and Redis only. (SQLite runs in
    process: its COMMIT returns or raises, so its outcome is never unknown.)"""
    return "postgres"


@pytest.fixture
def proxy(database_url: str) -> Iterator[TcpProxy]:
    port = urlsplit(database_url).port
    assert port is not None
    with TcpProxy(port) as proxy:
        yield proxy


def through(database_url: str, proxy: TcpProxy) -> str:
    """``database_url`` with its port replaced by the proxy's."""
    parts = urlsplit(database_url)
    return parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()


def keepalives(sock_fd: int) -> dict[str, int]:
    """The TCP keepalive options of the socket with descriptor ``sock_fd``."""
    with socket.socket(fileno=socket.dup(sock_fd)) as sock:
        return {
            "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "user_timeout_ms": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        }


D25_OPTIONS = {"keepalive": 1, "idle": 2, "interval": 1, "count": 3, "user_timeout_ms": 5000}


def pool_keepalives(url: str) -> dict[str, int]:
    async def scenario() -> dict[str, int]:
        database = PostgresDatabase(url, size=2, timeout=STORE_TIMEOUT)
        await database.open()
        try:
            async with database._pool.connection() as conn:
                return keepalives(conn.pgconn.socket)
        finally:
            await database.close()

    return asyncio.run(scenario())


def test_pooled_connections_notice_a_dead_peer_within_seconds(database_url: str) -> None:
    assert pool_keepalives(database_url) == D25_OPTIONS


def test_a_multi_host_url_gets_the_keepalives_too(database_url: str) -> None:
    parts = urlsplit(database_url)
    host = f"127.0.0.1:{parts.port}"
    url = f"postgresql://{parts.username}@{host},{host}{parts.path}?target_session_attrs=read-write"
    assert pool_keepalives(url) == D25_OPTIONS


def test_a_keepalive_option_in_the_url_wins(database_url: str) -> None:
    options = pool_keepalives(f"{database_url}?keepalives_idle=7&tcp_user_timeout=9000")
    assert options == {**D25_OPTIONS, "idle": 7, "user_timeout_ms": 9000}


def test_the_migrations_connect_with_the_keepalives(database_url: str) -> None:
    engine = migrate.engine_for(migrate.sqlalchemy_url(database_url), libpq_url=database_url)
    try:
        with engine.connect() as connection:
            driver_connection: Any = connection.connection.driver_connection
            assert keepalives(driver_connection.pgconn.socket) == D25_OPTIONS
    finally:
        engine.dispose()


@pytest.fixture
def app_through(
    database_url: str, proxy: TcpProxy, clock: FakeClock
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The real app whose database connections go through ``proxy``, and the
    headers of a valid key."""
    from petstore.server.rules import keys
    from petstore.server.store import open_store

    async def make_key() -> str:
        store = await open_store(database_url)
        try:
            _, key = await keys.create(store.api_keys, name="t", now=clock(), expires_at=None)
        finally:
            await store.close()
        return key

    key = asyncio.run(make_key())
    app = create_app(Settings(database_url=through(database_url, proxy)), clock=clock)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


def rows_named(database_url: str, name: str) -> list[int]:
    rows = run_sql(database_url, "SELECT id FROM pets WHERE name = ? ORDER BY id", (name,))
    return [row["id"] for row in rows]


@pytest.mark.parametrize("cut", ["before_commit", "after_commit"])
def test_a_create_whose_commit_outcome_is_unknown_is_503_and_its_retry_settles_it(
    database_url: str,
    proxy: TcpProxy,
    app_through: tuple[TestClient, dict[str, str]],
    cut: Cut,
) -> None:
    """The connection dies just before COMMIT reaches the server (nothing stored) or
    just after (stored, the answer lost): either way the client is told 503, and its
    retry with the same Idempotency-Key gets one animal, never two."""
    client, headers = app_through
    headers = {**headers, "Idempotency-Key": f"unknown-{cut}"}
    body = b'{"name": "Schrodinger", "categoryId": 1}'
    proxy.cut = cut
    first = client.post("/v1/pets", content=body, headers=headers)
    assert proxy.cuts == 1
    assert first.status_code == 503
    assert first.json()["code"] == "unavailable"
    assert first.headers["Retry-After"].isdigit()
    stored = rows_named(database_url, "Schrodinger")
    assert len(stored) == (1 if cut == "after_commit" else 0)

    retry = client.post("/v1/pets", content=body, headers=headers)
    assert retry.status_code == 201
    assert rows_named(database_url, "Schrodinger") == [retry.json()["id"]]
    if cut == "after_commit":
        assert retry.json()["id"] == stored[0]  # the replay of the committed create
    again = client.post("/v1/pets", content=body, headers=headers)
    assert again.json() == retry.json()


def test_a_create_stalled_before_its_commit_holds_other_creates_2_s_at_most(
    database_url: str,
    proxy: TcpProxy,
    app_through: tuple[TestClient, dict[str, str]],
    clock: FakeClock,
) -> None:
    """D27: an instance whose host stops sending after a create's statements (cut
    off, paused) leaves that transaction open on the server, holding the lock that
    keeps ids in commit order. The server ends it after 2 s (its sessions'
    idle_in_transaction_session_timeout), so another instance's create is answered
    201 instead of waiting out its own bound (5 s) for a 503; the stalled create is
    503, stored nowhere."""
    import threading

    stalled_client, headers = app_through
    proxy.cut = "hold_commit"
    stalled: list[int] = []
    keyed = {**headers, "Idempotency-Key": "stalled"}  # a create in a transaction (D16)
    thread = threading.Thread(
        target=lambda: stalled.append(
            stalled_client.post("/v1/pets", content=b'{"name": "Stuck", "categoryId": 1}',
                                headers=keyed).status_code
        )
    )  # fmt: skip
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while proxy.cuts == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.cuts == 1
        other = create_app(Settings(database_url=database_url), clock=clock)
        with TestClient(other) as direct:
            made, seconds = timed(lambda: direct.post("/v1/pets", content=REX, headers=headers))
        assert made.status_code == 201
        assert seconds < 4
    finally:
        proxy.resume()
        thread.join(10)
    assert stalled == [503]
    assert rows_named(database_url, "Stuck") == []


def timed(call: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def test_a_paused_database_is_503_within_the_bound_and_recovers(
    database_url: str, proxy: TcpProxy, app_through: tuple[TestClient, dict[str, str]]
) -> None:
    """PostgreSQL stops answering (its host paused, or cut off with the TCP
    connections up): a getPet and a create are each 503 within the store's bound
    (which no server-side statement_timeout enforces now), then, forwarding again,
    everything is served."""
    client, headers = app_through
    created = client.post("/v1/pets", content=REX, headers=headers)
    assert created.status_code == 201
    pet_id = created.json()["id"]
    assert client.get(f"/v1/pets/{pet_id}", headers=headers).status_code == 200
    # An animal this instance has not read yet: its getPet must ask the database (one
    # read in the last seconds is answered from memory, store.kept_pets).
    unread = client.post("/v1/pets", content=REX, headers=headers).json()["id"]

    proxy.pause()
    try:
        got, get_seconds = timed(lambda: client.get(f"/v1/pets/{unread}", headers=headers))
        made, create_seconds = timed(lambda: client.post("/v1/pets", content=REX, headers=headers))
    finally:
        proxy.resume()
    assert (got.status_code, got.json()["code"]) == (503, "unavailable")
    assert (made.status_code, made.json()["code"]) == (503, "unavailable")
    assert "Retry-After" in got.headers
    assert "Retry-After" in made.headers
    # One bound of the store's, and a margin for a loaded machine: never a hang.
    assert get_seconds < STORE_TIMEOUT + 2
    assert create_seconds < STORE_TIMEOUT + 2

    assert client.get(f"/v1/pets/{pet_id}", headers=headers).status_code == 200
    assert client.post("/v1/pets", content=REX, headers=headers).status_code == 201
    assert client.get("/readyz").status_code == 200


def test_a_paused_redis_fails_open_at_once_and_counting_resumes(
    database_url: str, clock: FakeClock
) -> None:
    """Redis stops answering: requests are still served, quickly and without
    rate-limit fields (D15 fails open); forwarding again, counting resumes."""
    from petstore.server.rules import keys
    from petstore.server.store import open_store

    async def make_key() -> str:
        store = await open_store(database_url)
        try:
            _, key = await keys.create(store.api_keys, name="t", now=clock(), expires_at=None)
        finally:
            await store.close()
        return key

    headers = {"Authorization": f"Bearer {asyncio.run(make_key())}"}
    redis_port = urlsplit(redis_url()).port
    assert redis_port is not None
    with TcpProxy(redis_port) as proxy:
        settings = Settings(
            database_url=database_url, redis_url=f"redis://127.0.0.1:{proxy.port}/0"
        )
        app = create_app(settings, clock=clock)
        with TestClient(app, raise_server_exceptions=False) as client:
            assert "RateLimit" in client.get("/v1/pets", headers=headers).headers
            proxy.pause()
            try:
                for _ in range(3):
                    response, seconds = timed(lambda: client.get("/v1/pets", headers=headers))
                    assert response.status_code == 200
                    assert "RateLimit" not in response.headers
                    assert seconds < 1.5
            finally:
                proxy.resume()
            deadline = time.monotonic() + 10
            while "RateLimit" not in client.get("/v1/pets", headers=headers).headers:
                assert time.monotonic() < deadline, "counting did not resume"
                time.sleep(0.1)
