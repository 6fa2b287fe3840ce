"""The SQLite store: WAL mode, reads on the event loop, writes on one writer thread.

Reads are short indexed queries on a read-only connection; running them on the
event loop costs less than a thread hop. Writes go to one writer thread
(``sqlite_connections.Writer``), so the loop never waits on a lock or an fsync.
Three devices make the served paths faster, each in one place with its measured
gain: :class:`_TurnReadTransaction` (the reads of a turn share a transaction),
:meth:`SQLiteStore._get_pets_of_turn` (the getPets of a turn share a query) and
:meth:`SQLiteStore._commit_creates` (group commit). Each request is still answered
only after the commit that holds its row, and with ``synchronous=FULL`` that commit
is on disk (interface: Add an animal; issue: a 201 means durably committed).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from petstore.schemas import NewPet, Pet, PetStatus, encode, pet_from_row
from petstore.server.store import (
    ApiKey,
    ApiKeyRecord,
    IdempotencyClaim,
    IdempotencyRecord,
    require_current_schema,
    sql,
)
from petstore.server.store.batch import Batcher, TurnBatcher
from petstore.server.store.sqlite_connections import (
    Writer,
    connect,
    idempotency_record,
    iso,
    not_open,
    parse_time,
    reachable,
)

#: The animals whose ids are in a JSON array (one statement whatever the number of ids).
_GET_PETS = f"SELECT {sql.PET_COLUMNS} FROM pets WHERE id IN (SELECT value FROM json_each(?))"  # noqa: S608
_Create = tuple[NewPet, IdempotencyClaim | None]


class _TurnReadTransaction:
    """The read connection, whose reads of one event-loop turn share one transaction.

    The first read of a turn opens it; a callback at the next turn ends it. Every
    request handled in a turn was handed to the loop before the turn began, so
    before that first read: each read still sees every commit answered before its
    request arrived. One transaction a turn, not one a read, saves each read taking
    and letting go of the WAL read lock (two ``fcntl`` calls and an ``fstat``):
    served S3 +7%, S6 +2% (b94b5a4, docs/performance.md).
    """

    def __init__(self) -> None:
        self._conn: sqlite3.Connection | None = None
        self._execute: Callable[..., sqlite3.Cursor] = not_open  # the connection's
        self._in_turn = False  # a transaction is open for this turn of the loop

    def open(self, path: Path) -> None:
        """Open the read-only connection; raises sqlite3.Error when that fails."""
        self._conn = connect(path, readonly=True)
        self._execute = self._conn.execute

    def execute(self, statement: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        """Run a read in this turn's transaction. Raises sqlite3.OperationalError
        when the database cannot be read, Unavailable when not open."""
        if not self._in_turn:
            if self._conn is None:
                not_open()
            if self._conn.in_transaction:  # the last turn's could not be ended
                self._conn.execute("ROLLBACK")
            self._conn.execute("BEGIN")
            self._in_turn = True
            asyncio.get_running_loop().call_soon(self.end)
        return self._execute(statement, params)

    def end(self) -> None:
        """End this turn's transaction, if any."""
        self._in_turn = False
        # If this fails, the next read ends it first, or answers 503 trying (D10).
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")

    def close(self) -> None:
        """End the transaction and close the connection, if open."""
        self.end()
        if self._conn is not None:
            self._conn.close()
            self._conn, self._execute = None, not_open


def _insert_pets(conn: sqlite3.Connection, creates: list[_Create]) -> list[Pet | IdempotencyRecord]:
    """One transaction for the batch; a create whose claim loses to an existing
    record is rolled back to its savepoint and answered with that record (D16)."""
    with reachable:
        if len(creates) == 1 and creates[0][1] is None:
            # One plain create: one statement, which SQLite commits on its own.
            # Each statement step hands the GIL back and forth with the event
            # loop; this takes one step where a transaction around it takes three.
            return [_insert_pet(conn, *creates[0])]
        conn.execute("BEGIN IMMEDIATE")
        try:
            results = [_insert_pet(conn, new, claim) for new, claim in creates]
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return results


def _insert_pet(
    conn: sqlite3.Connection, new: NewPet, claim: IdempotencyClaim | None
) -> Pet | IdempotencyRecord:
    if claim is not None:
        conn.execute("SAVEPOINT claim")
        conn.execute(
            sql.DELETE_EXPIRED_CLAIM, (claim.api_key_id, claim.key, iso(claim.expired_before))
        )
    # lastrowid, not RETURNING: a RETURNING row costs one more statement step.
    pet_id = conn.execute(sql.INSERT_PET, (new.name, new.category_id, new.status.value)).lastrowid
    assert pet_id is not None  # an INSERT into a rowid table always sets it
    pet = Pet(pet_id, new.name, new.category_id, new.status)
    if claim is None:
        return pet
    response = encode(pet).decode()
    claimed = conn.execute(
        sql.INSERT_CLAIM,
        (claim.api_key_id, claim.key, claim.fingerprint, pet_id, response, iso(claim.created_at)),
    ).fetchone()
    if claimed is None:
        conn.execute("ROLLBACK TO claim")
        conn.execute("RELEASE claim")
        row = conn.execute(sql.SELECT_CLAIM, (claim.api_key_id, claim.key)).fetchone()
        return idempotency_record(row)
    conn.execute("RELEASE claim")
    return pet


