"""Graceful shutdown of ``petstore serve`` (issue: a rolling restart behind HAProxy
fails no request): on SIGTERM ``/readyz`` answers 503 at once while everything else
is served, then, after the drain, requests in flight finish, idle keep-alive
connections are closed, and the process exits within the shutdown timeout.

The real-server tests run short drains and timeouts (1-3 s) set through the
environment; the figures they assert have a margin of about half a second.
"""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx2
import pytest
from starlette.testclient import TestClient

from petstore.server import shutdown
from petstore.server.app import create_app
from petstore.server.config import Settings
from testbed.processes import child_pids, listening
from tests import examples
from tests.conformance import Conformance
from tests.serve.test_crash_safety import CrashableServer, _serving, _wait_gone
from tests.serve.test_slow_clients import post_head, read_answer

#: How late an expected event may come: signal delivery, polling, a worker's exit.
SLACK = 0.5
NEW_PET = json.dumps({"name": "Rex", "categoryId": 1}).encode()


# The drain as the app sees it (no server process) -----------------------------------


def test_readyz_is_503_once_the_drain_marker_exists_and_nothing_else_changes(
    settings: Settings, conformance: Conformance, auth: dict[str, str], tmp_path: Path
) -> None:
    marker = tmp_path / "draining"
    app = create_app(settings, drain_marker=str(marker))
    with TestClient(app) as client:
        client.event_hooks["response"] = [conformance.check]
        assert client.get("/readyz").status_code == 200
        marker.touch()
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json() == {
            "code": "unavailable",
            "message": "this instance is shutting down; retry on another one",
            "status": 503,
        }
        assert ready.headers["retry-after"] == "1"
        assert client.get("/v1/pets", headers=auth).status_code == 200
        assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize(
    ("timeout", "drain", "kill_after"),
    [(30, 5, 25), (3, 1, 2), (3, 0.5, 2), (3, 2.5, 1), (1, 0, 1)],
)
def test_workers_get_what_is_left_of_the_timeout_after_the_drain_in_whole_seconds(
    timeout: int, drain: float, kill_after: int
) -> None:
    settings = Settings(shutdown_timeout_seconds=timeout, shutdown_drain_seconds=drain)
    assert shutdown.workers_kill_timeout(settings) == kill_after


# A real server ---------------------------------------------------------------------


def _env(*, drain: float, timeout: int, **more: str) -> dict[str, str]:
    return {
        "PETSTORE_SHUTDOWN_DRAIN_SECONDS": str(drain),
        "PETSTORE_SHUTDOWN_TIMEOUT_SECONDS": str(timeout),
        **{f"PETSTORE_{name.upper()}": value for name, value in more.items()},
    }


Serving = Callable[..., CrashableServer]


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[Serving]:
    """``serving(backend="sqlite", **env)``: a started server with those variables, its
    dev key known; every process of it is gone after the test (tests/serve/test_crash_safety.py's
    ``_serving``). One per test."""
    with ExitStack() as stack:

        def start(backend: str = "sqlite", **env: str) -> CrashableServer:
            root = tmp_path / "server"
            root.mkdir()
            server, _ = stack.enter_context(_serving(backend, root, env))
            assert isinstance(server, CrashableServer)
            return server

        yield start


def _send(server: CrashableServer, signum: signal.Signals) -> float:
    """Send ``signum`` to the server's main process; the monotonic time it was sent."""
    assert server.process is not None
    sent = time.monotonic()
    server.process.send_signal(signum)
    return sent


def _until_refused(server: CrashableServer, *, within: float) -> float:
    """The monotonic time at which the server stops accepting connections."""
    deadline = time.monotonic() + within
    while listening(server.port):
        assert time.monotonic() < deadline, f"still listening after {within} s"
        time.sleep(0.01)
    return time.monotonic()


def _exited(server: CrashableServer, *, within: float) -> float:
    """The monotonic time the main process exited (status 0); every worker is gone."""
    assert server.process is not None
    server.process.wait(within)
    ended = time.monotonic()
    assert server.process.returncode == 0, server.output()
    _wait_gone(server.workers, timeout=1)
    return ended


