"""The real server processes of the suite, all started and stopped by
:mod:`testbed.processes`: throwaway PostgreSQL and Redis servers for one test run,
and :class:`LiveServer`, a real ``petstore serve``, each on a free loopback port.

The suite needs no server the machine happens to run: ``postgres_server`` makes a
fresh cluster with Debian's binaries (``initdb`` into a temporary directory, then
``postgres`` on a free port, fsync off: it is thrown away), ``redis_server`` starts a
``redis-server`` without persistence, and both are stopped and deleted at the end of
the run, also when it is interrupted (pytest tears session fixtures down on Ctrl-C;
``atexit`` covers an exit that skips that, and any LiveServer a test left running).
``PETSTORE_TEST_POSTGRES_URL`` and ``PETSTORE_TEST_REDIS_URL`` point the suite at
servers of your own instead.

The servers start the way the local deployment's do: as the unprivileged
``postgres`` user that Debian's package creates when the tests run as root, since
``initdb`` and ``postgres`` refuse root. pytest-postgresql's ``postgresql_proc`` runs
them as the current user, which is why this is not that plugin.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from testbed.certificates import Certificates
from testbed.processes import (
    Daemon,
    ServerUnavailableError,
    answers,
    free_port,
    give_to_postgres,
    listening,
    postgres_user,
    program,
    start,
)

__all__ = ["LiveServer", "ServerUnavailableError", "postgres_server", "redis_server"]

_HINT = "postgresql (make test installs it), or set PETSTORE_TEST_POSTGRES_URL"
#: Set by ``pytest --in-process`` (``make check``): no server process may start.
IN_PROCESS_ONLY = "PETSTORE_TEST_IN_PROCESS"
#: The address a :class:`LiveServer` listens on, and the name its certificate holds.
LOOPBACK = "127.0.0.1"


def refuse_in_process(what: str) -> None:
    """Raise RuntimeError when the run is ``--in-process`` only: a test that starts
    ``what`` needs the ``servers`` mark (docs/contributing.md)."""
    if os.environ.get(IN_PROCESS_ONLY):
        raise RuntimeError(f"this test starts {what}: mark it servers (pytest.mark.servers)")


@contextmanager
def _stopped_at_exit(daemon: Daemon, *, root: Path, signum: int = signal.SIGTERM) -> Iterator[None]:
    """The block, after which ``daemon`` is stopped with ``signum`` and its folder
    ``root`` deleted; by ``atexit`` when the interpreter exits first."""

    def finish() -> None:
        daemon.stop(signum=signum)
        shutil.rmtree(root, ignore_errors=True)

    atexit.register(finish)
    try:
        yield
    finally:
        finish()
        atexit.unregister(finish)


@contextmanager
def postgres_server(**extra: object) -> Iterator[str]:
    """A fresh PostgreSQL cluster on a free loopback port for as long as the block
    runs, with the settings ``extra`` on top of the suite's; yields the URL of its
    ``postgres`` database (user ``postgres``, trust). Raises ServerUnavailableError
    when the binaries are missing or it cannot start."""
    refuse_in_process("PostgreSQL")
    initdb, postgres = program("initdb", package=_HINT), program("postgres", package=_HINT)
    user = postgres_user()
    root = Path(tempfile.mkdtemp(prefix="petstore-test-postgres-"))
    data, port = root / "data", free_port()
    try:
        give_to_postgres(root)
        done = subprocess.run(
            [initdb, "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8"],
            user=user,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ServerUnavailableError(f"initdb failed: {done.stderr or done.stdout}")
        settings = {
            "listen_addresses": "127.0.0.1", "port": port, "unix_socket_directories": root,
            "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
            "max_connections": 300, **extra,
        }  # fmt: skip
        options = [arg for name, value in settings.items() for arg in ("-c", f"{name}={value}")]
        daemon = start(
            [postgres, "-D", str(data), *options],
            ready=partial(_accepts, port),
            what="PostgreSQL",
            log=root / "server.log",
            user=user,
        )
        # Thrown away: an immediate shutdown (SIGQUIT), as `pg_ctl stop -m immediate`.
        with _stopped_at_exit(daemon, root=root, signum=signal.SIGQUIT):
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _accepts(port: int) -> bool:
    """Whether the PostgreSQL server on ``port`` accepts a session (it listens
    before it has finished starting up)."""
    import psycopg

    try:
        psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres").close()
    except psycopg.OperationalError:
        return False
    return True


@contextmanager
def redis_server() -> Iterator[str]:
    """A ``redis-server`` on a free loopback port, no persistence, for as long as the
    block runs; yields its ``redis://`` URL. Raises ServerUnavailableError when it
    is not installed or does not start."""
    refuse_in_process("Redis")
    executable = shutil.which("redis-server")
    if executable is None:
        raise ServerUnavailableError(
            "redis-server not found: install Debian's redis-server package (make test "
            "does), or set PETSTORE_TEST_REDIS_URL to a server of your own"
        )
    port = free_port()
    root = Path(tempfile.mkdtemp(prefix="petstore-test-redis-"))
    argv = [executable, "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
    try:
        daemon = start(
            [*argv, "--appendonly", "no", "--dir", str(root)],
            ready=partial(listening, port),
            what="Redis",
            log=root / "redis.log",
        )
        with _stopped_at_exit(daemon, root=root):
            yield f"redis://127.0.0.1:{port}/0"
    finally:
        shutil.rmtree(root, ignore_errors=True)


class LiveServer:
    """A real ``petstore serve`` process on a free loopback port, on the SQLite file
    ``root/data/petstore.db`` unless ``env`` names another database; ``env`` wins
    over ours (which has no PETSTORE_* variable of the caller's). With ``tls``, it
    serves TLS with the certificate of ``127.0.0.1`` that ``tls`` holds (made here
    when missing), and :attr:`trust` verifies it."""

    def __init__(
        self, root: Path, *, env: dict[str, str] | None = None, tls: Certificates | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"{'http' if tls is None else 'https'}://127.0.0.1:{self.port}"
        self.database_url = f"sqlite:///{root / 'data' / 'petstore.db'}"
        self.log = root / "serve.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PETSTORE_")}
        self.env.update(
            {"PETSTORE_DATABASE_URL": self.database_url, "PETSTORE_PORT": str(self.port)}
        )
        #: What verifies the server's certificate (None: plain HTTP).
        self.trust: ssl.SSLContext | None = None
        if tls is not None:
            if not tls.certificate(LOOPBACK).exists():
                tls.make(LOOPBACK)
            self.env.update(
                PETSTORE_TLS_CERTIFICATE=str(tls.certificate(LOOPBACK)),
                PETSTORE_TLS_KEY=str(tls.key(LOOPBACK)),
            )
            self.trust = ssl.create_default_context(cafile=tls.ca)
        # What a killed server leaves in its temporary folder stays in the test's.
        self.env["TMPDIR"] = str(root)
        self.env.update(env or {})
        self.root = root
        self.daemon: Daemon | None = None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The ``petstore serve`` (granian main) process of the last start."""
        return None if self.daemon is None else self.daemon.process

    def start(self, *args: str) -> None:
        """Start ``petstore serve *args`` (its log started afresh) and return once
        ``/healthz`` answers 200; raises ServerUnavailableError with the end of the
        log when it exits first or does not answer within 30 s."""
        refuse_in_process("petstore serve")
        self.daemon = start(
            [sys.executable, "-m", "petstore", "serve", *args],
            ready=partial(answers, self.port, "/healthz", tls=self.trust),
            what="petstore serve",
            log=self.log,
            env=self.env,
            cwd=self.root,
            append=False,
        )
        atexit.register(self.stop)

    def refused(self) -> subprocess.CompletedProcess[str]:
        """Run ``petstore serve`` expecting it to refuse to start: its exit status and
        output (a server that does start fails the test by the timeout)."""
        return subprocess.run(
            [sys.executable, "-m", "petstore", "serve"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def dev_key(self) -> str:
        match = re.search(r"petstore_[A-Za-z0-9_-]{43}", self.output())
        assert match, self.output()
        return match.group(0)

    def stop(self) -> None:
        """SIGINT (a stop without a drain), SIGKILL to all that is left after 15 s."""
        if self.daemon is not None:
            self.daemon.stop(grace=15, signum=signal.SIGINT)
        atexit.unregister(self.stop)
