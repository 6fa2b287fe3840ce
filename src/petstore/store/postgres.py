"""The PostgreSQL store: plain SQL over psycopg 3 async and one bounded connection pool.

Reads are single autocommit statements; getPets that arrive while one is in progress
share the next query, and listPets the next batch of pages (one query per status
filter, each page read once). Creates that arrive while an insert transaction is in
progress are grouped into the next transaction on one connection (group commit; those
without an Idempotency-Key in one statement), and each caller is answered only after
the commit that holds its row (interface: Add an animal; issue: a 201 means durably
committed).

Every wait is bounded by ``timeout``: for a pooled connection, for a new connection
(``connect_timeout``) and for each statement (``statement_timeout``, which also
bounds the wait for the id-order lock). A database that cannot be reached within it
raises ``errors.Unavailable`` (503, D10); the pool reconnects by itself when the
database is back. The pool lends connections untested (a test is a round trip on
every request); a statement that finds its connection dead has the pool test and
replace its idle ones, and a read is then run once more.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from typing import Any, LiteralString

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from petstore import errors
from petstore.batch import Batcher
from petstore.schemas import NewPet, Pet, PetStatus, encode, pet_from_row
from petstore.store import ApiKey, ApiKeyRecord, IdempotencyClaim, IdempotencyRecord, sql

#: The advisory lock that orders id assignment by commit (D9): b"petstore" as int64.
ID_ORDER_LOCK = int.from_bytes(b"petstore", "big")

# The shared statements (store.sql), adapted to psycopg's %s once, here.
_INSERT_PET = sql.postgres(sql.INSERT_PET + " RETURNING id")
_DELETE_EXPIRED_CLAIM = sql.postgres(sql.DELETE_EXPIRED_CLAIM)
_INSERT_CLAIM = sql.postgres(sql.INSERT_CLAIM)
_SELECT_CLAIM = sql.postgres(sql.SELECT_CLAIM)
_FIND_IDEMPOTENCY_RECORD = sql.postgres(sql.FIND_IDEMPOTENCY_RECORD)
_PURGE_IDEMPOTENCY_RECORDS = sql.postgres(sql.PURGE_IDEMPOTENCY_RECORDS)
_INSERT_API_KEY = sql.postgres(sql.INSERT_API_KEY)
_LIST_API_KEYS = sql.postgres(sql.LIST_API_KEYS)
_REVOKE_API_KEY = sql.postgres(sql.REVOKE_API_KEY)
_FIND_API_KEYS = sql.postgres(sql.FIND_API_KEYS)
_COUNT_ACTIVE_API_KEYS = sql.postgres(sql.COUNT_ACTIVE_API_KEYS)
_SCHEMA_REVISION = sql.postgres(sql.SCHEMA_REVISION)

#: Many animals with one statement: names, category ids, statuses as arrays.
_INSERT_PETS = (
    "INSERT INTO pets (name, category_id, status) "  # noqa: S608
    "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[]) "
    f"RETURNING {sql.PET_COLUMNS}"
)
#: The animals whose ids are in an array.
_GET_PETS = f"SELECT {sql.PET_COLUMNS} FROM pets WHERE id = ANY(%s)"  # noqa: S608
#: Several keyset pages in one query (:meth:`PostgresStore._list_status_pages`): each
#: row is the page's number (from 1) and an animal, pages in order, ids ascending.
_LIST_PAGES = (
    "SELECT page.n, pet.* FROM unnest(%s::bigint[], %s::int[]) "  # noqa: S608
    "WITH ORDINALITY AS page(after_id, size, n) CROSS JOIN LATERAL ("
    f"SELECT {sql.PET_COLUMNS} FROM pets WHERE id > page.after_id "
    "ORDER BY id LIMIT page.size) AS pet ORDER BY page.n, pet.id"
)
#: The same, of one status.
_LIST_STATUS_PAGES = _LIST_PAGES.replace(
    "WHERE id > page.after_id", "WHERE status = %s AND id > page.after_id"
)

_Connection = psycopg.AsyncConnection[TupleRow]
_Create = tuple[NewPet, IdempotencyClaim | None]
_Page = tuple[PetStatus | None, int, int]


class _ClaimTaken(Exception):
    """Rolls a create back to its savepoint: its Idempotency-Key is already stored."""


class _ConnectionLost(psycopg.OperationalError):
    """A statement found its pooled connection dead: the server restarted, or something
    between us and it cut the connection while it sat in the pool."""


@contextmanager
def _reachable() -> Iterator[None]:
    """Turn driver and pool errors that mean "database not usable now" into 503 (D10);
    a missing table (a database not migrated, or damaged) is one too, as on SQLite."""
    try:
        yield
    except (psycopg.OperationalError, psycopg.errors.UndefinedTable, PoolTimeout) as exc:
        raise errors.Unavailable("the database is unavailable; retry shortly") from exc


async def _insert_pet_rows(conn: _Connection, news: list[NewPet]) -> list[Pet]:
    """Insert ``news`` with one statement; their animals, in order.

    PostgreSQL does not promise that ``RETURNING`` lists the rows in the order of the
    ``SELECT`` that fed them, so each row comes back with its content and is matched
    to a create of the same content; equal creates take their ids in ascending order.
    """
    cursor = await conn.execute(
        _INSERT_PETS,
        (
            [new.name for new in news],
            [new.category_id for new in news],
            [new.status.value for new in news],
        ),
    )
    ids: dict[tuple[Any, ...], list[int]] = {}  # content -> ids, descending
    for pet_id, *content in sorted(await cursor.fetchall(), reverse=True):
        ids.setdefault(tuple(content), []).append(pet_id)
    pets = []
    for new in news:
        pet_id = ids[new.name, new.category_id, new.status.value].pop()
        pets.append(Pet(pet_id, new.name, new.category_id, new.status))
    return pets


def _idempotency_record(row: tuple[Any, ...]) -> IdempotencyRecord:
    return IdempotencyRecord(row[0], row[1], row[2], row[3], row[4].encode(), row[5])


def _api_key(row: tuple[Any, ...]) -> ApiKey:
    return ApiKey(row[0], row[1], row[2], row[3], row[4], row[5])


class PostgresStore:
    """:class:`petstore.store.Store` over one PostgreSQL database (created by the
    migrations). Build it with :meth:`open`; use it from one event loop."""

    full_pages_are_final = False

    def __init__(self, pool: AsyncConnectionPool[_Connection]) -> None:
        self._pool = pool
        self._creates = Batcher(self._insert_pets)
        self._pet_reads = Batcher(self._get_pets)
        self._page_reads = Batcher(self._list_pages)

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

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[_Connection]:
        """A connection from the pool, lent untested: testing it first is a round trip
        on every request (getPet in process: 2,530 -> 3,800 a second without,
        docs/performance.md). One that turns out dead in use raises _ConnectionLost,
        after the pool has tested its idle connections and replaced the dead ones, so
        that one request, not one per idle connection, meets a server restart."""
        async with self._pool.connection() as conn:
            try:
                yield conn
            except psycopg.OperationalError as exc:
                if not conn.broken:
                    raise
                await self._pool.check()
                raise _ConnectionLost(str(exc)) from exc

    async def _read(self, sql: LiteralString, params: tuple[Any, ...] = ()) -> list[TupleRow]:
        """The rows of one SELECT. One that met a dead connection is run once more, on
        another: a read changes nothing, so running it twice is safe."""
        with _reachable():
            try:
                return await self._execute(sql, params)
            except _ConnectionLost:
                return await self._execute(sql, params)

    async def _write(self, sql: LiteralString, params: tuple[Any, ...]) -> list[TupleRow]:
        """The rows (``RETURNING``) of one autocommit write. Not run again when its
        connection died: its commit may have landed first."""
        with _reachable():
            return await self._execute(sql, params)

    async def _execute(self, sql: LiteralString, params: tuple[Any, ...]) -> list[TupleRow]:
        async with self._connection() as conn:
            cursor = await conn.execute(sql, params)
            return await cursor.fetchall()

    # Pets ---------------------------------------------------------------------------

    async def create_pet(
        self, new_pet: NewPet, *, claim: IdempotencyClaim | None = None
    ) -> Pet | IdempotencyRecord:
        return await self._creates.submit((new_pet, claim))

    async def _insert_pets(self, creates: list[_Create]) -> list[Pet | IdempotencyRecord]:
        """Insert the batch in one transaction; ids in order (D5), claims kept (D16).

        A sequence hands out ids when rows are inserted, not when they commit, so
        without care id 5 could commit after id 6, and a client paging with
        ``id > last_id`` would already be past it (D9: none skipped). The
        transaction-scoped advisory lock :data:`ID_ORDER_LOCK`, taken before any id
        is drawn and released only by the commit, serialises insert transactions
        across every instance sharing the database, so ids become visible in
        ascending order. This holds for inserts made through this store with the
        identity's default ``CACHE 1``; rows inserted by other means skip the lock.

        The creates without an Idempotency-Key go in first, with one statement (one
        round trip for the batch, not one each); each with a key then gets its own
        savepoint.
        """
        with _reachable():
            async with self._connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (ID_ORDER_LOCK,))
                plain = [new for new, claim in creates if claim is None]
                inserted = iter(await _insert_pet_rows(conn, plain) if plain else ())
                return [
                    next(inserted)
                    if claim is None
                    else await self._insert_claimed(conn, new, claim)
                    for new, claim in creates
                ]

    @staticmethod
    async def _insert_claimed(
        conn: _Connection, new: NewPet, claim: IdempotencyClaim
    ) -> Pet | IdempotencyRecord:
        """One create with an Idempotency-Key, inside a savepoint that is rolled back
        (and the existing record returned) when the key is already taken (D16)."""
        try:
            async with conn.transaction():
                await conn.execute(
                    _DELETE_EXPIRED_CLAIM, (claim.api_key_id, claim.key, claim.expired_before)
                )
                cursor = await conn.execute(
                    _INSERT_PET, (new.name, new.category_id, new.status.value)
                )
                row = await cursor.fetchone()
                assert row is not None  # INSERT ... RETURNING: one row
                pet = Pet(row[0], new.name, new.category_id, new.status)
                cursor = await conn.execute(
                    _INSERT_CLAIM,
                    (
                        claim.api_key_id,
                        claim.key,
                        claim.fingerprint,
                        pet.id,
                        encode(pet).decode(),
                        claim.created_at,
                    ),
                )
                if await cursor.fetchone() is None:
                    raise _ClaimTaken
                return pet
        except _ClaimTaken:
            cursor = await conn.execute(_SELECT_CLAIM, (claim.api_key_id, claim.key))
            row = await cursor.fetchone()
            assert row is not None
            return _idempotency_record(row)

    async def find_idempotency_record(
        self, api_key_id: int, key: str, *, created_after: datetime
    ) -> IdempotencyRecord | None:
        rows = await self._read(_FIND_IDEMPOTENCY_RECORD, (api_key_id, key, created_after))
        return _idempotency_record(rows[0]) if rows else None

    async def purge_idempotency_records(self, *, created_before: datetime) -> int:
        with _reachable():
            async with self._connection() as conn:
                cursor = await conn.execute(_PURGE_IDEMPOTENCY_RECORDS, (created_before,))
                return cursor.rowcount

    async def list_pets(self, *, status: PetStatus | None, after_id: int, limit: int) -> list[Pet]:
        return list(await self._page_reads.submit((status, after_id, limit)))

    async def _list_pages(self, pages: list[_Page]) -> list[list[Pet]]:
        """Each of ``pages`` (status, after_id, limit), in order. listPets that arrive
        while a batch is in progress go together into the next (:class:`Batcher`):
        the same page asked several times is read once (clients polling the first
        page), and the different pages of one status filter are read with one query
        (clients walking the store by ``rel="next"``, each at its own cursor), the
        filters at once on as many connections. Each read starts after its request
        arrived, as in :meth:`_get_pets`."""
        distinct = list(dict.fromkeys(pages))
        by_status: dict[PetStatus | None, list[_Page]] = {}
        for page in distinct:
            by_status.setdefault(page[0], []).append(page)
        read = await asyncio.gather(
            *(self._list_status_pages(status, group) for status, group in by_status.items())
        )
        found = {
            page: pets
            for group, group_pets in zip(by_status.values(), read, strict=True)
            for page, pets in zip(group, group_pets, strict=True)
        }
        return [found[page] for page in pages]

    async def _list_status_pages(
        self, status: PetStatus | None, pages: list[_Page]
    ) -> list[list[Pet]]:
        """The animals of ``pages``, pages of the filter ``status``, in one query: each
        page a keyset scan by id (``id > after_id``, ascending, at most ``limit``),
        side by side in a LATERAL join. The filter is a parameter of the whole query,
        not of each page, so PostgreSQL plans it with the value in hand and picks the
        ``(status, id)`` index for a rare status."""
        after_ids = [after_id for _, after_id, _ in pages]
        limits = [limit for _, _, limit in pages]
        if status is None:
            rows = await self._read(_LIST_PAGES, (after_ids, limits))
        else:
            rows = await self._read(_LIST_STATUS_PAGES, (after_ids, limits, status.value))
        found: list[list[Pet]] = [[] for _ in pages]
        for row in rows:
            found[row[0] - 1].append(pet_from_row(row[1:]))
        return found

    async def get_pet(self, pet_id: int) -> Pet | None:
        return await self._pet_reads.submit(pet_id)

    async def _get_pets(self, pet_ids: list[int]) -> list[Pet | None]:
        """The animals of ``pet_ids``, in order, None where there is none, in one query.

        getPets that arrive while one such query is in progress go together into the
        next (:class:`Batcher`): one round trip for many, where the round trip is
        most of a getPet's cost (docs/performance.md). Each still reads after its
        request arrived, so it sees every animal whose 201 was sent before.
        """
        rows = await self._read(_GET_PETS, (pet_ids,))
        found = {row[0]: pet_from_row(row) for row in rows}
        return [found.get(pet_id) for pet_id in pet_ids]

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
        rows = await self._write(_INSERT_API_KEY, (name, prefix, key_hash, created_at, expires_at))
        return _api_key(rows[0])

    async def list_api_keys(self) -> list[ApiKey]:
        rows = await self._read(_LIST_API_KEYS)
        return [_api_key(row) for row in rows]

    async def revoke_api_key(self, key_id: int, *, at: datetime) -> bool:
        rows = await self._write(_REVOKE_API_KEY, (at, key_id))
        return bool(rows)

    async def find_api_keys(self, prefix: str) -> list[ApiKeyRecord]:
        rows = await self._read(_FIND_API_KEYS, (prefix,))
        return [ApiKeyRecord(row[0], row[1], row[2], row[3]) for row in rows]

    async def count_active_api_keys(self, *, now: datetime) -> int:
        rows = await self._read(_COUNT_ACTIVE_API_KEYS, (now,))
        return int(rows[0][0])

    async def schema_revision(self) -> str | None:
        (exists,) = (await self._read("SELECT to_regclass('alembic_version') IS NOT NULL"))[0]
        if not exists:
            return None
        rows = await self._read(_SCHEMA_REVISION)
        return str(rows[0][0]) if rows else None

    def pool_stats(self) -> dict[str, int]:
        stats = self._pool.get_stats()
        return {
            "size": stats.get("pool_size", 0),
            "available": stats.get("pool_available", 0),
            "requests_waiting": stats.get("requests_waiting", 0),
            "writes_waiting": self._creates.waiting,
        }

    async def close(self) -> None:
        """Commit the creates already queued, then close every connection."""
        await self._creates.close()
        await self._pet_reads.close()
        await self._page_reads.close()
        await self._pool.close()
