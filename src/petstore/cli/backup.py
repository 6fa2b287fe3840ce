"""``petstore db backup PATH`` (:func:`db_backup`): an online copy of the embedded
SQLite database (D28, the single-host deployment), through SQLite's backup API
(``sqlite3.Connection.backup``, what the ``sqlite3`` tool's ``.backup`` runs), opened
the way the service opens its file. The copy is one consistent snapshot, commits
still in the ``-wal`` file included, and the service goes on reading and writing
meanwhile (docs/operations/recover.md section 8).

The copy is written next to ``PATH`` under a temporary name, checked (``PRAGMA
integrity_check``), flushed to disk and only then renamed to ``PATH``: a failed or
interrupted backup never leaves a partial file under the name an operator restores
from. An existing ``PATH`` is refused, as ``VACUUM INTO`` refuses it.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

import click

from petstore.cli.store import settings_or_usage_error
from petstore.server.store.sqlite_connections import connect

#: Pages copied per step: between steps the source is unlocked, so that the
#: service's writers never wait long on the copy.
PAGES_PER_STEP = 1024


class BackupError(Exception):
    """The backup could not be made; the message says why."""


def backup(database: Path, target: Path) -> int:
    """Copy the SQLite database at ``database`` into the new file ``target``; returns
    the number of animals in the copy. Raises BackupError when ``database`` is
    missing, ``target`` exists or its folder does not, or the copy fails its integrity
    check (the partial copy removed)."""
    if not database.is_file():
        raise BackupError(f"no database at {database}")
    if target.exists():
        raise BackupError(f"{target} already exists: choose a new name")
    if not target.parent.is_dir():
        raise BackupError(f"no such folder: {target.parent}")
    partial = target.with_name(f".{target.name}.partial")
    try:
        with (
            closing(connect(database, readonly=True)) as source,
            closing(sqlite3.connect(partial)) as copy,
        ):
            source.backup(copy, pages=PAGES_PER_STEP)
            checked = copy.execute("PRAGMA integrity_check").fetchall()
            if checked != [("ok",)]:
                raise BackupError(f"the copy failed its integrity check: {checked}")
            (pets,) = copy.execute("SELECT count(*) FROM pets").fetchone()
        with partial.open("rb") as written:
            os.fsync(written.fileno())
        partial.rename(target)
        _sync_folder(target.parent)
    except sqlite3.Error as exc:
        raise BackupError(f"backup of {database} failed: {exc}") from None
    finally:
        partial.unlink(missing_ok=True)
    return int(pets)


def _sync_folder(folder: Path) -> None:
    """fsync ``folder``, so that the rename into it survives a crash."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@click.command("backup")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def db_backup(path: Path) -> None:
    """Copy the embedded SQLite database to the new file PATH while the service runs.

    One consistent snapshot through SQLite's online backup (what the sqlite3 tool's
    .backup makes), checked with PRAGMA integrity_check before it is named PATH.
    Refuses an existing PATH. PostgreSQL is backed up with pgBackRest
    (docs/operations/recover.md section 8).
    """
    settings = settings_or_usage_error()
    if settings.sqlite_path is None:
        raise click.UsageError(
            "petstore db backup copies an embedded SQLite database; back PostgreSQL up "
            "with pgBackRest (docs/operations/recover.md section 8)"
        )
    try:
        pets = backup(settings.sqlite_path, path)
    except BackupError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"Backed up {settings.sqlite_path} to {path}: {pets} animals, integrity ok.")
