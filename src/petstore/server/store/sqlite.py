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

from petstore.schemas import NewPet, Pet, PetStatus, pet_from_row
from petstore.server.store import (
    IdempotencyClaim,
    IdempotencyRecord,
    require_current_schema,
    sql,
)
from petstore.server.store.batch import CREATE_WAIT_TURNS, Batcher, TurnBatcher
from petstore.server.store.queries import SharedQueries, claimed_create
from petstore.server.store.sqlite_connections import (
    DIALECT,
    Writer,
    connect,
    iso,
    not_open,
    reachable,
)

#: The animals whose ids are in a JSON array (one statement whatever the number of ids).
_GET_PETS = f"SELECT {sql.PET_COLUMNS} FROM pets WHERE id IN (SELECT value FROM json_each(?))"  # noqa: S608
_Create = tuple[NewPet, IdempotencyClaim | None]


class _TurnReadTransaction:
    """The read connection, whose reads of one event-loop turn share one transaction.

    Why: one transaction a turn, not one a read, saves each read taking and letting
    go of the WAL read lock (two ``fcntl`` calls and an ``fstat``): served S3 +7%,
    S6 +2% (b94b5a4, docs/performance.md).

    What must hold (read-your-writes, interface: Add an animal, D9): *a read runs on
    a snapshot taken after the loop received the request it answers*, so it sees
    every commit whose 201 was sent before that request was sent. The snapshot is
    taken by the first read after ``BEGIN``; a later read may use it only if the
    work that issues it was queued on the loop before that moment. The loop runs
    its ready callbacks first in, first out, and I/O callbacks (a new request) are
    queued after the callbacks already ready. So :meth:`execute` queues :meth:`end`
    with ``call_soon`` at the very moment it opens the transaction: whatever runs
    before :meth:`end` was queued before the snapshot, whatever was queued after the
    snapshot runs after :meth:`end` and opens a transaction of its own. Ending it
    any later (``call_later``, a callback that queues another, an ``await``
    between opening and queuing) breaks read-your-writes: a getPet right after its
    201 could answer 404. Reads must also never ``await`` inside a transaction (they
    are synchronous calls on the loop). Pinned by
    ``tests/test_store_sqlite.py::test_a_request_that_arrives_after_a_commit_reads_it_even_in_the_next_turn``.
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
            return [_insert_pet(conn, creates[0][0])]
        conn.execute("BEGIN IMMEDIATE")
        try:
            results = [
                _insert_pet(conn, new) if claim is None else _insert_claimed(conn, new, claim)
                for new, claim in creates
            ]
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return results


def _insert_pet(conn: sqlite3.Connection, new: NewPet) -> Pet:
    # lastrowid, not RETURNING: a RETURNING row costs one more statement step.
    pet_id = conn.execute(sql.INSERT_PET, (new.name, new.category_id, new.status.value)).lastrowid
    assert pet_id is not None  # an INSERT into a rowid table always sets it
    return Pet(pet_id, new.name, new.category_id, new.status)


def _insert_claimed(
    conn: sqlite3.Connection, new: NewPet, claim: IdempotencyClaim
) -> Pet | IdempotencyRecord:
    """Run :func:`queries.claimed_create` on ``conn``, the new animal's id from
    ``lastrowid``."""
    steps = claimed_create(DIALECT, new, claim)
    statement, params = next(steps)
    while True:
        cursor = conn.execute(statement, params)
        answer = cursor.lastrowid if statement is DIALECT.insert_pet else cursor.fetchone()
        try:
            statement, params = steps.send(answer)
        except StopIteration as done:
            result: Pet | IdempotencyRecord = done.value
            return result


class SQLiteStore(SharedQueries):
    """:class:`petstore.server.store.Store` over the SQLite file at ``path`` (created by the
    migrations). Constructing it does no I/O; :meth:`open` connects."""

    full_pages_are_final = True
    dialect = DIALECT

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer = Writer(path)
        self._reads = _TurnReadTransaction()
        self._creates = Batcher(self._commit_creates, wait_turns=CREATE_WAIT_TURNS)
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

    async def _read(self, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with reachable:
            return self._reads.execute(statement, params).fetchall()

    async def _write(self, statement: str, params: tuple[Any, ...]) -> list[Any]:
        def run(conn: sqlite3.Connection) -> list[Any]:
            with reachable:
                return conn.execute(statement, params).fetchall()

        return await self._writer.submit(run)

    def pool_stats(self) -> dict[str, int]:
        # One reader on the loop and one writer thread.
        return {"size": 2, "available": 2, "writes_waiting": self._creates.waiting}

    async def close(self) -> None:
        await self._pet_reads.close()
        await self._creates.close()
        self._writer.close()
        self._reads.close()
