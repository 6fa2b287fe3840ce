"""petstore.client against a real ``petstore serve`` process over real HTTP.

Failures of the network are simulated by httpx transports that wrap the real one (a
lost connection, a lost response, a 503 from a proxy); the service itself is never
replaced. The sunset (410) runs the real app in-process with its clock after 2030.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from petstore.client import AsyncClient, Client, Page
from petstore.client.errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    GoneError,
    NotFoundError,
    PetstoreClientError,
    RateLimitedError,
    ServerError,
    ServiceNotFoundError,
    TransportError,
    service_not_found,
)
from petstore.schemas import Pet, PetStatus
from petstore.server.app import create_app
from petstore.server.config import Settings
from petstore.server.rules import keys
from petstore.server.store import open_store
from testbed.processes import free_port
from tests.conftest import FakeClock, LiveServer, lifespan

DEPRECATED = r"2030-12-05.*GET /v1/pets with the status filter"


@pytest.fixture
def base_url(live_server: LiveServer) -> str:
    return f"{live_server.url}/v1"


@pytest.fixture
def petstore(base_url: str, live_server: LiveServer) -> Iterator[Client]:
    with Client(base_url, api_key=live_server.dev_key) as client:
        yield client


def unique(prefix: str = "Rex") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def named(client: Client, name: str) -> list[Pet]:
    return [pet for pet in client.iter_pets() if pet.name == name]


class Recorder:
    """An event hook keeping every request the client sends."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> None:
        self.requests.append(request)


class Faulty(httpx.BaseTransport):
    """The real transport, with a fault injected into the first ``times`` attempts:
    ``"connect"`` (never sent), ``"lost"`` (sent, the response lost), or a status
    answered by a proxy in front of the service, with ``Retry-After: retry_after``."""

    def __init__(self, fault: str | int, *, times: int = 1, retry_after: str = "0") -> None:
        self.real = httpx.HTTPTransport()
        self.fault, self.left, self.retry_after = fault, times, retry_after
        self.requests: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.left == 0:
            return self.real.handle_request(request)
        self.left -= 1
        if self.fault == "connect":
            raise httpx.ConnectError("simulated: connection refused", request=request)
        if self.fault == "lost":
            self.real.handle_request(request).close()
            raise httpx.ReadTimeout("simulated: response lost", request=request)
        assert isinstance(self.fault, int)
        body = b'{"code":"unavailable","message":"simulated","status":%d}' % self.fault
        return httpx.Response(self.fault, headers={"Retry-After": self.retry_after}, content=body)

    def close(self) -> None:
        self.real.close()


def test_create_list_get_round_trip(petstore: Client) -> None:
    name = unique()
    created = petstore.create_pet(name, category_id=7, status=PetStatus.PENDING)
    assert isinstance(created, Pet)
    assert (created.name, created.category_id, created.status) == (name, 7, PetStatus.PENDING)
    assert created in list(petstore.iter_pets())
    with pytest.warns(DeprecationWarning, match=DEPRECATED):
        fetched = petstore.get_pet(created.id)
    assert fetched == created


def test_create_defaults_status_to_available(petstore: Client) -> None:
    assert petstore.create_pet(unique(), category_id=1).status is PetStatus.AVAILABLE


def test_list_pets_returns_a_page_with_the_next_url(petstore: Client) -> None:
    for _ in range(2):
        petstore.create_pet(unique(), category_id=1)
    page = petstore.list_pets(limit=1)
    assert isinstance(page, Page)
    assert len(page.pets) == 1
    assert page.has_next
    assert page.next_url is not None
    assert "cursor=" in page.next_url
    assert "limit=1" in page.next_url


def test_iter_pets_follows_next_links_and_yields_every_animal_once_in_order(
    petstore: Client, base_url: str, live_server: LiveServer
) -> None:
    created = [petstore.create_pet(unique("Page"), category_id=2).id for _ in range(7)]
    recorder = Recorder()
    hooks = {"request": [recorder]}
    with Client(base_url, api_key=live_server.dev_key, event_hooks=hooks) as client:
        ids = [pet.id for pet in client.iter_pets(limit=3)]
    assert len(recorder.requests) >= 3, "7 or more animals at 3 a page take 3 pages"
    assert ids == sorted(set(ids)), "ascending, none twice"
    assert [i for i in ids if i in created] == created
    assert ids == [pet.id for pet in petstore.iter_pets(limit=100)]
    assert all(r.url.host == "127.0.0.1" for r in recorder.requests)


