"""The SQLite store: its SQL, and its driver (:class:`SQLiteDatabase`).

WAL mode with ``synchronous=FULL``: a commit is on disk when it returns (interface:
Add an animal; a 201 means durably committed). Reads are short indexed queries on a
read-only connection, run on the event loop: a thread hop would cost more than the
read. Writes are committed by one writer thread (``sqlite_connections.Writer``), so
the loop never waits on another process's lock or on an fsync.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import LiteralString, TypeVar

from petstore.server.store.driver import Params, Row, Statements, Transaction
from petstore.server.store.queries import SQLStore
from petstore.server.store.sqlite_connections import (
    Writer,
    connect,
    iso,
    not_open,
    parse_time,
    reachable,
)

T = TypeVar("T")


#: SQLite's SQL (``?`` placeholders; timestamps as ISO text in UTC, :func:`iso`). One
#: writer at a time and ``AUTOINCREMENT`` keep ids in commit order (D5, D9).
STATEMENTS = Statements(
    insert_pets=(
        "INSERT INTO pets (name, category_id, status) "
        "SELECT value ->> 'name', value ->> 'categoryId', value ->> 'status' "
        "FROM json_each(?) RETURNING id, name, category_id, status"
    ),
    insert_pet="INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?) RETURNING id",
    lock_id_order=None,
    list_pets="SELECT id, name, category_id, status FROM pets WHERE id > ? ORDER BY id LIMIT ?",
    list_pets_of_status=(
        "SELECT id, name, category_id, status FROM pets WHERE status = ? AND id > ? ORDER BY "
        "id LIMIT ?"
    ),
    get_pet="SELECT id, name, category_id, status FROM pets WHERE id = ?",
    get_pets=(
        "SELECT id, name, category_id, status FROM pets WHERE id IN (SELECT value FROM "
        "json_each(?))"
    ),
    # Migration 0005's count of the changes made to animals outside the API (triggers).
    pets_version="SELECT changes FROM pet_changes",
    delete_expired_claim=(
        "DELETE FROM idempotency_records "
        "WHERE api_key_id = ? AND idempotency_key = ? AND created_at < ?"
    ),
    insert_claim=(
        "INSERT INTO idempotency_records (api_key_id, idempotency_key, fingerprint, pet_id, "
        "response, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING pet_id"
    ),
    select_claim=(
        "SELECT api_key_id, idempotency_key, fingerprint, pet_id, response, created_at FROM "
        "idempotency_records "
        "WHERE api_key_id = ? AND idempotency_key = ?"
    ),
    find_idempotency_record=(
        "SELECT api_key_id, idempotency_key, fingerprint, pet_id, response, created_at FROM "
        "idempotency_records "
        "WHERE api_key_id = ? AND idempotency_key = ? AND created_at > ?"
    ),
    purge_idempotency_records="DELETE FROM idempotency_records WHERE created_at < ? RETURNING 1",
    insert_api_key=(
        "INSERT INTO api_keys (name, prefix, key_hash, created_at, expires_at, scopes, "
        "rate_limit) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id, name, prefix, created_at, "
        "expires_at, revoked_at, scopes, rate_limit"
    ),
    list_api_keys=(
        "SELECT id, name, prefix, created_at, expires_at, revoked_at, scopes, rate_limit FROM "
        "api_keys ORDER BY id"
    ),
    revoke_api_key=(
        "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL RETURNING id"
    ),
    find_api_keys=(
        "SELECT id, key_hash, expires_at, revoked_at, scopes, rate_limit "
        "FROM api_keys WHERE prefix = ?"
    ),
    count_active_api_keys=(
        "SELECT count(*) FROM api_keys "
        "WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)"
    ),
    schema_exists=(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
    ),
    schema_revision="SELECT version_num FROM alembic_version",
    to_db=iso,
    from_db=parse_time,
)


class _Transaction:
    """Statements on the write connection, on the event loop, while the transaction's
    :class:`SQLiteDatabase` holds the write lock and the writer thread runs nothing."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def fetch(self, statement: LiteralString, params: Params = ()) -> list[Row]:
        with reachable:
            return self._conn.execute(statement, params).fetchall()


def _run(statement: LiteralString, params: Params, conn: sqlite3.Connection) -> list[Row]:
    with reachable:
        return conn.execute(statement, params).fetchall()


def _begin(conn: sqlite3.Connection) -> None:
    with reachable:  # waits up to the busy timeout for another process's write
        conn.execute("BEGIN IMMEDIATE")


def _commit(conn: sqlite3.Connection) -> None:
    with reachable:
        conn.execute("COMMIT")


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # a failed rollback: SQLite rolls back
            conn.execute("ROLLBACK")


class SQLiteDatabase:
    """:class:`.driver.Database` over the SQLite file at ``path``: a read-only
    connection on the event loop, and the write connection of one :class:`Writer`
    thread, used by one write at a time (an ``asyncio.Lock``)."""

    statements = STATEMENTS

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer = Writer(path)
        self._reader: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        """Start the writer thread and open the read connection (sqlite3.Error)."""
        await self._writer.start()
        self._reader = connect(self.path, readonly=True)

    async def read(self, statement: LiteralString, params: Params = ()) -> list[Row]:
        """One SELECT on the read connection: a snapshot of every commit so far."""
        if self._reader is None:
            not_open()
        with reachable:
            return self._reader.execute(statement, params).fetchall()

    def write(self, statement: LiteralString, params: Params = ()) -> Awaitable[list[Row]]:
        """One statement committed on its own by the writer thread: the writer's
        future, or, while a transaction holds the connection, a coroutine that waits
        for it to end first."""
        if self._lock.locked() or self._reader is None:  # in a transaction, or not open
            return self._write_after(statement, params)
        return self._writer.submit(partial(_run, statement, params))

    async def _write_after(self, statement: LiteralString, params: Params) -> list[Row]:
        async with self._lock:
            return await self._writer.submit(partial(_run, statement, params))

    async def in_transaction(self, work: Callable[[Transaction], Awaitable[T]]) -> T:
        """``BEGIN IMMEDIATE`` and ``COMMIT`` on the writer thread, ``work``'s
        statements on the loop in between (no fsync there, and no lock to wait for)."""
        async with self._lock:
            try:
                await self._writer.submit(_begin)
                conn = self._writer.connection
                if conn is None:
                    not_open()
                result = await work(_Transaction(conn))
                await self._writer.submit(_commit)
            except BaseException:
                # Queued behind a BEGIN or COMMIT still running if this was cancelled
                # meanwhile: it rolls back only what is still open.
                with contextlib.suppress(Exception):
                    self._writer.submit(_rollback)
                raise
            return result

    def stats(self) -> dict[str, int]:
        """One reader on the loop and one writer thread."""
        return {"size": 2, "available": 2, "requests_waiting": 0}

    async def close(self) -> None:
        """Run the writes already submitted, then close both connections."""
        self._writer.close()
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class SQLiteStore(SQLStore):
    """:class:`petstore.server.store.Store` over the SQLite file at ``path`` (created by
    the migrations). Constructing it does no I/O; :meth:`open` connects."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(SQLiteDatabase(path))
