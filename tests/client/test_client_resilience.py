"""petstore.client rides out what D27 bounds: a load balancer paused and replaced, a
database that stops answering, with keepalives on its connections and retries for
up to ``retry_for`` (20 s), never repeating what may not be repeated.

Everything is real: a ``petstore serve`` process; in front of it a load balancer of
the test's, a forwarding process that SIGSTOP pauses as a frozen HAProxy (its kernel
still accepts and acknowledges, nothing answers); behind it, for the 503s, a
PostgreSQL reached through tests/tcpproxy.py, whose pause makes the service answer
``503 unavailable`` with ``Retry-After: 1`` (D25). What the service received is
counted by the service itself (``petstore_requests_total`` at ``/metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import httpx
import pytest
from click.testing import CliRunner

from petstore.cli.main import main
from petstore.client import RETRY_FOR, AsyncClient, Client
from petstore.client.errors import PetstoreClientError, ServerError, TransportError
from petstore.server.store import migrate
from testbed.processes import free_port
from tests.conftest import postgres_database
from tests.servers import LiveServer
from tests.tcpproxy import TcpProxy

ROOT = Path(__file__).parents[2]
#: The service's request timeout in these tests: a paused database is 503 after 1 s.
REQUEST_TIMEOUT = 1.0
#: The balancer is paused this long, then killed, and its replacement listens this
#: much later: longer than a client bounded to 3 retries would wait (0.5 + 1 + 2 s of
#: backoff at most), well inside D27's 20 s.
PAUSED, REPLACED_AFTER = 2.0, 4.0
#: Long enough for the service to answer (and count) every request sent to it.
SETTLE = REQUEST_TIMEOUT + 1.0


def forward(port: int, target: int) -> None:
    """A load balancer of the test, run as a process of its own (so that SIGSTOP
    freezes it whole): every connection to ``127.0.0.1:port`` forwarded to
    ``127.0.0.1:target``. Writes ``listening`` once it accepts."""
    listener = socket.create_server(("127.0.0.1", port))  # SO_REUSEADDR on POSIX
    print("listening", flush=True)

    def pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    while True:
        client, _ = listener.accept()
        server = socket.create_connection(("127.0.0.1", target))
        for ends in ((client, server), (server, client)):
            threading.Thread(target=pump, args=ends, daemon=True).start()


class Balancer:
    """A :func:`forward` process on ``port``, in front of ``target``; returns once it
    listens."""

    def __init__(self, port: int, target: int) -> None:
        code = f"from {__name__} import forward; forward({port}, {target})"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE
        )
        stdout: IO[bytes] | None = self.process.stdout
        assert stdout is not None
        assert stdout.readline() == b"listening\n", "the balancer did not start"

    def pause(self) -> None:
        """Freeze it (SIGSTOP): its kernel still completes handshakes and acknowledges
        what is sent to it; nothing is forwarded or answered."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def kill(self) -> None:
        """Gone (SIGKILL, also when paused): its connections are reset."""
        self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


@contextlib.contextmanager
def balancers(target: int) -> Iterator[tuple[int, Callable[[], Balancer]]]:
    """A free port and a function starting a :class:`Balancer` on it, in front of
    ``target``; every balancer started is killed at the end."""
    port, started = free_port(), list[Balancer]()

    def start() -> Balancer:
        started.append(Balancer(port, target))
        return started[-1]

    try:
        yield port, start
    finally:
        for balancer in started:
            balancer.kill()


def replace_later(first: Balancer, start: Callable[[], Balancer]) -> threading.Thread:
    """A started thread that kills ``first`` after :data:`PAUSED` s (the client's
    connections to it are reset) and starts its replacement on the same port
    :data:`REPLACED_AFTER` s later (connections refused meanwhile)."""

    def replace() -> None:
        time.sleep(PAUSED)
        first.kill()
        time.sleep(REPLACED_AFTER)
        start()

    thread = threading.Thread(target=replace)
    thread.start()
    return thread


