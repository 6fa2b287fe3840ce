"""``petstore db backup PATH`` (:func:`db_backup`): an online copy of the embedded
SQLite database (D28, the single-host deployment), through SQLite's backup API
(``sqlite3.Connection.backup``, what the ``sqlite3`` tool's ``.backup`` runs), opened
the way the service opens its file. The copy is one consistent snapshot, commits
still in the ``-wal`` file included, and the service goes on reading and writing
meanwhile (docs/operations/recover.md, Backups and restore).

Nothing already in PATH's folder is followed, reused or replaced, so a folder other
users can write to (a shared ``/backups``, ``/tmp``) cannot turn a backup into a
write to a file of their choosing:

- the copy is made in a new folder next to PATH (``.NAME.XXXXXXXX.partial``, a random
  name made by ``mkdir``, which refuses anything already there, mode 0700), in a file
  this command creates with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and mode 0600 whatever
  the umask. SQLite opens that file by name (it resolves symbolic links in a path
  before it opens it) and makes its ``-journal``, ``-wal`` and ``-shm`` files beside
  it, under names anyone could derive: in a folder of its own, only its owner can put
  anything there;
- the copy is checked (``PRAGMA integrity_check``), flushed to disk and only then
  given the name PATH by a hard link (``link(2)``), which fails rather than replace
  whatever is at PATH. A PATH that exists, also one made while the copy ran, and also
  a symbolic link, is refused and left as it was, as ``VACUUM INTO`` refuses it;
- the folder and everything in it are removed whatever happens, so a failed or
  interrupted backup leaves nothing under the name an operator restores from.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

import click

from petstore.cli.store import settings_or_usage_error
from petstore.server.store.sqlite_connections import connect
from petstore.text import printable

#: Pages copied per step: between steps the source is unlocked, so that the
#: service's writers never wait long on the copy.
PAGES_PER_STEP = 1024
#: The mode of the copy: the database holds the API keys' hashes and every animal,
#: readable by its owner only, whatever the umask.
COPY_MODE = 0o600
#: link(2)'s errors of a file system that has no hard links (FAT, some network and
#: FUSE file systems) or that cannot link across the two names.
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV})


class BackupError(Exception):
    """The backup could not be made; the message says why."""


def backup(database: Path, target: Path) -> int:
    """Copy the SQLite database at ``database`` into the new file ``target`` (mode
    0600); returns the number of animals in the copy. Raises BackupError when
    ``database`` is missing, anything is at ``target`` (a symbolic link too) or
    appears there during the copy, ``target``'s folder does not exist or cannot be
    written, or the copy fails its integrity check; nothing is left behind then."""
    if not database.is_file():
        raise BackupError(f"no database at {database}")
    if os.path.lexists(target):
        raise BackupError(_taken(target))
    if not target.parent.is_dir():
        raise BackupError(f"no such folder: {target.parent}")
    try:
        workspace = Path(
            tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
        )
    except OSError as exc:
        raise BackupError(f"cannot write in {target.parent}: {exc.strerror}") from None
    try:
        copy = workspace / target.name
        os.close(os.open(copy, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, COPY_MODE))
        with (
            closing(connect(database, readonly=True)) as source,
            closing(sqlite3.connect(copy)) as copied,
        ):
            source.backup(copied, pages=PAGES_PER_STEP)
            checked = copied.execute("PRAGMA integrity_check").fetchall()
            if checked != [("ok",)]:
                raise BackupError(f"the copy failed its integrity check: {checked}")
            (pets,) = copied.execute("SELECT count(*) FROM pets").fetchone()
        _sync(copy, os.O_RDONLY | os.O_NOFOLLOW)
        place(copy, target)
        _sync(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    except sqlite3.Error as exc:
        raise BackupError(f"backup of {database} failed: {exc}") from None
    except OSError as exc:
        raise BackupError(f"backup to {target} failed: {exc.strerror}") from None
    finally:
        # The copy has its name PATH by now, or is not wanted: either way the folder
        # goes. rmtree walks it by descriptor, never following a link out of it.
        shutil.rmtree(workspace, ignore_errors=True)
    return int(pets)


def place(copy: Path, target: Path) -> None:
    """Give the file ``copy`` the further name ``target`` (a hard link, in the same
    folder's file system), never replacing anything: raises BackupError when
    ``target`` exists in any form (a file, a folder, a symbolic link, a dangling one)
    and then leaves it as it was, or when the file system has no hard links."""
    try:
        os.link(copy, target, follow_symlinks=False)
    except FileExistsError:
        raise BackupError(_taken(target)) from None
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        raise BackupError(
            f"the file system of {target.parent} cannot make hard links, by which the "
            "copy gets its name without ever replacing a file: back up to a local file "
            "system (ext4, XFS, ...) and copy the file from there"
        ) from None


def _taken(target: Path) -> str:
    return f"{target} already exists: choose a new name (nothing was overwritten)"


def _sync(path: Path, flags: int) -> None:
    """fsync the file or folder at ``path``, opened with ``flags``: the copy's bytes,
    and the folder's new name for it, survive a crash."""
    descriptor = os.open(path, flags)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@click.command("backup")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def db_backup(path: Path) -> None:
    """Copy the embedded SQLite database to the new file PATH while the service runs.

    One consistent snapshot through SQLite's online backup (what the sqlite3 tool's
    .backup makes), checked with PRAGMA integrity_check before it is named PATH,
    readable by its owner only (mode 0600). Refuses a PATH that exists, also one
    made during the copy: nothing is ever overwritten. PostgreSQL is backed up with
    pgBackRest (docs/operations/recover.md, Backups and restore).
    """
    settings = settings_or_usage_error()
    if settings.sqlite_path is None:
        raise click.UsageError(
            "petstore db backup copies an embedded SQLite database; back PostgreSQL up "
            "with pgBackRest (docs/operations/recover.md, Backups and restore)"
        )
    try:
        pets = backup(settings.sqlite_path, path)
    except BackupError as exc:
        raise click.ClickException(printable(str(exc))) from None
    click.echo(
        f"Backed up {printable(str(settings.sqlite_path))} to {printable(str(path))}: "
        f"{pets} animals, integrity ok."
    )
