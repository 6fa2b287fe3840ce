"""The ``petstore`` command: serve, API keys, migrations, the OpenAPI document.

Every command reads the same ``PETSTORE_*`` settings as the server. Exit codes:
0 success, 1 the operation failed (e.g. no such key), 2 bad usage or configuration.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import time
from datetime import UTC, datetime
from typing import Any

import click

from petstore import __version__
from petstore.cli import backup
from petstore.cli.keys import keys_group
from petstore.cli.listening import check_exposure, http_options
from petstore.cli.pets import pets_group
from petstore.cli.store import BadSettings, settings_or_usage_error, with_store
from petstore.server import shutdown
from petstore.server.config import Environment, Settings, UnsupportedDatabaseError
from petstore.server.rules import keys
from petstore.server.settings_checks import event_loop_problem, tls_problem
from petstore.server.store import Store, migrate
from petstore.server.telemetry import logs
from petstore.text import printable

#: Where the API's port is chosen, as the refusal of a taken port says it.
_PORT_SETTING = "--port (or PETSTORE_PORT)"


@click.group()
@click.version_option(__version__, prog_name="petstore")
def main() -> None:
    """Petstore: the Pet Store Service Interface v1.0.0 over HTTP/JSON.

    Settings come from PETSTORE_* environment variables (docs/reference/settings.md).
    """


def refuse_a_taken_address(host: str, port: int, *, setting: str = _PORT_SETTING) -> None:
    """Exit 1 (click.ClickException) when another process listens on ``host:port``
    (D24), naming the address and ``setting``, where another port is chosen. The
    probe binds without SO_REUSEPORT, which Linux refuses while any socket listens
    there, also one of another granian server that binds with SO_REUSEPORT;
    SO_REUSEADDR lets a restart pass the connections of the last run still in
    TIME_WAIT. Only granian's workers, started after this, share the port with
    SO_REUSEPORT. An address still taken after :data:`_TAKEN_GRACE_SECONDS` is
    refused."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise click.UsageError(f"cannot listen on {printable(host)}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    deadline = time.monotonic() + _TAKEN_GRACE_SECONDS
    while not _can_bind(family, kind, proto, address, host=host, port=port):
        if time.monotonic() >= deadline:
            raise click.ClickException(
                f"{printable(host)}:{port} is already in use by another process (another petstore "
                f"serve?); stop it, or choose another port with {setting}"
            )
        time.sleep(0.05)


#: How long a taken address is tried again before serve refuses it: the workers of an
#: instance whose main process was just killed close their sockets within moments,
#: and a supervisor's restart should not fail on them.
_TAKEN_GRACE_SECONDS = 1.0


def _can_bind(
    family: socket.AddressFamily,
    kind: socket.SocketKind,
    proto: int,
    address: Any,
    *,
    host: str,
    port: int,
) -> bool:
    """Whether a socket without SO_REUSEPORT can bind ``address`` now; raises
    click.ClickException for an error other than the address being in use."""
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                shown = f"{printable(host)}:{port}: {printable(str(exc))}"
                raise click.ClickException(f"cannot listen on {shown}") from None
            return False
    return True


def creates_dev_key(environment: Environment, asked: bool | None) -> bool:
    """Whether ``serve`` creates (and prints) a ``dev`` key when no key is active:
    in development unless ``--no-dev-key``; in staging only with ``--dev-key``, as a
    key printed to a shared log is a key anyone reading it holds; never in
    production. Raises click.UsageError for ``--dev-key`` in production."""
    if environment is Environment.PRODUCTION:
        if asked:
            raise click.UsageError(
                "--dev-key is refused in production; create keys with: petstore keys create"
            )
        return False
    if environment is Environment.STAGING:
        return bool(asked)
    return asked is None or asked


def drain_seconds(settings: Settings) -> float:
    """The drain of a SIGTERM: ``shutdown_drain_seconds``, except in development
    when PETSTORE_SHUTDOWN_DRAIN_SECONDS is not set, where no load balancer waits
    for ``/readyz`` and a stop is at once."""
    if settings.environment is Environment.DEVELOPMENT and (
        "PETSTORE_SHUTDOWN_DRAIN_SECONDS" not in os.environ
    ):
        return 0.0
    return settings.shutdown_drain_seconds


