"""PostgreSQL with automatic failover, from Debian's pg_auto_failover: a monitor and
three data nodes, a primary and two secondaries (D26).

The formation has ``number_sync_standbys = 1``: a commit returns once one secondary
has it, so a 201 is on two hosts; with two secondaries, losing any one host still
leaves a synchronous one, and either secondary can be promoted (both have candidate
priority 50 and take part in the write quorum). The settings that decide how fast a
lost node is replaced are deploy/postgres/monitor.conf and deploy/postgres/keeper.conf.
The service reaches the nodes through :attr:`PostgresNodes.url`, a libpq multi-host
URL with ``target_session_attrs=read-write``, TCP keepalives and ``tcp_user_timeout``
(D25): libpq keeps the node that accepts writes, so an instance follows a promotion,
and a connection to a vanished host is found dead within seconds.

Each part runs on its host (:mod:`testbed.hosts`): ``pg_autoctl run`` as a
:class:`~testbed.processes.Daemon` (its PostgreSQL in the same process group), as the
``postgres`` user when we are root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg

from testbed import DEPLOY
from testbed.disks import SmallDisk
from testbed.hosts import Hosts
from testbed.processes import Daemon, ServerUnavailableError, give_to_postgres, program, wait_for

DATABASE = "petstore"
NODES = 3
_PACKAGE = "pg-auto-failover-cli and postgresql-15-auto-failover"
#: libpq's bounds on an instance's connections (D25): a dead peer is found within
#: tcp_user_timeout (data unacknowledged) or keepalives_idle + 3 * interval (idle).
CONNECTION_BOUNDS = (
    "connect_timeout=2&keepalives=1&keepalives_idle=5&keepalives_interval=1"
    "&keepalives_count=3&tcp_user_timeout=5000"
)


class PostgresNodes:
    """The monitor (host ``monitor``) and :data:`NODES` data nodes (hosts ``db1``..)
    under ``root``; ``ports`` are the monitor's then each node's. Nothing runs until
    :meth:`create`. ``nodes[i]`` is None while node ``i`` is down. With ``disk_size``
    (``2g``) each node's folder is a small disk of its own (``disks[i]``)."""

    def __init__(
        self, root: Path, *, hosts: Hosts, ports: list[int], disk_size: str | None = None
    ) -> None:
        self.root, self.hosts = root, hosts
        self.monitor_port, self.node_ports = ports[0], ports[1 : NODES + 1]
        self.monitor: Daemon | None = None
        self.nodes: list[Daemon | None] = [None] * NODES
        folders = [root / "pg" / f"disk{i + 1}" for i in range(NODES)]
        self.disks = [SmallDisk(f, f.name, size=disk_size) for f in folders] if disk_size else []
        self.pg_autoctl = program("pg_autoctl", package=_PACKAGE)
        # Resolved: pg_autoctl looks for PostgreSQL's other programs next to pg_ctl.
        self.pg_ctl = os.path.realpath(program("pg_ctl", package="postgresql"))
        #: What each node's processes get in their environment on top of
        #: :meth:`_env` (the archive's configuration, :mod:`testbed.backups`).
        self.node_env: list[dict[str, str]] = [{} for _ in range(NODES)]
        #: Whether each node includes deploy/postgres/archiving.conf (D28).
        self.archiving = False

    def pgdata(self, name: str) -> Path:
        """The data directory of ``monitor`` or ``node<N>``; a node's is in a folder
        of its own (``disk<N>``, where pg_autoctl also keeps its base backups)."""
        if name == "monitor":
            return self.root / "pg" / name
        return self.root / "pg" / f"disk{name.removeprefix('node')}" / name

    def address(self, index: int) -> str:
        """Node ``index``'s host address."""
        return self.hosts.addresses[f"db{index + 1}"]

    @property
    def url(self) -> str:
        """The service's URL: every node, the one that accepts writes wins."""
        nodes = ",".join(f"{self.address(i)}:{port}" for i, port in enumerate(self.node_ports))
        return (
            f"postgresql://postgres@{nodes}/{DATABASE}"
            f"?target_session_attrs=read-write&{CONNECTION_BOUNDS}"
        )

    @property
    def monitor_url(self) -> str:
        """The monitor's database, for reading the nodes' states."""
        address = self.hosts.addresses["monitor"]
        return f"postgresql://postgres@{address}:{self.monitor_port}/pg_auto_failover"

    def node_url(self, index: int) -> str:
        """Node ``index``'s own database, whatever its role."""
        return f"postgresql://postgres@{self.address(index)}:{self.node_ports[index]}/{DATABASE}"

    def _env(self) -> dict[str, str]:
        state = self.root / "pg"
        return {
            **os.environ,
            "XDG_CONFIG_HOME": str(state / "config"),
            "XDG_DATA_HOME": str(state / "share"),
            "XDG_RUNTIME_DIR": str(state / "run"),
            "PG_CONFIG": program("pg_config", package="postgresql"),
        }

    def _autoctl(self, host: str, *args: str) -> None:
        argv = self.hosts.run_in(host, [self.pg_autoctl, *args], user=self.hosts.postgres)
        try:
            result = subprocess.run(  # noqa: S603 - our own argv
                argv, env=self._env(), capture_output=True, text=True, check=False, timeout=300
            )
        except subprocess.TimeoutExpired:  # a create waiting for a primary that never comes
            raise ServerUnavailableError(f"pg_autoctl {args[0]} {args[1]}: over 300 s") from None
        if result.returncode != 0:
            raise ServerUnavailableError(f"pg_autoctl {args[0]} {args[1]}: {result.stderr}")

    def _run(self, host: str, name: str, env: dict[str, str] | None = None) -> Daemon:
        argv = [self.pg_autoctl, "run", "--pgdata", str(self.pgdata(name))]
        return Daemon(
            self.hosts.run_in(host, argv, user=self.hosts.postgres),
            log=self.root / f"{name}.log",
            env={**self._env(), **(env or {})},
        )

    def _trust_the_hosts(self, pgdata: Path) -> None:
        """Let every test host in (the instances, the harness, the other nodes)."""
        with (pgdata / "pg_hba.conf").open("a") as out:
            out.write(f"host all all {self.hosts.cidr} trust\n")
            out.write(f"host replication all {self.hosts.cidr} trust\n")

    def create(self) -> None:
        """Create and start the monitor, then the nodes; returns once node 0 is the
        primary, the others its secondaries, and the formation has
        ``number_sync_standbys = 1``. Raises ServerUnavailableError."""
        state = self.root / "pg"
        state.mkdir(parents=True)
        give_to_postgres(state)
        for disk in self.disks:
            disk.mount()
        for index in range(NODES):
            folder = self.pgdata(f"node{index + 1}").parent
            if not folder.exists():
                folder.mkdir()
                give_to_postgres(folder)
        pgdata = state / "monitor"
        address = self.hosts.addresses["monitor"]
        self._autoctl(
            "monitor", "create", "monitor", "--pgdata", str(pgdata),
            "--pgport", str(self.monitor_port), "--hostname", address, "--auth", "trust",
            "--no-ssl", "--pgctl", self.pg_ctl,
        )  # fmt: skip
        self._autoctl(
            "monitor", "config", "set", "--pgdata", str(pgdata),
            "postgresql.listen_addresses", address,
        )  # fmt: skip
        _include(pgdata, DEPLOY / "postgres" / "monitor.conf", "petstore-monitor.conf")
        self._trust_the_hosts(pgdata)
        self.monitor = self._run("monitor", "monitor")
        wait_for(self._monitor_answers, what="the pg_auto_failover monitor")
        self.create_nodes()

    def create_nodes(self) -> None:
        """Create and start the data nodes, node 1 first (from an empty data
        directory, or a restored one that it registers as the primary); returns once
        the others are its secondaries and the formation has ``number_sync_standbys
        = 1``. Raises ServerUnavailableError."""
        self._create_and_start(0)
        wait_for(lambda: self.primary() == 0, what="node1 as primary", seconds=60)
        # The secondaries at once: each copies the primary on its own.
        with ThreadPoolExecutor(NODES - 1) as pool:
            for done in [pool.submit(self._create_and_start, i) for i in range(1, NODES)]:
                done.result()
        self.wait_until_replicated(seconds=120)
        self._autoctl(
            "db1", "set", "formation", "number-sync-standbys", "--pgdata",
            str(self.pgdata("node1")), "1",
        )  # fmt: skip

    def _create_and_start(self, index: int) -> None:
        """Create node ``index``, start it, and wait until the monitor knows it."""
        self._create_node(index)
        self.start_node(index)
        name = f"node{index + 1}"
        wait_for(lambda: name in self.states(), what=name)

    def _create_node(self, index: int) -> None:
        """``pg_autoctl create postgres`` for node ``index`` (of a data directory that
        is empty, or a restored one it registers as it is), then our settings."""
        name, host = f"node{index + 1}", f"db{index + 1}"
        pgdata = self.pgdata(name)
        monitor = self.monitor_url.replace("postgres@", "autoctl_node@")
        create = (
            host, "create", "postgres", "--pgdata", str(pgdata),
            "--pgport", str(self.node_ports[index]), "--hostname", self.address(index),
            "--listen", self.address(index), "--name", name, "--dbname", DATABASE,
            "--auth", "trust", "--no-ssl", "--pgctl", self.pg_ctl,
            "--candidate-priority", "50", "--replication-quorum", "true",
            "--monitor", f"{monitor}?sslmode=disable",
        )  # fmt: skip
        try:
            self._autoctl(*create)
        except ServerUnavailableError:  # once in CI: a standby's PostgreSQL not up in time
            self._autoctl(*create)  # pg_autoctl continues a failed create where it stopped
        self._trust_the_hosts(pgdata)
        if self.archiving:
            _include(pgdata, DEPLOY / "postgres" / "archiving.conf", "petstore-archiving.conf")
        for line in (DEPLOY / "postgres" / "keeper.conf").read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, value = (part.strip() for part in line.split("=", 1))
                self._autoctl(host, "config", "set", "--pgdata", str(pgdata), key, value)

    def _monitor_answers(self) -> bool:
        return _ask(self.monitor_url, "SELECT 1") is not None

    def monitor_answers(self) -> bool:
        """Whether the monitor's PostgreSQL answers within a second."""
        return self._monitor_answers()

    def kill_monitor(self) -> None:
        """SIGKILL the monitor (its pg_autoctl and PostgreSQL): a lost monitor host."""
        if self.monitor is not None:
            self.monitor.kill()
        self.monitor = None

    def start_monitor(self) -> None:
        """Start the monitor again; returns once it answers."""
        self.monitor = self._run("monitor", "monitor")
        wait_for(self._monitor_answers, what="the pg_auto_failover monitor", seconds=60)

    def states(self) -> dict[str, tuple[str, str]]:
        """Each node's (reported, assigned) state as the monitor sees it; raises
        psycopg.Error when the monitor does not answer within 2 s."""
        with psycopg.connect(self.monitor_url, connect_timeout=2) as connection:
            rows = connection.execute(
                "SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node"
            ).fetchall()
        return {name: (reported, goal) for name, reported, goal in rows}

    def primary(self) -> int:
        """The index of the node the monitor has as primary (or promoting); raises
        ServerUnavailableError when there is none."""
        for name, (_, goal) in sorted(self.states().items()):
            if goal in ("primary", "wait_primary", "single"):
                return int(name.removeprefix("node")) - 1
        raise ServerUnavailableError("no primary")

    def replicated(self) -> bool:
        """Whether one node is primary and every other its secondary, all settled."""
        try:
            states = sorted(self.states().values())
        except psycopg.Error:
            return False
        return states == [("primary", "primary")] + [("secondary", "secondary")] * (NODES - 1)

    def wait_until_replicated(self, *, seconds: float = 60) -> None:
        """Wait until :meth:`replicated`; raises ServerUnavailableError after ``seconds``."""
        wait_for(self.replicated, what="a primary with its secondaries", seconds=seconds)

    def writable(self, index: int) -> bool:
        """Whether node ``index`` answers within a second and accepts writes."""
        row = _ask(self.node_url(index), "SELECT pg_is_in_recovery()")
        return row is not None and not row[0]

    def wait_for_promotion(self, among: list[int], *, seconds: float = 60) -> int:
        """Wait until one of the nodes ``among`` accepts writes; returns its index."""
        promoted: list[int] = []

        def one() -> bool:
            promoted[:] = [i for i in among if self.writable(i)]
            return bool(promoted)

        wait_for(one, what="a promotion", seconds=seconds)
        return promoted[0]

    def start_node(self, index: int) -> None:
        """Start node ``index``'s keeper (and so its PostgreSQL)."""
        self.nodes[index] = self._run(f"db{index + 1}", f"node{index + 1}", self.node_env[index])

    def forget_nodes(self) -> None:
        """Drop every data node from the monitor (``pg_autoctl drop node --force``)
        and remove what their keepers kept (configuration and state), so that new
        nodes can be created in their place; their keepers must be stopped."""
        monitor = self.monitor_url.replace("postgres@", "autoctl_node@") + "?sslmode=disable"
        for index in range(NODES):
            name = f"node{index + 1}"
            if name in self.states():
                self._autoctl("monitor", "drop", "node", "--monitor", monitor, "--name", name,
                              "--force")  # fmt: skip
            for kept in ("config", "share"):
                shutil.rmtree(
                    self.root / "pg" / kept / "pg_autoctl" / self.pgdata(name).relative_to("/"),
                    ignore_errors=True,
                )

    def kill_node(self, index: int) -> None:
        """SIGKILL node ``index``'s keeper and PostgreSQL at once: a lost host."""
        node = self.nodes[index]
        if node is not None:
            node.kill()
        self.nodes[index] = None

    def postgres_pid(self, index: int) -> int | None:
        """The postmaster's process id of node ``index`` (from postmaster.pid)."""
        try:
            pid_file = self.pgdata(f"node{index + 1}") / "postmaster.pid"
            return int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def streaming_standbys(self, index: int) -> int:
        """How many standbys node ``index`` streams to now (``pg_stat_replication``),
        -1 when it does not answer within a second."""
        row = _ask(
            self.node_url(index),
            "SELECT count(*) FROM pg_stat_replication "
            "WHERE state = 'streaming' AND reply_time > now() - interval '2 s'",
        )
        return -1 if row is None else int(row[0])

    def daemons(self) -> list[Daemon]:
        """Everything running: the monitor and the nodes that are up."""
        return [d for d in (self.monitor, *self.nodes) if d is not None]


def _include(pgdata: Path, source: Path, name: str) -> None:
    """Copy ``source`` into ``pgdata`` as ``name`` and include it from its
    postgresql.conf, once (a secondary's copy of the primary's may include it)."""
    conf = pgdata / name
    shutil.copyfile(source, conf)
    give_to_postgres(conf)
    main = pgdata / "postgresql.conf"
    if f"include '{name}'" not in main.read_text():
        with main.open("a") as out:
            out.write(f"include '{name}'\n")


def _ask(url: str, query: str) -> tuple[Any, ...] | None:
    """The first row of ``query`` at ``url``, or None when the server does not answer
    within a second (or the query has no row)."""
    try:
        with psycopg.connect(url, connect_timeout=1) as connection:
            return connection.execute(query).fetchone()
    except psycopg.Error:
        return None
