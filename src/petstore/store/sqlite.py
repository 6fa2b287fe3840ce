"""The SQLite store: WAL mode, reads on the event loop, writes on one writer thread.

Reads are short indexed queries on a read-only connection; running them on the
event loop costs less than a thread hop, the reads of one turn of the loop share
one read transaction (``SQLiteStore._query``), and the getPets of one turn share one
query (``SQLiteStore._get_pets``). Writes go to a single writer thread so
the loop never waits on a lock or an fsync. Creates that arrive while a commit is in
progress are grouped into the next transaction (group commit): each request is
still answered only after the commit that holds its row, and with
``synchronous=FULL`` that commit is on disk (interface: Add an animal; issue: a 201
means durably committed).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from petstore import errors
from petstore.batch import Batcher, TurnBatcher
from petstore.schemas import NewPet, Pet, PetStatus, encode, pet_from_row
from petstore.store import ApiKey, ApiKeyRecord, IdempotencyClaim, IdempotencyRecord, sql

#: Milliseconds a writer waits for another process's write lock before giving up.
BUSY_TIMEOUT_MS = 5000
#: KiB of database pages the read connection keeps in memory (SQLite's default is
#: 2,000 KiB). 32 MiB holds the pets table of a million animals, so a getPet among
#: them reads no page from the file (docs/performance.md); SQLite allocates the
#: pages only as they are read, and drops them when another connection commits.
READ_CACHE_KIB = 32 * 1024

#: The animals whose ids are in a JSON array (one statement whatever the number of ids).
_GET_PETS = f"SELECT {sql.PET_COLUMNS} FROM pets WHERE id IN (SELECT value FROM json_each(?))"  # noqa: S608
_Create = tuple[NewPet, IdempotencyClaim | None]
_T = TypeVar("_T")
_Job = tuple[Callable[[sqlite3.Connection], Any], "asyncio.Future[Any]"]


class _Reachable:
    """``with _reachable:`` turns driver errors that mean "database not usable now"
    into 503 (D10). A class, not a generator: it is entered on every read."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if kind is not None and issubclass(kind, sqlite3.OperationalError):
            raise errors.Unavailable("the database is unavailable; retry shortly") from exc


_reachable = _Reachable()


def _connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if readonly:
        conn.execute("PRAGMA query_only = ON")
        conn.execute(f"PRAGMA cache_size = -{READ_CACHE_KIB}")
    else:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
    return conn


def _iso(value: datetime) -> str:
    # One fixed UTC spelling, so stored timestamps compare correctly as text.
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _idempotency_record(row: tuple[Any, ...]) -> IdempotencyRecord:
    return IdempotencyRecord(
        row[0], row[1], row[2], row[3], row[4].encode(), datetime.fromisoformat(row[5])
    )


def _api_key(row: tuple[Any, ...]) -> ApiKey:
    created_at = datetime.fromisoformat(row[3])
    return ApiKey(row[0], row[1], row[2], created_at, _time(row[4]), _time(row[5]))


class _Writer:
    """The thread that owns the write connection and runs write jobs one at a time,
    in submission order. Each job's result is handed back to the submitting event
    loop's future: one queue put and one thread-safe callback, with none of an
    executor's bookkeeping (a lone create spends more there than in SQLite)."""

    def __init__(self, path: Path) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        opened: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(path, opened), name="sqlite-writer", daemon=True
        )
        self._thread.start()
        opened.result()  # raises what connecting raised

    def submit(self, job: Callable[[sqlite3.Connection], _T]) -> asyncio.Future[_T]:
        """Run ``job`` with the write connection on the writer thread; its result."""
        future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        self._jobs.put((job, future))
        return future

    def close(self) -> None:
        """Run the jobs already submitted, close the connection, end the thread."""
        self._jobs.put(None)
        self._thread.join()

    def _run(self, path: Path, opened: concurrent.futures.Future[None]) -> None:
        try:
            conn = _connect(path, readonly=False)
        except BaseException as exc:
            opened.set_exception(exc)
            return
        opened.set_result(None)
        while (entry := self._jobs.get()) is not None:
            job, future = entry
            loop = future.get_loop()
            outcome: tuple[Any, BaseException | None]
            try:
                outcome = job(conn), None
            except BaseException as exc:
                outcome = None, exc
            # A loop already closed (a shutdown cut short) waits for nothing; the
            # thread goes on to the next job, and to closing the connection.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, *outcome)
        conn.close()


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.cancelled():  # its caller stopped waiting; the write itself is done
        return
    if exc is None:
        future.set_result(result)
    else:
        future.set_exception(exc)


