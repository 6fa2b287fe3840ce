"""What the ``petstore`` commands that work on the database share: the settings,
read once with a usage error for a bad one, and a store to run work against, the
schema migrated first where that is the rule."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from petstore.server import errors
from petstore.server.config import Settings, SettingsError, UnsupportedDatabaseError, load_settings
from petstore.server.store import SchemaOutOfDateError, Store, open_store
from petstore.server.store.migrate import UnreachableDatabaseError, upgrade
from petstore.text import printable

T = TypeVar("T")


def settings_or_usage_error(**overrides: object) -> Settings:
    """The settings (:func:`load_settings`), ``overrides`` that are not None winning:
    the one place a ``petstore`` command reads them. Raises :class:`BadSettings`
    (exit code 2) for an invalid one."""
    try:
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as exc:
        raise BadSettings(str(exc)) from None


class BadSettings(click.ClickException):
    """Invalid settings: each problem on a line of its own, ``Error: PETSTORE_PORT:
    ...``, naming its variable; exit code 2, as for bad usage, without the usage
    text (the command line was right)."""

    exit_code = 2

    def format_message(self) -> str:
        return "\nError: ".join(self.message.splitlines())


def with_store(
    settings: Settings,
    work: Callable[[Store], Awaitable[T]],
    *,
    migrate: bool = False,
    migrate_apart: bool = False,
) -> T:
    """Run ``work`` against the configured store. An embedded SQLite database is always
    migrated first; another backend only when ``migrate`` is set. With
    ``migrate_apart``, the migrations run in a child process (:func:`upgrade_apart`)."""

    async def run() -> T:
        if migrate or settings.sqlite_path is not None:
            if migrate_apart:
                upgrade_apart(settings.database_url)
            else:
                upgrade(settings.database_url, newer_is_fine=True)
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
        UnreachableDatabaseError,
        errors.PetstoreError,
    ) as exc:  # a database server's words among them
        raise click.ClickException(printable(str(exc))) from None


def upgrade_apart(url: str) -> None:
    """``upgrade(url, newer_is_fine=True)`` in a child interpreter (``python -m
    petstore.server.store.migrate``). ``petstore serve`` migrates this way so that Alembic and
    SQLAlchemy are never loaded into the process granian forks its workers
    from, nor, therefore, into any worker (docs/performance.md). The URL goes by
    environment, not argument, so that no password shows in the process list.

    Raises ClickException with the child's error output when it fails.
    """
    child = subprocess.run(
        [sys.executable, "-m", "petstore.server.store.migrate"],
        env={**os.environ, "PETSTORE_DATABASE_URL": url},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        raise click.ClickException(child.stderr.strip() or f"migrating exited {child.returncode}")
