"""Storage: the only package that speaks SQL.

A :class:`Store` is one database and a repository per aggregate, each written once
over the driver of :mod:`.driver`: :attr:`Store.pets` (:mod:`.pets`),
:attr:`Store.api_keys` (:mod:`.api_keys`) and :attr:`Store.idempotency_records`
(:mod:`.idempotency_records`); the store itself answers for the schema and the
connections. Writes that span a transaction go through its unit of work,
``async with store.transaction() as tx:`` (:mod:`.unit_of_work`), whose repositories
``tx.pets`` and ``tx.idempotency`` are bound to that transaction: the only way to
change a stored animal, and the one place the change signal learns of it. Each
backend (:mod:`.sqlite`, :mod:`.postgres`) is a driver and its :class:`Dialect`, the
literal SQL of every statement. :func:`create_store` picks the
backend from the database URL without connecting; :func:`open_store` also opens it.

The speed devices (:mod:`.group_commit`, :mod:`.read_grouping`, :mod:`.kept_pets`)
wrap the pets repository only, handing on what they do not change (:mod:`.decorator`);
the app composes them (``server.app``), and no backend knows of them.

**What is kept, and how stale it may be.** Answers kept in memory (kept animals, and
the kept pages of ``rules.kept_pages``) are checked against the store's change signal,
:attr:`Store.changes` (:mod:`.changes`): a change made through this store is never
answered as it was by this store's own instance, and a change made through another
instance, or outside the service (SQL, a restore, a failover), is answered as it was
for at most :data:`.changes.KEPT_SECONDS` (5 s) on any instance.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, LiteralString, NamedTuple

from petstore.server.clock import Monotonic, monotonic
from petstore.server.store.api_keys import ApiKey, ApiKeyRecord, ApiKeyRepository, ApiKeyStatements
from petstore.server.store.changes import PetChanges
from petstore.server.store.driver import Database, transactions
from petstore.server.store.idempotency_records import (
    IdempotencyRecord,
    IdempotencyRecordRepository,
    IdempotencyStatements,
)
from petstore.server.store.pets import PetRepository, PetStatements
from petstore.server.store.unit_of_work import Transactions, UnitOfWork

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = [
    "ApiKey",
    "ApiKeyRecord",
    "Dialect",
    "IdempotencyRecord",
    "PetRepository",
    "SchemaOutOfDateError",
    "Store",
    "UnitOfWork",
    "create_store",
    "open_store",
]


class SchemaOutOfDateError(RuntimeError):
    """The database's schema revision is not the one this code was built for."""


class Dialect(NamedTuple):
    """One backend's SQL: each repository's statements, the schema's, and how a
    timestamp goes in as a parameter (``to_db``: an aware datetime to what the
    driver stores)."""

    pets: PetStatements
    api_keys: ApiKeyStatements
    idempotency_records: IdempotencyStatements
    #: One row: whether the migrations' version table exists (``present``).
    schema_exists: LiteralString
    #: The applied revision (``version_num``), no row on an empty table.
    schema_revision: LiteralString
    to_db: Callable[[datetime], Any]


