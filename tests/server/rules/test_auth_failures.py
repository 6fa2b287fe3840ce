"""The limit on failed authentications per client address (PETSTORE_AUTH_FAILURE_LIMIT,
default 30 a minute): past it, 429 before any database lookup, until the window ends."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from petstore.server import errors
from petstore.server.app import create_app
from petstore.server.config import Settings, SettingsError, load_settings
from petstore.server.http.pipeline import Service
from petstore.server.rules.auth_failures import FailedAuthentications, counted_as
from tests.conformance import Conformance


class Monotonic:
    """A monotonic clock in seconds that tests move."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def random_key() -> dict[str, str]:
    """A well-formed key the service never issued."""
    return {"Authorization": f"Bearer petstore_{secrets.token_urlsafe(32)}"}


class Lookups:
    """Counts the store's key lookups of an app (each one a database read)."""

    def __init__(self, app: Service) -> None:
        api_keys = app.admission.verifier._api_keys
        found = api_keys.find
        self.count = 0

        async def counted(prefix: str) -> Any:
            self.count += 1
            return await found(prefix)

        api_keys.find = counted


@pytest.fixture
def monotonic() -> Monotonic:
    return Monotonic()


@pytest.fixture
def serve(
    database_url: str, monotonic: Monotonic, conformance: Conformance
) -> Iterator[Callable[..., tuple[TestClient, Lookups]]]:
    clients: list[TestClient] = []

    def start(**settings: Any) -> tuple[TestClient, Lookups]:
        app = create_app(Settings(database_url=database_url, **settings), monotonic=monotonic)
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        client.event_hooks["response"] = [conformance.check]
        clients.append(client)
        return client, Lookups(app)

    yield start
    for client in clients:
        client.__exit__(None, None, None)


