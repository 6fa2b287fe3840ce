"""The PostgreSQL store: plain SQL over psycopg 3 async and one bounded connection pool.

Reads are single autocommit statements, grouped while one is in progress
(:meth:`PostgresStore._get_pets`, :meth:`PostgresStore._list_pages`); an animal
found is kept for 5 s (:mod:`.kept`: the bound on changes made outside the API).
Creates are grouped and committed together, without an Idempotency-Key in one
statement (:meth:`PostgresStore._insert_pets`, group commit), each caller answered
only after the commit that holds its row (interface: Add an animal; issue: a 201
means durably committed; D26: in HA, after the synchronous standby's).

Connections, their timeouts and what a dead one means: :mod:`postgres_pool`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any, LiteralString

import msgspec

from petstore.schemas import NewPet, Pet, PetStatus, pet_from_row
from petstore.server import errors
from petstore.server.store import IdempotencyClaim, IdempotencyRecord, require_current_schema, sql
from petstore.server.store.batch import CREATE_WAIT_TURNS, Batcher
from petstore.server.store.kept import (
    COLUMNS_CHUNK,
    COLUMNS_MAX_ID,
    REFRESH_SECONDS,
    KeptPets,
    PetColumns,
)
from petstore.server.store.postgres_pool import Connection, Pool, reachable
from petstore.server.store.queries import Dialect, SharedQueries, claimed_create

#: The advisory lock that orders id assignment by commit (D9): b"petstore" as int64.
ID_ORDER_LOCK = int.from_bytes(b"petstore", "big")


def _as_is(value: Any) -> Any:
    return value


#: PostgreSQL's spelling of the shared statements (``%s`` placeholders, adapted once
#: here) and timestamps (``timestamptz``, datetimes both ways).
DIALECT = Dialect(
    insert_pet=sql.postgres(sql.INSERT_PET + " RETURNING id"),
    delete_expired_claim=sql.postgres(sql.DELETE_EXPIRED_CLAIM),
    insert_claim=sql.postgres(sql.INSERT_CLAIM),
    select_claim=sql.postgres(sql.SELECT_CLAIM),
    find_idempotency_record=sql.postgres(sql.FIND_IDEMPOTENCY_RECORD),
    insert_api_key=sql.postgres(sql.INSERT_API_KEY),
    list_api_keys=sql.postgres(sql.LIST_API_KEYS),
    revoke_api_key=sql.postgres(sql.REVOKE_API_KEY),
    find_api_keys=sql.postgres(sql.FIND_API_KEYS),
    count_active_api_keys=sql.postgres(sql.COUNT_ACTIVE_API_KEYS),
    schema_exists="SELECT to_regclass('alembic_version') IS NOT NULL",
    schema_revision=sql.postgres(sql.SCHEMA_REVISION),
    to_db=_as_is,
    from_db=_as_is,
)
_PURGE_IDEMPOTENCY_RECORDS = sql.postgres(sql.PURGE_IDEMPOTENCY_RECORDS)

#: Many animals with one statement: the NewPets as one JSON array
#: (:func:`_pets_json`). One text parameter, not an array per column: psycopg dumps
#: arrays element by element in Python, twice the worker's CPU for a statement of 32
#: animals (177-198 us against 86-100 us, docs/performance.md).
_INSERT_PETS = (
    "INSERT INTO pets (name, category_id, status) "  # noqa: S608
    'SELECT name, "categoryId", status FROM json_to_recordset(%s::json) '
    'AS new_pet(name text, "categoryId" bigint, status text) '
    f"RETURNING {sql.PET_COLUMNS}"
)
#: The same as one autocommit statement that first takes the id-order lock
#: (:data:`ID_ORDER_LOCK`, its key the fourth parameter): the uncorrelated subquery is
#: an InitPlan, run by the one-time filter of the node that draws the ids (its
#: ``nextval``) before that node yields its first row, so no id is drawn before the
#: lock is held; the commit that ends the statement releases it. Always true: the
#: filter is there for its side effect. (Not ``EXISTS``, whose select list PostgreSQL
#: drops unevaluated.) Pinned by ``tests/test_store_postgres.py::
#: test_a_create_draws_its_id_only_once_it_holds_the_id_order_lock``.
_INSERT_PETS_IN_ID_ORDER = _INSERT_PETS.replace(
    " RETURNING", " WHERE (SELECT pg_advisory_xact_lock(%s) IS NULL) IS NOT NULL RETURNING"
)
#: What moves when the animals may have changed outside the API (:class:`PetColumns`):
#: the count of such changes (migration 0004), the table's identity (a restore that
#: recreates it) and the server's start (a restore of the whole cluster, a failover).
_PETS_VERSION = "SELECT changes, 'pets'::regclass::oid, pg_postmaster_start_time() FROM pet_changes"
#: The animals after an id, up to an id, in id order, at most so many.
_PETS_AFTER = f"SELECT {sql.PET_COLUMNS} FROM pets WHERE id > %s AND id <= %s ORDER BY id LIMIT %s"  # noqa: S608
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

_Create = tuple[NewPet, IdempotencyClaim | None]
_Page = tuple[PetStatus | None, int, int]


def _pets_json(news: list[NewPet]) -> str:
    """``news`` as the JSON array :data:`_INSERT_PETS` reads: each NewPet's ``name``,
    ``categoryId`` and ``status``, all three always written."""
    return msgspec.json.encode(news).decode()


def _inserted(news: list[NewPet], rows: list[Any]) -> list[Pet]:
    """The animals of ``news``, in order, from the ``RETURNING`` rows of their insert.

    PostgreSQL does not promise that ``RETURNING`` lists the rows in the order of the
    ``SELECT`` that fed them, so each row comes back with its content and is matched
    to a create of the same content; equal creates take their ids in ascending order.
    """
    ids: dict[tuple[Any, ...], list[int]] = {}  # content -> ids, descending
    for pet_id, *content in sorted(rows, reverse=True):
        ids.setdefault(tuple(content), []).append(pet_id)
    pets = []
    for new in news:
        pet_id = ids[new.name, new.category_id, new.status.value].pop()
        pets.append(Pet(pet_id, new.name, new.category_id, new.status))
    return pets


async def _insert_claimed(
    conn: Connection, new: NewPet, claim: IdempotencyClaim
) -> Pet | IdempotencyRecord:
    """Run :func:`queries.claimed_create` on ``conn`` (D16)."""
    steps = claimed_create(DIALECT, new, claim)
    statement, params = next(steps)
    while True:
        cursor = await conn.execute(statement, params)
        row = None if cursor.description is None else await cursor.fetchone()
        answer = row[0] if statement is DIALECT.insert_pet and row is not None else row
        try:
            statement, params = steps.send(answer)
        except StopIteration as done:
            result: Pet | IdempotencyRecord = done.value
            return result


class PostgresStore(SharedQueries):
    """:class:`petstore.server.store.Store` over the PostgreSQL database at the
    ``postgresql://`` ``url`` (created by the migrations), with a pool of 1 to
    ``pool_size`` connections (an idle instance holds one; the pool grows under load
    and shrinks when idle); ``timeout`` (seconds) bounds every wait for the database,
    on the client too (D25, :meth:`Pool.connection`): a grouped call waits at most
    that for its own batch, after at most that for the batch in progress when it
    arrived, so twice ``timeout`` (10 s by default, the request timeout) at worst,
    then raises ``errors.Unavailable``. Constructing it does no I/O; :meth:`open`
    connects. Use it from one event loop."""

    full_pages_are_final = True
    dialect = DIALECT

    def __init__(self, url: str, *, pool_size: int = 10, timeout: float = 5.0) -> None:
        self._pool = Pool(url, size=pool_size, timeout=timeout)
        self._creates = Batcher(self._insert_pets, wait_turns=CREATE_WAIT_TURNS)
        self._pet_reads = Batcher(self._get_pets)
        self._kept = KeptPets()
        self._columns = PetColumns()
        self._refresher: asyncio.Task[None] | None = None
        self._page_reads = Batcher(self._list_pages)

    async def open(self) -> None:
        """Open the pool (raising ``errors.Unavailable`` promptly when the database
        cannot be reached: :meth:`Pool.open`), then check the schema."""
        try:
            await self._pool.open()
            await require_current_schema(self)
        except BaseException:
            await self.close()
            raise
        self._refresher = asyncio.create_task(self._keep_up())

    async def create_pet(
        self, new_pet: NewPet, *, claim: IdempotencyClaim | None = None
    ) -> Pet | IdempotencyRecord:
        return await self._creates.submit((new_pet, claim))

    async def _insert_pets(self, creates: list[_Create]) -> list[Pet | IdempotencyRecord]:
        """Group commit (:class:`Batcher`): the creates that arrived while the last
        insert was in progress, committed together; ids in order (D5), claims kept
        (D16). A batch without an Idempotency-Key is one autocommit statement, one
        round trip instead of four (:data:`_INSERT_PETS_IN_ID_ORDER`; S4 0.36 -> 0.41
        of the baseline on a loaded machine, docs/performance.md, "Issue 28"). A
        batch with one is a transaction of four round trips and more: the creates
        without a key first, with one statement (S4 1.710, S6 1.039 by ``make
        compare``, ef2d328), then a savepoint for each with a key.

        A sequence hands out ids when rows are inserted, not when they commit, so
        without care id 5 could commit after id 6, and a client paging with
        ``id > last_id`` would already be past it (D9: none skipped). The
        transaction-scoped advisory lock :data:`ID_ORDER_LOCK`, taken before any id
        is drawn and released only by the commit, serialises insert transactions
        across every instance sharing the database, so ids become visible in
        ascending order. This holds for inserts made through this store with the
        identity's default ``CACHE 1``; rows inserted by other means skip the lock.
        """
        if all(claim is None for _, claim in creates):
            news = [new for new, _ in creates]
            rows = await self._pool.write(
                _INSERT_PETS_IN_ID_ORDER, (_pets_json(news), ID_ORDER_LOCK)
            )
            return list(_inserted(news, rows))
        with reachable:
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (ID_ORDER_LOCK,))
                plain = [new for new, claim in creates if claim is None]
                inserted: Iterator[Pet] = iter(())
                if plain:
                    cursor = await conn.execute(_INSERT_PETS, (_pets_json(plain),))
                    inserted = iter(_inserted(plain, await cursor.fetchall()))
                return [
                    next(inserted) if claim is None else await _insert_claimed(conn, new, claim)
                    for new, claim in creates
                ]

    async def purge_idempotency_records(self, *, created_before: datetime) -> int:
        with reachable:
            async with self._pool.connection() as conn:
                cursor = await conn.execute(_PURGE_IDEMPOTENCY_RECORDS, (created_before,))
                return cursor.rowcount

    async def list_pets(self, *, status: PetStatus | None, after_id: int, limit: int) -> list[Pet]:
        return list(await self._page_reads.submit((status, after_id, limit)))

    async def _list_pages(self, pages: list[_Page]) -> list[list[Pet]]:
        """Grouped listPets (:class:`Batcher`): each of ``pages`` (status, after_id,
        limit), in order, read by the batch that follows the one in progress when it
        arrived. The same page asked several times is read once (clients polling the
        first page), and the different pages of one status filter with one query
        (clients walking the store by ``rel="next"``, each at its own cursor), the
        filters at once on as many connections. Served S1 0.061 -> 0.238 and S2
        0.059 -> 0.264 of the baseline; one query per filter, S5 0.168 -> 0.328
        (d97e192, docs/performance.md). Each read starts after its request arrived,
        as in :meth:`_get_pets`."""
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
            rows = await self._pool.read(_LIST_PAGES, (after_ids, limits))
        else:
            rows = await self._pool.read(_LIST_STATUS_PAGES, (after_ids, limits, status.value))
        found: list[list[Pet]] = [[] for _ in pages]
        for row in rows:
            found[row[0] - 1].append(pet_from_row(row[1:]))
        return found

    async def get_pet(self, pet_id: int) -> Pet | None:
        """The animal ``pet_id``: held in columns (:class:`PetColumns`) or kept
        (:class:`KeptPets`) if the database said so less than 5 s ago, else read
        (:meth:`_get_pets`); None when there is none (never held or kept)."""
        pet = self._columns.get(pet_id)
        if pet is None:
            pet = self._kept.get(pet_id)
        if pet is not None:
            return pet
        return await self._pet_reads.submit(pet_id)

    async def _keep_up(self) -> None:
        """Every ``REFRESH_SECONDS``: :meth:`_follow_changes`, then read again the kept
        animals asked for since they were read that would go stale within twice that
        (:meth:`KeptPets.due`), in one query (a thousand ids each), so an animal asked
        for every second or more often is never a miss (with 10,000 animals, before
        the columns held them all, S3 0.456 -> 0.521 of the baseline;
        docs/performance.md, "Issue 28"). When the database cannot be read (D25)
        what is held goes stale instead."""
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            with contextlib.suppress(errors.Unavailable):
                await self._follow_changes()
                due = self._kept.due(within=2 * REFRESH_SECONDS)
                for start in range(0, len(due), 1000):
                    await self._get_pets(due[start : start + 1000])

    async def _follow_changes(self) -> None:
        """Ask the database whether animals changed outside the API
        (:data:`_PETS_VERSION`; :meth:`PetColumns.confirm` drops every animal held
        when they may have), then, when the columns are behind
        (:attr:`PetColumns.behind`), read the animals created since the last look into
        them, :data:`COLUMNS_CHUNK` a query: on the first look, all of them (1,000,000
        in 0.6 s, 0.5 s of it the worker's CPU, docs/performance.md). Raises
        ``errors.Unavailable`` when the database cannot be read."""
        read_at = time.monotonic()
        version = await self._pool.read(_PETS_VERSION, warm=False)
        columns = self._columns
        columns.confirm(tuple(version[0]) if version else None, read_at=read_at)
        while version and columns.behind and not columns.full:
            columns.behind = False  # a get while this reads sets it again
            rows = await self._pool.read(
                _PETS_AFTER, (columns.last_id, COLUMNS_MAX_ID, COLUMNS_CHUNK), warm=False
            )
            columns.add(rows)
            if len(rows) < COLUMNS_CHUNK:
                return  # the rest at the next look, if asked for meanwhile
            columns.behind = True

    async def _get_pets(self, pet_ids: list[int]) -> list[Pet | None]:
        """Grouped getPets (:class:`Batcher`): the animals of ``pet_ids``, in order,
        None where there is none, in one query, for the getPets that arrived while
        the last such query was in progress: one round trip for many, where the round
        trip is most of a getPet's cost. In process 3,800 -> 29,000-33,000 getPets a
        second, served S3 0.096 -> 0.275 of the baseline (docs/performance.md). Each
        still reads after its request arrived, so it sees every animal whose 201 was
        sent before."""
        read_at = time.monotonic()
        rows = await self._pool.read(_GET_PETS, (pet_ids,))
        found = {row[0]: pet_from_row(row) for row in rows}
        pets = [found.get(pet_id) for pet_id in pet_ids]
        self._kept.keep(pet_ids, pets, read_at=read_at)
        return pets

    async def _read(self, statement: LiteralString, params: tuple[Any, ...] = ()) -> list[Any]:
        return await self._pool.read(statement, params)

    async def _write(self, statement: LiteralString, params: tuple[Any, ...]) -> list[Any]:
        return await self._pool.write(statement, params)

    def pool_stats(self) -> dict[str, int]:
        return {**self._pool.stats(), "writes_waiting": self._creates.waiting}

    async def close(self) -> None:
        if self._refresher is not None:  # it only reads: whatever ended it, close on
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
        await self._creates.close()
        await self._pet_reads.close()
        await self._page_reads.close()
        await self._pool.close()