@main.command()
@click.option("--host", help="Address to listen on [PETSTORE_HOST, default 127.0.0.1].")
@click.option("--port", type=int, help="Port to listen on [PETSTORE_PORT, default 8000].")
@click.option("--workers", type=int, help="Worker processes [PETSTORE_WORKERS, default 1].")
@click.option(
    "--migrate/--no-migrate",
    default=None,
    help="Apply pending migrations first [PETSTORE_MIGRATE_ON_START; always for SQLite].",
)
@click.option(
    "--dev-key/--no-dev-key",
    default=None,
    help="Create and print a key named dev when no key is active [default: in "
    "development only; staging only when asked; never in production].",
)
def serve(
    host: str | None,
    port: int | None,
    workers: int | None,
    migrate: bool | None,
    dev_key: bool | None,
) -> None:
    """Serve the API at http://HOST:PORT/v1.

    Applies pending migrations to an embedded SQLite database; on PostgreSQL only
    with --migrate, and refuses to start on an out-of-date schema. In development
    (and in staging with --dev-key), creates and prints an API key named "dev" when
    no key is active.

    Refuses (exit 1) a host and port (or PETSTORE_METRICS_PORT) another process
    listens on, and (exit 2) invalid settings (each named on a line of its own) and
    development settings on an address beyond loopback unless PETSTORE_ENVIRONMENT
    says development on purpose (then it warns).

    SIGTERM stops gracefully: /readyz answers 503 for PETSTORE_SHUTDOWN_DRAIN_SECONDS
    (in development only when that variable is set), then requests in flight finish;
    the process exits within PETSTORE_SHUTDOWN_TIMEOUT_SECONDS. A SIGTERM sent to the
    whole process group drains the same. Ctrl-C stops at once, as gracefully.
    """
    from granian import Granian
    from granian.constants import Interfaces

    settings = settings_or_usage_error(
        host=host, port=port, workers=workers, migrate_on_start=migrate
    )
    unusable = tls_problem(settings.tls_certificate, settings.tls_key)
    if unusable or (unusable := event_loop_problem(settings.event_loop)):
        raise BadSettings(unusable)
    create_dev_key = creates_dev_key(settings.environment, dev_key)
    # Workers build their app from the environment: hand them the same settings.
    for name, value in (("HOST", host), ("PORT", port), ("WORKERS", workers)):
        if value is not None:
            os.environ[f"PETSTORE_{name}"] = str(value)
    check_exposure(settings, dev_key=create_dev_key)
    logs.configure(level=settings.log_level, json=settings.json_logs)
    refuse_a_taken_address(settings.host, settings.port)
    if settings.metrics_port is not None:  # else each worker would fail on it
        refuse_a_taken_address(
            settings.host, settings.metrics_port, setting="PETSTORE_METRICS_PORT"
        )

    async def prepare(store: Store) -> str | None:
        if not create_dev_key:
            return None
        return await keys.ensure_dev_key(store.api_keys, now=datetime.now(UTC))

    created = with_store(settings, prepare, migrate=settings.migrate_on_start, migrate_apart=True)
    scheme = "http" if settings.tls_certificate is None else "https"
    url = f"{scheme}://{settings.host}:{settings.port}/v1"
    if created is not None:
        click.echo('No active API key: created one named "dev" (shown only now):')
        click.echo(f"  {created}")
        click.echo(f'  curl -H "Authorization: Bearer {created}" {url}/pets')
    click.echo(f"Serving {url} (docs: {url}/docs)")
    sys.stdout.flush()
    with shutdown.drain_marker() as marker:  # before Granian: its workers inherit the path
        drain = shutdown.Drain(seconds=drain_seconds(settings), marker=marker)
        server = Granian(
            "petstore.cli.worker:app",
            factory=True,
            address=settings.host,
            port=settings.port,
            interface=Interfaces.ASGI,
            workers=settings.workers,
            workers_kill_timeout=shutdown.workers_kill_timeout(settings),
            log_access=False,
            **http_options(settings),
        )
        server.on_startup(drain.install)
        try:
            server.serve()
        finally:
            logs.flush()


@main.group("db")
def db_group() -> None:
    """Database schema migrations and the SQLite backup."""


@db_group.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration (safe to run again)."""
    settings = settings_or_usage_error()
    try:
        migrate.upgrade(settings.database_url)
    except (UnsupportedDatabaseError, migrate.UnreachableDatabaseError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"Database is at revision {migrate.head_revision()}.")


@main.command()
def openapi() -> None:
    """Print the served OpenAPI document (JSON)."""
    from petstore.server.http.docs import openapi_document

    document = openapi_document(settings_or_usage_error())
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))  # as served: UTF-8


db_group.add_command(backup.db_backup)
main.add_command(keys_group)
main.add_command(pets_group)
