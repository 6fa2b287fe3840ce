"""Per-API-key rate limits (D15): the IETF RateLimit fields on every ``/v1/pets``
response, 429 with ``Retry-After``, in memory and in Redis (one budget shared by
several instances), and failing open when Redis cannot be reached."""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import redis
import uvloop
from starlette.testclient import TestClient

from petstore.server.app import create_app
from petstore.server.config import Settings
from petstore.server.http.pipeline import Service
from petstore.server.rules.ratelimit import RateLimiter
from petstore.server.store import migrate
from petstore.server.store.counters import (
    REDIS_CONNECT_SECONDS,
    REDIS_TIMEOUT_SECONDS,
    Counters,
)
from tests.conformance import Conformance
from tests.conftest import (
    FakeClock,
    LiveServer,
    lifespan,
    postgres_database,
    redis_url,
    run_sql,
)
from tests.tcpproxy import TcpProxy

UNREACHABLE_REDIS_URL = "redis://127.0.0.1:1/0"
DEFAULT_POLICY = '"default";q=600;w=60'
_RATELIMIT = re.compile(r'"default";r=(\d+);t=(\d+)')
REX = {"name": "Rex", "categoryId": 1}

StartApp = Callable[..., TestClient]


@pytest.fixture
def start_app(database_url: str, clock: FakeClock, conformance: Conformance) -> Iterator[StartApp]:
    """Starts an instance of the app on this test's database with settings overridden;
    every response is checked against the OpenAPI document."""
    with ExitStack() as stack:

        def start(**overrides: Any) -> TestClient:
            app = create_app(Settings(database_url=database_url, **overrides), clock=clock)
            client = stack.enter_context(TestClient(app, raise_server_exceptions=False))
            client.event_hooks["response"] = [conformance.check]
            return client

        yield start


def _redis_clients_named(name: str) -> int:
    store = redis.Redis.from_url(redis_url())
    try:
        clients: list[dict[str, Any]] = store.client_list()  # type: ignore[assignment]
        return [client.get("name") for client in clients].count(name)
    finally:
        store.close()


def _forget_redis_counters() -> None:
    """API key ids restart with each test database, so counters of an earlier test
    would share this test's partition."""
    store = redis.Redis.from_url(redis_url())
    try:
        names = list(store.scan_iter(match="LIMITS*"))
        if names:
            store.delete(*names)
    finally:
        store.close()


@pytest.fixture
def fresh_redis() -> Iterator[str]:
    _forget_redis_counters()
    yield redis_url()
    _forget_redis_counters()


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _remaining(response: httpx.Response) -> tuple[int, int]:
    """``r`` and ``t`` of the RateLimit field."""
    match = _RATELIMIT.fullmatch(response.headers["ratelimit"])
    assert match, response.headers["ratelimit"]
    return int(match.group(1)), int(match.group(2))


def _assert_rate_limited(response: httpx.Response, *, policy: str) -> int:
    assert response.status_code == 429, response.text
    body = response.json()
    assert body["code"] == "rate_limited"
    assert body["status"] == 429
    retry_after = response.headers["retry-after"]
    assert retry_after.isdigit(), retry_after
    assert 1 <= int(retry_after) <= 60
    assert response.headers["ratelimit-policy"] == policy
    remaining, reset = _remaining(response)
    assert remaining == 0
    assert 0 <= reset <= 60
    return int(retry_after)


# The fields on every response ----------------------------------------------------------


_AUTHENTICATED = [
    pytest.param("GET", "/v1/pets", None, 200, id="list-200"),
    pytest.param("POST", "/v1/pets", REX, 201, id="create-201"),
    pytest.param("GET", "/v1/pets?limit=0", None, 400, id="list-400"),
    pytest.param("POST", "/v1/pets", {"name": "Rex"}, 400, id="create-400"),
    pytest.param("GET", "/v1/pets/999", None, 404, id="get-404"),
    pytest.param("GET", "/v1/pets/abc", None, 400, id="get-400"),
]


