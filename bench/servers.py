"""The two servers under load, each one worker pinned to one core: ``petstore serve``
as shipped, and the baseline (``bench.baseline`` under the same granian).

Each server runs in its own session so that :meth:`Server.stop` ends it and every
process it forked, and nothing else; ``stop`` is always reached through
:func:`running` (try/finally), on failure and on Ctrl-C too.
"""

from __future__ import annotations

import http.client
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: Settings the benchmark adds to the production defaults, nothing switched off.
#: D15: the per-key rate limit sits above any load one core can offer, so the limiter
#: counts every request and refuses none ("ordinary setting" of issue 6).
SERVICE_EXTRA_ENV = {"PETSTORE_RATE_LIMIT": "1000000000/minute"}

#: granian's header timeout as ``petstore serve`` sets it (its default setting, 10 s).
HEADER_TIMEOUT_MS = 10_000


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Server:
    """A server process of ours: its command, environment and log file."""

    name: str
    command: list[str]
    env: dict[str, str]
    log: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout: float = 60.0) -> None:
        """Start and wait until ``/healthz`` answers 200. Raises RuntimeError with the
        end of the server's log when it exits or does not answer in time."""
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                self.command,
                env=self.env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start:\n{self.tail()}")
            if self._healthy():
                return
            time.sleep(0.1)
        raise RuntimeError(
            f"{self.name} did not answer /healthz in {timeout:.0f} s:\n{self.tail()}"
        )

    def _healthy(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the server's output."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def memory(self) -> dict[str, int]:
        """Resident memory in KiB (VmRSS) of the main process and each worker."""
        if self.process is None or self.process.poll() is not None:
            return {}
        sizes = {"main": _rss_kib(self.process.pid)}
        for number, child in enumerate(child_pids(self.process.pid), start=1):
            sizes[f"worker {number}" if number > 1 else "worker"] = _rss_kib(child)
        return sizes

    def stop(self) -> None:
        """SIGINT to the server's process group (a graceful stop), SIGKILL after 10 s."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        for sig, grace in ((signal.SIGINT, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(grace)
                break
            except subprocess.TimeoutExpired:
                continue
        # The group may outlive its leader for a moment (a worker finishing).
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def child_pids(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (granian's workers), from /proc,
    in pid order. The tests use it too."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after its last ")".
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


def service(*, database_url: str, cpu: int, log: Path, source: Path | None = None) -> Server:
    """``petstore serve``: one worker, production, a fresh 48-character cursor secret,
    everything else as shipped (plus :data:`SERVICE_EXTRA_ENV`). ``source``: a ``src``
    folder whose ``petstore`` is served instead of the installed one (bench.compare)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PETSTORE_")}
    env.update(
        {
            "PETSTORE_ENVIRONMENT": "production",
            "PETSTORE_CURSOR_SECRET": secrets.token_urlsafe(36),  # 48 characters
            "PETSTORE_DATABASE_URL": database_url,
            "PETSTORE_PORT": str(port),
            "PETSTORE_WORKERS": "1",
            **SERVICE_EXTRA_ENV,
        }
    )
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    command = ["taskset", "-c", str(cpu), sys.executable, "-m", "petstore", "serve"]
    return Server("petstore serve", command, env, log, port)


def baseline(*, key: str, answers: Path, cpu: int, log: Path) -> Server:
    """The raw ASGI app of ``bench.baseline`` under granian with one worker, replaying
    the captured ``answers`` to requests that carry ``key``."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PETSTORE_", "GRANIAN_"))}
    env.update(
        {"BENCH_BASELINE_AUTHORIZATION": f"Bearer {key}", "BENCH_BASELINE_ANSWERS": str(answers)}
    )
    command = [
        "taskset", "-c", str(cpu), sys.executable, "-m", "granian",
        "--interface", "asgi", "--workers", "1", "--host", "127.0.0.1", "--port", str(port),
        "--http1-header-read-timeout", str(HEADER_TIMEOUT_MS), "bench.baseline:app",
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
