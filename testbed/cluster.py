"""The whole deployment on this machine: HAProxy in front of N ``petstore serve``
instances, PostgreSQL with automatic failover (:mod:`testbed.failover`: a monitor and
three data nodes) and Redis for the shared rate-limit budget, from the files in deploy/.

    python -m testbed.cluster_command up [--hosts] [--instances 3] [--port 8080]
    python -m testbed.cluster_command down

By default every part listens on this namespace's loopback. With ``--hosts`` every
part runs on a test host of its own (:mod:`testbed.hosts`: one network namespace each,
joined by a bridge, addresses in one private /24, nothing routed out): ``lb1`` and
``lb2`` (HAProxy and keepalived, :mod:`testbed.balancers`: clients call their virtual
address), ``app1``.. (the instances), ``monitor``, ``db1``..``db3``, ``redis``, ``ctl``
(where this harness talks from), ``client1``.. (for callers) and ``backup`` (the
pgBackRest repository the data nodes archive to, :mod:`testbed.backups`).

``up`` leaves everything running and its state in ``.cluster/`` (``make cluster``);
``down`` stops every process it started and checks that none is left, no port is
taken and no test host remains (``make cluster-down``). :class:`Cluster` is also what
:mod:`testbed.chaos` and :mod:`testbed.chaos_network` break.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
from dotenv import dotenv_values

from testbed import DEPLOY, backups
from testbed import hosts as test_hosts
from testbed.balancers import Balancers, accepts
from testbed.certificates import Certificates
from testbed.failover import NODES, PostgresNodes
from testbed.processes import (
    Daemon,
    ServerUnavailableError,
    answers,
    free_port,
    kill_group,
    listening,
    program,
    start,
    wait_for,
)

STATE_DIR = DEPLOY.parent / ".cluster"
#: What :meth:`Cluster.save` writes under the root, for ``down`` from another process.
STATE_FILE = "state.json"


class Cluster:
    """The topology under ``root``, ``instances`` instances with the settings of
    ``deploy/<environment>/``, HAProxy on ``port`` (a free port when None). With
    ``on_hosts`` every part runs on a test host of its own (and ``clients`` hosts for
    callers), else on 127.0.0.1. ``overrides`` are instance settings that win over
    the environment file. With ``disk_size`` (``2g``) each data node's folder is a small
    disk of its own (:mod:`testbed.disks`). On test hosts the data nodes archive their
    WAL to a pgBackRest repository on host ``backup`` (D28, :mod:`testbed.backups`),
    which takes a first full backup once the nodes replicate."""

    def __init__(
        self,
        root: Path,
        *,
        instances: int = 3,
        environment: str = "production",
        port: int | None = None,
        overrides: dict[str, str] | None = None,
        on_hosts: bool = False,
        clients: int = 1,
        disk_size: str | None = None,
    ) -> None:
        self.root, self.environment = root, environment
        balancers = ["lb1", "lb2"] if on_hosts else ["lb"]
        names = [*balancers, *(f"app{i + 1}" for i in range(instances)), "monitor",
                 *(f"db{i + 1}" for i in range(NODES)), "redis", "ctl",
                 *([backups.HOST] if on_hosts else []),
                 *(f"client{i + 1}" for i in range(clients))]  # fmt: skip
        self.hosts = test_hosts.Network(names) if on_hosts else test_hosts.Loopback(names)
        if on_hosts:  # each on a host of its own; PostgreSQL's ports differ all the same
            # (their Unix sockets share one /tmp)
            self.lb_port, self.redis_port = port or 8080, 6379
            self.instance_ports = [8001 + i for i in range(instances)]
            pg_ports = [15431 + i for i in range(NODES + 1)]
        else:
            self.lb_port, self.redis_port = port or free_port(), free_port()
            self.instance_ports = [free_port() for _ in range(instances)]
            pg_ports = [free_port() for _ in range(NODES + 1)]
        #: The deployment's CA and every server's certificate (made by :meth:`up`).
        self.certificates = Certificates(root / "tls")
        self.postgres = PostgresNodes(
            root, hosts=self.hosts, ports=pg_ports, certificates=self.certificates,
            disk_size=disk_size,
        )  # fmt: skip
        self.repository = (
            backups.Repository(
                root, self.hosts, nodes=[f"db{i + 1}" for i in range(NODES)],
                ports=pg_ports[1:], pgdata=lambda i: self.postgres.pgdata(f"node{i + 1}"),
                certificates=self.certificates,
            )
            if on_hosts
            else None
        )  # fmt: skip
        self.overrides = overrides or {}
        self.instances: list[Daemon | None] = [None] * instances
        self.redis: Daemon | None = None
        self.redis_password = secrets.token_urlsafe(24)
        self.balancers = Balancers(
            root, self.hosts, balancers, port=self.lb_port,
            redirect_port=80 if on_hosts else free_port(),
            vip=test_hosts.VIRTUAL_ADDRESS if on_hosts else None,
            settings=self._settings_file("haproxy.env"),
            certificates=self.certificates,
        )  # fmt: skip

    @property
    def on_hosts(self) -> bool:
        """Whether the parts run on test hosts (network namespaces)."""
        return isinstance(self.hosts, test_hosts.Network)

    @property
    def url(self) -> str:
        """The service's base URL, through HAProxy over TLS (in hosts mode: the load
        balancers' virtual address, reached from a test host); clients verify it with
        ``self.balancers.trust()``."""
        return f"https://{self.balancers.address}:{self.lb_port}/v1"

    def harness(self) -> AbstractContextManager[None]:
        """The calling thread in the ``ctl`` host for the block (hosts mode): where
        the harness reads the monitor and the service from."""
        return self.hosts.entered("ctl")

    def up(self) -> str:
        """Start everything, migrate, create an API key; returns the key once every
        instance is in HAProxy's rotation. Raises ServerUnavailableError (after
        stopping what started) when a part does not come up."""
        if not self.on_hosts and listening(self.lb_port):
            raise ServerUnavailableError(
                f"port {self.lb_port} is taken: choose another with --port (make cluster "
                'ARGS="--port 8090")'
            )
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # the postgres user keeps its nodes under it
        (self.root / "tmp").mkdir(exist_ok=True)
        self.hosts.up()  # cleans up after itself; refuses another run's live hosts
        try:
            with self.harness():
                return self._start()
        except BaseException:
            self.down()
            raise

    def _start(self) -> str:
        apps = [f"app{i + 1}" for i in range(len(self.instances))]
        servers = [*apps, "monitor", *(f"db{i + 1}" for i in range(NODES)), "redis"]
        self.certificates.make(
            *dict.fromkeys(self.hosts.addresses[name] for name in servers),
            self.postgres.node_certificate,
        )
        self.certificates.give_to_postgres()
        self.start_redis()
        if self.repository is not None:
            self.repository.prepare()
            self.postgres.archiving = True
            self.postgres.node_env = [self.repository.node_env(i) for i in range(NODES)]
        self.postgres.create()
        if self.repository is not None:
            # After create: ip netns exec gives a process a mount namespace of its
            # own, and a server started before the nodes' small disks would not see them.
            self.repository.start()
            self.repository.create_stanza()
            self.repository.backup("full")
        self._write_secrets()
        self._petstore("db", "upgrade")
        key = self.create_key("load", "100000/second")
        for index in range(len(self.instances)):
            self.start_instance(index)
        apps = [self.hosts.addresses[f"app{i + 1}"] for i in range(len(self.instances))]
        self.balancers.start(list(zip(apps, self.instance_ports, strict=True)))
        self.wait_in_rotation(range(len(self.instances)))
        wait_for(self.counting_in_redis, what="every instance counting in Redis", seconds=10)
        self.save()
        return key

    def create_key(self, name: str, rate_limit: str) -> str:
        """A new API key named ``name`` with its own ``rate_limit`` (D22, ``limits``'s
        notation: ``20/second``); returns the key."""
        created = self._petstore("keys", "create", "--name", name, "--rate-limit", rate_limit)
        return created.splitlines()[-1]

    @property
    def redis_url(self) -> str:
        """The instances' Redis URL: TLS verified against the deployment's CA."""
        return (
            f"rediss://:{self.redis_password}@{self.hosts.addresses['redis']}:"
            f"{self.redis_port}/0?ssl_ca_certs={self.certificates.ca}"
        )

    def _write_secrets(self) -> None:
        folder = self.root / "secrets"
        folder.mkdir(mode=0o700)
        for name, value in (
            ("petstore_cursor_secret", secrets.token_urlsafe(32)),
            ("petstore_database_url", self.postgres.url),
            ("petstore_redis_url", self.redis_url),
        ):
            (folder / name).write_text(value + "\n")
            (folder / name).chmod(0o600)

    def instance_env(self) -> dict[str, str]:
        """An instance's environment: ours without PETSTORE_*, the deployment's file,
        then the loopback's differences (address, secrets folder, one worker)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PETSTORE_")}
        env.update(self._settings_file("petstore.env"))
        env.update(
            PETSTORE_WORKERS="1",
            PETSTORE_SECRETS_DIR=str(self.root / "secrets"),
            TMPDIR=str(self.root / "tmp"),  # what a killed instance leaves goes with us
        )
        # Links point at the deployment's public URL (http/links.py): here, HAProxy's.
        public = "STAGING_BASE_URL" if self.environment == "staging" else "BASE_URL"
        env[f"PETSTORE_{public}"] = self.url
        env.update(self.overrides)
        return env

    def _settings_file(self, name: str) -> dict[str, str]:
        """The variables of ``deploy/<environment>/<name>``."""
        values = dotenv_values(DEPLOY / self.environment / name)
        return {k: v for k, v in values.items() if v is not None}

    def _petstore(self, *args: str) -> str:
        result = subprocess.run(  # noqa: S603 - our own argv
            self.hosts.run_in("ctl", [sys.executable, "-m", "petstore", *args]),
            env=self.instance_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ServerUnavailableError(f"petstore {' '.join(args)}: {result.stderr}")
        return result.stdout.strip()

    def start_redis(self) -> None:
        """Start Redis on its port with deploy/redis/redis.conf (nothing on disk) and
        a password, as in production: TLS only, with the certificate of its address
        (no plain port), and in protected mode, which refuses every client from
        another host until a password is set."""
        address = self.hosts.addresses["redis"]
        self.redis = Daemon(
            self.hosts.run_in("redis", [
                program("redis-server", package="redis-server"),
                str(DEPLOY / "redis" / "redis.conf"),
                "--bind", address, "--tls-port", str(self.redis_port),
                "--tls-cert-file", str(self.certificates.certificate(address)),
                "--tls-key-file", str(self.certificates.key(address)),
                "--tls-ca-cert-file", str(self.certificates.ca),
                "--requirepass", self.redis_password]),
            log=self.root / "redis.log",
        )  # fmt: skip
        wait_for(lambda: accepts(address, self.redis_port), what="Redis")

    def stop_redis(self) -> None:
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    def counting_in_redis(self) -> bool:
        """Whether every instance running counts rate limits in Redis: its ``/readyz``
        says ``"rateLimits": "ok"`` (not failing open)."""
        for index, daemon in enumerate(self.instances):
            address = self.hosts.addresses[f"app{index + 1}"]
            url = f"https://{address}:{self.instance_ports[index]}/readyz"
            trust = self.balancers.trust()
            try:
                ready = (
                    daemon is None
                    or httpx.get(url, timeout=2, verify=trust).json()["rateLimits"] == "ok"
                )
            except (httpx.HTTPError, ValueError, KeyError):
                ready = False
            if not ready:
                return False
        return True

    def start_instance(self, index: int) -> None:
        """Start instance ``index`` (``petstore serve`` on its port); returns once it
        answers ``/readyz``."""
        port, address = self.instance_ports[index], self.hosts.addresses[f"app{index + 1}"]
        trust = self.balancers.trust()
        self.instances[index] = start(
            self.hosts.run_in(f"app{index + 1}", [sys.executable, "-m", "petstore", "serve"]),
            ready=lambda: answers(port, "/readyz", host=address, tls=trust),
            what=f"instance {index + 1}",
            log=self.root / f"instance{index + 1}.log",
            env={
                **self.instance_env(), "PETSTORE_PORT": str(port), "PETSTORE_HOST": address,
                # Its own port over TLS, with the certificate of its address.
                "PETSTORE_TLS_CERTIFICATE": str(self.certificates.certificate(address)),
                "PETSTORE_TLS_KEY": str(self.certificates.key(address)),
            },
        )  # fmt: skip

    def stop_instance(self, index: int, signum: int = signal.SIGTERM) -> None:
        """Send ``signum`` to instance ``index`` (SIGKILL: the whole process group) and
        wait for it to end (after its drain, for SIGTERM; killed after 60 s)."""
        daemon = self.instances[index]
        if daemon is not None:
            if signum == signal.SIGKILL:
                daemon.kill()
            else:
                daemon.signal(signum)
                daemon.reap(grace=60)
        self.instances[index] = None

    def lb_command(self, command: str) -> str:
        """The first HAProxy's answer to one runtime-API ``command``
        (:meth:`Balancers.command`)."""
        return self.balancers.command(command)

    def lb_states(self, balancer: str | None = None) -> dict[str, str]:
        """Each instance's state in the backend of HAProxy on ``balancer`` (the first
        by default): ``UP``, ``DOWN``, ``MAINT``..."""
        return self.balancers.states(balancer)

    def wait_in_rotation(self, indexes: range | list[int], *, seconds: float = 30) -> None:
        """Wait until every running HAProxy has each of ``indexes`` UP. A runtime-API
        socket not there yet (an HAProxy that accepts connections before it has made
        its socket) is not yet UP."""
        names = [f"i{i + 1}" for i in indexes]

        def in_rotation() -> bool:
            try:
                return all(
                    self.lb_states(balancer).get(name) == "UP"
                    for balancer in self.balancers.running()
                    for name in names
                )
            except (FileNotFoundError, ConnectionRefusedError):
                return False

        wait_for(in_rotation, what="instances in HAProxy's rotation", seconds=seconds)

    def daemons(self) -> list[Daemon]:
        """Everything running now."""
        parts = [*self.balancers.daemons(), *self.instances, self.redis]
        archive = self.repository.daemons() if self.repository is not None else []
        return [d for d in parts if d is not None] + self.postgres.daemons() + archive

    def ports(self) -> list[int]:
        """Every loopback port the topology listens on."""
        return [
            self.lb_port, self.balancers.redirect_port, self.redis_port, *self.instance_ports,
            self.postgres.monitor_port, *self.postgres.node_ports,
        ]  # fmt: skip

    def save(self) -> None:
        """Record what runs, for ``down`` from another process."""
        state = {
            "groups": [d.pid for d in self.daemons()],
            "ports": [] if self.on_hosts else self.ports(),
            "hosts": self.on_hosts,
        }
        (self.root / STATE_FILE).write_text(json.dumps(state))

    def down(self) -> None:
        """Stop everything: SIGCONT and SIGTERM to all at once, then up to 10 s for each
        to end (HAProxy and the instances first, the database last), then the same
        for the backup repository's servers; then unmount the small disks and remove
        the test hosts."""
        archive = self.repository.daemons() if self.repository is not None else []
        # The repository's servers last: a stopping PostgreSQL archives what is left.
        for daemons in ([d for d in self.daemons() if d not in archive], archive):
            for daemon in daemons:
                kill_group(daemon.pid, signal.SIGCONT)  # a paused part could not end
                daemon.signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            for daemon in daemons:
                daemon.reap(deadline - time.monotonic())
        self.instances = [None] * len(self.instances)
        self.balancers.forget()
        self.redis = self.postgres.monitor = None
        self.postgres.nodes = [None] * NODES
        if self.repository is not None:
            self.repository.servers = dict.fromkeys(self.repository.servers)
        for disk in self.postgres.disks:
            disk.unmount()
        self.hosts.down()
