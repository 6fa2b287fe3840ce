"""testbed/processes.py, the one way tests, bench and the test bed start, wait for and stop a
server process: a stop that the server ignores still ends it and all it forked, a
server that dies or never gets ready is reported with its log, and the readiness
probe tells a serving port from a silent one. Small Python programs stand in for the
servers (real processes, real signals, a real HTTP server)."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import pytest

from testbed import processes
from testbed.processes import ServerUnavailableError

#: Ignores SIGTERM, forks a child that ignores it too and, with ``leave``, moves to a
#: process group of its own; prints both pids, then waits to be killed.
STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = os.fork()
if child == 0:
    if sys.argv[1] == "leave":
        os.setpgid(0, 0)
    time.sleep(600)
    os._exit(0)
print(os.getpid(), child, flush=True)
time.sleep(600)
"""


def _stubborn(tmp_path: Path, mode: str) -> tuple[processes.Daemon, list[int]]:
    log = tmp_path / "stubborn.log"
    daemon = processes.start(
        [sys.executable, "-c", STUBBORN, mode],
        ready=lambda: len(log.read_text().split()) == 2,
        what="stubborn",
        log=log,
        seconds=30,
    )
    return daemon, [int(pid) for pid in log.read_text().split()]


@pytest.mark.parametrize("mode", ["stay", "leave"], ids=["in-its-group", "left-its-group"])
def test_stop_ends_a_server_that_ignores_sigterm_and_the_child_it_forked(
    tmp_path: Path, mode: str
) -> None:
    daemon, pids = _stubborn(tmp_path, mode)
    assert processes.child_pids(daemon.pid) == [pids[1]]
    assert all(processes.running(pid) for pid in pids)
    daemon.stop(grace=0.5)
    assert not daemon.alive()
    assert daemon.process.returncode == -9  # SIGTERM ignored: killed after the grace
    assert processes.wait_gone(pids, seconds=5) == []
    assert not processes.group_alive(daemon.pid)


def test_kill_ends_the_whole_tree_at_once(tmp_path: Path) -> None:
    daemon, pids = _stubborn(tmp_path, "leave")
    daemon.kill()
    assert processes.wait_gone(pids, seconds=5) == []


def test_a_server_that_exits_at_start_is_reported_with_its_log(tmp_path: Path) -> None:
    script = "import sys; print('port already taken'); sys.exit(3)"
    with pytest.raises(ServerUnavailableError) as caught:
        processes.start(
            [sys.executable, "-c", script],
            ready=lambda: False,
            what="the server",
            log=tmp_path / "server.log",
        )
    assert str(caught.value).startswith("the server exited (3); its log ends:")
    assert str(caught.value).endswith("port already taken")


def test_a_server_never_ready_is_killed_and_reported_after_the_wait(tmp_path: Path) -> None:
    script = "import os, time; print(os.getpid(), flush=True); time.sleep(600)"
    log = tmp_path / "server.log"
    with pytest.raises(ServerUnavailableError, match=r"^the server did not become ready within"):
        processes.start(
            [sys.executable, "-c", script],
            ready=lambda: False,
            what="the server",
            log=log,
            seconds=5,  # time enough for it to print its pid on a loaded machine
        )
    assert processes.wait_gone([int(log.read_text())], seconds=5) == []


def test_the_readiness_probe_answers_only_while_a_server_serves_200(tmp_path: Path) -> None:
    port = processes.free_port()
    assert not processes.listening(port)
    assert not processes.answers(port, "/")
    (tmp_path / "healthz").write_text("ok")
    server = processes.start(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
        ready=partial(processes.answers, port, "/healthz"),
        what="http.server",
        log=tmp_path / "server.log",
        cwd=tmp_path,
    )
    try:
        assert processes.listening(port)
        assert not processes.answers(port, "/readyz")  # 404
        assert processes.child_pids(server.pid) == []
        assert processes.rss_kib(server.pid) > 1024
    finally:
        server.stop(grace=5)
    assert not processes.answers(port, "/healthz")
    assert not processes.listening(port)
    assert processes.rss_kib(server.pid) == 0
