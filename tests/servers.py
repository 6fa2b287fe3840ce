"""Throwaway PostgreSQL and Redis servers for one test run, on free loopback ports.

The suite needs no server the machine happens to run: ``postgres_server`` makes a
fresh cluster with Debian's binaries (``initdb`` into a temporary directory,
``pg_ctl`` on a free port, fsync off: it is thrown away), ``redis_server`` starts a
``redis-server`` without persistence, and both are stopped and deleted at the end of
the run, also when it is interrupted (pytest tears session fixtures down on Ctrl-C;
``atexit`` covers an exit that skips that). ``PETSTORE_TEST_POSTGRES_URL`` and
``PETSTORE_TEST_REDIS_URL`` point the suite at servers of your own instead.

The servers start the way the local deployment's do (:mod:`deploy.processes`): as
the unprivileged ``postgres`` user that Debian's package creates when the tests run
as root, since ``initdb`` and ``postgres`` refuse root. pytest-postgresql's
``postgresql_proc`` runs them as the current user, which is why this is not that
plugin.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deploy.processes import (
    ServerUnavailableError,
    free_port,
    give_to_postgres,
    listening,
    postgres_user,
    program,
    wait_for,
)

__all__ = ["ServerUnavailableError", "postgres_server", "redis_server"]

_HINT = "postgresql (make test installs it), or set PETSTORE_TEST_POSTGRES_URL"


@contextmanager
def postgres_server() -> Iterator[str]:
    """A fresh PostgreSQL cluster on a free loopback port for as long as the block
    runs; yields the URL of its ``postgres`` database (user ``postgres``, trust).
    Raises ServerUnavailableError when the binaries are missing or it cannot start."""
    initdb, pg_ctl = program("initdb", package=_HINT), program("pg_ctl", package=_HINT)
    user = postgres_user()
    root = Path(tempfile.mkdtemp(prefix="petstore-test-postgres-"))
    data, port = root / "data", free_port()
    give_to_postgres(root)

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
        wait_for(lambda: listening(port), what="PostgreSQL")
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
        wait_for(lambda: process.poll() is not None or listening(port), what="Redis")
        if process.poll() is not None:
            raise ServerUnavailableError(f"redis-server exited with {process.returncode}")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop()
        atexit.unregister(stop)