def _readyz(server: CrashableServer) -> httpx2.Response:
    return httpx2.get(f"{server.url}/readyz", timeout=2)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_sigterm_makes_readyz_503_at_once_while_pets_are_still_served(
    serving: Serving, backend: str
) -> None:
    server = serving(backend, **_env(drain=2.5, timeout=6, workers="2"))
    assert len(server.workers) == 2
    assert _readyz(server).status_code == 200
    sent = _send(server, signal.SIGTERM)
    while (ready := _readyz(server)).status_code == 200:
        assert time.monotonic() - sent < SLACK, "/readyz still 200"
    assert ready.status_code == 503
    assert ready.json()["code"] == "unavailable"
    assert "shutting down" in ready.json()["message"]
    assert ready.headers["retry-after"].isdigit()
    # The rest of the drain, over new connections that either worker may take.
    with httpx2.Client(headers=server.auth, timeout=2) as client:
        while time.monotonic() - sent < 2.5 - SLACK:
            assert client.get(f"{server.url}/readyz").status_code == 503
            assert client.get(f"{server.url}/v1/pets").status_code == 200
            created = client.post(f"{server.url}/v1/pets", json={"name": "Late", "categoryId": 2})
            assert created.status_code == 201
            time.sleep(0.05)
    assert "SIGTERM: draining for 2.5 s" in server.output()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_request_in_flight_when_the_stop_starts_is_answered(
    serving: Serving, backend: str
) -> None:
    server = serving(backend, **_env(drain=1, timeout=10, body_timeout_seconds="5"))
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as slow:
        # A createPet whose body is still on its way when the stop starts.
        head = post_head(server.key, f"Content-Length: {len(NEW_PET)}")
        slow.sendall(head + NEW_PET[:5])
        sent = _send(server, signal.SIGTERM)
        stopped = _until_refused(server, within=1 + SLACK * 2)
        assert stopped - sent > 1 - SLACK / 5, "the stop started before the drain was over"
        time.sleep(0.3)
        slow.sendall(NEW_PET[5:])
        answer = read_answer(slow)
    assert answer.status == 201, answer.raw[:300]
    assert answer.json() == examples.pet(1, "Rex", 1)
    _exited(server, within=5)
    assert "the drain is over: stopping" in server.output()


@pytest.mark.slow
def test_an_idle_keep_alive_connection_is_closed_by_the_server_after_the_drain(
    serving: Serving,
) -> None:
    server = serving(**_env(drain=1.5, timeout=5))
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as idle:
        idle.sendall(request)
        assert read_answer(idle).status == 200
        sent = _send(server, signal.SIGTERM)
        time.sleep(0.3)
        idle.sendall(request)  # the load balancer may still use it during the drain
        assert read_answer(idle).status == 200
        idle.settimeout(1.5 + 2)
        assert idle.recv(1) == b"", "the server sent something instead of closing"
        closed = time.monotonic() - sent
    assert 1.5 - SLACK / 5 < closed < 1.5 + SLACK
    _exited(server, within=2)


@pytest.mark.slow
def test_sigterm_exits_after_the_drain_leaving_no_worker_nor_marker(
    serving: Serving, tmp_path: Path
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    server = serving(**_env(drain=1, timeout=4, workers="2"), TMPDIR=str(temp))
    (marker_dir,) = temp.glob("petstore-serve-*")
    assert len(server.workers) == 2
    sent = _send(server, signal.SIGTERM)
    ended = _exited(server, within=4 + SLACK)
    assert 1 - SLACK / 5 < ended - sent < 1 + 2 * SLACK
    assert not marker_dir.exists()
    assert not child_pids(server.process.pid)  # type: ignore[union-attr]
    assert "Granian shutdown completed" in server.output()


@pytest.mark.slow
def test_sigint_stops_at_once_without_a_drain(serving: Serving) -> None:
    server = serving(**_env(drain=3, timeout=6))
    sent = _send(server, signal.SIGINT)
    assert _until_refused(server, within=SLACK) - sent < SLACK
    assert _exited(server, within=2) - sent < 1 + SLACK
    assert "SIGINT: stopping" in server.output()
    assert "draining" not in server.output()


@pytest.mark.slow
@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_second_sigterm_or_a_sigint_during_the_drain_stops_at_once(
    serving: Serving, second: signal.Signals
) -> None:
    server = serving(**_env(drain=4, timeout=8))
    _send(server, signal.SIGTERM)
    deadline = time.monotonic() + SLACK
    while _readyz(server).status_code != 503:
        assert time.monotonic() < deadline
    sent = _send(server, second)
    assert _exited(server, within=2) - sent < 1 + SLACK
    reason = "a second SIGTERM" if second == signal.SIGTERM else "SIGINT"
    assert f"{reason}: stopping" in server.output()


@pytest.mark.slow
def test_a_worker_still_busy_at_the_timeout_is_killed_and_the_process_exits_in_time(
    serving: Serving,
) -> None:
    # The request's body never comes, and its body timeout (30 s) is past the
    # shutdown timeout (3 s): granian waits for the request until it kills the worker.
    server = serving(**_env(drain=1, timeout=3, body_timeout_seconds="30"))
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as stuck:
        stuck.sendall(post_head(server.key, f"Content-Length: {len(NEW_PET)}") + NEW_PET[:5])
        time.sleep(0.2)
        sent = _send(server, signal.SIGTERM)
        ended = _exited(server, within=3 + 2 * SLACK)
        assert ended - sent > 3 - SLACK, "the worker was not waited for"
        answer = read_answer(stuck, timeout=1)
    assert answer.status is None  # no answer: the connection died with the worker
    assert "Killing worker-1 after it refused to gracefully stop" in server.output()