def test_a_flood_of_unknown_keys_is_429_after_30_failures_without_database_lookups(
    serve: Callable[..., tuple[TestClient, Lookups]], monotonic: Monotonic
) -> None:
    client, lookups = serve()
    statuses = [client.get("/v1/pets", headers=random_key()).status_code for _ in range(30)]
    assert statuses == [401] * 30
    assert lookups.count == 30
    for path in ("/v1/pets", "/v1/pets/1"):
        response = client.get(path, headers=random_key())
        assert response.status_code == 429
        assert response.headers["retry-after"] == "20"  # the window is 960-1020 s
        assert response.json() == {
            "code": "rate_limited",
            "message": "too many failed authentications from this address; retry in 20 s",
            "status": 429,
        }
    refused = client.post("/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=random_key())
    assert refused.status_code == 429
    assert [client.get("/v1/pets", headers=random_key()).status_code for _ in range(120)] == [
        429
    ] * 120
    assert lookups.count == 30, "no request over the limit reached the database"
    monotonic.now = 1019.5
    assert client.get("/v1/pets", headers=random_key()).headers["retry-after"] == "1"
    monotonic.now = 1020.0  # the next window
    assert client.get("/v1/pets", headers=random_key()).status_code == 401
    assert lookups.count == 31


def test_missing_and_malformed_keys_are_401_and_never_count(
    serve: Callable[..., tuple[TestClient, Lookups]],
) -> None:
    """A client that forgot its key, or a tool probing the API, is not locked out:
    only well-formed keys that are not valid cost a lookup, so only they count."""
    client, lookups = serve(auth_failure_limit="3/minute")
    malformed = [
        {},
        {"Authorization": "Basic x"},
        {"Authorization": "Bearer nope"},
        {"Authorization": "Bearer " + "A" * 300},
    ]
    for headers in malformed * 10:
        assert client.get("/v1/pets", headers=headers).status_code == 401
    assert lookups.count == 0
    for _ in range(3):
        assert client.get("/v1/pets", headers=random_key()).status_code == 401
    assert client.get("/v1/pets", headers=random_key()).status_code == 429
    assert client.get("/v1/pets").status_code == 401, "a missing key is never 429"
    assert lookups.count == 3


def test_an_address_over_the_limit_keeps_the_keys_it_used_before(
    serve: Callable[..., tuple[TestClient, Lookups]],
    auth: dict[str, str],
    make_key: Callable[..., str],
) -> None:
    """Behind a shared address (a NAT), made-up keys lock out made-up keys: a key this
    instance verified before still works; one it never saw waits out the window."""
    client, _ = serve(auth_failure_limit="2/minute")
    never_seen = {"Authorization": f"Bearer {make_key(name='new')}"}
    assert client.get("/v1/pets", headers=auth).status_code == 200
    for _ in range(2):
        assert client.get("/v1/pets", headers=random_key()).status_code == 401
    assert client.get("/v1/pets", headers=random_key()).status_code == 429
    assert client.get("/v1/pets", headers=auth).status_code == 200
    assert client.get("/v1/pets", headers=never_seen).status_code == 429


def test_behind_a_trusted_proxy_each_forwarded_address_has_its_own_count(
    serve: Callable[..., tuple[TestClient, Lookups]], auth: dict[str, str]
) -> None:
    client, lookups = serve(auth_failure_limit="2/minute", trust_forwarded_headers=True)
    flooder = {"X-Forwarded-For": "203.0.113.7"}
    for _ in range(2):
        assert client.get("/v1/pets", headers={**random_key(), **flooder}).status_code == 401
    assert client.get("/v1/pets", headers={**random_key(), **flooder}).status_code == 429
    other = {"X-Forwarded-For": "203.0.113.7, 198.51.100.9"}  # a proxy appended the last
    assert client.get("/v1/pets", headers={**auth, **other}).status_code == 200
    assert client.get("/v1/pets", headers={**random_key(), **other}).status_code == 401
    assert lookups.count == 4


def test_made_up_forwarded_addresses_before_the_proxys_own_count_as_the_proxys(
    serve: Callable[..., tuple[TestClient, Lookups]],
) -> None:
    """Issue 53 (N4): 40 made-up keys, each with another X-Forwarded-For written by
    the client, were 40 x 401. The client is the address the nearest proxy added,
    here appended after the client's; the limit (30) holds."""
    client, lookups = serve(trust_forwarded_headers=True)
    statuses = [
        client.get(
            "/v1/pets",
            headers={**random_key(), "X-Forwarded-For": f"10.0.{n // 250}.{n % 250}, 192.0.2.1"},
        ).status_code
        for n in range(40)
    ]
    assert statuses == [401] * 30 + [429] * 10
    assert lookups.count == 30


def test_a_forwarded_value_that_is_not_an_address_is_ignored(
    serve: Callable[..., tuple[TestClient, Lookups]], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 53 (N4): ``203.0.113.7 api_key_id=2`` was counted (and logged) as an
    address. Now the client is the connection's peer, and the value is logged as
    ignored, escaped."""
    client, _ = serve(auth_failure_limit="2/minute", trust_forwarded_headers=True)
    statuses = []
    for forged in ("203.0.113.7 api_key_id=2", "203.0.113.8:4711", "fe80::1%eth0", "x"):
        with caplog.at_level("WARNING", logger="petstore.http"):
            headers = {**random_key(), "X-Forwarded-For": forged}
            statuses.append(client.get("/v1/pets", headers=headers).status_code)
    # All four counted for one client, the peer: the limit of 2 was reached.
    assert statuses == [401, 401, 429, 429]
    assert [r.getMessage() for r in caplog.records if r.name == "petstore.http"] == [
        "X-Forwarded-For ignored: its last element is not an IP address: "
        "203.0.113.7\\x20api_key_id=2",
        "X-Forwarded-For ignored: its last element is not an IP address: 203.0.113.8:4711",
        "X-Forwarded-For ignored: its last element is not an IP address: fe80::1%eth0",
        "X-Forwarded-For ignored: its last element is not an IP address: x",
    ]


def test_an_ipv6_client_is_counted_by_its_64_block(
    serve: Callable[..., tuple[TestClient, Lookups]], auth: dict[str, str]
) -> None:
    """Issue 53 (N4): each IPv6 address had its own count, and a host holds a /64."""
    client, _ = serve(auth_failure_limit="2/minute", trust_forwarded_headers=True)
    for n in (1, 2, 0xFFFF):
        walked = {**random_key(), "X-Forwarded-For": f"2001:db8:0:7::{n:x}"}
        expected = 401 if n < 3 else 429
        assert client.get("/v1/pets", headers=walked).status_code == expected
    neighbour = {**random_key(), "X-Forwarded-For": "2001:db8:0:8::1"}
    assert client.get("/v1/pets", headers=neighbour).status_code == 401
    for forwarded, expected in (("192.0.2.5", 401), ("::ffff:192.0.2.5", 401), ("192.0.2.5", 429)):
        headers = {**random_key(), "X-Forwarded-For": forwarded}
        assert client.get("/v1/pets", headers=headers).status_code == expected, forwarded


def test_without_trust_a_forwarded_address_does_not_escape_the_count(
    serve: Callable[..., tuple[TestClient, Lookups]],
) -> None:
    client, _ = serve(auth_failure_limit="2/minute")
    for n in range(2):
        forged = {**random_key(), "X-Forwarded-For": f"192.0.2.{n}"}
        assert client.get("/v1/pets", headers=forged).status_code == 401
    forged = {**random_key(), "X-Forwarded-For": "192.0.2.99"}
    assert client.get("/v1/pets", headers=forged).status_code == 429


def test_the_limit_can_be_turned_off(serve: Callable[..., tuple[TestClient, Lookups]]) -> None:
    client, lookups = serve(auth_failure_limit="off")
    assert {client.get("/v1/pets", headers=random_key()).status_code for _ in range(40)} == {401}
    assert lookups.count == 40


def test_the_failure_limit_setting_takes_the_rate_limit_notation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().auth_failure_limit == "30/minute"
    monkeypatch.setenv("PETSTORE_AUTH_FAILURE_LIMIT", "100 per hour")
    assert load_settings().auth_failure_limit == "100/hour"  # written one way
    monkeypatch.setenv("PETSTORE_AUTH_FAILURE_LIMIT", "lots")
    with pytest.raises(SettingsError, match=r"PETSTORE_AUTH_FAILURE_LIMIT: .*600/minute"):
        load_settings()


def test_failures_are_counted_in_fixed_windows_of_the_clock() -> None:
    clock = Monotonic(59.0)
    failures = FailedAuthentications(limit=2, window=60.0, clock=clock)
    failures.failed("a")
    clock.now = 60.0  # a new window: the count starts again
    failures.failed("a")
    failures.check("a")
    failures.failed("a")
    failures.check("b")
    with pytest.raises(errors.RateLimited) as raised:
        failures.check("a")
    assert raised.value.headers == {"Retry-After": "60"}
    clock.now = 119.9
    with pytest.raises(errors.RateLimited) as raised:
        failures.check("a")
    assert raised.value.headers == {"Retry-After": "1"}
    clock.now = 120.0
    failures.check("a")


def test_ipv6_failures_count_for_their_64_and_ipv4_per_address() -> None:
    assert counted_as("2001:db8:0:7:aaaa:bbbb:cccc:dddd") == "2001:db8:0:7::/64"
    assert counted_as("192.0.2.1") == "192.0.2.1"
    assert counted_as("-") == "-"
    failures = FailedAuthentications(limit=1, window=60.0, clock=Monotonic(0.0))
    failures.failed("2001:db8::1")
    with pytest.raises(errors.RateLimited):
        failures.check("2001:db8::ffff:1")
    failures.check("2001:db8:0:1::1")
