"""The PostgreSQL store's connections: one bounded psycopg pool, every wait bounded.

Every wait is bounded by ``timeout`` (D25): for a pooled connection, for a new
connection (``connect_timeout``), for each statement on the server
(``statement_timeout``, which also bounds the wait for the id-order lock) and on the
client, since a server cut off or paused enforces nothing: a connection lent for
longer than ``timeout`` is cut (:meth:`Pool.connection`). A dead peer is noticed by
TCP within seconds (:data:`KEEPALIVES`). A database that cannot be reached within
the bound raises ``errors.Unavailable`` (503 with Retry-After, D10); the pool
reconnects by itself when the database is back. The pool lends connections untested
(a test is a round trip on every request); a statement that finds its connection
dead has the pool test and replace its idle ones, and a read is then run once more.

Single statements (:meth:`Pool.read`, :meth:`Pool.write`) keep a few connections
warm between them, each with its cursor (:data:`WARM_MAX`), instead of handing each
back to the library's pool: about 200 -> 139 us of the worker's CPU a statement.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, LiteralString

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from petstore.server.store.batch import running_loop
from petstore.server.store.queries import Reachable

Connection = psycopg.AsyncConnection[TupleRow]
Cursor = psycopg.AsyncCursor[TupleRow]
_IDLE = psycopg.pq.TransactionStatus.IDLE

#: libpq options on every PostgreSQL connection (D25): the pool's, the probe's and
#: the migrations'. A peer that vanishes without a FIN (a host cut off, powered off)
#: is noticed by TCP: an idle connection after 2 s without traffic and 3 unanswered
#: probes 1 s apart (5 s), one with data unacknowledged after 5 s
#: (``tcp_user_timeout``, ms), instead of TCP's retransmission timeout (about 15
#: minutes on Linux). 5 s is within the store's ``timeout`` (5 s by default) plus a
#: margin, and far above a loopback or LAN round trip, so a busy but live server is
#: never taken for dead. A value the operator put in the URL wins.
KEEPALIVES: dict[str, str] = {
    "keepalives": "1",
    "keepalives_idle": "2",
    "keepalives_interval": "1",
    "keepalives_count": "3",
    "tcp_user_timeout": "5000",
}


def connection_options(url: str, **options: Any) -> dict[str, Any]:
    """The keyword arguments for ``psycopg.connect(url, ...)``: ``options``, then
    :data:`KEEPALIVES` except those the libpq ``url`` (or conninfo string) already
    sets. Raises psycopg.ProgrammingError for a URL libpq cannot parse."""
    given = conninfo_to_dict(url)
    return {**{k: v for k, v in KEEPALIVES.items() if k not in given}, **options}


class ConnectionLost(psycopg.OperationalError):
    """A statement found its pooled connection dead: the server restarted, or something
    between us and it cut the connection while it sat in the pool."""


class NoAnswer(psycopg.OperationalError):
    """The database did not answer within the timeout, and the connection was cut
    (D25): it is paused, cut off, or overloaded. Not retried."""


#: PostgreSQL's "database not usable now" (D10, D25): a connection refused, lost
#: or cut at the client-side bound, no pooled connection within the timeout (or a
#: pool not open), a statement cancelled by ``statement_timeout``, a missing table
#: (a database not migrated, or damaged).
reachable = Reachable(psycopg.OperationalError, psycopg.errors.UndefinedTable, PoolTimeout)

#: Connections kept out of the library's pool between single statements, at most:
#: the batches that run one statement after another (creates, getPets, the pages of
#: each filter) each find one there, with the cursor it used. A read of 8 animals in
#: a loop costs the worker about 200 us of CPU through the pool with a new cursor,
#: 170 us on a warm connection, 139 us with its cursor used again
#: (docs/performance.md, "Warm connections").
WARM_MAX = 4
#: Seconds between the moments every warm connection goes back to the library's
#: pool, which then applies its own upkeep (its lifetime, shrinking when idle), so an
#: idle instance holds no more connections than the pool would a second later.
WARM_SECONDS = 1.0


def _cut(conn: Connection) -> None:
    """Shut ``conn``'s socket down, both ways: whatever waits on it reads end of file
    at once and fails with an OperationalError, the connection then broken. Not
    ``close``: the event loop still watches the descriptor. Not ``cancel``: psycopg
    would wait for the server's answer to the cancel request, which a paused server
    never sends."""
    if conn.closed:
        return
    with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


class Pool:
    """Connections to the ``postgresql://`` ``url``: 1 to ``size`` of them (an idle
    instance holds one; the pool grows under load and shrinks when idle), every wait
    bounded by ``timeout`` seconds, each session in UTC. Constructing it does no I/O;
    :meth:`open` connects. Use it from one event loop."""

    def __init__(self, url: str, *, size: int, timeout: float) -> None:
        self._url = url
        self._timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None  # see batch.running_loop
        self._warm: list[tuple[Connection, Cursor]] = []  # idle, out of the library's pool
        self._cooling: asyncio.TimerHandle | None = None  # the next _cool
        self._returning: set[asyncio.Task[None]] = set()  # strong references until done
        statement_ms = str(math.ceil(timeout * 1000))

        async def configure(conn: Connection) -> None:
            # UTC: timestamps come back alike whatever the server's zone.
            await conn.execute(
                "SELECT set_config('TimeZone', 'UTC', false), "
                "set_config('statement_timeout', %s, false)",
                (statement_ms,),
            )

        # libpq counts connect_timeout in whole seconds, at least 2.
        self._kwargs = connection_options(
            url, autocommit=True, connect_timeout=max(2, math.ceil(timeout))
        )
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
        with reachable:
            probe = await psycopg.AsyncConnection.connect(self._url, **self._kwargs)
            await probe.close()
            await self._pool.open(wait=True, timeout=self._timeout)

    @property
    def timeout(self) -> float:
        """Seconds every wait for the database is bounded by (D25)."""
        return self._timeout

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A connection from the pool, lent untested: testing it first is a round trip
        on every request (getPet in process: 2,530 -> 3,800 a second without,
        docs/performance.md). One that turns out dead in use raises ConnectionLost,
        after the pool has tested its idle connections and replaced the dead ones, so
        that one request, not one per idle connection, meets a server restart.

        Bounded on the client (D25): ``timeout`` seconds after it was asked for, a
        connection still lent is cut (:func:`_cut`), so a statement that gets no
        answer (a server paused or cut off, which enforces no ``statement_timeout``)
        raises ConnectionLost then; a write's outcome is then unknown, and its
        caller is answered 503 (a retry with the same Idempotency-Key settles it,
        D16). One timer a lending, no round trip. Raises psycopg_pool.PoolTimeout
        when none is free within the timeout."""
        conn, cut = await self._lend()
        try:
            yield conn
        except psycopg.OperationalError as exc:
            raise await self._failed(conn, cut, exc) from exc
        finally:
            cut.cancel()
            await self._pool.putconn(conn)

    async def _lend(self) -> tuple[Connection, asyncio.TimerHandle]:
        """A connection from the library's pool and the timer that cuts it at its
        deadline, ``timeout`` seconds from now (D25, :meth:`connection`)."""
        loop = self._loop = running_loop(self._loop)
        deadline = loop.time() + self._timeout
        conn = await self._pool.getconn(self._timeout)
        return conn, loop.call_at(deadline, _cut, conn)

    async def _failed(
        self, conn: Connection, cut: asyncio.TimerHandle, exc: psycopg.OperationalError
    ) -> psycopg.OperationalError:
        """What a statement that failed with ``exc`` on ``conn`` raises: ``exc`` itself
        when the connection is whole (an error of the statement), NoAnswer when the
        deadline cut it, else ConnectionLost once the pool has tested its idle
        connections (the warm ones handed back first)."""
        if not conn.broken:
            return exc
        if cut.when() <= running_loop(self._loop).time():  # cut at its deadline: no test
            return NoAnswer(f"no answer within {self._timeout} s")
        self._cool()
        await asyncio.gather(*self._returning)
        await self._pool.check()
        return ConnectionLost(str(exc))

    def _cool(self) -> None:
        """Hand every warm connection back to the library's pool (:data:`WARM_SECONDS`)."""
        if self._cooling is not None:
            self._cooling.cancel()
            self._cooling = None
        warm, self._warm = self._warm, []
        if warm:
            task = asyncio.ensure_future(self._put_back(warm), loop=self._loop)
            self._returning.add(task)
            task.add_done_callback(self._returning.discard)

    async def _put_back(self, warm: list[tuple[Connection, Cursor]]) -> None:
        for conn, _ in warm:
            await self._pool.putconn(conn)

    async def read(
        self, statement: LiteralString, params: tuple[Any, ...] = (), *, warm: bool = True
    ) -> list[TupleRow]:
        """The rows of one SELECT. One that met a dead connection is run once more, on
        another: a read changes nothing, so running it twice is safe. ``warm=False``
        (reads in the background, each second) takes no warm connection and leaves
        none, so an idle instance's connections still go back to the library's pool.
        Raises ``errors.Unavailable`` when the database cannot be reached."""
        with reachable:
            try:
                return await self._execute(statement, params, warm=warm)
            except ConnectionLost:
                return await self._execute(statement, params, warm=warm)

    async def write(self, statement: LiteralString, params: tuple[Any, ...]) -> list[TupleRow]:
        """The rows (``RETURNING``) of one autocommit write. Not run again when its
        connection died, as its commit may have landed first: raises
        ``errors.Unavailable`` then, and when the database cannot be reached."""
        with reachable:
            return await self._execute(statement, params)

    async def _execute(
        self, statement: LiteralString, params: tuple[Any, ...], *, warm: bool = True
    ) -> list[TupleRow]:
        """One statement on a warm connection and its cursor if one is there (a cursor
        used again keeps the types it has learnt; :data:`WARM_MAX`), else on one from
        the library's pool, bounded as :meth:`connection` is; its rows. ``warm=False``:
        on one from the library's pool, handed back at once."""
        if warm and self._warm:
            conn, cursor = self._warm.pop()
            loop = self._loop = running_loop(self._loop)
            cut = loop.call_at(loop.time() + self._timeout, _cut, conn)
        else:
            conn, cut = await self._lend()
            cursor = conn.cursor()
        try:
            await cursor.execute(statement, params)
            rows = await cursor.fetchall()
        except BaseException as exc:
            cut.cancel()
            await self._pool.putconn(conn)  # closed there when broken
            if isinstance(exc, psycopg.OperationalError):
                raise await self._failed(conn, cut, exc) from exc
            raise
        cut.cancel()
        if warm and len(self._warm) < WARM_MAX and conn.pgconn.transaction_status == _IDLE:
            self._warm.append((conn, cursor))
            if self._cooling is None:
                self._cooling = running_loop(self._loop).call_later(WARM_SECONDS, self._cool)
        else:
            await self._pool.putconn(conn)
        return rows

    def stats(self) -> dict[str, int]:
        """``size``, ``available`` (idle connections, the warm ones included) and
        ``requests_waiting``."""
        stats = self._pool.get_stats()
        return {
            "size": stats.get("pool_size", 0),
            "available": stats.get("pool_available", 0) + len(self._warm),
            "requests_waiting": stats.get("requests_waiting", 0),
        }

    async def close(self) -> None:
        """Close every connection; safe whether or not the pool was opened."""
        self._cool()
        await asyncio.gather(*self._returning)
        await self._pool.close()
