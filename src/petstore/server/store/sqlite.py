"""The SQLite store's driver (:class:`SQLiteDatabase`); its SQL is in
:mod:`petstore.server.store.sqlite_sql`.

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

from petstore.server.store.driver import NONE, Params, Transaction
from petstore.server.store.rows import Row
from petstore.server.store.sqlite_connections import (
    Writer,
    connect,
    not_open,
    reachable,
    rows_of,
)

T = TypeVar("T")


class _Transaction:
    """Statements on the write connection, on the event loop, while the transaction's
    :class:`SQLiteDatabase` holds the write lock and the writer thread runs nothing."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def fetch(self, statement: LiteralString, params: Params = NONE) -> list[Row]:
        with reachable:
            return rows_of(self._conn.execute(statement, params))


def _run(statement: LiteralString, params: Params, conn: sqlite3.Connection) -> list[Row]:
    with reachable:
        return rows_of(conn.execute(statement, params))


def _run_after(
    first: LiteralString, statement: LiteralString, params: Params, conn: sqlite3.Connection
) -> list[Row]:
    """``first``, then ``statement`` with its row's columns added to ``params``, in one
    transaction."""
    with reachable:
        conn.execute("BEGIN IMMEDIATE")
        try:
            (given,) = rows_of(conn.execute(first))
            rows = rows_of(conn.execute(statement, {**params, **given}))
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return rows


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


def _roll_back(writer: Writer) -> None:
    # Queued behind a BEGIN or COMMIT still running if the transaction was cancelled
    # meanwhile: it rolls back only what is still open.
    with contextlib.suppress(Exception):
        writer.submit(_rollback)


class _Block:
    """One transaction on ``writer``'s connection, holding ``lock`` from its
    ``BEGIN IMMEDIATE`` to its end (:meth:`SQLiteDatabase.transaction`). A class, not
    a generator: it is on the path of every transaction."""

    __slots__ = ("_lock", "_writer")

    def __init__(self, lock: asyncio.Lock, writer: Writer) -> None:
        self._lock = lock
        self._writer = writer

    async def __aenter__(self) -> Transaction:
        await self._lock.acquire()
        try:
            await self._writer.submit(_begin)
            conn = self._writer.connection
            if conn is None:
                not_open()
        except BaseException:
            _roll_back(self._writer)
            self._lock.release()
            raise
        return _Transaction(conn)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        try:
            if kind is None:
                try:
                    await self._writer.submit(_commit)
                except BaseException:
                    _roll_back(self._writer)
                    raise
            else:
                _roll_back(self._writer)
        finally:
            self._lock.release()


class SQLiteDatabase:
    """:class:`.driver.Database` over the SQLite file at ``path``: a read-only
    connection on the event loop, and the write connection of one :class:`Writer`
    thread, used by one write at a time (an ``asyncio.Lock``)."""

    system = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer = Writer(path)
        self._reader: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        """Start the writer thread and open the read connection (sqlite3.Error)."""
        await self._writer.start()
        self._reader = connect(self.path, readonly=True)

    async def read(self, statement: LiteralString, params: Params = NONE) -> list[Row]:
        """One SELECT on the read connection: a snapshot of every commit so far."""
        if self._reader is None:
            not_open()
        with reachable:
            return rows_of(self._reader.execute(statement, params))

    async def write(
        self,
        statement: LiteralString,
        params: Params = NONE,
        *,
        first: LiteralString | None = None,
    ) -> list[Row]:
        """One statement committed by the writer thread (``first`` before it, in its
        transaction), after the transaction that holds the connection, if any."""
        if first is None:
            return await self._submit(partial(_run, statement, params))
        return await self._submit(partial(_run_after, first, statement, params))

    async def _submit(self, job: Callable[[sqlite3.Connection], T]) -> T:
        if self._lock.locked() or self._reader is None:  # in a transaction, or not open
            async with self._lock:
                return await self._writer.submit(job)
        return await self._writer.submit(job)

    async def in_transaction(self, work: Callable[[Transaction], Awaitable[T]]) -> T:
        """``work``'s statements in one :meth:`transaction`."""
        async with self.transaction() as tx:
            return await work(tx)

    def transaction(self) -> _Block:
        """``async with database.transaction() as tx:`` (``driver.TransactionBlocks``):
        ``BEGIN IMMEDIATE`` and ``COMMIT`` on the writer thread, the block's statements
        on the loop in between (no fsync there, and no lock to wait for); rolled back
        when the block raises."""
        return _Block(self._lock, self._writer)

    def stats(self) -> dict[str, int]:
        """One reader on the loop and one writer thread."""
        return {"size": 2, "available": 2, "requests_waiting": 0}

    async def close(self) -> None:
        """Run the writes already submitted, then close both connections."""
        self._writer.close()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
