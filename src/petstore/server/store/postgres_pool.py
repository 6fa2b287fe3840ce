"""The PostgreSQL store's driver: one psycopg_pool pool, every wait bounded (D25).

Every wait is bounded by ``timeout`` seconds: for a pooled connection (the pool's
own timeout), for a new connection (libpq's ``connect_timeout``), for each statement
on the server (``statement_timeout``, which also bounds the wait for the id-order
lock), and on the client, since a server cut off or paused enforces nothing: a
statement or transaction not done within ``timeout`` is answered
``errors.Unavailable`` at once and left to psycopg, which cancels it and hands the
connection back (or closes it) in the background (:meth:`PostgresDatabase._bounded`).
A dead peer is noticed by TCP within seconds (:data:`KEEPALIVES`); the pool
reconnects by itself when the database is back.

Connections are lent untested (a test is a round trip on every request): a read
that finds its connection dead has the pool test its idle connections, replacing the
dead ones, and runs once more, so that one request, not one per idle connection,
meets a server restart. A write is never run twice: its commit may have landed.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, LiteralString, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from petstore.server import errors
from petstore.server.store.driver import Params, Reachable, Row, Statements, Transaction

Connection = psycopg.AsyncConnection[TupleRow]
T = TypeVar("T")

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

#: PostgreSQL's "database not usable now" (D10, D25): a connection refused or lost,
#: no pooled connection within the timeout (or a pool not open), a statement
#: cancelled by ``statement_timeout``, a missing table (a database not migrated).
reachable = Reachable(psycopg.OperationalError, psycopg.errors.UndefinedTable, PoolTimeout)


def connection_options(url: str, **options: Any) -> dict[str, Any]:
    """The keyword arguments for ``psycopg.connect(url, ...)``: ``options``, then
    :data:`KEEPALIVES` except those the libpq ``url`` (or conninfo string) already
    sets. Raises psycopg.ProgrammingError for a URL libpq cannot parse."""
    given = conninfo_to_dict(url)
    return {**{k: v for k, v in KEEPALIVES.items() if k not in given}, **options}


class _Transaction:
    """Statements on one connection inside ``conn.transaction()``."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def fetch(self, statement: LiteralString, params: Params = ()) -> list[Row]:
        cursor = await self._conn.execute(statement, params)
        return list(await cursor.fetchall()) if cursor.description is not None else []


class PostgresDatabase:
    """:class:`.driver.Database` over the ``postgresql://`` ``url`` with its
    ``statements``: 1 to ``size`` connections (an idle instance holds one), every
    wait bounded by ``timeout`` seconds, each session in UTC. Constructing it does no
    I/O; :meth:`open` connects. Use it from one event loop."""

    def __init__(self, url: str, *, statements: Statements, size: int, timeout: float) -> None:
        self.statements = statements
        self._url = url
        self._timeout = timeout
        self._abandoned: set[asyncio.Task[Any]] = set()  # cut short, still finishing
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

    @property
    def timeout(self) -> float:
        """Seconds every wait for the database is bounded by (D25)."""
        return self._timeout

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

    def read(self, statement: LiteralString, params: Params = ()) -> Awaitable[list[Row]]:
        """One SELECT; run once more on another connection if its own was dead."""
        return self._bounded(self._run(statement, params, again=True))

    def write(self, statement: LiteralString, params: Params = ()) -> Awaitable[list[Row]]:
        """One autocommit statement; never run twice (``errors.Unavailable`` when its
        connection died: its commit's outcome is unknown, D25)."""
        return self._bounded(self._run(statement, params, again=False))

    def in_transaction(self, work: Callable[[Transaction], Awaitable[T]]) -> Awaitable[T]:
        """``work`` inside ``BEGIN`` ... ``COMMIT`` on one connection, all of it
        within the bound."""

        async def transact() -> T:
            async with self._pool.connection() as conn, conn.transaction():
                return await work(_Transaction(conn))

        return self._bounded(transact())

    async def _run(self, statement: LiteralString, params: Params, *, again: bool) -> list[Row]:
        async with self._pool.connection() as conn:
            try:
                cursor = await conn.execute(statement, params)
                return list(await cursor.fetchall()) if cursor.description is not None else []
            except psycopg.OperationalError:
                if not (again and conn.broken):
                    raise
        await self._pool.check()
        return await self._run(statement, params, again=False)

    def _bounded(self, work: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """``work``'s result, run as a task of its own, or ``errors.Unavailable`` once
        it has run ``timeout`` seconds; the driver's errors become ``Unavailable``.
        Not ``asyncio.timeout``: that would wait for the cancelled statement, and
        psycopg cancels one by asking the server, which a paused server never answers
        (psycopg gives up after 10 s). Cut short, or its caller gone, the task is
        cancelled and left to finish in the background."""
        loop = asyncio.get_running_loop()
        task = loop.create_task(work)
        answer: asyncio.Future[T] = loop.create_future()
        timer = loop.call_later(self._timeout, self._expire, task, answer)

        def finished(task: asyncio.Task[T]) -> None:
            timer.cancel()
            if answer.done():  # answered already: retrieve what it raised
                if not task.cancelled():
                    task.exception()
            elif task.cancelled():
                answer.cancel()
            elif (exc := task.exception()) is not None:
                answer.set_exception(_as_unavailable(exc))
            else:
                answer.set_result(task.result())

        def given_up(answer: asyncio.Future[T]) -> None:
            if answer.cancelled() and not task.done():
                self._abandon(task)

        task.add_done_callback(finished)
        answer.add_done_callback(given_up)
        return answer

    def _expire(self, task: asyncio.Task[Any], answer: asyncio.Future[Any]) -> None:
        if not answer.done():
            answer.set_exception(
                errors.Unavailable(
                    f"the database did not answer within {self._timeout:g} s; retry shortly"
                )
            )
            self._abandon(task)

    def _abandon(self, task: asyncio.Task[Any]) -> None:
        task.cancel()
        self._abandoned.add(task)
        task.add_done_callback(self._abandoned.discard)

    def stats(self) -> dict[str, int]:
        """``size``, ``available`` (idle connections) and ``requests_waiting``."""
        stats = self._pool.get_stats()
        return {
            "size": stats.get("pool_size", 0),
            "available": stats.get("pool_available", 0),
            "requests_waiting": stats.get("requests_waiting", 0),
        }

    async def close(self) -> None:
        """Let the statements cut short finish (within the bound), then close every
        connection; safe whether or not the pool was opened."""
        if self._abandoned:
            await asyncio.wait(self._abandoned, timeout=self._timeout)
        await self._pool.close(timeout=self._timeout)


def _as_unavailable(exc: BaseException) -> BaseException:
    """``exc``, or ``errors.Unavailable`` caused by it when it is one of the driver's
    errors of :data:`reachable`."""
    try:
        with reachable:
            raise exc
    except BaseException as raised:
        return raised