EXPECTED_KEEPALIVES = {"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 2, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 3}


class Connections:
    """Response hooks noting the connection that carried each response, as it
    arrives: its local port and its TCP keepalive options."""

    def __init__(self) -> None:
        self.ports: list[int] = []
        self.keepalives: list[dict[str, int]] = []

    def note(self, response: httpx.Response) -> None:
        sock = response.extensions["network_stream"].get_extra_info("socket")
        self.ports.append(sock.getsockname()[1])
        tcp = socket.IPPROTO_TCP
        self.keepalives.append({
            "SO_KEEPALIVE": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "TCP_KEEPIDLE": sock.getsockopt(tcp, socket.TCP_KEEPIDLE),
            "TCP_KEEPINTVL": sock.getsockopt(tcp, socket.TCP_KEEPINTVL),
            "TCP_KEEPCNT": sock.getsockopt(tcp, socket.TCP_KEEPCNT),
        })  # fmt: skip

    async def noted(self, response: httpx.Response) -> None:
        self.note(response)

    def hooks(self) -> dict[str, list[Callable[..., Any]]]:
        return {"response": [self.note]}

    def async_hooks(self) -> dict[str, list[Callable[..., Any]]]:
        return {"response": [self.noted]}


def unique(prefix: str = "Rex") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_the_client_s_connections_carry_tcp_keepalives(live_server: LiveServer) -> None:
    url, key, connections = f"{live_server.url}/v1", live_server.dev_key, Connections()
    with Client(url, api_key=key, event_hooks=connections.hooks()) as petstore:
        petstore.list_pets(limit=1)

    async def scenario() -> None:
        async with AsyncClient(url, api_key=key, event_hooks=connections.async_hooks()) as c:
            await c.list_pets(limit=1)

    asyncio.run(scenario())
    assert connections.keepalives == [EXPECTED_KEEPALIVES] * 2


def test_a_paused_balancer_replaced_is_ridden_out_within_d27(live_server: LiveServer) -> None:
    """A create sent on a kept-alive connection to a balancer that is then paused,
    killed 2 s later and replaced 4 s after that succeeds on the new one, once,
    within D27's 20 s."""
    connections, name = Connections(), unique("Paused")
    with balancers(live_server.port) as (port, start):
        first = start()
        with Client(f"http://127.0.0.1:{port}/v1", api_key=live_server.dev_key,
                    event_hooks=connections.hooks()) as petstore:  # fmt: skip
            petstore.list_pets(limit=1)
            first.pause()
            replacing = replace_later(first, start)
            started = time.monotonic()
            try:
                pet = petstore.create_pet(name, category_id=1)
                took = time.monotonic() - started
            finally:
                replacing.join()
            assert [p for p in petstore.iter_pets() if p.name == name] == [pet]
    assert PAUSED + REPLACED_AFTER <= took < RETRY_FOR
    assert connections.ports[1] != connections.ports[0], "answered on a new connection"


def test_a_paused_balancer_replaced_is_ridden_out_by_the_async_client(
    live_server: LiveServer,
) -> None:
    connections = Connections()

    async def scenario(port: int, first: Balancer, start: Callable[[], Balancer]) -> float:
        url, hooks = f"http://127.0.0.1:{port}/v1", connections.async_hooks()
        async with AsyncClient(url, api_key=live_server.dev_key, event_hooks=hooks) as petstore:
            await petstore.list_pets(limit=1)
            first.pause()
            replacing = replace_later(first, start)
            started = time.monotonic()
            try:
                page = await petstore.list_pets(limit=1)
                assert len(page.pets) <= 1
                return time.monotonic() - started
            finally:
                await asyncio.to_thread(replacing.join)

    with balancers(live_server.port) as (port, start):
        took = asyncio.run(scenario(port, start(), start))
    assert PAUSED + REPLACED_AFTER <= took < RETRY_FOR
    assert connections.ports[1] != connections.ports[0], "answered on a new connection"


class PausableService:
    """A ``petstore serve`` on a PostgreSQL database of its own reached through
    ``database`` (a :class:`TcpProxy`): paused, every request that needs the
    database is ``503 unavailable`` with ``Retry-After: 1`` after
    :data:`REQUEST_TIMEOUT` (D25)."""

    def __init__(self, server: LiveServer, database: TcpProxy) -> None:
        self.server, self.database = server, database
        self.url, self.key = f"{server.url}/v1", server.dev_key

    def requests(self, operation: str) -> int:
        """How many requests of ``operation`` the service has answered, whatever the
        status (its own count, ``petstore_requests_total``)."""
        text = httpx.get(f"{self.server.url}/metrics", timeout=5).text
        pattern = rf'^petstore_requests_total\{{operation="{operation}",status="\d+"\}} (\S+)$'
        return int(sum(float(n) for n in re.findall(pattern, text, flags=re.MULTILINE)))

    @contextlib.contextmanager
    def paused(self, *, resume_after: float | None = None) -> Iterator[None]:
        """The database paused for the block, or until ``resume_after`` seconds."""
        self.database.pause()
        timer = threading.Timer(resume_after or 0, self.database.resume)
        if resume_after is not None:
            timer.start()
        try:
            yield
        finally:
            timer.cancel()
            self.database.resume()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PausableService]:
    with postgres_database() as database_url:
        migrate.upgrade(database_url)
        parts = urlsplit(database_url)
        assert parts.port is not None
        with TcpProxy(parts.port) as proxy:
            through = parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()
            server = LiveServer(
                tmp_path_factory.mktemp("pausable"),
                env={
                    "PETSTORE_DATABASE_URL": through,
                    "PETSTORE_REQUEST_TIMEOUT_SECONDS": str(REQUEST_TIMEOUT),
                },
            )
            server.start()
            try:
                yield PausableService(server, proxy)
            finally:
                server.stop()