@pytest.mark.parametrize(("method", "path", "body", "status"), _AUTHENTICATED)
def test_every_authenticated_response_carries_both_fields(
    client: TestClient,
    auth: dict[str, str],
    api_key: str,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    status: int,
) -> None:
    response = client.request(method, path, json=body, headers=auth)
    assert response.status_code == status, response.text
    assert response.headers["ratelimit-policy"] == DEFAULT_POLICY
    remaining, reset = _remaining(response)
    assert remaining == 599
    assert 1 <= reset <= 60
    for name, value in response.headers.items():
        assert api_key not in value, name
        assert api_key[:17] not in value, name


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no-key"),
        pytest.param(_bearer("petstore_" + "A" * 43), id="unknown-key"),
        pytest.param({"Authorization": "Basic dXNlcjpwYXNz"}, id="other-scheme"),
    ],
)
@pytest.mark.parametrize(("method", "body"), [("GET", None), ("POST", REX)])
def test_a_401_carries_the_policy(
    client: TestClient,
    database_url: str,
    headers: dict[str, str],
    method: str,
    body: dict[str, Any] | None,
) -> None:
    response = client.request(method, "/v1/pets", json=body, headers=headers)
    assert response.status_code == 401
    assert response.headers["ratelimit-policy"] == DEFAULT_POLICY
    assert "petstore_" not in response.headers.get("ratelimit", "")


def test_remaining_falls_by_one_per_request_of_any_kind(
    client: TestClient, auth: dict[str, str]
) -> None:
    requests = [("GET", "/v1/pets", None), ("POST", "/v1/pets", REX)] * 3
    requests += [("GET", "/v1/pets/1", None), ("GET", "/v1/pets?limit=0", None)]
    seen = []
    for method, path, body in requests:
        response = client.request(method, path, json=body, headers=auth)
        assert response.status_code < 500
        seen.append(_remaining(response)[0])
    assert seen == list(range(599, 599 - len(requests), -1))


# Over the limit ---------------------------------------------------------------------


@pytest.fixture(params=["memory", "redis"])
def limit_store(request: pytest.FixtureRequest) -> str | None:
    """The limiter's counters: in this process, or in Redis."""
    if request.param == "memory":
        return None
    url: str = request.getfixturevalue("fresh_redis")
    return url


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("GET", "/v1/pets", None, id="list"),
        pytest.param("POST", "/v1/pets", {"name": "Max", "categoryId": 2}, id="create"),
        pytest.param("GET", "/v1/pets/1", None, id="get"),
    ],
)
def test_the_request_past_the_limit_is_429_with_retry_after(
    start_app: StartApp,
    make_key: Callable[..., str],
    database_url: str,
    limit_store: str | None,
    method: str,
    path: str,
    body: dict[str, Any] | None,
) -> None:
    client = start_app(rate_limit="3/minute", redis_url=limit_store)
    auth = _bearer(make_key())
    assert client.post("/v1/pets", json=REX, headers=auth).status_code == 201
    assert [_remaining(client.get("/v1/pets", headers=auth))[0] for _ in range(2)] == [1, 0]
    _assert_rate_limited(
        client.request(method, path, json=body, headers=auth), policy='"default";q=3;w=60'
    )
    _assert_rate_limited(client.get("/v1/pets", headers=auth), policy='"default";q=3;w=60')
    assert run_sql(database_url, "SELECT name FROM pets") == [{"name": "Rex"}]


def _at_once(
    app: Service, requests: list[dict[str, str]], *, first: Sequence[dict[str, str]] = ()
) -> list[httpx.Response]:
    """GET /v1/pets once per header set in ``requests``, all at once, in one event loop,
    after one request per header set in ``first``, one after the other."""

    async def send() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with (
            lifespan(app),
            httpx.AsyncClient(transport=transport, base_url="http://testserver") as client,
        ):
            for headers in first:
                assert (await client.get("/v1/pets", headers=headers)).status_code == 200
            return await asyncio.gather(*(client.get("/v1/pets", headers=h) for h in requests))

    return asyncio.run(send())


