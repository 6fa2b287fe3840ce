"""The PostgreSQL store: plain SQL over psycopg 3 async and one bounded connection pool.

Reads are single autocommit statements. Creates that arrive while an insert
transaction is in progress are grouped into the next transaction on one connection
(group commit), and each caller is answered only after the commit that holds its row
(interface: Add an animal; issue: a 201 means durably committed).

Every wait is bounded by ``timeout``: for a pooled connection, for a new connection
(``connect_timeout``) and for each statement (``statement_timeout``, which also
bounds the wait for the id-order lock). A database that cannot be reached within it
raises ``errors.Unavailable`` (503, D10); the pool checks each connection before
lending it and reconnects by itself when the database is back.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, LiteralString

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from petstore import errors
from petstore.schemas import NewPet, Pet, PetStatus
from petstore.store import ApiKey, ApiKeyRecord

#: Creates committed together at most, so one transaction stays short.
MAX_BATCH = 256
#: The advisory lock that orders id assignment by commit (D9): b"petstore" as int64.
ID_ORDER_LOCK = int.from_bytes(b"petstore", "big")

_PET_COLUMNS = "id, name, category_id, status"
_KEY_COLUMNS = "id, name, prefix, created_at, expires_at, revoked_at"

_Connection = psycopg.AsyncConnection[TupleRow]
_Pending = tuple[NewPet, asyncio.Future[Pet]]


@contextmanager
def _reachable() -> Iterator[None]:
    """Turn driver and pool errors that mean "database not usable now" into 503 (D10);
    a missing table (a database not migrated, or damaged) is one too, as on SQLite."""
    try:
        yield
    except (psycopg.OperationalError, psycopg.errors.UndefinedTable, PoolTimeout) as exc:
        raise errors.Unavailable("the database is unavailable; retry shortly") from exc


def _pet(row: tuple[Any, ...]) -> Pet:
    return Pet(id=row[0], name=row[1], category_id=row[2], status=PetStatus(row[3]))


def _api_key(row: tuple[Any, ...]) -> ApiKey:
    return ApiKey(row[0], row[1], row[2], row[3], row[4], row[5])


class PostgresStore:
    """:class:`petstore.store.Store` over one PostgreSQL database (created by the
    migrations). Build it with :meth:`open`; use it from one event loop."""

    def __init__(self, pool: AsyncConnectionPool[_Connection]) -> None:
        self._pool = pool
        self._queue: asyncio.Queue[_Pending | None] | None = None
        self._batcher: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod  # ASYNC109: ``timeout`` bounds the store's every wait, not this call.
    async def open(cls, url: str, *, pool_size: int = 10, timeout: float = 5.0) -> PostgresStore:  # noqa: ASYNC109
        """Connect to the ``postgresql://`` ``url`` with a pool of 1 to ``pool_size``
        connections (an idle instance holds one; the pool grows under load and shrinks
        when idle); ``timeout`` (seconds) bounds every wait for the database.

        Raises ``errors.Unavailable`` promptly when the database cannot be reached
        (one probe connection surfaces refused connections, unknown databases and
        bad credentials at once, the cause chained), instead of retrying until a
        request comes.
        """
        statement_ms = str(math.ceil(timeout * 1000))

        async def configure(conn: _Connection) -> None:
            # UTC: timestamps come back alike whatever the server's zone.
            await conn.execute(
                "SELECT set_config('TimeZone', 'UTC', false), "
                "set_config('statement_timeout', %s, false)",
                (statement_ms,),
            )

        # libpq counts connect_timeout in whole seconds, at least 2.
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": max(2, math.ceil(timeout))}
        with _reachable():
            probe = await psycopg.AsyncConnection.connect(url, **kwargs)
            await probe.close()
        pool: AsyncConnectionPool[_Connection] = AsyncConnectionPool(
            url,
            kwargs=kwargs,
            min_size=1,
            max_size=pool_size,
            timeout=timeout,
            configure=configure,
            check=AsyncConnectionPool.check_connection,
            open=False,
            name="petstore",
        )
        try:
            with _reachable():
                await pool.open(wait=True, timeout=timeout)
        except BaseException:
            await pool.close()
            raise
        return cls(pool)

    async def _fetch(self, sql: LiteralString, params: tuple[Any, ...] = ()) -> list[TupleRow]:
        with _reachable():
            async with self._pool.connection() as conn:
                cursor = await conn.execute(sql, params)
                return await cursor.fetchall()

    # Pets ---------------------------------------------------------------------------

    async def create_pet(self, new_pet: NewPet) -> Pet:
        if self._closed:
            raise errors.Unavailable("the store is closing; retry shortly")
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._batcher = asyncio.create_task(self._commit_batches(self._queue))
        future: asyncio.Future[Pet] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((new_pet, future))
        return await future

    async def _commit_batches(self, queue: asyncio.Queue[_Pending | None]) -> None:
        """Commit queued creates in batches until ``close`` queues None."""
        stopping = False
        while not stopping:
            batch: list[_Pending] = []
            item = await queue.get()
            while item is not None:
                batch.append(item)
                if len(batch) == MAX_BATCH or queue.empty():
                    break
                item = queue.get_nowait()
            stopping = item is None
            if not batch:
                continue
            try:
                pets = await self._insert_pets([new for new, _ in batch])
            except Exception as exc:  # every waiter learns why its create failed
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
            else:
                for (_, future), pet in zip(batch, pets, strict=True):
                    if not future.done():
                        future.set_result(pet)

    async def _insert_pets(self, new_pets: list[NewPet]) -> list[Pet]:
        """Insert ``new_pets`` in one transaction; their ids in order (D5).

        A sequence hands out ids when rows are inserted, not when they commit, so
        without care id 5 could commit after id 6, and a client paging with
        ``id > last_id`` would already be past it (D9: none skipped). The
        transaction-scoped advisory lock :data:`ID_ORDER_LOCK`, taken before any id
        is drawn and released only by the commit, serialises insert transactions
        across every instance sharing the database, so ids become visible in
        ascending order. This holds for inserts made through this store with the
        identity's default ``CACHE 1``; rows inserted by other means skip the lock.
        """
        with _reachable():
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (ID_ORDER_LOCK,))
                async with conn.cursor() as cursor:
                    await cursor.executemany(
                        "INSERT INTO pets (name, category_id, status) VALUES (%s, %s, %s) "
                        "RETURNING id",
                        [(new.name, new.category_id, new.status.value) for new in new_pets],
                        returning=True,
                    )
                    ids = []
                    async for result in cursor.results():
                        row = await result.fetchone()
                        assert row is not None
                        ids.append(int(row[0]))
        return [
            Pet(pet_id, new.name, new.category_id, new.status)
            for pet_id, new in zip(ids, new_pets, strict=True)
        ]

    async def list_pets(self, *, status: PetStatus | None, after_id: int, limit: int) -> list[Pet]:
        if status is None:
            rows = await self._fetch(
                f"SELECT {_PET_COLUMNS} FROM pets WHERE id > %s ORDER BY id LIMIT %s",  # noqa: S608
                (after_id, limit),
            )
        else:
            rows = await self._fetch(
                f"SELECT {_PET_COLUMNS} FROM pets WHERE status = %s AND id > %s "  # noqa: S608
                "ORDER BY id LIMIT %s",
                (status.value, after_id, limit),
            )
        return [_pet(row) for row in rows]

    async def get_pet(self, pet_id: int) -> Pet | None:
        rows = await self._fetch(
            f"SELECT {_PET_COLUMNS} FROM pets WHERE id = %s",  # noqa: S608
            (pet_id,),
        )
        return _pet(rows[0]) if rows else None

    # API keys ----------------------------------------------------------------------

    async def create_api_key(
        self,
        *,
        name: str,
        prefix: str,
        key_hash: str,
        created_at: datetime,
        expires_at: datetime | None,
    ) -> ApiKey:
        rows = await self._fetch(
            "INSERT INTO api_keys (name, prefix, key_hash, created_at, expires_at) "
            "VALUES (%s, %s, %s, %s, %s) "
            "RETURNING id, name, prefix, created_at, expires_at, revoked_at",
            (name, prefix, key_hash, created_at, expires_at),
        )
        return _api_key(rows[0])

    async def list_api_keys(self) -> list[ApiKey]:
        rows = await self._fetch(f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY id")  # noqa: S608
        return [_api_key(row) for row in rows]

    async def revoke_api_key(self, key_id: int, *, at: datetime) -> bool:
        rows = await self._fetch(
            "UPDATE api_keys SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL RETURNING id",
            (at, key_id),
        )
        return bool(rows)

    async def find_api_keys(self, prefix: str) -> list[ApiKeyRecord]:
        rows = await self._fetch(
            "SELECT id, key_hash, expires_at, revoked_at FROM api_keys WHERE prefix = %s",
            (prefix,),
        )
        return [ApiKeyRecord(row[0], row[1], row[2], row[3]) for row in rows]

    async def count_active_api_keys(self, *, now: datetime) -> int:
        rows = await self._fetch(
            "SELECT count(*) FROM api_keys WHERE revoked_at IS NULL "
            "AND (expires_at IS NULL OR expires_at > %s)",
            (now,),
        )
        return int(rows[0][0])

    async def schema_revision(self) -> str | None:
        (exists,) = (await self._fetch("SELECT to_regclass('alembic_version') IS NOT NULL"))[0]
        if not exists:
            return None
        rows = await self._fetch("SELECT version_num FROM alembic_version")
        return str(rows[0][0]) if rows else None

    async def close(self) -> None:
        """Commit the creates already queued, then close every connection."""
        self._closed = True
        if self._queue is not None and self._batcher is not None:
            self._queue.put_nowait(None)
            await self._batcher
        await self._pool.close()