class SQLiteStore:
    """:class:`petstore.store.Store` over one SQLite file (created by the migrations)."""

    full_pages_are_final = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer = _Writer(path)
        self._reader = _connect(path, readonly=True)
        self._reading = False  # a read transaction is open for this turn of the loop
        self._creates = Batcher(self._commit_creates)
        self._pet_reads = TurnBatcher(self._get_pets)

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        """Run a read on the read connection, in this event-loop turn's transaction.

        The first read of a turn opens it; a callback at the next turn ends it. Every
        request handled in a turn was handed to the loop before the turn began, so
        before that first read: each read still sees every commit answered before
        its request arrived. One transaction a turn, not one a read, saves each read
        taking and releasing the WAL read lock (two ``fcntl`` calls and an ``fstat``).
        Raises sqlite3.OperationalError when the database cannot be read.
        """
        if not self._reading:
            if self._reader.in_transaction:  # the last turn's could not be ended
                self._reader.execute("ROLLBACK")
            self._reader.execute("BEGIN")
            self._reading = True
            asyncio.get_running_loop().call_soon(self._end_read)
        return self._reader.execute(sql, params)

    def _end_read(self) -> None:
        self._reading = False
        # If this fails, the next read ends it first, or answers 503 trying (D10).
        with contextlib.suppress(sqlite3.Error):
            self._reader.execute("ROLLBACK")

    # Pets ---------------------------------------------------------------------------

    async def create_pet(
        self, new_pet: NewPet, *, claim: IdempotencyClaim | None = None
    ) -> Pet | IdempotencyRecord:
        return await self._creates.submit((new_pet, claim))

    def _commit_creates(
        self, creates: list[_Create]
    ) -> asyncio.Future[list[Pet | IdempotencyRecord]]:
        return self._writer.submit(lambda conn: self._insert_pets(conn, creates))

    def _insert_pets(
        self, conn: sqlite3.Connection, creates: list[_Create]
    ) -> list[Pet | IdempotencyRecord]:
        """One transaction for the batch; a create whose claim loses to an existing
        record is rolled back to its savepoint and answered with that record (D16)."""
        results: list[Pet | IdempotencyRecord] = []
        with _reachable:
            if len(creates) == 1 and creates[0][1] is None:
                # One plain create: one statement, which SQLite commits on its own.
                # Each statement step hands the GIL back and forth with the event
                # loop; this takes one step where a transaction around it takes three.
                return [self._insert_pet(conn, *creates[0])]
            conn.execute("BEGIN IMMEDIATE")
            try:
                for new, claim in creates:
                    results.append(self._insert_pet(conn, new, claim))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return results

    @staticmethod
    def _insert_pet(
        conn: sqlite3.Connection, new: NewPet, claim: IdempotencyClaim | None
    ) -> Pet | IdempotencyRecord:
        if claim is not None:
            conn.execute("SAVEPOINT claim")
            conn.execute(
                sql.DELETE_EXPIRED_CLAIM,
                (claim.api_key_id, claim.key, _iso(claim.expired_before)),
            )
        # lastrowid, not RETURNING: a RETURNING row costs one more statement step.
        pet_id = conn.execute(
            sql.INSERT_PET,
            (new.name, new.category_id, new.status.value),
        ).lastrowid
        assert pet_id is not None  # an INSERT into a rowid table always sets it
        pet = Pet(pet_id, new.name, new.category_id, new.status)
        if claim is None:
            return pet
        claimed = conn.execute(
            sql.INSERT_CLAIM,
            (
                claim.api_key_id,
                claim.key,
                claim.fingerprint,
                pet_id,
                encode(pet).decode(),
                _iso(claim.created_at),
            ),
        ).fetchone()
        if claimed is None:
            conn.execute("ROLLBACK TO claim")
            conn.execute("RELEASE claim")
            row = conn.execute(sql.SELECT_CLAIM, (claim.api_key_id, claim.key)).fetchone()
            return _idempotency_record(row)
        conn.execute("RELEASE claim")
        return pet

    async def find_idempotency_record(
        self, api_key_id: int, key: str, *, created_after: datetime
    ) -> IdempotencyRecord | None:
        with _reachable:
            row = self._query(
                sql.FIND_IDEMPOTENCY_RECORD, (api_key_id, key, _iso(created_after))
            ).fetchone()
        return None if row is None else _idempotency_record(row)

    async def purge_idempotency_records(self, *, created_before: datetime) -> int:
        def purge(conn: sqlite3.Connection) -> int:
            with _reachable:
                return conn.execute(sql.PURGE_IDEMPOTENCY_RECORDS, (_iso(created_before),)).rowcount

        return await self._writer.submit(purge)

    async def list_pets(self, *, status: PetStatus | None, after_id: int, limit: int) -> list[Pet]:
        with _reachable:
            if status is None:
                rows = self._query(sql.LIST_PETS, (after_id, limit)).fetchall()
            else:
                rows = self._query(
                    sql.LIST_PETS_OF_STATUS, (status.value, after_id, limit)
                ).fetchall()
        return [pet_from_row(row) for row in rows]

    async def get_pet(self, pet_id: int) -> Pet | None:
        return await self._pet_reads.submit(pet_id)

    async def _get_pets(self, pet_ids: list[int]) -> list[Pet | None]:
        """The animals ``pet_ids`` asked for during one turn of the loop, with one
        query (:class:`TurnBatcher`); None for an id with no animal. A query per id
        lets go of the GIL three times, and each time the server's threads take it:
        served, that cost a getPet more than the read itself (docs/performance.md)."""
        with _reachable:
            rows = self._query(_GET_PETS, (msgspec.json.encode(pet_ids).decode(),)).fetchall()
        found = {row[0]: pet_from_row(row) for row in rows}
        return [found.get(pet_id) for pet_id in pet_ids]

    # API keys ----------------------------------------------------------------------

    async def _write(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        def run(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            with _reachable:
                return conn.execute(sql, params).fetchall()

        return await self._writer.submit(run)

    async def create_api_key(
        self,
        *,
        name: str,
        prefix: str,
        key_hash: str,
        created_at: datetime,
        expires_at: datetime | None,
    ) -> ApiKey:
        rows = await self._write(
            sql.INSERT_API_KEY,
            (
                name,
                prefix,
                key_hash,
                _iso(created_at),
                _iso(expires_at) if expires_at else None,
            ),
        )
        return _api_key(rows[0])

    async def list_api_keys(self) -> list[ApiKey]:
        with _reachable:
            rows = self._query(sql.LIST_API_KEYS).fetchall()
        return [_api_key(row) for row in rows]

    async def revoke_api_key(self, key_id: int, *, at: datetime) -> bool:
        rows = await self._write(sql.REVOKE_API_KEY, (_iso(at), key_id))
        return bool(rows)

    async def find_api_keys(self, prefix: str) -> list[ApiKeyRecord]:
        with _reachable:
            rows = self._query(sql.FIND_API_KEYS, (prefix,)).fetchall()
        return [ApiKeyRecord(row[0], row[1], _time(row[2]), _time(row[3])) for row in rows]

    async def count_active_api_keys(self, *, now: datetime) -> int:
        with _reachable:
            (count,) = self._query(sql.COUNT_ACTIVE_API_KEYS, (_iso(now),)).fetchone()
        return int(count)

    async def schema_revision(self) -> str | None:
        with _reachable:
            try:
                row = self._query(sql.SCHEMA_REVISION).fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return None
                raise
        return None if row is None else str(row[0])

    def pool_stats(self) -> dict[str, int]:
        # One reader on the loop and one writer thread, always open.
        return {"size": 2, "available": 2, "writes_waiting": self._creates.waiting}

    async def close(self) -> None:
        await self._pet_reads.close()
        await self._creates.close()
        self._writer.close()
        self._end_read()
        self._reader.close()
