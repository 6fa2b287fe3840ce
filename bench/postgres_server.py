"""The PostgreSQL server of ``python -m bench.postgres_tls``: a cluster of the run's
own with ``ssl=on`` and a certificate of a CA of its own
(deploy/tls/make-certificates, as the deployment's), and the two sides' connections
to it: the URL each side uses, and what ``pg_stat_ssl`` shows of them.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import psycopg

from testbed.certificates import Certificates
from testbed.processes import free_port, give_to_postgres, postgres_user, program, start

#: The name libpq verifies (the URL's host) and the certificate's.
HOST = "127.0.0.1"
#: Each side's connection options (``{ca}``: the CA's certificate).
SIDES = {"TLS": "sslmode=verify-full&sslrootcert={ca}", "plain": "sslmode=disable"}
#: Each side's ``application_name``, which tells its connections apart in
#: ``pg_stat_activity``.
NAMES = {"TLS": "bench-tls", "plain": "bench-plain"}


@contextmanager
def running() -> Iterator[tuple[str, Certificates]]:
    """A new PostgreSQL cluster in a new temporary folder, on a free port of
    127.0.0.1, ``ssl=on`` with a certificate of :data:`HOST` signed by a new CA, plain
    connections allowed too (initdb's ``trust`` for 127.0.0.1); yields the URL of its
    ``postgres`` database and the certificates (``.ca`` for ``sslrootcert``). Stopped
    (fast shutdown) and removed when the block ends. Raises ServerUnavailableError
    when the certificates or the server cannot be made, CalledProcessError when
    initdb fails."""
    user, port = postgres_user(), free_port()
    root = Path(tempfile.mkdtemp(prefix="petstore-pgtls-"))
    try:
        give_to_postgres(root)  # PostgreSQL runs as its own user when we are root
        certificates = Certificates(root / "certificates")
        certificates.make(HOST)
        certificates.give_to_postgres()
        data = root / "data"
        subprocess.run(
            [program("initdb", package="postgresql"), "-D", str(data), "-U", "postgres",
             "-A", "trust", "-E", "UTF8"],
            user=user, capture_output=True, text=True, check=True,
        )  # fmt: skip
        settings = {
            "listen_addresses": HOST, "port": port, "unix_socket_directories": root,
            "ssl": "on", "ssl_cert_file": certificates.certificate(HOST),
            "ssl_key_file": certificates.key(HOST),
        }  # fmt: skip
        options = [arg for name, value in settings.items() for arg in ("-c", f"{name}={value}")]
        url = f"postgresql://postgres@{HOST}:{port}/postgres"
        daemon = start(
            [program("postgres", package="postgresql"), "-D", str(data), *options],
            ready=partial(_accepts, url), what="PostgreSQL", log=root / "postgres.log",
            user=user,
        )  # fmt: skip
        try:
            yield url, certificates
        finally:
            daemon.stop(grace=10, signum=signal.SIGINT)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _accepts(url: str) -> bool:
    try:
        psycopg.connect(url, connect_timeout=2).close()
    except psycopg.OperationalError:
        return False
    return True


def side_url(database_url: str, side: str, *, ca: Path) -> str:
    """``database_url`` (no query of its own) as ``side`` (a key of :data:`SIDES`)
    connects to it."""
    return f"{database_url}?{SIDES[side].format(ca=ca)}&application_name={NAMES[side]}"


def encryption(database_url: str) -> dict[str, set[str | None]]:
    """By side, what ``pg_stat_ssl`` shows of that side's open connections to the
    database of ``database_url``: the TLS version and cipher, or None for a plain one."""
    by_name = {name: side for side, name in NAMES.items()}
    seen: dict[str, set[str | None]] = {side: set() for side in SIDES}
    with psycopg.connect(database_url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT a.application_name, s.ssl, s.version, s.cipher FROM pg_stat_activity a"
            " JOIN pg_stat_ssl s USING (pid) WHERE a.datname = current_database()"
        ).fetchall()
    for name, ssl, tls_version, cipher in rows:
        if name in by_name:
            seen[by_name[name]].add(f"{tls_version} {cipher}" if ssl else None)
    return seen


def check_encryption(seen: dict[str, set[str | None]]) -> str:
    """The TLS version and cipher of the TLS side; raises RuntimeError unless each
    side has connections, all of the TLS side's encrypted and none of the plain's."""
    if not seen["TLS"] or None in seen["TLS"] or seen["plain"] != {None}:
        raise RuntimeError(f"connections not as the sides say (None: plain): {seen}")
    return ", ".join(sorted(str(each) for each in seen["TLS"]))
