"""``petstore serve`` as a newcomer starts and stops it: a taken address refused
(D24), and the drain kept when SIGTERM goes to the whole process group (``kill -TERM
-PGID``, ``timeout make serve``, systemd's ``KillMode=control-group``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from testbed.processes import child_pids
from tests.conftest import LiveServer
from tests.serve.test_crash_safety import CrashableServer, _wait_gone
from tests.serve.test_slow_clients import post_head, read_answer

SLACK = 0.5
NEW_PET = json.dumps({"name": "Rex", "categoryId": 1}).encode()


class GroupServer(CrashableServer):
    """A CrashableServer in a process group of its own, as a shell or systemd starts
    one: ``signal_group`` reaches the main process and every worker at once."""

    def start(self, *args: str) -> None:
        # testbed.processes starts every server in a session (and group) of its own.
        super().start(*args)
        assert self.process is not None
        deadline = time.monotonic() + 30
        workers = int(self.env.get("PETSTORE_WORKERS", "1"))
        while self.output().count("[INFO] Started worker-") < workers:
            assert time.monotonic() < deadline, self.output()
            time.sleep(0.05)
        # the workers started after /healthz first answered, too
        self.workers += [pid for pid in child_pids(self.process.pid) if pid not in self.workers]

    def signal_group(self, signum: signal.Signals) -> float:
        assert self.process is not None
        sent = time.monotonic()
        os.killpg(self.process.pid, signum)
        return sent


@pytest.fixture
def group_server(tmp_path: Path) -> Iterator[GroupServer]:
    server = GroupServer(tmp_path / "server", env={})
    server.root.mkdir()
    yield server
    server.close()


# D24: one service per address --------------------------------------------------------


def test_a_second_serve_on_the_same_port_exits_1_naming_the_address_and_port(
    tmp_path: Path,
) -> None:
    first = LiveServer(tmp_path / "first")
    first.root.mkdir()
    first.start()
    try:
        second = LiveServer(tmp_path / "second", env={"PETSTORE_PORT": str(first.port)})
        second.root.mkdir()
        result = second.refused()
        assert result.returncode == 1, result.stdout + result.stderr
        assert f"127.0.0.1:{first.port} is already in use" in result.stderr
        assert "--port" in result.stderr
        assert not (second.root / "data").exists(), "the refused server touched its database"
        # Every request still reaches the first server: its key is good on all of them.
        auth = {"Authorization": f"Bearer {first.dev_key}"}
        with httpx2.Client(headers=auth) as client:
            assert {client.get(f"{first.url}/v1/pets").status_code for _ in range(20)} == {200}
    finally:
        first.stop()


def test_serve_refuses_a_port_a_plain_socket_listens_on(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        server = LiveServer(tmp_path, env={"PETSTORE_PORT": str(port)})
        result = server.refused()
    assert result.returncode == 1
    assert f"127.0.0.1:{port} is already in use by another process" in result.stderr
    assert "--port" in result.stderr


def test_serve_starts_again_on_its_port_right_after_a_stop(tmp_path: Path) -> None:
    """A restart is not refused for the last run's connections (TIME_WAIT)."""
    server = LiveServer(tmp_path)
    server.start()
    assert httpx2.get(f"{server.url}/healthz").status_code == 200
    server.stop()
    server.start()
    server.stop()


# SIGTERM to the whole process group -------------------------------------------------


@pytest.mark.slow
def test_a_group_sigterm_drains_answers_the_request_in_flight_and_exits_0(
    group_server: GroupServer,
) -> None:
    group_server.env.update(
        {
            "PETSTORE_SHUTDOWN_DRAIN_SECONDS": "2",
            "PETSTORE_SHUTDOWN_TIMEOUT_SECONDS": "8",
            "PETSTORE_WORKERS": "2",
            "PETSTORE_BODY_TIMEOUT_SECONDS": "6",
        }
    )
    group_server.start()
    assert len(group_server.workers) == 2
    with socket.create_connection(("127.0.0.1", group_server.port), timeout=10) as slow:
        slow.sendall(post_head(group_server.key, f"Content-Length: {len(NEW_PET)}") + NEW_PET[:5])
        time.sleep(0.2)
        sent = group_server.signal_group(signal.SIGTERM)
        while httpx2.get(f"{group_server.url}/readyz", timeout=2).status_code == 200:
            assert time.monotonic() - sent < SLACK, "/readyz still 200"
        with httpx2.Client(headers=group_server.auth, timeout=2) as client:
            while time.monotonic() - sent < 2 - SLACK:
                assert client.get(f"{group_server.url}/readyz").status_code == 503
                assert client.get(f"{group_server.url}/v1/pets").status_code == 200
                time.sleep(0.1)
        slow.sendall(NEW_PET[5:])
        answer = read_answer(slow)
    assert answer.status == 201, answer.raw[:300]
    assert group_server.process is not None
    assert group_server.process.wait(8) == 0, group_server.output()
    _wait_gone(group_server.workers, timeout=1)
    output = group_server.output()
    assert "Unexpected exit" not in output
    assert "left to the main process" in output
    assert "the drain is over: stopping" in output


@pytest.mark.slow
def test_a_group_sigint_stops_at_once_and_exits_0(group_server: GroupServer) -> None:
    """Ctrl-C at the terminal: every process of the group gets SIGINT."""
    group_server.env.update({"PETSTORE_SHUTDOWN_DRAIN_SECONDS": "3", "PETSTORE_WORKERS": "2"})
    group_server.start()
    sent = group_server.signal_group(signal.SIGINT)
    assert group_server.process is not None
    assert group_server.process.wait(5) == 0, group_server.output()
    assert time.monotonic() - sent < 1 + SLACK
    assert "Unexpected exit" not in group_server.output()


@pytest.mark.slow
def test_in_development_without_a_drain_setting_sigterm_stops_at_once(
    group_server: GroupServer,
) -> None:
    """No load balancer watches a development server: no 5 s drain unless asked."""
    group_server.start()
    sent = group_server.signal_group(signal.SIGTERM)
    assert group_server.process is not None
    assert group_server.process.wait(5) == 0, group_server.output()
    assert time.monotonic() - sent < 1 + SLACK
    assert "draining" not in group_server.output()