def _passed_and_refused(responses: list[httpx.Response], *, policy: str) -> tuple[list[int], int]:
    """The requests left in the window after each response that passed, in order, and
    how many were refused (each checked as a proper 429)."""
    left = [_remaining(response)[0] for response in responses if response.status_code == 200]
    refused = [response for response in responses if response.status_code != 200]
    for response in refused:
        _assert_rate_limited(response, policy=policy)
    return sorted(left), len(refused)


def test_requests_at_once_are_counted_one_by_one(
    database_url: str, make_key: Callable[..., str], limit_store: str | None
) -> None:
    """Hits that arrive together are counted together, yet each gets its own count:
    of 8 requests at once against a budget of 5, exactly 5 pass, with 4 to 0 left,
    and 3 are refused, as if they had come one after the other."""
    settings = Settings(database_url=database_url, rate_limit="5/minute", redis_url=limit_store)
    responses = _at_once(create_app(settings), [_bearer(make_key())] * 8)
    assert _passed_and_refused(responses, policy='"default";q=5;w=60') == ([0, 1, 2, 3, 4], 3)


def test_keys_at_once_are_counted_each_in_its_own_window(
    database_url: str, make_key: Callable[..., str], limit_store: str | None
) -> None:
    """Two API keys' requests arriving together (one batch, two counters), each key
    verified once before so that no store read spreads them over turns: of 4 at once
    from the key that has spent 1 of its 3, two pass (1 and 0 left); of 2 from the
    key that has spent 2, one passes (0 left)."""
    settings = Settings(database_url=database_url, rate_limit="3/minute", redis_url=limit_store)
    noisy, quiet = _bearer(make_key("noisy")), _bearer(make_key("quiet"))
    sent = [noisy, quiet, noisy, noisy, quiet, noisy]
    responses = _at_once(create_app(settings), sent, first=[noisy, quiet, quiet])
    policy = '"default";q=3;w=60'
    of_noisy = [response for h, response in zip(sent, responses, strict=True) if h is noisy]
    of_quiet = [response for h, response in zip(sent, responses, strict=True) if h is quiet]
    assert _passed_and_refused(of_noisy, policy=policy) == ([0, 1], 2)
    assert _passed_and_refused(of_quiet, policy=policy) == ([0], 1)


def test_the_limit_is_per_api_key(
    start_app: StartApp, make_key: Callable[..., str], limit_store: str | None
) -> None:
    client = start_app(rate_limit="3/minute", redis_url=limit_store)
    noisy, quiet = _bearer(make_key("noisy")), _bearer(make_key("quiet"))
    for _ in range(3):
        assert client.get("/v1/pets", headers=noisy).status_code == 200
    _assert_rate_limited(client.get("/v1/pets", headers=noisy), policy='"default";q=3;w=60')
    response = client.get("/v1/pets", headers=quiet)
    assert response.status_code == 200
    assert _remaining(response)[0] == 2


@pytest.mark.parametrize(
    "path",
    ["/healthz", "/readyz", "/v1/openapi.json", "/v1/docs", "/v1/docs/deprecations", "/metrics"],
)
def test_service_endpoints_are_not_limited(
    start_app: StartApp, auth: dict[str, str], path: str
) -> None:
    client = start_app(rate_limit="1/minute")
    assert client.get("/v1/pets", headers=auth).status_code == 200
    _assert_rate_limited(client.get("/v1/pets", headers=auth), policy='"default";q=1;w=60')
    for _ in range(3):
        response = client.get(path, headers=auth)
        assert response.status_code == 200, response.text
        assert "ratelimit" not in response.headers
        assert "ratelimit-policy" not in response.headers