class Store:
    """One database (``database``, spoken in ``dialect``) and its repositories.

    Constructing a store does no I/O; :meth:`open` connects, and :meth:`close`
    releases what it holds. Every other method, and every repository's, needs the
    store open, and raises ``errors.Unavailable`` when the database cannot be
    reached (or the store is not open, or closing). Use a store from one event loop.
    ``monotonic`` is the clock of the change signal (:mod:`.changes`).
    """

    def __init__(
        self, database: Database, dialect: Dialect, *, monotonic: Monotonic = monotonic
    ) -> None:
        self.database = database
        self._dialect = dialect
        plain = PetRepository(
            database,
            sql=dialect.pets,
            changes=PetChanges(lambda: plain.version(), monotonic=monotonic),
        )
        #: The animals; ``server.app`` may put speed devices around them.
        self.pets: PetRepository = plain
        #: The change signal every kept answer is checked against.
        self.changes = plain.changes
        self.api_keys = ApiKeyRepository(database, sql=dialect.api_keys, to_db=dialect.to_db)
        self.idempotency_records = IdempotencyRecordRepository(
            database, sql=dialect.idempotency_records, to_db=dialect.to_db
        )
        self._transactions = Transactions(transactions(database), dialect, changes=self.changes)

    def transaction(self) -> AbstractAsyncContextManager[UnitOfWork]:
        """``async with store.transaction() as tx:``: the repositories bound to one
        transaction (:class:`UnitOfWork`), whose writes are committed together,
        durable, once the block ends, or rolled back when it raises (what it raised
        raised again). Once the transaction has ended, either way, the change signal
        moves (:meth:`PetChanges.changed`) if a statement that may change stored
        animals ran (:mod:`.unit_of_work`): no answer kept before is given again.
        Raises ``errors.Unavailable`` when the database cannot be used now."""
        return self._transactions()

    async def open(self) -> None:
        """Connect, then check the schema is current.

        Raises ``errors.Unavailable`` when the database cannot be reached (a SQLite
        file that cannot be opened raises ``sqlite3.Error``), and SchemaOutOfDateError
        when migrations are missing (run ``petstore db upgrade``); either way what
        was opened is closed again.
        """
        from petstore.server.store import migrate

        try:
            await self.database.open()
            found = await self.schema_revision()
            if not migrate.schema_is_usable(found):
                raise SchemaOutOfDateError(
                    f"database schema is at revision {found or 'none'}, this code needs "
                    f"{migrate.head_revision()}; run `petstore db upgrade`"
                )
        except BaseException:
            await self.close()
            raise

    async def schema_revision(self) -> str | None:
        """The applied migration revision, None on an empty database."""
        (row,) = await self.database.read(self._dialect.schema_exists)
        if not row["present"]:
            return None
        rows = await self.database.read(self._dialect.schema_revision)
        return str(rows[0]["version_num"]) if rows else None

    def pool_stats(self) -> dict[str, int]:
        """Connection pool figures by name (for metrics): ``size``, ``available``,
        ``requests_waiting`` and ``writes_waiting`` (creates queued for a commit)."""
        return {**self.database.stats(), "writes_waiting": self.pets.writes_waiting()}

    async def close(self) -> None:
        """Finish pending writes, stop the change signal and release connections;
        later calls raise ``errors.Unavailable``. Safe after a failed open, without
        one, and twice."""
        try:
            await self.pets.close()
            await self.changes.close()
        finally:
            await self.database.close()


def create_store(
    url: str,
    *,
    pool_size: int = 10,
    monotonic: Monotonic = monotonic,
    tracer: Tracer | None = None,
) -> Store:
    """The store for the database ``url``, not yet open (no connection, no thread).

    ``pool_size`` bounds the connections of a PostgreSQL store (SQLite uses one
    reader and one writer). With an OpenTelemetry ``tracer``, every statement is a
    span (D23, :mod:`.traced`). Raises ``config.UnsupportedDatabaseError`` for an
    unknown URL scheme or an unusable SQLite URL.
    """
    from petstore.server import config

    database: Database
    path = config.sqlite_path(url)
    if path is not None:
        from petstore.server.store.sqlite import SQLiteDatabase
        from petstore.server.store.sqlite_sql import DIALECT

        database, dialect = SQLiteDatabase(path), DIALECT
    elif config.is_postgres(url):
        from petstore.server.store.postgres import DIALECT, PostgresDatabase

        database, dialect = PostgresDatabase(url, size=pool_size), DIALECT
    else:
        raise config.UnsupportedDatabaseError(f"unsupported database URL: {url.split(':', 1)[0]}")
    if tracer is not None:
        from petstore.server.store.traced import TracedDatabase

        database = TracedDatabase(database, tracer)
    return Store(database, dialect, monotonic=monotonic)


async def open_store(url: str, *, pool_size: int = 10) -> Store:
    """:func:`create_store`, then :meth:`Store.open`: an open store with a current
    schema. Raises what each of them raises."""
    store = create_store(url, pool_size=pool_size)
    await store.open()
    return store