def test_503_with_retry_after_is_repeated_until_the_service_answers(
    service: PausableService,
) -> None:
    """The database paused 9 s: the list is answered 503 with Retry-After: 1 more than
    3 times (where a client bounded to 3 retries gives up), the client waits at least
    that second each time, and the list is answered 200 once the database is back."""
    events: list[tuple[float, int | None]] = []  # (when, status), None for a request
    hooks: dict[str, list[Callable[..., Any]]] = {
        "request": [lambda request: events.append((time.monotonic(), None))],
        "response": [lambda response: events.append((time.monotonic(), response.status_code))],
    }
    with Client(service.url, api_key=service.key, event_hooks=hooks) as petstore:
        petstore.list_pets(limit=1)  # the key verified while the database answers
        events.clear()
        with service.paused(resume_after=9.0):
            started = time.monotonic()
            page = petstore.list_pets(limit=1)
            took = time.monotonic() - started
    statuses = [status for _, status in events if status is not None]
    assert statuses.count(503) > 3
    assert statuses[-1] == 200
    assert len(page.pets) <= 1
    assert took < RETRY_FOR
    for (answered, status), (sent, request) in itertools.pairwise(events):
        if status == 503:
            assert request is None
            assert sent - answered >= 1.0, "Retry-After: 1 honoured"


def test_pets_import_rides_out_a_database_paused_9_s(
    service: PausableService, tmp_path: Path
) -> None:
    """``pets import`` goes through the client: its creates, answered 503 for 9 s, are
    repeated with their keys, and every record is stored once."""
    prefix = unique("Imported")
    path = tmp_path / "animals.jsonl"
    path.write_text("".join(f'{{"name":"{prefix}-{i}","categoryId":1}}\n' for i in range(3)))
    env = {"PETSTORE_URL": service.url, "PETSTORE_API_KEY": service.key}
    with service.paused(resume_after=9.0):
        started = time.monotonic()
        result = CliRunner(env=env).invoke(main, ["pets", "import", str(path)])
        took = time.monotonic() - started
    assert result.exit_code == 0, result.output
    assert "3 animals stored, 0 refused" in result.stdout
    assert 9 <= took < RETRY_FOR
    with Client(service.url, api_key=service.key) as petstore:
        names = [pet.name for pet in petstore.iter_pets() if pet.name.startswith(prefix)]
    assert sorted(names) == [f"{prefix}-{i}" for i in range(3)]


def without_idempotency_key(request: httpx.Request) -> None:
    """A request hook sending a create without its Idempotency-Key."""
    del request.headers["Idempotency-Key"]


def test_a_create_without_idempotency_key_is_never_repeated(service: PausableService) -> None:
    """Neither after a 503 (the service may not know whether it committed) nor after a
    read timeout (it may be committing): the service receives it once. With its key
    the same create is repeated (D16)."""
    hooks = {"request": [without_idempotency_key]}
    for timeout, error, message in (
        (10.0, ServerError, "unavailable"),
        (0.3, TransportError, r"after 1 attempt\(s\).*ReadTimeout"),
    ):
        before = service.requests("createPet")
        with service.paused():
            options: dict[str, Any] = {"timeout": timeout, "retry_for": 4, "event_hooks": hooks}
            with (
                Client(service.url, api_key=service.key, **options) as petstore,
                pytest.raises(error, match=message),
            ):
                petstore.create_pet(unique(), category_id=1)
            time.sleep(SETTLE)
        assert service.requests("createPet") == before + 1, f"timeout {timeout} s"

    before = service.requests("createPet")
    with service.paused():
        with (
            Client(service.url, api_key=service.key, timeout=0.3, retry_for=4) as petstore,
            pytest.raises(PetstoreClientError),
        ):
            petstore.create_pet(unique(), category_id=1)
        time.sleep(SETTLE)
    assert service.requests("createPet") >= before + 3, "with its key, repeated"


def test_retries_end_at_retry_for_with_the_typed_error(service: PausableService) -> None:
    """A database that never comes back: the call ends with the 503's ServerError
    (its retry_after) once ``retry_for`` is spent, not before and not a whole
    attempt later."""
    with service.paused(), Client(service.url, api_key=service.key, retry_for=3) as petstore:
        started = time.monotonic()
        with pytest.raises(ServerError) as answered:
            petstore.list_pets(limit=1)
        took = time.monotonic() - started
    assert (answered.value.status, answered.value.retry_after) == (503, 1)
    assert 3 - REQUEST_TIMEOUT <= took < 3 + REQUEST_TIMEOUT + 1.5


def test_an_unreachable_service_is_transport_error_after_the_variable_s_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PETSTORE_RETRY_FOR_SECONDS", "2")
    client = Client(f"http://127.0.0.1:{free_port()}/v1", api_key="petstore_k")
    assert client.retries.retry_for == 2
    started = time.monotonic()
    with client, pytest.raises(TransportError, match="ConnectError") as caught:
        client.list_pets()
    took = time.monotonic() - started
    assert 2 <= took < 3
    assert "attempt(s) in 2." in caught.value.message


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_retry_for_variable_is_value_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("PETSTORE_RETRY_FOR_SECONDS", value)
    with pytest.raises(ValueError, match="PETSTORE_RETRY_FOR_SECONDS must be a number"):
        Client("http://127.0.0.1:9/v1", api_key="petstore_k")
    with pytest.raises(ValueError, match="retry_for must be a number"):
        Client("http://127.0.0.1:9/v1", api_key="petstore_k", retry_for=-1)
