"""deploy/haproxy.cfg in front of a real ``petstore serve``, on loopback: the public
side reaches the API and the health checks, and never ``/metrics``, however its path
is spelled (the server percent-decodes before it routes); what HAProxy answers
itself carries the Error body (D10), and the public ``/readyz`` only its status."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from testbed.processes import Daemon, free_port, program, wait_for
from tests import ROOT
from tests.conftest import LiveServer

#: Spellings of /metrics a client may send; the server routes several of them to
#: its /metrics page when they reach it.
METRICS_SPELLINGS = [
    "/metrics",
    "/%6detrics",
    "/%6D%65%74%72%69%63%73",
    "/metrics/",
    "/metrics?x=1",
    "//metrics",
    "/./metrics",
    "/v1/../metrics",
    "/v1/%2e%2e/metrics",
    "/%2fmetrics",
    "/%256detrics",
    "/METRICS",
    "/metrics%00",
    "http://petstore.example.com/%6detrics",
]


def raw_get(port: int, target: str) -> tuple[int, bytes]:
    """Send ``GET <target> HTTP/1.1`` byte for byte (no client library normalises
    it) to 127.0.0.1:``port``; the status and body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
        )
        answer = b"".join(iter(lambda: conn.recv(65536), b""))
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def ready(port: int) -> bool:
    """Whether HAProxy on ``port`` answers /readyz with 200 (its instance is up)."""
    try:
        return raw_get(port, "/readyz")[0] == 200
    except OSError:
        return False


def haproxy_env(tmp_path: Path, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "PETSTORE_LB_BIND": f"127.0.0.1:{port}",
        "PETSTORE_LB_STATS_SOCKET": str(tmp_path / "haproxy.sock"),
        "PETSTORE_LB_MAXCONN": "100",
    }


def config_for(tmp_path: Path, server_port: int) -> Path:
    """deploy/haproxy.cfg with the instance's ``server`` line and its unchecked backup,
    as ``make cluster`` writes it."""
    config = tmp_path / "haproxy.cfg"
    text = (ROOT / "deploy" / "haproxy.cfg").read_text()
    config.write_text(
        f"{text}    server app1 127.0.0.1:{server_port}\n"
        f"    server app1-backup 127.0.0.1:{server_port} backup no-check\n"
    )
    return config


@pytest.fixture(scope="module")
def balanced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, int]]:
    """A real server and HAProxy in front of it: (the server, HAProxy's port)."""
    root = tmp_path_factory.mktemp("haproxy")
    with haproxy_in_front(root) as balanced:
        yield balanced


@contextmanager
def haproxy_in_front(root: Path) -> Iterator[tuple[LiveServer, int]]:
    """A real server under ``root`` and HAProxy in front of it, until the block ends:
    (the server, HAProxy's port)."""
    server = LiveServer(root / "server")
    (root / "server").mkdir()
    server.start()
    port = free_port()
    haproxy = Daemon(
        [
            program("haproxy", package="haproxy"),
            "-W",
            "-db",
            "-f",
            str(config_for(root, server.port)),
        ],
        log=root / "haproxy.log",
        env=haproxy_env(root, port),
    )
    try:
        wait_for(lambda: ready(port), what="HAProxy with its instance up", seconds=30)
        yield server, port
    finally:
        haproxy.stop(grace=5)
        server.stop()


def state_of(root: Path, server: str) -> str:
    """``server``'s status in the backend (``UP``, ``DOWN``...), from HAProxy's runtime
    API under ``root``."""
    with socket.socket(socket.AF_UNIX) as api:
        api.connect(str(root / "haproxy.sock"))
        api.sendall(b"show stat\n")
        answer = b""
        while chunk := api.recv(65536):
            answer += chunk
    for row in answer.decode().splitlines():
        fields = row.split(",")
        if fields[:2] == ["petstore", server]:
            return fields[17]
    raise AssertionError(f"no server {server} in {answer!r}")


def test_when_every_instance_fails_its_checks_the_backups_serve(tmp_path: Path) -> None:
    """D27: when every instance fails its checks at once (as under heavy packet loss on
    the path to the database), HAProxy sends requests to them unchecked (the backup
    lines, ``option allbackups``) rather than answering 503 itself. Here the
    instance's /readyz fails because its schema reads as too old; it serves still."""
    with haproxy_in_front(tmp_path) as (server, port):
        assert raw_get(port, "/healthz")[0] == 200
        database = server.database_url.removeprefix("sqlite:///")
        with sqlite3.connect(database) as connection:
            connection.execute("UPDATE alembic_version SET version_num = '0001'")
        wait_for(lambda: state_of(tmp_path, "app1") == "DOWN", what="app1 DOWN", seconds=10)
        before = served(server)
        status, body = raw_get(port, "/healthz")
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        wait_for(lambda: served(server) > before, what="the instance's access line", seconds=5)


