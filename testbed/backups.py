"""pgBackRest on test hosts (D28): the repository on host ``backup``, every data node
archiving its WAL there and serving the repository host's backups, each over
pgBackRest's own TLS server, from deploy/pgbackrest/ and deploy/postgres/archiving.conf.

Every host's configuration is deploy/pgbackrest/node.conf or repository.conf with the
host's names, paths and ports put in (the test hosts share one file system, so each
has its own spool, lock and log folders under ``root``); the certificates are made by
deploy/tls/make-certificates, the deployment's own step. A data node's
PostgreSQL finds its configuration through ``PGBACKREST_CONFIG`` in its environment
(:meth:`Repository.node_env`), so that its ``archive_command`` is the deployment's.
pgBackRest runs as the PostgreSQL user, as the data directories' owner must.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed import DEPLOY
from testbed.balancers import accepts
from testbed.hosts import Loopback
from testbed.processes import Daemon, ServerUnavailableError, give_to_postgres, program, wait_for

STANZA = "petstore"
#: pgBackRest's TLS servers' port (its default).
TLS_PORT = 8432
#: What the repository's host is called.
HOST = "backup"


class Repository:
    """The repository on host :data:`HOST` under ``root``, for the data nodes on
    ``nodes`` (host names) whose data directories ``pgdata(index)`` gives and whose
    PostgreSQL listen on ``ports``. Nothing exists until :meth:`prepare`; nothing
    runs until :meth:`start`."""

    def __init__(
        self, root: Path, hosts: Loopback, *, nodes: list[str], ports: list[int],
        pgdata: Callable[[int], Path],
    ) -> None:  # fmt: skip
        self.root, self.hosts, self.nodes, self.ports = root / "pgbackrest", hosts, nodes, ports
        self.pgdata = pgdata
        self.servers: dict[str, Daemon | None] = dict.fromkeys([HOST, *nodes])
        self.pgbackrest = program("pgbackrest", package="pgbackrest")

    def config(self, host: str) -> Path:
        """Host ``host``'s pgbackrest.conf."""
        return self.root / f"{host}.conf"

    def node_env(self, index: int) -> dict[str, str]:
        """What a data node's PostgreSQL needs in its environment to archive."""
        return {"PGBACKREST_CONFIG": str(self.config(self.nodes[index]))}

    def prepare(self) -> None:
        """Make the certificates (deploy/tls/make-certificates), every host's
        configuration and folders. Raises ServerUnavailableError."""
        self.root.mkdir()
        give_to_postgres(self.root)
        tls = self.root / "tls"
        addresses = [self.hosts.addresses[name] for name in (HOST, *self.nodes)]
        made = subprocess.run(  # noqa: S603 - the deployment's own script
            [str(DEPLOY / "tls" / "make-certificates"), str(tls), *addresses],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if made.returncode != 0:
            raise ServerUnavailableError(f"make-certificates: {made.stderr}")
        for path in [tls, *tls.iterdir()]:
            give_to_postgres(path)
        backup = self.hosts.addresses[HOST]
        for index, name in enumerate(self.nodes):
            own = self.hosts.addresses[name]
            pg1: dict[str, str | list[str]] = {
                "pg1-path": str(self.pgdata(index)),
                "pg1-port": str(self.ports[index]),
            }
            self._write(name, "node.conf", {
                "repo1-host": backup,
                "repo1-path": str(self.root / "repo"),
                "repo1-host-ca-file": str(tls / "ca.crt"),
                "repo1-host-cert-file": str(tls / f"{own}.crt"),
                "repo1-host-key-file": str(tls / f"{own}.key"),
                "tls-server-address": own,
                "tls-server-ca-file": str(tls / "ca.crt"),
                "tls-server-cert-file": str(tls / f"{own}.crt"),
                "tls-server-key-file": str(tls / f"{own}.key"),
                "tls-server-auth": f"{backup}={STANZA}",
            }, pg1)  # fmt: skip
        stanza: dict[str, str | list[str]] = {}
        for index, name in enumerate(self.nodes):
            n = index + 1
            stanza.update({
                f"pg{n}-host": self.hosts.addresses[name],
                f"pg{n}-host-ca-file": str(tls / "ca.crt"),
                f"pg{n}-host-cert-file": str(tls / f"{backup}.crt"),
                f"pg{n}-host-key-file": str(tls / f"{backup}.key"),
                f"pg{n}-path": str(self.pgdata(index)),
                f"pg{n}-port": str(self.ports[index]),
            })  # fmt: skip
        self._write(HOST, "repository.conf", {
            "repo1-path": str(self.root / "repo"),
            "tls-server-address": backup,
            "tls-server-ca-file": str(tls / "ca.crt"),
            "tls-server-cert-file": str(tls / f"{backup}.crt"),
            "tls-server-key-file": str(tls / f"{backup}.key"),
            "tls-server-auth": [f"{address}={STANZA}" for address in addresses[1:]],
        }, stanza)  # fmt: skip

    def _write(
        self, host: str, template: str, glob: dict[str, str | list[str]],
        stanza: dict[str, str | list[str]],
    ) -> None:  # fmt: skip
        """``host``'s configuration: deploy/pgbackrest/``template`` with the options of
        ``glob`` and ``stanza`` put in (a list: one line each), and its own spool, lock
        and log folders."""
        folders = {what: self.root / what / host for what in ("spool", "lock", "log")}
        for folder in folders.values():
            folder.mkdir(parents=True, exist_ok=True)
            give_to_postgres(folder.parent)
            give_to_postgres(folder)
        glob = {**glob, **{f"{what}-path": str(path) for what, path in folders.items()}}
        text = _render((DEPLOY / "pgbackrest" / template).read_text(),
                       {"global": glob, STANZA: stanza})  # fmt: skip
        self.config(host).write_text(text)
        give_to_postgres(self.config(host))
        if host == HOST:
            (self.root / "repo").mkdir(exist_ok=True)
            give_to_postgres(self.root / "repo")

    def start(self) -> None:
        """Start the TLS server of every host that has none running; returns once
        each accepts connections."""
        for host, daemon in self.servers.items():
            if daemon is None:
                self.servers[host] = self.start_server(host)

    def start_server(self, host: str) -> Daemon:
        """``pgbackrest server`` on ``host``; returns it once it accepts connections."""
        daemon = Daemon(
            self.hosts.run_in(host, [self.pgbackrest, f"--config={self.config(host)}", "server"],
                              user=self.hosts.postgres),
            log=self.root.parent / f"pgbackrest-{host}.log",
        )  # fmt: skip
        address = self.hosts.addresses[host]
        wait_for(lambda: accepts(address, TLS_PORT), what=f"pgBackRest's TLS server on {host}")
        return daemon

    def stop_server(self, host: str) -> None:
        """SIGKILL ``host``'s TLS server (a lost host)."""
        daemon = self.servers.get(host)
        if daemon is not None:
            daemon.kill()
        self.servers[host] = None

    def command(self, host: str, *args: str, seconds: float = 600) -> str:
        """``pgbackrest --stanza=petstore ARGS`` on ``host`` with its configuration;
        returns what it printed. Raises ServerUnavailableError when it fails or takes
        longer than ``seconds``."""
        argv = self.hosts.run_in(
            host, [self.pgbackrest, f"--config={self.config(host)}", f"--stanza={STANZA}", *args],
            user=self.hosts.postgres,
        )  # fmt: skip
        try:
            done = subprocess.run(  # noqa: S603 - our own argv
                argv, capture_output=True, text=True, check=False, timeout=seconds
            )
        except subprocess.TimeoutExpired:
            what = " ".join(args)
            raise ServerUnavailableError(f"pgbackrest {what}: over {seconds:g} s") from None
        if done.returncode != 0:
            raise ServerUnavailableError(
                f"pgbackrest {' '.join(args)} on {host} exited {done.returncode}: "
                f"{done.stdout.strip()} {done.stderr.strip()}"
            )
        return done.stdout

    def create_stanza(self) -> None:
        """``stanza-create``, from the repository's host. (A backup then checks that
        the primary archives: it waits for its own WAL in the archive.)"""
        self.command(HOST, "stanza-create")

    def backup(self, kind: str = "full") -> None:
        """A ``kind`` backup (``full``, ``diff``, ``incr``) of the primary."""
        self.command(HOST, f"--type={kind}", "backup")

    def info(self) -> dict[str, Any]:
        """The stanza of ``pgbackrest info --output=json``: its backups, archive
        ranges and status."""
        stanzas: list[dict[str, Any]] = json.loads(self.command(HOST, "--output=json", "info"))
        return stanzas[0]

    def restore(self, index: int, *, target: str | None = None) -> None:
        """Restore the newest backup into node ``index``'s (empty) data directory, to
        the moment ``target`` (PostgreSQL's timestamp notation, ``--type=time``, then
        promote) or, without it, through the newest archived WAL."""
        pgdata = self.pgdata(index)
        pgdata.mkdir(mode=0o700)
        give_to_postgres(pgdata)
        to = ["--type=time", f"--target={target}", "--target-action=promote"] if target else []
        self.command(self.nodes[index], *to, "restore")

    def daemons(self) -> list[Daemon]:
        """The TLS servers running."""
        return [d for d in self.servers.values() if d is not None]


def _render(template: str, options: dict[str, dict[str, str | list[str]]]) -> str:
    """``template`` (pgBackRest's INI notation, where an option given on several
    lines holds several values) with each section's ``options`` in place of the
    template's lines of the same option, or added at the section's end."""
    out: list[str] = []
    section, done = "", set[tuple[str, str]]()

    def rest() -> None:  # the section's options the template does not have
        for key, value in options.get(section, {}).items():
            if (section, key) not in done:
                out.extend(_lines(key, value))

    for line in template.splitlines():
        if line.startswith("["):
            rest()
            section = line.strip("[]")
        key = line.split("=", 1)[0] if "=" in line and not line.startswith("#") else ""
        if key in options.get(section, {}):
            if (section, key) not in done:
                out.extend(_lines(key, options[section][key]))
                done.add((section, key))
            continue
        out.append(line)
    rest()
    return "\n".join(out) + "\n"


def _lines(key: str, value: str | list[str]) -> list[str]:
    return [f"{key}={one}" for one in ([value] if isinstance(value, str) else value)]
