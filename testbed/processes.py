"""The one way tests, bench and the test bed start, wait for and stop a real server
process on loopback (``petstore serve``, PostgreSQL, Redis, HAProxy, pg_autoctl).

:func:`start` runs it as a :class:`Daemon`, in a session of its own so that one
signal reaches it and all it forked (PostgreSQL's backends, granian's workers) and
nothing else, and returns once a readiness probe holds (:func:`listening`,
:func:`answers` or any callable); :meth:`Daemon.stop` sends one signal, waits, then
SIGKILLs what is left of the group and the tree. Also the one :func:`free_port`, and
what tests read of a process (children, memory, liveness) through psutil, not /proc.
``initdb``, ``postgres`` and ``pg_autoctl`` refuse root: they run as Debian's
``postgres`` user then (:func:`postgres_user`).
"""

from __future__ import annotations

import glob
import http.client
import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from pathlib import Path
from signal import SIGKILL, SIGTERM

import psutil

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


def listening(port: int, *, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host``:``port``."""
    with socket.socket() as probe:
        return probe.connect_ex((host, port)) == 0


def answers(
    port: int, path: str = "/healthz", *, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None
) -> bool:
    """The readiness probe: whether ``GET path`` on ``http://host:port`` (with
    ``tls``, ``https://``, the server verified by it) answers 200 within a second
    (``/healthz``: the process serves; ``/readyz``: it also reaches its database and
    is not draining). False on any connection, TLS or protocol error."""
    connection = (
        http.client.HTTPConnection(host, port, timeout=1)
        if tls is None
        else http.client.HTTPSConnection(host, port, timeout=1, context=tls)
    )
    try:
        connection.request("GET", path)
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


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
    """A server process started in a new session, stdin closed, its output appended
    to ``log`` (``append=False``: the log starts empty); as ``user`` (we must be
    root then), in ``cwd``, with exactly ``env``, when given."""

    def __init__(
        self,
        argv: list[str],
        *,
        log: Path,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        cwd: Path | None = None,
        append: bool = True,
    ) -> None:
        self.argv, self.log = argv, log
        with log.open("ab" if append else "wb") as out:
            self.process = subprocess.Popen(  # noqa: S603 - our own argv
                argv,
                stdin=subprocess.DEVNULL,
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

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the log ("" when it cannot be read)."""
        with suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the main process only (as an orchestrator's stop does)."""
        with suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL the process group and tree at once (a lost machine)."""
        self._end(_tree(self.pid))

    def stop(self, grace: float = 10, *, signum: int = SIGTERM) -> None:
        """``signum`` to the main process (once: a second SIGTERM may cut a drain
        short), then SIGKILL to the group and tree after ``grace`` seconds; also kills
        whatever the group left behind."""
        tree = _tree(self.pid)  # before the signal: an ended parent's children move
        if self.alive():
            self.signal(signum)
        self.reap(grace, tree)

    def reap(self, grace: float, tree: list[psutil.Process] | None = None) -> None:
        """Wait up to ``grace`` seconds for the main process to end, then SIGKILL
        what is left of its group and of its process ``tree`` (as now by default)."""
        tree = _tree(self.pid) if tree is None else tree
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(max(grace, 0))
        self._end(tree)

    def _end(self, tree: list[psutil.Process]) -> None:
        kill_group(self.pid, SIGKILL)
        for process in tree:  # psutil refuses a pid that now names another process
            with suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                process.kill()
        self.process.wait()
        wait_gone([process.pid for process in tree], seconds=5)


def start(
    argv: list[str],
    *,
    ready: Callable[[], bool],
    what: str,
    log: Path,
    seconds: float = 30,
    env: Mapping[str, str] | None = None,
    user: str | None = None,
    cwd: Path | None = None,
    append: bool = True,
) -> Daemon:
    """A :class:`Daemon` of ``argv``, returned once ``ready()`` holds. Raises
    ServerUnavailableError naming ``what`` and quoting the end of its log, the
    process killed, when it exits first or is not ready within ``seconds``."""
    daemon = Daemon(argv, log=log, env=env, user=user, cwd=cwd, append=append)
    try:
        wait_for(lambda: not daemon.alive() or ready(), what=what, seconds=seconds)
        if not daemon.alive():
            raise ServerUnavailableError(f"{what} exited ({daemon.process.returncode})")
    except BaseException as exc:  # Ctrl-C too
        daemon.kill()
        if isinstance(exc, ServerUnavailableError):
            raise ServerUnavailableError(f"{exc}; its log ends:\n{daemon.tail()}") from None
        raise
    return daemon


def kill_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to process group ``pgid``; nothing when it is gone."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _tree(pid: int, *, recursive: bool = True) -> list[psutil.Process]:
    with suppress(psutil.NoSuchProcess):
        return psutil.Process(pid).children(recursive=recursive)
    return []


def child_pids(pid: int) -> list[int]:
    """The pids of the children of ``pid`` (granian's workers), in pid order; empty
    when ``pid`` is gone."""
    return sorted(child.pid for child in _tree(pid, recursive=False))


def running(pid: int) -> bool:
    """Whether ``pid`` still runs: a zombie, dead but not yet reaped by its parent
    (or by a container's init that never reaps), does not."""
    with suppress(psutil.NoSuchProcess):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False


def wait_gone(pids: Iterable[int], *, seconds: float) -> list[int]:
    """Wait up to ``seconds`` for every one of ``pids`` to stop :func:`running`;
    returns those still running then (empty: all gone)."""
    pids = list(pids)
    deadline = time.monotonic() + seconds
    while (left := [pid for pid in pids if running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies do not count)."""
    for process in psutil.process_iter():
        with suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(process.pid) == pgid and running(process.pid):
                return True
    return False


def rss_kib(pid: int) -> int:
    """The resident memory of ``pid`` in KiB (VmRSS); 0 when it is gone."""
    with suppress(psutil.NoSuchProcess):
        return int(psutil.Process(pid).memory_info().rss // 1024)
    return 0
