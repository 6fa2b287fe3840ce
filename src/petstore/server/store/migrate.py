"""Applying or checking the schema migrations of a database URL.

``PETSTORE_DATABASE_URL`` accepts ``sqlite:///relative/path.db``,
``sqlite:////absolute/path.db`` (the SQLAlchemy spelling) and
``postgresql://user:password@host:port/database`` (libpq's). The migrations are
Alembic's, in ``petstore/migrations``; they are run here with SQLAlchemy Core,
which never runs on the request path: ``petstore serve`` migrates in a child process
(``python -m petstore.server.store.migrate``), and the revisions are known from the migration files'
names, so no serving process imports Alembic or SQLAlchemy.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from petstore.server.config import UnsupportedDatabaseError, is_postgres, sqlite_path

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Engine

_MIGRATIONS = Path(__file__).with_name("migrations")
_VERSIONS = _MIGRATIONS / "versions"


class UnreachableDatabaseError(RuntimeError):
    """Raised when migrating fails on the database's side: it does not answer,
    refuses the connection, or the file cannot be opened or written."""


def sqlalchemy_url(url: str) -> str:
    """The URL Alembic's engine is made for, for the service's ``url``. For
    PostgreSQL only the dialect: the connections are opened by psycopg with ``url``
    itself (migrations/env.py), so every libpq URL works, a multi-host one with
    ``target_session_attrs=read-write`` too, which SQLAlchemy's URL parser refuses.

    Raises UnsupportedDatabaseError for a scheme no store implements.
    """
    path = sqlite_path(url)
    if path is not None:
        return f"sqlite:///{path}"
    if is_postgres(url):
        return "postgresql+psycopg://"
    raise UnsupportedDatabaseError(f"unsupported database URL scheme: {url.split(':', 1)[0]!r}")


def engine_for(sqlalchemy_url: str, *, libpq_url: str | None) -> Engine:
    """A SQLAlchemy engine without a pool for the migrations: on PostgreSQL its
    connections are psycopg's, opened with the service's own ``libpq_url`` and the
    keepalives of every PostgreSQL connection (D25: ``postgres_connections.KEEPALIVES``)."""
    from sqlalchemy import create_engine, pool

    options: dict[str, Any] = {"poolclass": pool.NullPool}
    if libpq_url is not None:
        import psycopg

        from petstore.server.store.postgres_connections import connection_options

        kwargs = connection_options(libpq_url)
        options["creator"] = lambda: psycopg.connect(libpq_url, **kwargs)
    return create_engine(sqlalchemy_url, **options)


def _alembic_config(url: str) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    if is_postgres(url):
        config.set_main_option("petstore.libpq_url", url.replace("%", "%%"))
    return config


def upgrade(url: str, *, newer_is_fine: bool = False, to: str = "head") -> None:
    """Apply every pending migration to the database at ``url`` (idempotent), or
    those up to revision ``to`` (a rolling deploy's previous release, in tests).

    A SQLite file and its folder are created when missing. With ``newer_is_fine``, a
    database already migrated by a newer release (a revision this code does not
    know) is left as it is instead of raising alembic's CommandError. Raises
    UnsupportedDatabaseError for a URL no store implements and
    UnreachableDatabaseError, with the driver's one-line reason, when the database
    cannot be reached or written (or a SQLite file's folder made, or the file is
    not a database). Plain arguments and exceptions, so it can run in a
    child process (``petstore serve`` does).
    """
    from alembic import command
    from sqlalchemy.exc import DatabaseError

    path = sqlite_path(url)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UnreachableDatabaseError(f"cannot create {path.parent}: {exc.strerror}") from None
    try:
        if newer_is_fine and _applied_revision(url) not in (None, *revisions()):
            return  # a newer release's schema, which serves this code too
        command.upgrade(_alembic_config(url), to)
    except DatabaseError as exc:  # also a file that is no SQLite database
        raise UnreachableDatabaseError(f"cannot reach the database: {exc.orig}") from None


def _applied_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at, None when it has no schema yet.
    Raises sqlalchemy's OperationalError when it cannot be reached."""
    from alembic.runtime.migration import MigrationContext

    engine = engine_for(sqlalchemy_url(url), libpq_url=url if is_postgres(url) else None)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


@functools.cache
def revisions() -> tuple[str, ...]:
    """Every schema revision this code knows, oldest first.

    A migration file is named for its revision id (``0002_idempotency_records.py``
    holds revision ``0002``, whose ``down_revision`` is ``0001``; tests pin the
    naming against Alembic's own reading), so the serving processes learn the
    revisions from the file names without importing Alembic and SQLAlchemy, which
    would weigh on the memory of every process that does (docs/performance.md).
    """
    return tuple(sorted(path.name.split("_", 1)[0] for path in _VERSIONS.glob("[0-9]*_*.py")))


def head_revision() -> str:
    """The newest migration's revision id: the schema version this code expects."""
    return revisions()[-1]


@functools.cache
def older_revisions() -> frozenset[str]:
    """Every revision this code knows except the newest: a schema at one of these
    lacks something this code uses."""
    return frozenset(revisions()[:-1])


def schema_is_usable(revision: str | None) -> bool:
    """Whether this code can run on a schema at ``revision``: the newest revision it
    knows, or one it does not know, i.e. a newer one applied for the next release
    during a rolling deploy (migrations are expand/contract: a new schema still
    serves the code before it)."""
    return revision is not None and revision not in older_revisions()


def _upgrade_from_environment() -> int:
    """``python -m petstore.server.store.migrate``: :func:`upgrade` the database named by
    ``PETSTORE_DATABASE_URL``, accepting a newer schema, as ``petstore serve`` runs it
    in a child process. Exit status 0 when done; 1, with the reason as one line on
    stderr, for an unsupported URL or an unreachable database; any other failure
    raises (a traceback, exit status 1)."""
    try:
        upgrade(os.environ["PETSTORE_DATABASE_URL"], newer_is_fine=True)
    except (UnsupportedDatabaseError, UnreachableDatabaseError) as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_upgrade_from_environment())