class SQLiteStore:
    """:class:`petstore.server.store.Store` over the SQLite file at ``path`` (created by the
    migrations). Constructing it does no I/O; :meth:`open` connects."""

    full_pages_are_final = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer = Writer(path)
        self._reads = _TurnReadTransaction()
        self._creates = Batcher(self._commit_creates)
        self._pet_reads = TurnBatcher(self._get_pets_of_turn)

    async def open(self) -> None:
        """Start the writer thread, open the read connection, check the schema."""
        try:
            await self._writer.start()
            self._reads.open(self.path)
            await require_current_schema(self)
        except BaseException:
            await self.close()
            raise

    async def create_pet(
        self, new_pet: NewPet, *, claim: IdempotencyClaim | None = None
    ) -> Pet | IdempotencyRecord:
        return await self._creates.submit((new_pet, claim))

    def _commit_creates(
        self, creates: list[_Create]
    ) -> asyncio.Future[list[Pet | IdempotencyRecord]]:
        """Group commit (:class:`Batcher`): the creates that arrived while the last
        commit was in progress, in one transaction on the writer thread, so they
        share one fsync. Called from the Batcher's done-callback, not a task: that
        and the writer thread took a lone create from 54 to 31 µs of CPU
        (docs/performance.md; the grouping itself was not measured apart)."""
        return self._writer.submit(lambda conn: _insert_pets(conn, creates))

    async def find_idempotency_record(
        self, api_key_id: int, key: str, *, created_after: datetime
    ) -> IdempotencyRecord | None:
        with reachable:
            row = self._reads.execute(
                sql.FIND_IDEMPOTENCY_RECORD, (api_key_id, key, iso(created_after))
            ).fetchone()
        return None if row is None else idempotency_record(row)

    async def purge_idempotency_records(self, *, created_before: datetime) -> int:
        def purge(conn: sqlite3.Connection) -> int:
            with reachable:
                return conn.execute(sql.PURGE_IDEMPOTENCY_RECORDS, (iso(created_before),)).rowcount

        return await self._writer.submit(purge)

    async def list_pets(self, *, status: PetStatus | None, after_id: int, limit: int) -> list[Pet]:
        with reachable:
            if status is None:
                rows = self._reads.execute(sql.LIST_PETS, (after_id, limit)).fetchall()
            else:
                rows = self._reads.execute(
                    sql.LIST_PETS_OF_STATUS, (status.value, after_id, limit)
                ).fetchall()
        return [pet_from_row(row) for row in rows]

    async def get_pet(self, pet_id: int) -> Pet | None:
        return await self._pet_reads.submit(pet_id)

    async def _get_pets_of_turn(self, pet_ids: list[int]) -> list[Pet | None]:
        """The animals ``pet_ids`` asked for during one turn of the loop, with one
        ``json_each`` query (:class:`TurnBatcher`); None for an id with no animal. A
        query per id lets go of the GIL three times, and each time the server's
        threads take it: served, that cost a getPet more than the read itself. One
        query a turn: served S3 +18% (59c439d, docs/performance.md)."""
        with reachable:
            rows = self._reads.execute(
                _GET_PETS, (msgspec.json.encode(pet_ids).decode(),)
            ).fetchall()
        found = {row[0]: pet_from_row(row) for row in rows}
        return [found.get(pet_id) for pet_id in pet_ids]

    async def _write(self, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        def run(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            with reachable:
                return conn.execute(statement, params).fetchall()

        return await self._writer.submit(run)

    async def create_api_key(
        self,
        *,
        name: str,
        prefix: str,
        key_hash: str,
        created_at: datetime,
        expires_at: datetime | None,
        scopes: tuple[str, ...],
        rate_limit: str | None,
    ) -> ApiKey:
        expires = iso(expires_at) if expires_at else None
        params = (name, prefix, key_hash, iso(created_at), expires, " ".join(scopes), rate_limit)
        return sql.api_key((await self._write(sql.INSERT_API_KEY, params))[0], time=parse_time)

    async def list_api_keys(self) -> list[ApiKey]:
        with reachable:
            rows = self._reads.execute(sql.LIST_API_KEYS).fetchall()
        return [sql.api_key(row, time=parse_time) for row in rows]

    async def revoke_api_key(self, key_id: int, *, at: datetime) -> bool:
        return bool(await self._write(sql.REVOKE_API_KEY, (iso(at), key_id)))

    async def find_api_keys(self, prefix: str) -> list[ApiKeyRecord]:
        with reachable:
            rows = self._reads.execute(sql.FIND_API_KEYS, (prefix,)).fetchall()
        return [sql.api_key_record(row, time=parse_time) for row in rows]

    async def count_active_api_keys(self, *, now: datetime) -> int:
        with reachable:
            (count,) = self._reads.execute(sql.COUNT_ACTIVE_API_KEYS, (iso(now),)).fetchone()
        return int(count)

    async def schema_revision(self) -> str | None:
        with reachable:
            try:
                row = self._reads.execute(sql.SCHEMA_REVISION).fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return None
                raise
        return None if row is None else str(row[0])

    def pool_stats(self) -> dict[str, int]:
        # One reader on the loop and one writer thread.
        return {"size": 2, "available": 2, "writes_waiting": self._creates.waiting}

    async def close(self) -> None:
        await self._pet_reads.close()
        await self._creates.close()
        self._writer.close()
        self._reads.close()