def test_status_filter(petstore: Client) -> None:
    sold = petstore.create_pet(unique(), category_id=3, status="sold")
    pending = petstore.create_pet(unique(), category_id=3, status=PetStatus.PENDING)
    found = list(petstore.iter_pets(status=PetStatus.SOLD, limit=2))
    assert sold in found
    assert pending not in found
    assert {pet.status for pet in found} == {PetStatus.SOLD}
    assert all(pet.status is PetStatus.SOLD for pet in petstore.list_pets("sold").pets)


def test_bad_key_is_authentication_error(base_url: str) -> None:
    secret = "petstore_" + "x" * 43
    with (
        Client(base_url, api_key=secret) as client,
        pytest.raises(AuthenticationError) as caught,
    ):
        client.list_pets()
    error = caught.value
    assert isinstance(error, PetstoreClientError)
    assert (error.code, error.status) == ("unauthorized", 401)
    assert error.message
    assert error.request_id
    assert secret not in str(error)
    assert secret not in repr(error)


def test_a_key_without_the_scope_is_forbidden_error(base_url: str, live_server: LiveServer) -> None:
    """D21: a read-only key's create raises ForbiddenError naming the missing scope."""
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "petstore",
            "keys",
            "create",
            "--name",
            "ro",
            "--scope",
            "pets:read",
        ],
        env=live_server.env,
        capture_output=True,
        text=True,
        check=True,
    )
    with Client(base_url, api_key=made.stdout.split()[-1]) as client:
        assert isinstance(client.list_pets().pets, list)
        with pytest.raises(ForbiddenError) as caught:
            client.create_pet("Rex", category_id=1)
    assert (caught.value.code, caught.value.status) == ("forbidden", 403)
    assert "pets:write" in caught.value.message


def test_get_of_a_missing_id_is_not_found_error(petstore: Client) -> None:
    with (
        pytest.warns(DeprecationWarning, match=DEPRECATED),
        pytest.raises(NotFoundError) as caught,
    ):
        petstore.get_pet(2**62)
    assert (caught.value.code, caught.value.status) == ("not_found", 404)


def test_invalid_name_is_bad_request_error_naming_the_field(petstore: Client) -> None:
    with pytest.raises(BadRequestError) as caught:
        petstore.create_pet("", category_id=1)
    assert (caught.value.code, caught.value.status) == ("invalid_request", 400)
    assert "name" in caught.value.message


def test_limit_out_of_range_is_bad_request_error(petstore: Client) -> None:
    with pytest.raises(BadRequestError, match="limit"):
        petstore.list_pets(limit=101)


def test_get_pet_warns_naming_sunset_and_replacement(petstore: Client) -> None:
    pet = petstore.create_pet(unique(), category_id=1)
    with pytest.warns(DeprecationWarning, match="2030") as warned:
        petstore.get_pet(pet.id)
    assert len(warned) == 1
    message = str(warned[0].message)
    assert "2030" in message
    assert "GET /v1/pets" in message
    assert warned[0].filename == __file__, "the warning points at the caller's line"


def test_create_pet_sends_a_generated_idempotency_key(
    base_url: str, live_server: LiveServer
) -> None:
    recorder = Recorder()
    with Client(base_url, api_key=live_server.dev_key, event_hooks={"request": [recorder]}) as c:
        c.create_pet(unique(), category_id=1)
        c.create_pet(unique(), category_id=1)
    first, second = (r.headers["Idempotency-Key"] for r in recorder.requests)
    assert first != second
    assert first.startswith('"')
    assert uuid.UUID(first.strip('"')).version == 4


def test_same_idempotency_key_and_body_returns_the_same_animal(petstore: Client) -> None:
    name, key = unique(), str(uuid.uuid4())
    first = petstore.create_pet(name, category_id=4, idempotency_key=key)
    again = petstore.create_pet(name, category_id=4, idempotency_key=key)
    assert again == first
    assert len(named(petstore, name)) == 1


