"""deploy/haproxy.cfg in front of a real ``petstore serve``, on loopback: the public
side reaches the API and the health checks, and never ``/metrics``, however its path
is spelled (the server percent-decodes before it routes)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.processes import Daemon, free_port, program, wait_for
from tests.conftest import LiveServer

ROOT = Path(__file__).resolve().parent.parent
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
    """deploy/haproxy.cfg with one ``server`` line, as ``make cluster`` writes it."""
    config = tmp_path / "haproxy.cfg"
    text = (ROOT / "deploy" / "haproxy.cfg").read_text()
    config.write_text(f"{text}    server app1 127.0.0.1:{server_port}\n")
    return config


@pytest.fixture(scope="module")
def balanced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, int]]:
    """A real server and HAProxy in front of it: (the server, HAProxy's port)."""
    root = tmp_path_factory.mktemp("haproxy")
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
