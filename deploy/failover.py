"""PostgreSQL with automatic failover, from Debian's pg_auto_failover: a monitor, a
primary and a synchronous secondary, each on a loopback port.

The settings that decide how fast a lost node is replaced are the deployment's own
files, deploy/postgres/monitor.conf and deploy/postgres/keeper.conf. The service
reaches the pair through :attr:`PostgresPair.url`, a libpq multi-host URL with
``target_session_attrs=read-write``: libpq tries the nodes in turn and keeps the one
that accepts writes, so an instance follows a promotion by itself.

Every node runs ``pg_autoctl run`` as a :class:`~deploy.processes.Daemon` (its
PostgreSQL is in the same process group), as the ``postgres`` user when we are root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import psycopg

from deploy.processes import (
    Daemon,
    ServerUnavailableError,
    give_to_postgres,
    postgres_user,
    program,
    wait_for,
)

HERE = Path(__file__).resolve().parent
DATABASE = "petstore"
_PACKAGE = "pg-auto-failover-cli and postgresql-15-auto-failover"


class PostgresPair:
    """The monitor and two nodes under ``root`` on the given loopback ports; nothing
    runs until :meth:`create`. ``nodes[i]`` is None while node ``i`` is down."""

    def __init__(self, root: Path, *, monitor_port: int, node_ports: tuple[int, int]) -> None:
        self.root, self.monitor_port, self.node_ports = root, monitor_port, node_ports
        self.monitor: Daemon | None = None
        self.nodes: list[Daemon | None] = [None, None]
        self.pg_autoctl = program("pg_autoctl", package=_PACKAGE)
        # Resolved: pg_autoctl looks for PostgreSQL's other programs next to pg_ctl.
        self.pg_ctl = os.path.realpath(program("pg_ctl", package="postgresql"))

    @property
    def url(self) -> str:
        """The service's URL: both nodes, the one that accepts writes wins."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.node_ports)
        return (
            f"postgresql://postgres@{hosts}/{DATABASE}"
            "?target_session_attrs=read-write&connect_timeout=2"
        )

    @property
    def monitor_url(self) -> str:
        """The monitor's database, for reading the nodes' states."""
        return f"postgresql://postgres@127.0.0.1:{self.monitor_port}/pg_auto_failover"

    def _env(self) -> dict[str, str]:
        state = self.root / "pg"
        return {
            **os.environ,
            "XDG_CONFIG_HOME": str(state / "config"),
            "XDG_DATA_HOME": str(state / "share"),
            "XDG_RUNTIME_DIR": str(state / "run"),
            "PG_CONFIG": program("pg_config", package="postgresql"),
        }

    def _autoctl(self, *args: str) -> None:
        result = subprocess.run(  # noqa: S603 - our own argv
            [self.pg_autoctl, *args],
            env=self._env(),
            user=postgres_user(),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ServerUnavailableError(f"pg_autoctl {args[0]} {args[1]}: {result.stderr}")

    def _run(self, name: str) -> Daemon:
        return Daemon(
            [self.pg_autoctl, "run", "--pgdata", str(self.root / "pg" / name)],
            log=self.root / f"{name}.log",
            env=self._env(),
            user=postgres_user(),
        )

    def create(self) -> None:
        """Create and start the monitor, then the nodes; returns once node 0 is the
        primary and node 1 its synchronous secondary. Raises ServerUnavailableError."""
        state = self.root / "pg"
        state.mkdir(parents=True)
        give_to_postgres(state)
        pgdata = state / "monitor"
        self._autoctl(
            "create", "monitor", "--pgdata", str(pgdata), "--pgport", str(self.monitor_port),
            "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--pgctl", self.pg_ctl,
        )  # fmt: skip
        self._autoctl(
            "config", "set", "--pgdata", str(pgdata), "postgresql.listen_addresses", "127.0.0.1"
        )
        conf = pgdata / "petstore-monitor.conf"
        shutil.copyfile(HERE / "postgres" / "monitor.conf", conf)
        give_to_postgres(conf)
        with (pgdata / "postgresql.conf").open("a") as out:
            out.write("include 'petstore-monitor.conf'\n")
        self.monitor = self._run("monitor")
        wait_for(self._monitor_answers, what="the pg_auto_failover monitor")
        for index in (0, 1):
            self._create_node(index)
            self.start_node(index)
            wait_for(partial(self._registered, f"node{index + 1}"), what=f"node{index + 1}")
        self.wait_until_replicated(seconds=60)

    def _create_node(self, index: int) -> None:
        name = f"node{index + 1}"
        pgdata = str(self.root / "pg" / name)
        monitor = f"postgres://autoctl_node@127.0.0.1:{self.monitor_port}/pg_auto_failover"
        self._autoctl(
            "create", "postgres", "--pgdata", pgdata, "--pgport", str(self.node_ports[index]),
            "--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--name", name,
            "--dbname", DATABASE, "--auth", "trust", "--no-ssl", "--pgctl", self.pg_ctl,
            "--monitor", f"{monitor}?sslmode=disable",
        )  # fmt: skip
        for line in (HERE / "postgres" / "keeper.conf").read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, value = (part.strip() for part in line.split("=", 1))
                self._autoctl("config", "set", "--pgdata", pgdata, key, value)

    def _registered(self, name: str) -> bool:
        return name in self.states()

    def _monitor_answers(self) -> bool:
        return _ask(self.monitor_url, "SELECT 1") is not None

    def states(self) -> dict[str, tuple[str, str]]:
        """Each node's (reported, assigned) state as the monitor sees it."""
        with psycopg.connect(self.monitor_url, connect_timeout=2) as connection:
            rows = connection.execute(
                "SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node"
            ).fetchall()
        return {name: (reported, goal) for name, reported, goal in rows}

    def primary(self) -> int:
        """The index of the node the monitor has as primary (or promoting)."""
        for name, (_, goal) in self.states().items():
            if goal in ("primary", "wait_primary", "single"):
                return int(name.removeprefix("node")) - 1
        raise ServerUnavailableError("no primary")

    def wait_until_replicated(self, *, seconds: float = 60) -> None:
        """Wait until one node is primary and the other its secondary, both settled."""
        wanted = {("primary", "primary"), ("secondary", "secondary")}
        wait_for(
            lambda: set(self.states().values()) == wanted,
            what="a primary with its synchronous secondary",
            seconds=seconds,
        )

    def wait_for_promotion(self, index: int, *, seconds: float = 60) -> None:
        """Wait until node ``index`` accepts writes (the monitor promoted it)."""

        def writable() -> bool:
            url = f"postgresql://postgres@127.0.0.1:{self.node_ports[index]}/{DATABASE}"
            row = _ask(url, "SELECT pg_is_in_recovery()")
            return row is not None and not row[0]

        wait_for(writable, what=f"the promotion of node{index + 1}", seconds=seconds)

    def start_node(self, index: int) -> None:
        """Start node ``index``'s keeper (and so its PostgreSQL)."""
        self.nodes[index] = self._run(f"node{index + 1}")

    def kill_node(self, index: int) -> None:
        """SIGKILL node ``index``'s keeper and PostgreSQL at once: a lost machine."""
        node = self.nodes[index]
        if node is not None:
            node.kill()
        self.nodes[index] = None

    def daemons(self) -> list[Daemon]:
        """Everything running: the monitor and the nodes that are up."""
        return [d for d in (self.monitor, *self.nodes) if d is not None]


def _ask(url: str, query: str) -> tuple[Any, ...] | None:
    """The first row of ``query`` at ``url``, or None when the server does not answer
    within a second (or the query has no row)."""
    try:
        with psycopg.connect(url, connect_timeout=1) as connection:
            return connection.execute(query).fetchone()
    except psycopg.Error:
        return None
