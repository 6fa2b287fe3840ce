"""Throwaway PostgreSQL and Redis servers for one test run, on free loopback ports.

The suite needs no server the machine happens to run: ``postgres_server`` makes a
fresh cluster with Debian's binaries (``initdb`` into a temporary directory,
``pg_ctl`` on a free port, fsync off: it is thrown away), ``redis_server`` starts a
``redis-server`` without persistence, and both are stopped and deleted at the end of
the run, also when it is interrupted (pytest tears session fixtures down on Ctrl-C;
``atexit`` covers an exit that skips that). ``PETSTORE_TEST_POSTGRES_URL`` and
``PETSTORE_TEST_REDIS_URL`` point the suite at servers of your own instead.

``initdb`` and ``postgres`` refuse to run as root, and tests here run as root: the
cluster then runs as the unprivileged ``postgres`` user that Debian's package
creates (``subprocess``'s ``user=``). pytest-postgresql's ``postgresql_proc`` runs
them as the current user, which is why this is not that plugin.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

#: The unprivileged user a cluster runs as when the tests run as root.
POSTGRES_USER = "postgres"


class ServerUnavailableError(RuntimeError):
    """A throwaway server could not be started; the message says what is missing."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _postgres_bin(name: str) -> str:
    """The path of a PostgreSQL server program: on PATH, else Debian's newest."""
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise ServerUnavailableError(
            f"{name} not found: install Debian's postgresql package (make test does), "
            "or set PETSTORE_TEST_POSTGRES_URL to a server of your own"
        )
    return found


def _wait_for(ready: Callable[[], bool], *, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise ServerUnavailableError(f"{what} did not start within {seconds:g} s")
        time.sleep(0.05)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def postgres_server() -> Iterator[str]:
    """A fresh PostgreSQL cluster on a free loopback port for as long as the block
    runs; yields the URL of its ``postgres`` database (user ``postgres``, trust).
    Raises ServerUnavailableError when the binaries are missing or it cannot start."""
    initdb, pg_ctl = _postgres_bin("initdb"), _postgres_bin("pg_ctl")
    as_root = os.geteuid() == 0
    user = POSTGRES_USER if as_root else None
    root = Path(tempfile.mkdtemp(prefix="petstore-test-postgres-"))
    data, port = root / "data", free_port()
    if as_root:
        owner = pwd.getpwnam(POSTGRES_USER)
        os.chown(root, owner.pw_uid, owner.pw_gid)

    def run(*args: str) -> None:
        result = subprocess.run(args, user=user, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ServerUnavailableError(f"{args[0]} failed: {result.stderr or result.stdout}")

    def stop() -> None:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                [pg_ctl, "stop", "-D", str(data), "-m", "immediate", "-w"],
                user=user,
                capture_output=True,
                check=False,
            )
        shutil.rmtree(root, ignore_errors=True)

    atexit.register(stop)
    try:
        run(initdb, "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=300"
        )
        run(pg_ctl, "start", "-D", str(data), "-w", "-l", str(root / "server.log"), "-o", options)
        _wait_for(lambda: _listening(port), what="PostgreSQL")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        stop()
        atexit.unregister(stop)


@contextmanager
def redis_server() -> Iterator[str]:
    """A ``redis-server`` on a free loopback port, no persistence, for as long as the
    block runs; yields its ``redis://`` URL. Raises ServerUnavailableError when it
    is not installed or does not start."""
    executable = shutil.which("redis-server")
    if executable is None:
        raise ServerUnavailableError(
            "redis-server not found: install Debian's redis-server package (make test "
            "does), or set PETSTORE_TEST_REDIS_URL to a server of your own"
        )
    port = free_port()
    process = subprocess.Popen(
        [
            executable,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def stop() -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    atexit.register(stop)
    try:
        _wait_for(lambda: process.poll() is not None or _listening(port), what="Redis")
        if process.poll() is not None:
            raise ServerUnavailableError(f"redis-server exited with {process.returncode}")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop()
        atexit.unregister(stop)
