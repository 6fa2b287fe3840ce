"""The load balancers of a :class:`~testbed.cluster.Cluster`: HAProxy with
deploy/haproxy.cfg on one host (loopback mode, ``lb``), or on two test hosts (``lb1``,
``lb2``) with keepalived (deploy/keepalived/) on each holding the one virtual address
that clients call (D27: no single point of failure). VRRP (RFC 5798) moves that
address to the other host when the active one's HAProxy stops answering or its
keepalived falls silent.

HAProxy serves TLS with a certificate of the test bed's CA (:mod:`testbed.certificates`)
named for the address clients call, and every client of the test bed trusts that CA
alone (:meth:`Balancers.trust`); its plain HTTP port answers only redirects.
"""

from __future__ import annotations

import csv
import os
import signal
import socket
import ssl
import subprocess
from pathlib import Path

from testbed import DEPLOY
from testbed.certificates import Certificates
from testbed.hosts import Loopback, Network
from testbed.processes import Daemon, kill_group, program, wait_for

#: keepalived's priority per host: the first wins the first election.
PRIORITIES = (150, 100)
#: The name of HAProxy's certificate (its files in the test bed's certificates).
CERTIFICATE = "balancer"


class Balancers:
    """HAProxy on each of ``names`` (hosts of ``hosts``), serving TLS on ``port`` and
    answering plain HTTP on ``redirect_port`` with a redirect, sending to ``servers``
    (address, port: one ``server`` line each, named ``i1``..); with ``vip`` (an
    address of the hosts' network) keepalived on each keeps it on one of them.
    ``root`` holds the configurations, sockets and logs; ``certificates`` the CA that
    signs HAProxy's certificate (made by :meth:`start`)."""

    def __init__(
        self, root: Path, hosts: Loopback, names: list[str], *, port: int, redirect_port: int,
        vip: str | None, settings: dict[str, str], certificates: Certificates,
    ) -> None:  # fmt: skip
        self.root, self.hosts, self.names, self.port, self.vip = root, hosts, names, port, vip
        self.redirect_port, self.settings, self.certificates = redirect_port, settings, certificates
        self.servers: list[tuple[str, int]] = []
        self.haproxy: dict[str, Daemon | None] = dict.fromkeys(names)
        self.keepalived: dict[str, Daemon | None] = dict.fromkeys(names)
        self.paused: set[str] = set()

    @property
    def address(self) -> str:
        """The address clients call: the virtual one, or the only HAProxy's."""
        return self.vip or self.hosts.addresses[self.names[0]]

    def trust(self) -> ssl.SSLContext:
        """What a client of the test bed verifies HAProxy with: the test bed's CA and
        nothing else, the address it calls checked against the certificate's names."""
        return ssl.create_default_context(cafile=self.certificates.ca)

    def start(self, servers: list[tuple[str, int]]) -> None:
        """Make HAProxy's certificate (for the address clients call), then start
        HAProxy (and keepalived) on every host; returns once that address accepts
        connections. Raises ServerUnavailableError when the certificate cannot be made."""
        self.servers = servers
        self.certificates.make(f"{CERTIFICATE},{self.address}")
        for name in self.names:
            self.start_one(name)
        wait_for(lambda: accepts(self.address, self.port), what="the load balancers' address")

    def start_one(self, name: str) -> None:
        """Start HAProxy on host ``name``, then its keepalived (with a virtual
        address); returns once that HAProxy accepts connections."""
        config = self.root / f"haproxy-{name}.cfg"
        servers = list(enumerate(self.servers, 1))
        # Each instance's certificate is named by its address (testbed.certificates).
        lines = [f"    server i{n} {at}:{port} verifyhost {at}\n" for n, (at, port) in servers]
        lines += [
            f"    server i{n}-backup {at}:{port} verifyhost {at} backup no-check\n"
            for n, (at, port) in servers
        ]
        config.write_text((DEPLOY / "haproxy.cfg").read_text() + "".join(lines))
        own = self.hosts.addresses[name]
        env = {**os.environ, **self.settings}
        # With a virtual address: every address of the host, the virtual one too.
        listen = "" if self.vip else own
        env.update(
            PETSTORE_LB_BIND=f"{listen}:{self.port}",
            PETSTORE_LB_REDIRECT_BIND=f"{listen}:{self.redirect_port}",
            PETSTORE_LB_CERTIFICATE=str(self.certificates.pem(CERTIFICATE)),
            PETSTORE_LB_INSTANCES_CA=str(self.certificates.ca),
            PETSTORE_LB_STATS_SOCKET=str(self.socket(name)),
            PETSTORE_LB_MAXCONN="2000",  # within this machine's open-files limit
        )
        self.haproxy[name] = Daemon(
            self.hosts.run_in(name, [program("haproxy", package="haproxy"), "-W", "-db", "-f",
                                     str(config)]),
            log=self.root / f"haproxy-{name}.log",
            env=env,
        )  # fmt: skip
        wait_for(lambda: accepts(own, self.port), what=f"HAProxy on {name}")
        if self.vip is not None:
            self._start_keepalived(name)

    def _start_keepalived(self, name: str) -> None:
        """keepalived on ``name`` with deploy/keepalived/keepalived.conf, its
        variables written in a file of this host's that includes it."""
        assert self.vip is not None
        config = self.root / f"keepalived-{name}.conf"
        values = {
            "ADDRESS": self.hosts.addresses[name], "PORT": str(self.port),
            "VIP": f"{self.vip}/{Network.prefix}", "INTERFACE": "eth0",
            "PRIORITY": str(PRIORITIES[self.names.index(name)]),
            "CHECK": str(DEPLOY / "keepalived" / "haproxy-answers"),
        }  # fmt: skip
        lines = [f"$PETSTORE_LB_{key}={value}\n" for key, value in values.items()]
        include = f"include {DEPLOY / 'keepalived' / 'keepalived.conf'}\n"
        config.write_text("".join([*lines, include]))
        keepalived = program("keepalived", package="keepalived")
        self.keepalived[name] = Daemon(
            self.hosts.run_in(name, [
                keepalived, "--dont-fork", "--log-console", "--no-syslog", "--vrrp",
                "--use-file", str(config), "--pid", str(self.root / f"keepalived-{name}.pid"),
                "--vrrp_pid", str(self.root / f"keepalived-vrrp-{name}.pid")]),
            log=self.root / f"keepalived-{name}.log",
        )  # fmt: skip

    def socket(self, name: str) -> Path:
        """HAProxy's runtime API socket on host ``name``."""
        return self.root / f"haproxy-{name}.sock"

    def command(self, command: str, name: str | None = None) -> str:
        """HAProxy's answer to one runtime-API ``command`` (``show stat``, ``set
        server petstore/i1 state drain``...) on host ``name`` (the first by default)."""
        with socket.socket(socket.AF_UNIX) as api:
            api.settimeout(5)  # a paused HAProxy never answers
            api.connect(str(self.socket(name or self.names[0])))
            api.sendall(command.encode() + b"\n")
            return b"".join(iter(lambda: api.recv(65536), b"")).decode()

    def states(self, name: str | None = None) -> dict[str, str]:
        """Each instance's state in the backend of HAProxy on ``name`` (the first by
        default): ``UP``, ``DOWN``, ``MAINT``... (its unchecked backup line aside)."""
        rows = csv.DictReader(self.command("show stat", name).removeprefix("# ").splitlines())
        return {
            row["svname"]: row["status"]
            for row in rows
            if row["svname"].startswith("i") and not row["svname"].endswith("-backup")
        }

    def running(self) -> list[str]:
        """The hosts whose HAProxy runs (and is not paused)."""
        return [
            name
            for name, daemon in self.haproxy.items()
            if daemon is not None and name not in self.paused
        ]

    def holders(self) -> list[str]:
        """The hosts whose interface has the virtual address now: one when all is
        well (a paused or unplugged host keeps it on its interface, unheard)."""
        held = []
        for name in self.names if self.vip else []:
            shown = subprocess.run(  # noqa: S603
                self.hosts.run_in(name, ["ip", "-o", "-4", "addr", "show", "dev", "eth0"]),
                capture_output=True, text=True, check=False,
            ).stdout  # fmt: skip
            if f" {self.vip}/" in shown:
                held.append(name)
        return held

    def lose(self, name: str) -> None:
        """SIGKILL HAProxy and keepalived on ``name`` (what a lost host leaves: the
        address stays on its interface until the host is cut)."""
        for daemons in (self.keepalived, self.haproxy):
            daemon = daemons[name]
            if daemon is not None:
                daemon.kill()
            daemons[name] = None
        self.paused.discard(name)

    def pause(self, name: str, signum: int) -> None:
        """``signum`` (SIGSTOP, SIGCONT) to HAProxy and keepalived on ``name``."""
        for daemon in (self.haproxy[name], self.keepalived[name]):
            if daemon is not None:
                kill_group(daemon.pid, signum)
        if signum == signal.SIGSTOP:
            self.paused.add(name)
        else:
            self.paused.discard(name)

    def release(self, name: str) -> None:
        """Remove the virtual address from ``name``'s interface (what a lost host's
        keepalived left), before it starts again."""
        argv = ["ip", "addr", "del", f"{self.vip}/{Network.prefix}", "dev", "eth0"]
        subprocess.run(self.hosts.run_in(name, argv), capture_output=True, check=False)  # noqa: S603

    def daemons(self) -> list[Daemon]:
        """Every HAProxy and keepalived running now."""
        parts = [*self.keepalived.values(), *self.haproxy.values()]
        return [daemon for daemon in parts if daemon is not None]

    def forget(self) -> None:
        """Forget every process (after they were stopped)."""
        self.haproxy = dict.fromkeys(self.names)
        self.keepalived = dict.fromkeys(self.names)
        self.paused.clear()


def accepts(address: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``address``:``port`` within 1 s."""
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False
