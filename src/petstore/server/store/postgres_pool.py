"""The PostgreSQL store's connections: one bounded psycopg pool, every wait bounded.

Every wait is bounded by ``timeout``: for a pooled connection, for a new connection
(``connect_timeout``) and for each statement (``statement_timeout``, which also
bounds the wait for the id-order lock). A database that cannot be reached within it
raises ``errors.Unavailable`` (503, D10); the pool reconnects by itself when the
database is back. The pool lends connections untested (a test is a round trip on
every request); a statement that finds its connection dead has the pool test and
replace its idle ones, and a read is then run once more.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, LiteralString

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from petstore.server import errors

Connection = psycopg.AsyncConnection[TupleRow]


class ConnectionLost(psycopg.OperationalError):
    """A statement found its pooled connection dead: the server restarted, or something
    between us and it cut the connection while it sat in the pool."""


@contextmanager
def reachable() -> Iterator[None]:
    """Turn driver and pool errors that mean "database not usable now" into
    ``errors.Unavailable`` (503, D10); a missing table (a database not migrated, or
    damaged) is one too, as on SQLite, and so is a pool not open or closed."""
    try:
        yield
    except (psycopg.OperationalError, psycopg.errors.UndefinedTable, PoolTimeout) as exc:
        raise errors.Unavailable("the database is unavailable; retry shortly") from exc


class Pool:
    """Connections to the ``postgresql://`` ``url``: 1 to ``size`` of them (an idle
    instance holds one; the pool grows under load and shrinks when idle), every wait
    bounded by ``timeout`` seconds, each session in UTC. Constructing it does no I/O;
    :meth:`open` connects. Use it from one event loop."""

    def __init__(self, url: str, *, size: int, timeout: float) -> None:
        self._url = url
        self._timeout = timeout
        statement_ms = str(math.ceil(timeout * 1000))

        async def configure(conn: Connection) -> None:
            # UTC: timestamps come back alike whatever the server's zone.
            await conn.execute(
                "SELECT set_config('TimeZone', 'UTC', false), "
                "set_config('statement_timeout', %s, false)",
                (statement_ms,),
            )

        # libpq counts connect_timeout in whole seconds, at least 2.
        self._kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(2, math.ceil(timeout)),
        }
        self._pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
            url,
            kwargs=self._kwargs,
            min_size=1,
            max_size=size,
            timeout=timeout,
            configure=configure,
            open=False,
            name="petstore",
        )

    async def open(self) -> None:
        """Connect, and open the pool with its first connection.

        Raises ``errors.Unavailable`` promptly when the database cannot be reached
        (one probe connection surfaces refused connections, unknown databases and
        bad credentials at once, the cause chained), instead of retrying until a
        request comes.
        """
        with reachable():
            probe = await psycopg.AsyncConnection.connect(self._url, **self._kwargs)
            await probe.close()
            await self._pool.open(wait=True, timeout=self._timeout)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A connection from the pool, lent untested: testing it first is a round trip
        on every request (getPet in process: 2,530 -> 3,800 a second without,
        docs/performance.md). One that turns out dead in use raises ConnectionLost,
        after the pool has tested its idle connections and replaced the dead ones, so
        that one request, not one per idle connection, meets a server restart.
        Raises psycopg_pool.PoolTimeout when none is free within the timeout."""
        async with self._pool.connection() as conn:
            try:
                yield conn
            except psycopg.OperationalError as exc:
                if not conn.broken:
                    raise
                await self._pool.check()
                raise ConnectionLost(str(exc)) from exc

    async def read(self, statement: LiteralString, params: tuple[Any, ...] = ()) -> list[TupleRow]:
        """The rows of one SELECT. One that met a dead connection is run once more, on
        another: a read changes nothing, so running it twice is safe. Raises
        ``errors.Unavailable`` when the database cannot be reached."""
        with reachable():
            try:
                return await self._execute(statement, params)
            except ConnectionLost:
                return await self._execute(statement, params)

    async def write(self, statement: LiteralString, params: tuple[Any, ...]) -> list[TupleRow]:
        """The rows (``RETURNING``) of one autocommit write. Not run again when its
        connection died, as its commit may have landed first: raises
        ``errors.Unavailable`` then, and when the database cannot be reached."""
        with reachable():
            return await self._execute(statement, params)

    async def _execute(self, statement: LiteralString, params: tuple[Any, ...]) -> list[TupleRow]:
        async with self.connection() as conn:
            cursor = await conn.execute(statement, params)
            return await cursor.fetchall()

    def stats(self) -> dict[str, int]:
        """``size``, ``available`` (idle connections) and ``requests_waiting``."""
        stats = self._pool.get_stats()
        return {
            "size": stats.get("pool_size", 0),
            "available": stats.get("pool_available", 0),
            "requests_waiting": stats.get("requests_waiting", 0),
        }

    async def close(self) -> None:
        """Close every connection; safe whether or not the pool was opened."""
        await self._pool.close()