def test_the_shipped_haproxy_config_is_valid(tmp_path: Path) -> None:
    config = config_for(tmp_path, free_port())
    checked = subprocess.run(
        [program("haproxy", package="haproxy"), "-c", "-f", str(config)],
        env=haproxy_env(tmp_path, free_port()),
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Configuration file is valid" in checked.stdout


@pytest.mark.parametrize("target", METRICS_SPELLINGS)
def test_metrics_are_unreachable_through_haproxy_however_spelled(
    balanced: tuple[LiveServer, int], target: str
) -> None:
    _, port = balanced
    status, body = raw_get(port, target)
    assert status in (400, 403, 404), (status, body[:200])
    assert b"petstore_requests_total" not in body


def test_the_server_itself_answers_a_percent_encoded_metrics_path(
    balanced: tuple[LiveServer, int],
) -> None:
    # What makes the load balancer's refusal necessary: the instance decodes the path.
    server, _ = balanced
    status, body = raw_get(server.port, "/%6detrics")
    assert status == 200
    assert b"petstore_requests_total" in body


@pytest.mark.parametrize(
    ("target", "status"),
    [
        ("/healthz", 200),
        ("/readyz", 200),
        ("/v1/pets", 401),
        ("/v1/pets/1", 401),
        ("/v1/openapi.json", 200),
        ("/v1/docs", 200),
        ("/v1/%70ets", 401),
    ],
)
def test_the_api_and_health_checks_are_reachable_through_haproxy(
    balanced: tuple[LiveServer, int], target: str, status: int
) -> None:
    _, port = balanced
    assert raw_get(port, target)[0] == status


def exchange(port: int, request: bytes, *, timeout: float = 30) -> tuple[int, bytes, bytes, float]:
    """Send ``request`` byte for byte to 127.0.0.1:``port`` and read until the answer
    is whole (its Content-Length) or the connection ends: its status, head, body and
    the seconds it took."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        started = time.monotonic()
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            length = [
                line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")
            ]
            if length and len(body) >= int(length[0].split(b":")[1]):
                break
        took = time.monotonic() - started
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, body, took


def error_body(head: bytes, body: bytes, status: int, code: str) -> str:
    """The Error body's message, once head and body are the JSON Error of ``status``
    and ``code`` (D10)."""
    assert b"\r\ncontent-type: application/json" in head.lower(), head
    error = json.loads(body)
    assert (error["status"], error["code"]) == (status, code), error
    return str(error["message"])


def test_an_oversized_content_length_is_413_at_once(balanced: tuple[LiveServer, int]) -> None:
    """Issue 53 (N7): a Content-Length over 1 MiB with no body waited 10 s for it,
    then answered 408."""
    _, port = balanced
    head = b"POST /v1/pets HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
    status, answer_head, body, took = exchange(port, head + b"Content-Length: 2000000\r\n\r\n")
    assert status == 413
    error_body(answer_head, body, 413, "payload_too_large")
    assert took < 1


def test_a_body_too_slow_is_400_with_the_error_body(balanced: tuple[LiveServer, int]) -> None:
    """Issue 53 (N7): HAProxy's answer said ``"code":"invalid_request","status":408``;
    the instances answer a body too slow 400 (D17), and so does HAProxy now."""
    _, port = balanced
    request = (
        b"POST /v1/pets HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
        b'Content-Length: 40\r\n\r\n{"name"'
    )
    status, head, body, took = exchange(port, request)
    assert status == 400
    assert "did not arrive within 10 s" in error_body(head, body, 400, "invalid_request")
    assert 9.5 < took < 12


@pytest.mark.parametrize("target", ["/readyz", "/%72eadyz", "/readyz?verbose=1"])
def test_the_public_readyz_says_only_the_status(
    balanced: tuple[LiveServer, int], target: str
) -> None:
    """Issue 53 (N11): the public /readyz told anyone whether the rate limits fail
    open. The instance's own port still says it."""
    server, port = balanced
    status, head, body, _ = exchange(
        port, f"GET {target} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".encode()
    )
    assert (status, json.loads(body)) == (200, {"status": "ready"})
    assert b"\r\ncontent-type: application/json" in head.lower()
    assert json.loads(raw_get(server.port, "/readyz")[1]) == {"status": "ready", "rateLimits": "ok"}


@pytest.mark.parametrize(
    ("request_head", "status"),
    [
        (b"GET /v1/pets HTTP/1.1\r\nHost: a\r\nHost: b\r\n", 400),
        (b"GET /v1 pets HTTP/1.1\r\nHost: a\r\n", 400),
        (b"POST /v1/pets HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity, chunked\r\n", 422),
    ],
)
def test_what_haproxys_http_parser_refuses_never_reaches_an_instance(
    balanced: tuple[LiveServer, int], request_head: bytes, status: int
) -> None:
    """HAProxy 2.6 answers these from its HTTP/1 parser, with its own HTML body that
    no errorfile or http-error changes (docs/operations/troubleshoot.md): the status
    is pinned here, and that no instance saw the request."""
    server, port = balanced
    before = settled(server)
    got, _, _, _ = exchange(port, request_head + b"Connection: close\r\n\r\n0\r\n\r\n")
    assert got == status
    time.sleep(0.3)  # an access line would be written within 0.1 s
    assert served(server) == before


def settled(server: LiveServer) -> int:
    """:func:`served` once it has stayed the same for half a second (an earlier test's
    request, such as a body that never arrived, is logged when the instance's own
    deadline ends it), within 15 s."""
    deadline = time.monotonic() + 15
    count = served(server)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if (now := served(server)) == count:
            return count
        count = now
    raise AssertionError(f"{server} kept logging requests for 15 s")


def served(server: LiveServer) -> int:
    """How many requests other than HAProxy's checks ``server`` has logged."""
    lines = server.output().splitlines()
    return sum(1 for line in lines if "petstore.access" in line and "/readyz" not in line)