def test_with_limits_disabled_there_is_no_limit_and_no_fields(
    start_app: StartApp, auth: dict[str, str]
) -> None:
    client = start_app(rate_limit="3/minute", rate_limit_enabled=False)
    responses = [client.get("/v1/pets", headers=auth) for _ in range(6)]
    responses.append(client.post("/v1/pets", json=REX, headers=auth))
    assert [r.status_code for r in responses] == [200] * 6 + [201]
    for response in responses:
        assert "ratelimit" not in response.headers
        assert "ratelimit-policy" not in response.headers


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param({}, "ok", id="memory"),
        pytest.param({"redis_url": "fresh_redis"}, "ok", id="redis"),
        pytest.param({"rate_limit_enabled": False}, "off", id="disabled"),
    ],
)
def test_readyz_names_the_rate_limit_state(
    start_app: StartApp,
    auth: dict[str, str],
    fresh_redis: str,
    overrides: dict[str, Any],
    expected: str,
) -> None:
    if overrides.get("redis_url") == "fresh_redis":
        overrides = {"redis_url": fresh_redis}
    client = start_app(**overrides)
    assert client.get("/v1/pets", headers=auth).status_code == 200
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "rateLimits": expected}


# Redis: one budget for several instances -------------------------------------------


def test_two_instances_on_one_redis_share_one_budget(
    start_app: StartApp, auth: dict[str, str], fresh_redis: str
) -> None:
    a = start_app(rate_limit="5/minute", redis_url=fresh_redis)
    b = start_app(rate_limit="5/minute", redis_url=fresh_redis)
    remaining = [_remaining(a.get("/v1/pets", headers=auth))[0] for _ in range(3)]
    remaining += [_remaining(b.get("/v1/pets", headers=auth))[0] for _ in range(2)]
    assert remaining == [4, 3, 2, 1, 0]
    for client in (a, b):
        _assert_rate_limited(client.get("/v1/pets", headers=auth), policy='"default";q=5;w=60')


def test_two_instances_in_memory_count_separately(
    start_app: StartApp, auth: dict[str, str]
) -> None:
    a = start_app(rate_limit="2/minute")
    b = start_app(rate_limit="2/minute")
    for client in (a, b):
        assert [_remaining(client.get("/v1/pets", headers=auth))[0] for _ in range(2)] == [1, 0]


def test_counters_in_redis_are_partitioned_by_key_id_not_by_key(
    start_app: StartApp, api_key: str, auth: dict[str, str], fresh_redis: str
) -> None:
    client = start_app(rate_limit="5/minute", redis_url=fresh_redis)
    assert client.get("/v1/pets", headers=auth).status_code == 200
    store = redis.Redis.from_url(redis_url())
    try:
        names = [name.decode() for name in store.scan_iter(match="LIMITS*")]
    finally:
        store.close()
    assert names
    for name in names:
        assert api_key not in name
        assert api_key[:17] not in name


