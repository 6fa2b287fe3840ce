"""Starting and stopping the servers of a topology from Debian's binaries, on loopback.

What the test suite's throwaway servers (tests/servers.py) and the local deployment
(:mod:`deploy.cluster`) share: finding a free port and a PostgreSQL program, waiting
for a port, and :class:`Daemon`, a server process in a session of its own so that one
signal reaches it and everything it forked (PostgreSQL's backends, granian's workers)
and nothing else.

``initdb``, ``postgres`` and ``pg_autoctl`` refuse to run as root: when the caller is
root they run as Debian's unprivileged ``postgres`` user (:func:`postgres_user`).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path

#: The unprivileged user PostgreSQL programs run as when the caller is root.
POSTGRES_USER = "postgres"


class ServerUnavailableError(RuntimeError):
    """A server could not be started; the message says what is missing."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def wait_for(ready: Callable[[], bool], *, what: str, seconds: float = 30) -> None:
    """Poll ``ready`` every 50 ms until it is true; raises ServerUnavailableError,
    naming ``what``, after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise ServerUnavailableError(f"{what} did not become ready within {seconds:g} s")
        time.sleep(0.05)


def program(name: str, *, package: str) -> str:
    """The path of a server program: on PATH, else Debian's newest PostgreSQL's.
    Raises ServerUnavailableError naming the Debian ``package`` to install."""
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise ServerUnavailableError(f"{name} not found: install Debian's {package} package")
    return found


def postgres_user() -> str | None:
    """The user PostgreSQL programs must run as: ``postgres`` when we are root, else
    None (ourselves)."""
    return POSTGRES_USER if os.geteuid() == 0 else None


def give_to_postgres(path: Path) -> None:
    """Make ``path`` (a fresh directory) the PostgreSQL user's, when that is not us."""
    if (user := postgres_user()) is not None:
        shutil.chown(path, user, user)


class Daemon:
    """A server process started in a new session, its output appended to ``log``.

    ``stop`` signals the whole session's process group (the server and all it forked),
    waits up to ``grace`` seconds, then kills what is left.
    """

    def __init__(
        self,
        argv: list[str],
        *,
        log: Path,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = argv
        with log.open("ab") as out:
            self.process = subprocess.Popen(  # noqa: S603 - our own argv
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=None if env is None else dict(env),
                user=user,
                cwd=cwd,
                start_new_session=True,
            )
        self.pid = self.process.pid

    def alive(self) -> bool:
        """Whether the main process is still running."""
        return self.process.poll() is None

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the main process only (as an orchestrator's stop does)."""
        with suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL the whole process group at once: a lost machine."""
        kill_group(self.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self, grace: float = 10) -> None:
        """SIGTERM to the main process (once: a second one may cut a drain short),
        then SIGKILL to the group after ``grace`` seconds; also kills whatever the
        group left behind."""
        if self.alive():
            self.signal(signal.SIGTERM)
        self.reap(grace)

    def reap(self, grace: float) -> None:
        """Wait up to ``grace`` seconds for the main process to end, then SIGKILL
        what is left of its group."""
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(max(grace, 0))
        kill_group(self.pid, signal.SIGKILL)
        self.process.wait()


def kill_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to process group ``pgid``; nothing when it is gone."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
