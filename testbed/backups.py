"""pgBackRest on test hosts (D28): the repository on host ``backup``, every data node
archiving its WAL there and serving the repository host's backups, each over
pgBackRest's own TLS server, from deploy/pgbackrest/ and deploy/postgres/archiving.conf.

Every host's configuration is deploy/pgbackrest/node.conf or repository.conf with the
host's names, paths and ports put in (the test hosts share one file system, so each
has its own configuration, include folder, spool, lock and log folders under
``root``); the certificates are made by deploy/tls/make-certificates, the deployment's
own step (:class:`~testbed.certificates.Certificates`). A data node's PostgreSQL finds
its configuration through ``PGBACKREST_CONFIG`` in its environment
(:meth:`Repository.node_env`), so that its ``archive_command`` is the deployment's.
pgBackRest runs as the PostgreSQL user, as the data directories' owner must.

The repository is encrypted (``repo1-cipher-type=aes-256-cbc``): its passphrase is in
an include file of the repository host's own (:attr:`Repository.passphrase`, as
/etc/pgbackrest/conf.d/passphrase.conf in production), and nowhere else. A data node
asks the repository host for it over TLS whenever it archives or restores: pgBackRest
does so when the node's own configuration sets no cipher, and the repository host's
remote process reads the configuration the node names (``repo1-host-config`` and
``repo1-host-config-include-path``, which production leaves at their defaults).
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed import DEPLOY
from testbed.balancers import accepts
from testbed.certificates import Certificates
from testbed.hosts import Loopback
from testbed.processes import Daemon, ServerUnavailableError, give_to_postgres, program, wait_for

STANZA = "petstore"
#: pgBackRest's TLS servers' port (its default).
TLS_PORT = 8432
#: What the repository's host is called.
HOST = "backup"
#: ``pgbackrest info``'s status codes of a repository that opens: ok, and no valid
#: backup yet.
OPENS = (0, 2)
#: Its status code for every other error, a passphrase that is not the repository's
#: among them (pgBackRest reads its info files as garbage then).
OTHER = 99


class Repository:
    """The repository on host :data:`HOST` under ``root``, for the data nodes on
    ``nodes`` (host names) whose data directories ``pgdata(index)`` gives and whose
    PostgreSQL listen on ``ports``, with the hosts' certificates signed by the CA of
    ``certificates`` (default: a CA of the repository's own, under
    ``root/pgbackrest/tls``; the certificates a host lacks are made there). Nothing
    exists until :meth:`prepare`; nothing runs until :meth:`start`."""

    def __init__(
        self, root: Path, hosts: Loopback, *, nodes: list[str], ports: list[int],
        pgdata: Callable[[int], Path], certificates: Certificates | None = None,
    ) -> None:  # fmt: skip
        self.root, self.hosts, self.nodes, self.ports = root / "pgbackrest", hosts, nodes, ports
        self.pgdata = pgdata
        self.certificates = certificates or Certificates(self.root / "tls")
        self.servers: dict[str, Daemon | None] = dict.fromkeys([HOST, *nodes])
        self.pgbackrest = program("pgbackrest", package="pgbackrest")

    def config(self, host: str) -> Path:
        """Host ``host``'s pgbackrest.conf."""
        return self.root / f"{host}.conf"

    def include(self, host: str) -> Path:
        """Host ``host``'s include folder (``config-include-path``, production's
        /etc/pgbackrest/conf.d): every ``.conf`` file in it is read after
        :meth:`config`. Each host has its own, so that none reads this machine's."""
        return self.root / "conf.d" / host

    @property
    def passphrase(self) -> Path:
        """The repository's passphrase (``repo1-cipher-pass``), in an include file
        of the repository host only (mode 0600, the PostgreSQL user's)."""
        return self.include(HOST) / "passphrase.conf"

    def write_passphrase(self, passphrase: str | None = None) -> str:
        """Write ``passphrase`` into :attr:`passphrase`, or, when None, a new one: 48
        random bytes in base64, as ``openssl rand -base64 48`` makes (64 characters);
        returns it. The repository is made with the passphrase there when
        :meth:`create_stanza` runs, and opens with that one only."""
        if passphrase is None:
            passphrase = base64.b64encode(secrets.token_bytes(48)).decode()
        self.passphrase.touch(mode=0o600)
        give_to_postgres(self.passphrase)
        self.passphrase.write_text(f"[global]\nrepo1-cipher-pass={passphrase}\n")
        return passphrase

    def _argv(self, host: str) -> list[str]:
        """pgBackRest with host ``host``'s configuration and include folder."""
        return [self.pgbackrest, f"--config={self.config(host)}",
                f"--config-include-path={self.include(host)}"]  # fmt: skip

    def node_env(self, index: int) -> dict[str, str]:
        """What a data node's PostgreSQL needs in its environment to archive (and,
        restored, to read the archive): its pgBackRest configuration, and
        deploy/pgbackrest/ first on its ``PATH``, where the archive_command of
        deploy/postgres/archiving.conf is (production: /usr/local/bin)."""
        node = self.nodes[index]
        path = f"{DEPLOY / 'pgbackrest'}:{os.environ.get('PATH', os.defpath)}"
        return {"PGBACKREST_CONFIG": str(self.config(node)),
                "PGBACKREST_CONFIG_INCLUDE_PATH": str(self.include(node)),
                "PATH": path}  # fmt: skip

    def prepare(self) -> None:
        """Make the certificates the hosts lack (deploy/tls/make-certificates),
        every host's configuration and folders, and the repository's passphrase.
        Raises ServerUnavailableError."""
        self.root.mkdir()
        give_to_postgres(self.root)
        certs = self.certificates
        addresses = [self.hosts.addresses[name] for name in (HOST, *self.nodes)]
        if lacking := [name for name in addresses if not certs.certificate(name).exists()]:
            certs.make(*lacking)
        certs.give_to_postgres()
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
                # Where the repository host's files are (production: the defaults).
                "repo1-host-config": str(self.config(HOST)),
                "repo1-host-config-include-path": str(self.include(HOST)),
                "repo1-host-ca-file": str(certs.ca),
                "repo1-host-cert-file": str(certs.certificate(own)),
                "repo1-host-key-file": str(certs.key(own)),
                "tls-server-address": own,
                "tls-server-ca-file": str(certs.ca),
                "tls-server-cert-file": str(certs.certificate(own)),
                "tls-server-key-file": str(certs.key(own)),
                "tls-server-auth": f"{backup}={STANZA}",
            }, pg1)  # fmt: skip
        stanza: dict[str, str | list[str]] = {}
        for index, name in enumerate(self.nodes):
            n = index + 1
            stanza.update({
                f"pg{n}-host": self.hosts.addresses[name],
                f"pg{n}-host-ca-file": str(certs.ca),
                f"pg{n}-host-cert-file": str(certs.certificate(backup)),
                f"pg{n}-host-key-file": str(certs.key(backup)),
                f"pg{n}-path": str(self.pgdata(index)),
                f"pg{n}-port": str(self.ports[index]),
                # The node's own files, which its remote process reads (production:
                # the defaults); its lock-path among them.
                f"pg{n}-host-config": str(self.config(name)),
                f"pg{n}-host-config-include-path": str(self.include(name)),
            })  # fmt: skip
        # The template's nodes past these (fewer than its three) are left out.
        template = (DEPLOY / "pgbackrest" / "repository.conf").read_text()
        for key, n in re.findall(r"^(pg(\d+)-[a-z-]+)=", template, re.MULTILINE):
            if int(n) > len(self.nodes):
                stanza[key] = []
        self._write(HOST, "repository.conf", {
            "repo1-path": str(self.root / "repo"),
            "tls-server-address": backup,
            "tls-server-ca-file": str(certs.ca),
            "tls-server-cert-file": str(certs.certificate(backup)),
            "tls-server-key-file": str(certs.key(backup)),
            "tls-server-auth": [f"{address}={STANZA}" for address in addresses[1:]],
        }, stanza)  # fmt: skip
        self.write_passphrase()

    def _write(
        self, host: str, template: str, glob: dict[str, str | list[str]],
        stanza: dict[str, str | list[str]],
    ) -> None:  # fmt: skip
        """``host``'s configuration: deploy/pgbackrest/``template`` with the options of
        ``glob`` and ``stanza`` put in (a list: one line each), and its own include,
        spool, lock and log folders."""
        folders = {what: self.root / what / host for what in ("spool", "lock", "log")}
        for folder in [*folders.values(), self.include(host)]:
            folder.mkdir(parents=True, exist_ok=True)
            give_to_postgres(folder.parent)
            give_to_postgres(folder)
        glob = {**glob, **{f"{what}-path": str(path) for what, path in folders.items()}}
        text = render((DEPLOY / "pgbackrest" / template).read_text(),
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

    def start_server(self, host: str, *, sandbox: list[str] | None = None) -> Daemon:
        """``pgbackrest server`` on ``host``; returns it once it accepts connections.
        With ``sandbox``, the server's command line is appended to it and run as
        root in the host: the sandbox becomes the PostgreSQL user itself."""
        server = [*self._argv(host), "server"]
        argv = (
            self.hosts.run_in(host, [*sandbox, *server])
            if sandbox is not None
            else self.hosts.run_in(host, server, user=self.hosts.postgres)
        )
        daemon = Daemon(argv, log=self.root.parent / f"pgbackrest-{host}.log")
        address = self.hosts.addresses[host]
        try:
            with self.hosts.entered(host):  # the probe's packets stay on the test network
                wait_for(lambda: accepts(address, TLS_PORT) or not daemon.alive(),
                         what=f"pgBackRest's TLS server on {host}")  # fmt: skip
            if not daemon.alive():
                raise ServerUnavailableError(f"pgBackRest's TLS server on {host} ended")
        except ServerUnavailableError as error:
            daemon.stop()
            raise ServerUnavailableError(f"{error}; its log:\n{daemon.tail()}") from None
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
            host, [*self._argv(host), f"--stanza={STANZA}", *args], user=self.hosts.postgres
        )
        try:
            done = subprocess.run(  # noqa: S603 - our own argv
                argv, capture_output=True, text=True, errors="replace", check=False,
                timeout=seconds,
            )  # fmt: skip
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
        # Not strict: a repository that does not open is reported with what pgBackRest
        # read of it, control characters and all.
        text = self.command(HOST, "--output=json", "info")
        stanzas: list[dict[str, Any]] = json.loads(text, strict=False)
        return stanzas[0]

    def verify(self) -> list[tuple[str, str]]:
        """``pgbackrest verify`` on the repository host: every archived WAL segment
        and every backup's files read back and checked against their checksums.
        Returns the runs of consecutive WAL segments it found, each (first, last)
        segment name, timeline included (pgBackRest starts a new run where a segment
        is missing). Raises ServerUnavailableError when it finds a file invalid or
        missing, naming what it reported."""
        text = self.command(HOST, "--log-level-console=detail", "--output=text", "--verbose",
                            "verify")  # fmt: skip
        if re.search(r"^status: (?!ok$)", text, re.MULTILINE):
            raise ServerUnavailableError(f"pgbackrest verify: {text.strip()}")
        return re.findall(r"wal start: ([0-9A-F]{24}), wal stop: ([0-9A-F]{24})", text)

    def check_opens(self) -> None:
        """Raise ServerUnavailableError, naming :attr:`passphrase` when that may be
        the cause, unless ``pgbackrest info`` on the repository host reads the
        repository (docs/operations/recover.md, Backups and restore: before a restore).
        With a passphrase that is not the repository's, pgBackRest 2.45's ``info``
        reports the stanza's status as an error (other) and its ``restore`` on a data
        node dies of a signal without a word."""
        status = self.info()["repo"][0]["status"]
        if status["code"] in OPENS:
            return
        reason = f"pgbackrest info on {HOST}: {status['message'].splitlines()[0]}"
        if status["code"] == OTHER:
            raise ServerUnavailableError(
                f"the repository does not open ({reason}): is {self.passphrase} the "
                "passphrase it was made with?"
            )
        raise ServerUnavailableError(f"the repository does not open ({reason})")

    def restore(self, index: int, *, target: str | None = None) -> None:
        """Restore the newest backup into node ``index``'s (empty) data directory, to
        the moment ``target`` (PostgreSQL's timestamp notation, ``--type=time``, then
        promote) or, without it, through the newest archived WAL. Raises
        ServerUnavailableError, before the data directory is made, when the
        repository does not open (:meth:`check_opens`)."""
        self.check_opens()
        pgdata = self.pgdata(index)
        pgdata.mkdir(mode=0o700)
        give_to_postgres(pgdata)
        to = ["--type=time", f"--target={target}", "--target-action=promote"] if target else []
        self.command(self.nodes[index], *to, "restore")

    def daemons(self) -> list[Daemon]:
        """The TLS servers running."""
        return [d for d in self.servers.values() if d is not None]


def render(template: str, options: dict[str, dict[str, str | list[str]]]) -> str:
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