def test_idempotency_key_reused_with_another_body_is_conflict_error(petstore: Client) -> None:
    key = str(uuid.uuid4())
    petstore.create_pet(unique(), category_id=4, idempotency_key=key)
    with pytest.raises(ConflictError) as caught:
        petstore.create_pet(unique(), category_id=4, idempotency_key=key)
    assert (caught.value.code, caught.value.status) == ("idempotency_key_reused", 422)


@pytest.mark.parametrize("fault", ["connect", "lost"])
def test_create_retries_a_network_failure_with_the_same_key_and_adds_once(
    base_url: str, live_server: LiveServer, fault: str
) -> None:
    transport = Faulty(fault)
    name = unique()
    with Client(base_url, api_key=live_server.dev_key, transport=transport, backoff=0.01) as c:
        pet = c.create_pet(name, category_id=5)
        assert named(c, name) == [pet]
    first, second = transport.requests[:2]
    assert first.method == second.method == "POST"
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]
    assert first.content == second.content


@pytest.mark.parametrize("status", [429, 503])
def test_create_retries_429_and_503_honouring_retry_after(
    base_url: str, live_server: LiveServer, status: int
) -> None:
    transport = Faulty(status, retry_after="0")
    name = unique()
    # A backoff of 30 s would be drawn without the header: Retry-After 0 must win.
    key = live_server.dev_key
    with Client(base_url, api_key=key, transport=transport, backoff=30, max_sleep=60) as c:
        started = time.monotonic()
        pet = c.create_pet(name, category_id=6)
        assert time.monotonic() - started < 5
        assert named(c, name) == [pet]
    keys_sent = {r.headers["Idempotency-Key"] for r in transport.requests if r.method == "POST"}
    assert len(keys_sent) == 1
    assert sum(r.method == "POST" for r in transport.requests) == 2


def test_retry_waits_the_retry_after_seconds(base_url: str, live_server: LiveServer) -> None:
    transport = Faulty(503, retry_after="1")
    with Client(base_url, api_key=live_server.dev_key, transport=transport, backoff=0) as c:
        started = time.monotonic()
        c.create_pet(unique(), category_id=6)
        assert time.monotonic() - started >= 1


def test_retries_are_bounded_then_the_typed_error(base_url: str, live_server: LiveServer) -> None:
    transport = Faulty(503, times=10)
    client = Client(base_url, api_key=live_server.dev_key, transport=transport, max_retries=2)
    with client, pytest.raises(ServerError) as caught:
        client.create_pet(unique(), category_id=6)
    assert (caught.value.status, caught.value.retry_after) == (503, 0)
    assert len(transport.requests) == 3


def test_unreachable_service_is_transport_error_after_retries() -> None:
    port = free_port()
    secret = "petstore_" + "s" * 43
    client = Client(f"http://127.0.0.1:{port}/v1", api_key=secret, max_retries=2, backoff=0.01)
    with client, pytest.raises(TransportError) as caught:
        client.create_pet(unique(), category_id=1)
    assert "3 attempt(s)" in caught.value.message
    assert caught.value.status is None
    assert secret not in str(caught.value)
    assert secret not in repr(caught.value)


def test_rate_limited_beyond_max_sleep_is_rate_limited_error(tmp_path: Path) -> None:
    server = LiveServer(tmp_path, env={"PETSTORE_RATE_LIMIT": "2/minute"})
    server.start()
    try:
        with Client(f"{server.url}/v1", api_key=server.dev_key, max_sleep=1) as client:
            client.list_pets()
            client.list_pets()
            with pytest.raises(RateLimitedError) as caught:
                client.list_pets()
    finally:
        server.stop()
    assert (caught.value.code, caught.value.status) == ("rate_limited", 429)
    assert caught.value.retry_after is not None
    assert caught.value.retry_after > 1


def test_configuration_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, base_url: str, live_server: LiveServer
) -> None:
    monkeypatch.setenv("PETSTORE_URL", base_url)
    monkeypatch.setenv("PETSTORE_API_KEY", live_server.dev_key)
    with Client() as client:
        assert client.base_url == base_url
        assert isinstance(client.list_pets(limit=1), Page)


