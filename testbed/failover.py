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

Every connection between hosts is TLS with the server verified, as
docs/operations/tls.md sets it up: each server presents a certificate of the
deployment's CA (:mod:`testbed.certificates`) for its address (the data nodes one
certificate, at one path, for all their addresses), every client (the
service, the keepers, the monitor's and the secondaries' connections, this harness)
connects with ``sslmode=verify-full`` against that CA, and every ``pg_hba.conf``
refuses a TCP connection without TLS before any other line is read. Roles sign in
with scram-sha-256 passwords: the service as ``petstore``, the database's owner;
pg_auto_failover's keepers as ``autoctl_node`` and ``pgautofailover_replicator``,
whose passwords are in a password file (``PGPASSFILE``) only the PostgreSQL user
reads; this harness as ``postgres``. pg_auto_failover's health checks sign in as
``pgautofailover_monitor`` without a password (pg_autoctl writes that line itself,
for the monitor's address only; the role can do nothing but connect).

Each part runs on its host (:mod:`testbed.hosts`): ``pg_autoctl run`` as a
:class:`~testbed.processes.Daemon` (its PostgreSQL in the same process group), as the
``postgres`` user when we are root.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from testbed import DEPLOY
from testbed.certificates import Certificates
from testbed.disks import SmallDisk
from testbed.hosts import Hosts
from testbed.processes import Daemon, ServerUnavailableError, give_to_postgres, program, wait_for

DATABASE = "petstore"
#: The service's role, the database's owner (docs/operations/deploy.md, step 1).
SERVICE_ROLE = "petstore"
NODES = 3
#: The file name (and first name) of the data nodes' certificate.
NODE_CERTIFICATE = "data-nodes"
#: The roles that sign in with a password, and who uses each: the service, this
#: harness (a superuser), the keepers at the monitor and the secondaries' streaming.
ROLES = (SERVICE_ROLE, "postgres", "autoctl_node", "pgautofailover_replicator")
#: Where every node's and the monitor's PostgreSQL listens on a Unix socket (Debian's
#: default): this harness sets the passwords through it, before any can be used.
SOCKETS = "/var/run/postgresql"
_PACKAGE = "pg-auto-failover-cli and postgresql-15-auto-failover"
#: libpq's bounds on an instance's connections (D25): a dead peer is found within
#: tcp_user_timeout (data unacknowledged) or keepalives_idle + 3 * interval (idle).
CONNECTION_BOUNDS = (
    "connect_timeout=2&keepalives=1&keepalives_idle=5&keepalives_interval=1"
    "&keepalives_count=3&tcp_user_timeout=5000"
)


class PostgresNodes:
    """The monitor (host ``monitor``) and :data:`NODES` data nodes (hosts ``db1``..)
    under ``root``; ``ports`` are the monitor's then each node's. Each serves TLS with
    a certificate in ``certificates`` (made by the caller, the PostgreSQL user's): the
    monitor's of its address, the nodes' :attr:`node_certificate`. Nothing runs
    until :meth:`create`. ``nodes[i]`` is None while node ``i`` is down. With
    ``disk_size`` (``2g``) each node's folder is a small disk of its own
    (``disks[i]``)."""

    def __init__(
        self, root: Path, *, hosts: Hosts, ports: list[int], certificates: Certificates,
        disk_size: str | None = None,
    ) -> None:  # fmt: skip
        self.root, self.hosts, self.certificates = root, hosts, certificates
        #: Each role's password (:data:`ROLES`).
        self.passwords = {role: secrets.token_urlsafe(24) for role in ROLES}
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
    def node_certificate(self) -> str:
        """The one certificate every data node serves, for every node's address
        (``NAME,ALTNAME,...`` for :meth:`Certificates.make`), at one path: pg_rewind
        copies a node's configuration, which names the file, to the node that
        rejoins (docs/operations/recover.md). On hosts of their own each node would
        have a certificate of its own at that path."""
        addresses = dict.fromkeys(self.address(i) for i in range(NODES))
        return ",".join([NODE_CERTIFICATE, *addresses])

    def rewind_source_url(self, index: int) -> str:
        """Node ``index`` as pg_rewind reaches it when another node rejoins after a
        failover: the replication role, at the ``postgres`` database."""
        return (
            f"postgresql://{self._signed_in('pgautofailover_replicator')}@"
            f"{self.address(index)}:{self.node_ports[index]}/postgres?{self._verified}"
        )

    @property
    def _verified(self) -> str:
        """The query parameters of a connection that verifies the server's
        certificate against the deployment's CA and the name connected to."""
        return f"sslmode=verify-full&sslrootcert={self.certificates.ca}"

    def _signed_in(self, role: str) -> str:
        return f"{role}:{self.passwords[role]}"

    @property
    def url(self) -> str:
        """The service's URL: every node, the one that accepts writes wins."""
        nodes = ",".join(f"{self.address(i)}:{port}" for i, port in enumerate(self.node_ports))
        return (
            f"postgresql://{self._signed_in(SERVICE_ROLE)}@{nodes}/{DATABASE}"
            f"?target_session_attrs=read-write&{self._verified}&{CONNECTION_BOUNDS}"
        )

    @property
    def monitor_url(self) -> str:
        """The monitor's database, for reading the nodes' states."""
        address = self.hosts.addresses["monitor"]
        return (
            f"postgresql://{self._signed_in('postgres')}@{address}:{self.monitor_port}"
            f"/pg_auto_failover?{self._verified}"
        )

    @property
    def _keepers_monitor_url(self) -> str:
        """The monitor as the keepers reach it: as ``autoctl_node``, whose password
        they read from the password file (it is never on a command line)."""
        address = self.hosts.addresses["monitor"]
        return (
            f"postgresql://autoctl_node@{address}:{self.monitor_port}/pg_auto_failover"
            f"?{self._verified}"
        )

    def node_url(self, index: int) -> str:
        """Node ``index``'s own database, whatever its role."""
        return (
            f"postgresql://{self._signed_in('postgres')}@{self.address(index)}:"
            f"{self.node_ports[index]}/{DATABASE}?{self._verified}"
        )

    def _socket_url(self, port: int, dbname: str) -> str:
        """A superuser's connection through the Unix socket of the server on ``port``
        (``local`` lines trust the user: no password, no network)."""
        return f"host={SOCKETS} port={port} user=postgres dbname={dbname}"

    def _write_password_file(self) -> None:
        """The keepers' password file (``PGPASSFILE``), the PostgreSQL user's, mode
        0600, as libpq requires."""
        path = self.root / "pg" / "pgpass"
        roles = ("autoctl_node", "pgautofailover_replicator")
        path.write_text("".join(f"*:*:*:{role}:{self.passwords[role]}\n" for role in roles))
        path.chmod(0o600)
        give_to_postgres(path)

    def _set_passwords(self, port: int, dbname: str, roles: tuple[str, ...]) -> None:
        """Give ``roles`` their passwords on the server on ``port``, through its Unix
        socket; the service's role is made first, when missing, as the owner of the
        database."""
        with psycopg.connect(self._socket_url(port, dbname), autocommit=True) as connection:
            if SERVICE_ROLE in roles:
                exists = connection.execute(
                    "SELECT 1 FROM pg_roles WHERE rolname = %s", (SERVICE_ROLE,)
                ).fetchone()
                if exists is None:
                    connection.execute(
                        sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(SERVICE_ROLE))
                    )
                connection.execute(
                    sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                        sql.Identifier(DATABASE), sql.Identifier(SERVICE_ROLE)
                    )
                )
            for role in roles:
                connection.execute(
                    sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                        sql.Identifier(role), sql.Literal(self.passwords[role])
                    )
                )

    def _socket_answers(self, port: int, dbname: str) -> bool:
        return _ask(self._socket_url(port, dbname), "SELECT 1") is not None

    def _tls_options(self, certificate: str) -> tuple[str, ...]:
        """pg_autoctl's options for a server of ``certificate`` (its name in
        :attr:`certificates`): its certificate, the CA, scram-sha-256 passwords and
        ``verify-full`` in every connection it makes."""
        return (
            "--auth", "scram-sha-256", "--ssl-ca-file", str(self.certificates.ca),
            "--server-cert", str(self.certificates.certificate(certificate)),
            "--server-key", str(self.certificates.key(certificate)), "--ssl-mode", "verify-full",
        )  # fmt: skip

    def _restrict_hba(self, pgdata: Path, lines: list[str]) -> None:
        """Rewrite ``pgdata``'s pg_hba.conf: first a refusal of every TCP connection
        without TLS, then its ``local`` lines and pg_auto_failover's own, then
        ``lines`` for the test hosts' network; initdb's ``host`` lines for the
        loopback (trust) are dropped, so that no TCP connection signs in without TLS
        and a password, from any address."""
        hba = pgdata / "pg_hba.conf"
        kept = [
            line
            for line in hba.read_text().splitlines()
            if not line.startswith("host ") and "hostnossl" not in line
        ]
        cidr = self.hosts.cidr
        head = ["hostnossl all all all reject"]
        tail = [line.format(cidr=cidr) for line in lines]
        hba.write_text("\n".join([*head, *kept, *(t for t in tail if t not in kept)]) + "\n")

    def _env(self) -> dict[str, str]:
        state = self.root / "pg"
        return {
            **os.environ,
            "PGPASSFILE": str(state / "pgpass"),
            # libpq looks for a client certificate under ~/.postgresql and fails on
            # one it may not read (root's home, for the PostgreSQL user): a home of
            # the PostgreSQL user's own, which has none.
            "HOME": str(state),
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

    def create(self) -> None:
        """Create and start the monitor, then the nodes; returns once node 0 is the
        primary, the others its secondaries, and the formation has
        ``number_sync_standbys = 1``. Raises ServerUnavailableError."""
        state = self.root / "pg"
        state.mkdir(parents=True)
        give_to_postgres(state)
        self._write_password_file()
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
            "--pgport", str(self.monitor_port), "--hostname", address,
            *self._tls_options(address), "--pgctl", self.pg_ctl,
        )  # fmt: skip
        self._autoctl(
            "monitor", "config", "set", "--pgdata", str(pgdata),
            "postgresql.listen_addresses", address,
        )  # fmt: skip
        _include(pgdata, DEPLOY / "postgres" / "monitor.conf", "petstore-monitor.conf")
        self._restrict_hba(pgdata, [
            "hostssl pg_auto_failover autoctl_node {cidr} scram-sha-256",
            "hostssl pg_auto_failover postgres {cidr} scram-sha-256",
        ])  # fmt: skip
        self.monitor = self._run("monitor", "monitor")
        port = self.monitor_port
        wait_for(lambda: self._socket_answers(port, "pg_auto_failover"), what="the monitor")
        self._set_passwords(port, "pg_auto_failover", ("postgres", "autoctl_node"))
        wait_for(self._monitor_answers, what="the pg_auto_failover monitor")
        self.create_nodes()

    def create_nodes(self) -> None:
        """Create and start the data nodes, node 1 first (from an empty data
        directory, or a restored one that it registers as the primary); returns once
        the others are its secondaries and the formation has ``number_sync_standbys
        = 1``. Raises ServerUnavailableError."""
        self._create_and_start(0)
        wait_for(lambda: self.primary() == 0, what="node1 as primary", seconds=60)
        # Before the secondaries copy it: their pg_basebackup signs in as the
        # replicator (the roles and their passwords are then on every node).
        port, roles = self.node_ports[0], (SERVICE_ROLE, "postgres", "pgautofailover_replicator")
        wait_for(lambda: self._socket_answers(port, DATABASE), what="node1", seconds=60)
        self._set_passwords(port, DATABASE, roles)
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
        create = (
            host, "create", "postgres", "--pgdata", str(pgdata),
            "--pgport", str(self.node_ports[index]), "--hostname", self.address(index),
            "--listen", self.address(index), "--name", name, "--dbname", DATABASE,
            *self._tls_options(NODE_CERTIFICATE), "--pgctl", self.pg_ctl,
            "--candidate-priority", "50", "--replication-quorum", "true",
            "--monitor", self._keepers_monitor_url,
        )  # fmt: skip
        try:
            self._autoctl(*create)
        except ServerUnavailableError:  # once in CI: a standby's PostgreSQL not up in time
            self._autoctl(*create)  # pg_autoctl continues a failed create where it stopped
        self._restrict_hba(pgdata, [
            f"hostssl {DATABASE} {SERVICE_ROLE} {{cidr}} scram-sha-256",
            "hostssl all postgres {cidr} scram-sha-256",
            "hostssl replication pgautofailover_replicator {cidr} scram-sha-256",
            # pg_rewind, when a former primary rejoins, signs in to the `postgres`
            # database; pg_autoctl's own line names only --dbname's, and without this
            # one every rejoin is a whole pg_basebackup.
            "hostssl postgres pgautofailover_replicator {cidr} scram-sha-256",
        ])  # fmt: skip
        _include(pgdata, DEPLOY / "postgres" / "node.conf", "petstore-node.conf")
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
        monitor = self._keepers_monitor_url
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
