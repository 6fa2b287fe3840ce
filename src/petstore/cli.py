"""The ``petstore`` command: serve, API keys, migrations, the OpenAPI document.

Every command reads the same ``PETSTORE_*`` settings as the server. Exit codes:
0 success, 1 the operation failed (e.g. no such key), 2 bad usage or configuration.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

import click

from petstore import db, errors, keys, logs
from petstore.cli_pets import pets_group
from petstore.config import (
    Environment,
    Settings,
    SettingsError,
    UnsupportedDatabaseError,
    load_settings,
)
from petstore.store import ApiKey, SchemaOutOfDateError, Store, open_store

T = TypeVar("T")


def _settings(**overrides: object) -> Settings:
    try:
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None


def _with_store(
    settings: Settings,
    work: Callable[[Store], Awaitable[T]],
    *,
    migrate: bool = False,
    migrate_apart: bool = False,
) -> T:
    """Run ``work`` against the configured store. An embedded SQLite database is always
    migrated first; another backend only when ``migrate`` is set. With
    ``migrate_apart``, the migrations run in a child process (:func:`_upgrade_apart`)."""

    async def run() -> T:
        if migrate or settings.sqlite_path is not None:
            if migrate_apart:
                _upgrade_apart(settings.database_url)
            else:
                db.upgrade(settings.database_url, newer_is_fine=True)
        store = await open_store(settings.database_url, pool_size=2)
        try:
            return await work(store)
        finally:
            await store.close()

    try:
        return asyncio.run(run())
    except (
        SchemaOutOfDateError,
        UnsupportedDatabaseError,
        db.UnreachableDatabaseError,
        errors.PetstoreError,
    ) as exc:
        raise click.ClickException(str(exc)) from None


def _upgrade_apart(url: str) -> None:
    """``db.upgrade(url, newer_is_fine=True)`` in a child interpreter (``python -m
    petstore.db``). ``petstore serve`` migrates this way so that Alembic and
    SQLAlchemy (21 MiB) are never loaded into the process granian forks its workers
    from, nor, therefore, into any worker (docs/performance.md). The URL goes by
    environment, not argument, so that no password shows in the process list.

    Raises ClickException with the child's error output when it fails.
    """
    child = subprocess.run(
        [sys.executable, "-m", "petstore.db"],
        env={**os.environ, "PETSTORE_DATABASE_URL": url},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        raise click.ClickException(child.stderr.strip() or f"migrating exited {child.returncode}")


@click.group()
@click.version_option(package_name="petstore")
def main() -> None:
    """Petstore: the Pet Store Service Interface v1.0.0 over HTTP/JSON.

    Settings come from PETSTORE_* environment variables (see the README).
    """


@main.command()
@click.option("--host", help="Address to listen on [PETSTORE_HOST, default 127.0.0.1].")
@click.option("--port", type=int, help="Port to listen on [PETSTORE_PORT, default 8000].")
@click.option("--workers", type=int, help="Worker processes [PETSTORE_WORKERS, default 1].")
@click.option(
    "--migrate/--no-migrate",
    default=None,
    help="Apply pending migrations first [PETSTORE_MIGRATE_ON_START; always for SQLite].",
)
def serve(host: str | None, port: int | None, workers: int | None, migrate: bool | None) -> None:
    """Serve the API at http://HOST:PORT/v1.

    Applies pending migrations to an embedded SQLite database; on PostgreSQL only
    with --migrate, and refuses to start on an out-of-date schema. Outside
    production, creates and prints an API key named "dev" when no key is active.
    """
    from granian import Granian
    from granian.constants import Interfaces
    from granian.http import HTTP1Settings

    settings = _settings(host=host, port=port, workers=workers, migrate_on_start=migrate)
    # Workers build their app from the environment: hand them the same settings.
    for name, value in (("HOST", host), ("PORT", port), ("WORKERS", workers)):
        if value is not None:
            os.environ[f"PETSTORE_{name}"] = str(value)
    logs.configure(level=settings.log_level, json=settings.json_logs)

    async def prepare(store: Store) -> str | None:
        if settings.environment is Environment.PRODUCTION:
            return None
        return await keys.ensure_dev_key(store, now=datetime.now(UTC))

    dev_key = _with_store(settings, prepare, migrate=settings.migrate_on_start, migrate_apart=True)
    url = f"http://{settings.host}:{settings.port}/v1"
    if dev_key is not None:
        click.echo('No active API key: created one named "dev" (shown only now):')
        click.echo(f"  {dev_key}")
        click.echo(f'  curl -H "Authorization: Bearer {dev_key}" {url}/pets')
    click.echo(f"Serving {url} (docs: {url}/docs)")
    sys.stdout.flush()
    Granian(
        "petstore.app:app_from_environment",
        factory=True,
        address=settings.host,
        port=settings.port,
        interface=Interfaces.ASGI,
        workers=settings.workers,
        log_access=False,
        http1_settings=HTTP1Settings(header_read_timeout=settings.header_timeout_seconds * 1000),
    ).serve()


@main.group("keys")
def keys_group() -> None:
    """Create, list and revoke API keys (D13)."""


@keys_group.command("create")
@click.option("--name", required=True, help="A label for the key, e.g. the client's name.")
@click.option(
    "--expires-at",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d"]),
    help="ISO-8601 expiry, e.g. 2027-01-31T00:00:00Z (a bare date is UTC midnight).",
)
def keys_create(name: str, expires_at: datetime | None) -> None:
    """Create a key. The key is printed once, alone on the last line."""
    if expires_at is not None and expires_at.tzinfo is None:
        expires_at = expires_at.replace(tzinfo=UTC)

    async def create(store: Store) -> tuple[ApiKey, str]:
        return await keys.create(store, name=name, now=datetime.now(UTC), expires_at=expires_at)

    try:
        record, key = _with_store(_settings(), create)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    click.echo(f"Created API key {record.id} ({record.name}, prefix {record.prefix}).", err=True)
    click.echo("Store it now: it cannot be shown again.", err=True)
    click.echo(key)


@keys_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per key.")
def keys_list(as_json: bool) -> None:
    """List keys: id, name, prefix, created, expires, revoked. Never a secret."""
    records = _with_store(_settings(), keys.list_keys)

    def iso(value: datetime | None) -> str | None:
        return value.isoformat(timespec="seconds") if value else None

    if as_json:
        for r in records:
            times = {f: iso(getattr(r, f)) for f in ("created_at", "expires_at", "revoked_at")}
            click.echo(json.dumps({"id": r.id, "name": r.name, "prefix": r.prefix, **times}))
        return
    rows: list[tuple[str, ...]] = [("ID", "NAME", "PREFIX", "CREATED", "EXPIRES", "REVOKED")]
    for r in records:
        shown = (iso(t) or "-" for t in (r.created_at, r.expires_at, r.revoked_at))
        rows.append((str(r.id), r.name, r.prefix, *shown))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


@keys_group.command("revoke")
@click.argument("key_id", type=int)
def keys_revoke(key_id: int) -> None:
    """Revoke key KEY_ID; every instance refuses it within 5 seconds (D13)."""
    now = datetime.now(UTC)
    revoked = _with_store(_settings(), lambda store: keys.revoke(store, key_id, now=now))
    if not revoked:
        raise click.ClickException(f"no active key has id {key_id}")
    click.echo(f"Revoked API key {key_id}.")


@main.group("db")
def db_group() -> None:
    """Database schema migrations."""


@db_group.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration (safe to run again)."""
    settings = _settings()
    try:
        db.upgrade(settings.database_url)
    except (UnsupportedDatabaseError, db.UnreachableDatabaseError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"Database is at revision {db.head_revision()}.")


@main.command()
def openapi() -> None:
    """Print the served OpenAPI document (JSON)."""
    from petstore.docs import openapi_document

    click.echo(json.dumps(openapi_document(_settings()), indent=2))


main.add_command(pets_group)