@pytest.mark.parametrize("missing", ["PETSTORE_URL", "PETSTORE_API_KEY"])
def test_missing_configuration_is_value_error(
    monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    monkeypatch.setenv("PETSTORE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("PETSTORE_API_KEY", "petstore_key")
    monkeypatch.delenv(missing)
    with pytest.raises(ValueError, match=missing):
        Client()


def test_the_key_never_appears_in_the_client_repr(base_url: str, live_server: LiveServer) -> None:
    with Client(base_url, api_key=live_server.dev_key) as client:
        assert live_server.dev_key not in repr(client)
        assert live_server.dev_key not in str(client)
    async_client = AsyncClient(base_url, api_key=live_server.dev_key)
    assert live_server.dev_key not in repr(async_client)
    asyncio.run(async_client.aclose())


def test_async_client_parity(base_url: str, live_server: LiveServer) -> None:
    async def scenario() -> None:
        async with AsyncClient(base_url, api_key=live_server.dev_key) as client:
            created = [
                await client.create_pet(unique("Async"), category_id=8, status="sold")
                for _ in range(3)
            ]
            page = await client.list_pets(PetStatus.SOLD, limit=1)
            assert page.has_next
            found = [pet async for pet in client.iter_pets(status="sold", limit=2)]
            assert [pet for pet in found if pet in created] == created
            assert [pet.id for pet in found] == sorted({pet.id for pet in found})
            with pytest.warns(DeprecationWarning, match=DEPRECATED):
                assert await client.get_pet(created[0].id) == created[0]
            with pytest.raises(BadRequestError) as caught:
                await client.create_pet(" ", category_id=1)
            assert caught.value.code == "invalid_request"
        async with AsyncClient(base_url, api_key="petstore_wrong") as client:
            with pytest.raises(AuthenticationError):
                await client.list_pets()

    asyncio.run(scenario())


def test_async_create_retries_with_the_same_key(base_url: str, live_server: LiveServer) -> None:
    seen: list[httpx.Request] = []

    class Flaky(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self.real = httpx.AsyncHTTPTransport()

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            seen.append(request)
            if len(seen) == 1:
                raise httpx.ConnectError("simulated", request=request)
            return await self.real.handle_async_request(request)

        async def aclose(self) -> None:
            await self.real.aclose()

    async def scenario() -> Pet:
        async with AsyncClient(
            base_url, api_key=live_server.dev_key, transport=Flaky(), backoff=0.01
        ) as client:
            return await client.create_pet(unique(), category_id=9)

    pet = asyncio.run(scenario())
    assert pet.id > 0
    assert seen[0].headers["Idempotency-Key"] == seen[1].headers["Idempotency-Key"]


def test_get_pet_after_the_sunset_is_gone_error(migrated_template: Path, tmp_path: Path) -> None:
    """The real app in-process (ASGI), its clock standing after 2030-12-05 (D14)."""
    path = tmp_path / "petstore.db"
    shutil.copyfile(migrated_template, path)
    database_url = f"sqlite:///{path}"
    clock = FakeClock(datetime(2031, 1, 1, tzinfo=UTC))
    app = create_app(Settings(database_url=database_url), clock=clock)

    async def scenario() -> GoneError:
        store = await open_store(database_url)
        try:
            _, key = await keys.create(store.api_keys, name="sunset", now=clock(), expires_at=None)
        finally:
            await store.close()
        transport = httpx.ASGITransport(app=app)
        async with (
            lifespan(app),
            AsyncClient("http://testserver/v1", api_key=key, transport=transport) as client,
        ):
            with pytest.raises(GoneError) as caught:
                await client.get_pet(1)
            return caught.value

    error = asyncio.run(scenario())
    assert (error.code, error.status) == ("gone", 410)
    assert "GET /v1/pets" in error.message


@pytest.mark.parametrize("path", ["", "/", "/v2", "/v1/docs"])
def test_a_base_url_that_is_not_a_petstore_is_service_not_found_error(
    live_server: LiveServer, path: str
) -> None:
    base = f"{live_server.url}{path}"
    with Client(base, api_key=live_server.dev_key, max_retries=0) as client:
        for call in (
            client.list_pets,
            lambda: list(client.iter_pets()),
            lambda: client.create_pet(unique(), category_id=1),
            lambda: client.get_pet(1),
        ):
            with pytest.raises(ServiceNotFoundError) as caught:
                call()
            error = caught.value
            assert isinstance(error, NotFoundError), "still a 404 for code catching those"
            assert error.status == 404
            assert f"no Petstore service at {base.rstrip('/')}" in error.message


def test_a_missing_animal_is_not_found_error_not_service_not_found(petstore: Client) -> None:
    with (
        pytest.warns(DeprecationWarning, match=DEPRECATED),
        pytest.raises(NotFoundError) as caught,
    ):
        petstore.get_pet(2**62)
    assert not isinstance(caught.value, ServiceNotFoundError)
    assert caught.value.message == f"no animal has id {2**62}"


def test_a_404_page_of_another_server_is_service_not_found_error() -> None:
    def not_petstore(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, html="<h1>Not Found</h1>")

    transport = httpx.MockTransport(not_petstore)
    with Client("http://other.invalid/v1", api_key="k", transport=transport) as client:
        with pytest.raises(ServiceNotFoundError, match="no Petstore service at http://other"):
            client.list_pets()
        with pytest.raises(ServiceNotFoundError) as caught:
            client.get_pet(1)
    assert caught.value.code == "http_404"


@pytest.mark.parametrize("suffix", ["/v1/pets", "/v1/pets/"])
def test_a_base_url_of_the_pets_collection_is_value_error(
    live_server: LiveServer, suffix: str
) -> None:
    with pytest.raises(ValueError, match="is the pets collection; pass the base URL ending in /v1"):
        Client(f"{live_server.url}{suffix}", api_key=live_server.dev_key)


def test_create_pet_json_sends_the_document_as_written(petstore: Client) -> None:
    name = unique()
    pet = petstore.create_pet_json(f'{{"name":"{name}","categoryId":2e0}}'.encode())
    assert (pet.name, pet.category_id, pet.status) == (name, 2, PetStatus.AVAILABLE)
    for document, member in [
        (b'{"name":"Loki","categoryId":22,"color":"green"}', "color"),
        (b'{"name":"A","categoryId":1,"categoryId":2}', "categoryId"),
    ]:
        with pytest.raises(BadRequestError) as caught:
            petstore.create_pet_json(document)
        assert caught.value.message.startswith(f"{member}: ")
    assert named(petstore, "Loki") == []


def test_async_create_pet_json(base_url: str, live_server: LiveServer) -> None:
    async def scenario() -> Pet:
        async with AsyncClient(base_url, api_key=live_server.dev_key) as client:
            with pytest.raises(BadRequestError, match="color"):
                await client.create_pet_json(b'{"name":"A","categoryId":1,"color":"x"}')
            return await client.create_pet_json(b'{"name":"Async-json","categoryId":3}')

    assert asyncio.run(scenario()).category_id == 3


PASSWORD = "hunter2"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (
            f"http://user:{PASSWORD}@127.0.0.1:1/v1",
            "http://***@127.0.0.1:1/v1 holds a user name or password (shown as ***), which "
            "the service does not take",
        ),
        (f"https://{PASSWORD}@db1/v1", "https://***@db1/v1 holds a user name or password"),
        (f"https://u:{PASSWORD}@db1/v1/pets", "https://***@db1/v1/pets holds a user name"),
        (f"ftp://user:{PASSWORD}@db1/v1", "ftp://***@db1/v1 is not an http:// or https:// URL"),
    ],
)
def test_a_base_url_with_a_password_is_value_error_not_showing_it(url: str, says: str) -> None:
    """issue 60, P6: the password of ``http://user:hunter2@host/v1`` was printed back
    (and httpx sent it as Basic credentials in place of the key, and logged it)."""
    for client in (Client, AsyncClient):
        with pytest.raises(ValueError, match=re.escape(says)) as caught:
            client(url, api_key="k")
        assert PASSWORD not in str(caught.value)


def test_service_not_found_names_the_urls_without_a_password() -> None:
    url = f"http://user:{PASSWORD}@other.invalid/v1"
    request = httpx.Request("GET", f"{url}/pets")
    error = service_not_found(url, httpx.Response(404, html="<h1>x</h1>", request=request))
    assert error is not None
    assert error.message.startswith(
        "no Petstore service at http://***@other.invalid/v1 (GET "
        "http://***@other.invalid/v1/pets answered 404: Not Found)"
    )
    assert PASSWORD not in str(error)