def test_stopping_an_instance_closes_its_redis_connection(
    database_url: str, auth: dict[str, str], fresh_redis: str
) -> None:
    name = f"petstore-test-{uuid.uuid4().hex}"
    settings = Settings(database_url=database_url, redis_url=f"{fresh_redis}?client_name={name}")
    app = create_app(settings)

    async def serve_one_request_then_stop() -> tuple[int, int]:
        async with lifespan(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                response = await http.get("/v1/pets", headers=auth)
                assert response.status_code == 200
                assert "ratelimit" in response.headers
            while_serving = _redis_clients_named(name)
        return while_serving, _redis_clients_named(name)

    while_serving, after_stop = asyncio.run(serve_one_request_then_stop())
    assert while_serving == 1
    assert after_stop == 0


# Redis unreachable: fail open --------------------------------------------------------


def test_with_redis_unreachable_requests_succeed_and_readyz_says_so(
    start_app: StartApp,
    auth: dict[str, str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logging.getLogger("petstore"), "propagate", True)
    client = start_app(rate_limit="2/minute", redis_url=UNREACHABLE_REDIS_URL)
    with caplog.at_level(logging.WARNING, logger="petstore.ratelimit"):
        responses = [client.get("/v1/pets", headers=auth) for _ in range(4)]
        responses.append(client.post("/v1/pets", json=REX, headers=auth))
    assert [r.status_code for r in responses] == [200] * 4 + [201]
    for response in responses:
        assert response.headers["ratelimit-policy"] == '"default";q=2;w=60'
        assert "ratelimit" not in response.headers
    warnings = [r for r in caplog.records if r.name == "petstore.ratelimit"]
    assert len(warnings) == 1, warnings  # at most once a minute, not once per request
    assert warnings[0].levelno == logging.WARNING
    assert "failing open" in warnings[0].getMessage()
    ready = client.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ready"
    assert body["rateLimits"].startswith("failing open")


def test_after_a_failed_count_redis_is_left_alone_for_a_second_then_counted_again(
    fresh_redis: str,
) -> None:
    """A Redis that stops answering costs one hit its call's timeout; the hits of the
    next second fail open at once, without a call; then counting starts again (D15)."""
    now = [0.0]
    port = int(fresh_redis.rsplit(":", 1)[1].split("/")[0])

    async def run(proxy: TcpProxy) -> list[tuple[bool, float]]:
        counters = Counters(f"redis://127.0.0.1:{proxy.port}/0")
        limiter = RateLimiter("100/minute", counters=counters, monotonic=lambda: now[0])
        key = 1
        seen: list[tuple[bool, float]] = []

        async def hit() -> None:
            began = time.monotonic()
            quota = await limiter.hit(key)
            seen.append((quota is not None, time.monotonic() - began))

        await hit()  # counted
        proxy.pause()
        connections = proxy.accepted
        await hit()  # waits for its call's timeout, fails open
        assert proxy.accepted == connections  # a timeout is not tried again
        now[0] += 0.5
        await hit()  # within the second: fails open without a call
        proxy.resume()
        now[0] += 0.6
        await hit()  # the second has passed: counted again
        await limiter.close()
        return seen

    with TcpProxy(port) as proxy:
        seen = asyncio.run(run(proxy))
    assert [counted for counted, _ in seen] == [True, False, False, True]
    assert seen[1][1] >= REDIS_TIMEOUT_SECONDS
    assert seen[2][1] < 0.05  # no call at all


@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_an_answer_that_came_while_the_worker_stood_still_is_counted_not_failed_open(
    fresh_redis: str, event_loop: str
) -> None:
    """A worker stopped (paused, starved of the processor) while Redis answers finds
    its call's timeout passed when it runs again: that says nothing of Redis, so the
    count is asked once more and the worker does not fail open (D15), on either
    event loop a worker may run (``PETSTORE_EVENT_LOOP``)."""
    port = int(fresh_redis.rsplit(":", 1)[1].split("/")[0])

    async def run(proxy: TcpProxy, counters: Counters) -> tuple[bool, str | None]:
        limiter = RateLimiter("100/minute", counters=counters)
        await limiter.hit(1)  # a pooled connection
        proxy.pause()

        def stand_still() -> None:  # Redis answers while the loop does not run
            proxy.resume()
            time.sleep(0.4)  # past the call's 0.25 s

        asyncio.get_running_loop().call_later(0.05, stand_still)
        quota = await limiter.hit(1)
        await limiter.close()
        return quota is not None, limiter.store_error

    with TcpProxy(port) as proxy:
        counters = Counters(f"redis://127.0.0.1:{proxy.port}/0")
        run_loop = uvloop.run if event_loop == "uvloop" else asyncio.run
        counted, error = run_loop(run(proxy, counters))
    assert (counted, error) == (True, None)


def test_a_new_connection_slower_to_set_up_than_a_call_is_counted_not_failed_open(
    fresh_redis: str,
) -> None:
    """A new connection's setup (PING, CLIENT SETINFO, AUTH where Redis asks for it)
    has the connect timeout, not a call's 0.25 s: a busy host, or a new worker's
    first seconds, that answers it in 0.45 s is counted (D15); one that answers
    nothing fails open within that timeout."""
    port = int(fresh_redis.rsplit(":", 1)[1].split("/")[0])

    async def run(proxy: TcpProxy) -> tuple[bool, str | None, float]:
        limiter = RateLimiter("100/minute", counters=Counters(f"redis://127.0.0.1:{proxy.port}/0"))
        proxy.first_answer_delay = REDIS_TIMEOUT_SECONDS + 0.2
        slow = await limiter.hit(1)
        error = limiter.store_error
        await limiter.close()
        limiter = RateLimiter("100/minute", counters=Counters(f"redis://127.0.0.1:{proxy.port}/0"))
        proxy.pause()
        started = time.monotonic()
        silent = await limiter.hit(1)
        waited = time.monotonic() - started
        proxy.resume()
        await limiter.close()
        return slow is not None and silent is None, error, waited

    with TcpProxy(port) as proxy:
        counted_then_failed_open, error, waited = asyncio.run(run(proxy))
    assert (counted_then_failed_open, error) == (True, None)
    assert REDIS_CONNECT_SECONDS <= waited < REDIS_CONNECT_SECONDS + 0.5


def test_connections_redis_closed_while_pooled_count_again_without_failing_open(
    fresh_redis: str,
) -> None:
    """After Redis restarts, the connections opened before it are closed: a burst that
    takes them all from the pool, and more, is counted, none failing open."""
    port = int(fresh_redis.rsplit(":", 1)[1].split("/")[0])

    async def run(proxy: TcpProxy) -> tuple[list[bool], list[bool], int]:
        counters = Counters(f"redis://127.0.0.1:{proxy.port}/0")
        limiter = RateLimiter("100/minute", counters=counters)

        async def burst(keys: int) -> list[bool]:
            quotas = await asyncio.gather(*(limiter.hit(key) for key in range(keys)))
            return [quota is not None for quota in quotas]

        before = await burst(4)  # four keys in one turn: four pooled connections
        opened = proxy.accepted
        proxy.close_all()  # Redis restarted
        await asyncio.sleep(0.1)
        after = await burst(8)
        await limiter.close()
        return before, after, opened

    with TcpProxy(port) as proxy:
        before, after, opened = asyncio.run(run(proxy))
    assert opened == 4
    assert before == [True] * 4
    assert after == [True] * 8


def test_readyz_says_failing_open_when_redis_is_unreachable_before_any_request(
    start_app: StartApp,
) -> None:
    client = start_app(redis_url=UNREACHABLE_REDIS_URL)
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["rateLimits"].startswith("failing open")


# Two real processes --------------------------------------------------------------------


@pytest.mark.slow
def test_two_served_instances_share_one_redis_budget(
    tmp_path_factory: pytest.TempPathFactory, fresh_redis: str
) -> None:
    with postgres_database() as url:
        migrate.upgrade(url)
        env = {
            "PETSTORE_DATABASE_URL": url,
            "PETSTORE_REDIS_URL": fresh_redis,
            "PETSTORE_RATE_LIMIT": "10/minute",
        }
        servers = [LiveServer(tmp_path_factory.mktemp(name), env=env) for name in ("a", "b")]
        try:
            for server in servers:
                server.start()
            key = _create_key(servers[0])
            with httpx.Client(headers=_bearer(key), timeout=10) as http:
                remaining = []
                for i in range(10):
                    response = http.get(f"{servers[i % 2].url}/v1/pets")
                    assert response.status_code == 200, response.text
                    assert response.headers["ratelimit-policy"] == '"default";q=10;w=60'
                    remaining.append(_remaining(response)[0])
                assert remaining == list(range(9, -1, -1))
                for server in servers:
                    _assert_rate_limited(
                        http.get(f"{server.url}/v1/pets"), policy='"default";q=10;w=60'
                    )
        finally:
            for server in servers:
                server.stop()


def _create_key(server: LiveServer) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "petstore", "keys", "create", "--name", "rate-limit"],
        env=server.env,
        cwd=Path(server.root),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()[-1]
