"""The two servers under load, each one worker pinned to one core: ``petstore serve``
as shipped, and the baseline (``bench.baseline`` under the same granian).

Each is started, waited for (``/healthz`` answers 200) and stopped by
:mod:`testbed.processes`, in a session of its own so that :meth:`Server.stop` ends it
and every process it forked, and nothing else; ``stop`` is always reached through
:func:`running` (try/finally), on failure and on Ctrl-C too.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from testbed import processes

REPO = Path(__file__).resolve().parent.parent

#: Settings the benchmark adds to the production defaults, nothing switched off.
#: D15: the per-key rate limit sits above any load one core can offer, so the limiter
#: counts every request and refuses none ("ordinary setting" of issue 6).
SERVICE_EXTRA_ENV = {"PETSTORE_RATE_LIMIT": "1000000000/minute"}

#: granian's header timeout as ``petstore serve`` sets it (its default setting, 10 s).
HEADER_TIMEOUT_MS = 10_000
#: The event loop ``petstore serve`` runs by default (``PETSTORE_EVENT_LOOP``), which
#: the baseline runs too: the baseline is the most the service's own stack can serve.
EVENT_LOOP = "uvloop"


@dataclass
class Server:
    """A server process of ours: its command, environment and log file."""

    name: str
    command: list[str]
    env: dict[str, str]
    log: Path
    port: int
    daemon: processes.Daemon | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout: float = 60.0) -> None:
        """Start and wait until ``/healthz`` answers 200. Raises ServerUnavailableError
        (a RuntimeError) with the end of the server's log when it exits or does not
        answer in time."""
        self.daemon = processes.start(
            self.command,
            ready=partial(processes.answers, self.port, "/healthz"),
            what=self.name,
            log=self.log,
            seconds=timeout,
            env=self.env,
            cwd=REPO,
            append=False,
        )

    def memory(self) -> dict[str, int]:
        """Resident memory in KiB (VmRSS) of the main process and each worker."""
        if self.daemon is None or not self.daemon.alive():
            return {}
        sizes = {"main": processes.rss_kib(self.daemon.pid)}
        for number, child in enumerate(processes.child_pids(self.daemon.pid), start=1):
            sizes[f"worker {number}" if number > 1 else "worker"] = processes.rss_kib(child)
        return sizes

    def stop(self) -> None:
        """SIGINT to the server (a graceful stop), SIGKILL to all it left after 10 s."""
        if self.daemon is not None:
            self.daemon.stop(grace=10, signum=signal.SIGINT)


def service_environment(*, database_url: str, port: int) -> dict[str, str]:
    """The environment of a service on ``database_url`` listening on ``port``: this
    process's, without its ``PETSTORE_*``, then production, a fresh 48-character
    cursor secret, one worker and :data:`SERVICE_EXTRA_ENV`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PETSTORE_")}
    env.update(
        {
            "PETSTORE_ENVIRONMENT": "production",
            "PETSTORE_CURSOR_SECRET": secrets.token_urlsafe(36),  # 48 characters
            "PETSTORE_BASE_URL": f"http://127.0.0.1:{port}/v1",  # where its links point
            "PETSTORE_DATABASE_URL": database_url,
            "PETSTORE_PORT": str(port),
            "PETSTORE_WORKERS": "1",
            **SERVICE_EXTRA_ENV,
        }
    )
    return env


def service(*, database_url: str, cpu: int, log: Path, source: Path | None = None) -> Server:
    """``petstore serve``: one worker, production, a fresh 48-character cursor secret,
    everything else as shipped (plus :data:`SERVICE_EXTRA_ENV`). ``source``: a ``src``
    folder whose ``petstore`` is served instead of the installed one (bench.compare)."""
    port = processes.free_port()
    env = service_environment(database_url=database_url, port=port)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    command = ["taskset", "-c", str(cpu), sys.executable, "-m", "petstore", "serve"]
    return Server("petstore serve", command, env, log, port)


def baseline(*, key: str, answers: Path, cpu: int, log: Path) -> Server:
    """The raw ASGI app of ``bench.baseline`` under granian with one worker and the
    service's event loop (:data:`EVENT_LOOP`), replaying the captured ``answers`` to
    requests that carry ``key``."""
    port = processes.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PETSTORE_", "GRANIAN_"))}
    env.update(
        {"BENCH_BASELINE_AUTHORIZATION": f"Bearer {key}", "BENCH_BASELINE_ANSWERS": str(answers)}
    )
    command = [
        "taskset", "-c", str(cpu), sys.executable, "-m", "granian",
        "--interface", "asgi", "--workers", "1", "--host", "127.0.0.1", "--port", str(port),
        "--http1-header-read-timeout", str(HEADER_TIMEOUT_MS), "--loop", EVENT_LOOP,
        "bench.baseline:app",
    ]  # fmt: skip
    return Server("baseline", command, env, log, port)


@contextmanager
def running(server: Server) -> Iterator[Server]:
    """``server``, started, and stopped on the way out whatever happens."""
    try:
        server.start()
        yield server
    finally:
        server.stop()
