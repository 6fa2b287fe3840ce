"""The PostgreSQL store's driver: one psycopg_pool pool, every wait bounded (D25).

Every wait is bounded by ``timeout`` seconds: for a pooled connection (the pool's
own timeout), for a new connection (libpq's ``connect_timeout``), for each statement
on the server (``statement_timeout``, which also bounds the wait for the id-order
lock), and on the client, since a server cut off or paused enforces nothing: a
statement or transaction not done within ``timeout`` is answered
``errors.Unavailable`` at once and its connection cut, never cancelled
(:meth:`PostgresDatabase._bounded` says why: D26).
A dead peer is noticed by TCP within seconds (:data:`KEEPALIVES`); the pool
reconnects by itself when the database is back, and refuses a primary that may have
been replaced (D27, :data:`.postgres_connections.SERVES`).

Connections are lent untested (a test is a round trip on every request): a read
that finds its connection dead has the pool test its idle connections, replacing the
dead ones, and runs once more, so that one request, not one per idle connection,
meets a server restart. A write is never run twice: its commit may have landed.

**The one hand-built awaitable.** Each call runs as a task of its own and its caller
awaits a future of :meth:`PostgresDatabase._bounded`, settled when the task ends or
at the deadline, whichever comes first. It is there for correctness, not speed: a
caller that stops waiting (cancelled, or past the bound) leaves the task and its
statement running on a cut connection, never cancelling them. A caller must await
only the future it is given; the task is the driver's and must never be awaited or
cancelled from outside.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, LiteralString, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from petstore.server import errors
from petstore.server.store.driver import NONE, Params, Transaction
from petstore.server.store.postgres_connections import (
    KEEPALIVES,
    SERVICE_SESSION,
    Call,
    Connection,
    HostOrder,
    NoAnswer,
    as_unavailable,
    connection_options,
    reachable,
)
from petstore.server.store.rows import Row

T = TypeVar("T")


class PostgresDatabase:
    """:class:`.driver.Database` over the ``postgresql://`` ``url``: 1 to ``size``
    connections (an idle instance holds one), every wait bounded by ``timeout``
    seconds, each session in UTC. Constructing it does no I/O; :meth:`open` connects.
    Use it from one event loop."""

    system = "postgresql"

    def __init__(self, url: str, *, size: int = 10, timeout: float = 5.0) -> None:
        self._url = url
        self._timeout = timeout
        self._working: set[asyncio.Task[Any]] = set()  # every bounded call's task
        statement_ms = str(math.ceil(timeout * 1000))

        async def configure(conn: Connection) -> None:
            conn.keep_a_cursor(self._hosts)
            # UTC: timestamps come back alike whatever the server's zone.
            await conn.execute(
                "SELECT set_config('TimeZone', 'UTC', false), "
                "set_config('statement_timeout', %s, false)",
                (statement_ms,),
            )

        # libpq counts connect_timeout in whole seconds, at least 2.
        self._kwargs = connection_options(
            url,
            defaults={**KEEPALIVES, **SERVICE_SESSION},
            autocommit=True,
            connect_timeout=max(2, math.ceil(timeout)),
        )
        self._hosts = HostOrder(url, self._kwargs)
        self._pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
            url,
            kwargs=self._hosts,
            min_size=1,
            max_size=size,
            timeout=timeout,
            configure=configure,
            connection_class=Connection,
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

    async def read(self, statement: LiteralString, params: Params = NONE) -> list[Row]:
        """One SELECT; run once more on another connection if its own was dead."""
        return await self._bounded(lambda call: self._run(call, statement, params, again=True))

    async def write(
        self,
        statement: LiteralString,
        params: Params = NONE,
        *,
        first: LiteralString | None = None,
    ) -> list[Row]:
        """One autocommit statement (with ``first``: both in one transaction); never
        run twice (``errors.Unavailable`` when its connection died: its commit's
        outcome is unknown, D25)."""
        if first is None:
            return await self._bounded(lambda call: self._run(call, statement, params, again=False))

        async def after(tx: Transaction) -> list[Row]:
            (given,) = await tx.fetch(first)
            return await tx.fetch(statement, {**params, **given})

        return await self.in_transaction(after)

    async def in_transaction(self, work: Callable[[Transaction], Awaitable[T]]) -> T:
        """``work`` inside ``BEGIN`` ... ``COMMIT`` on one connection, all of it
        within the bound."""

        async def transact(call: Call) -> T:
            async with self._lend(call) as conn, conn.transaction():
                return await work(conn)

        return await self._bounded(transact)

    @asynccontextmanager
    async def _lend(self, call: Call) -> AsyncIterator[Connection]:
        """A pooled connection for ``call``, which its timer cuts at the deadline."""
        conn = await self._borrow(call)
        try:
            yield conn
        finally:
            call.conn = None
            if call.expired:  # cut after its last read: it looks sound, its socket is shut
                await conn.close()  # so the pool drops it instead of lending it again
            await self._pool.putconn(conn)

    async def _borrow(self, call: Call) -> Connection:
        """A connection from the pool (``getconn``: its own bound), now ``call``'s;
        raises NoAnswer, the connection handed back, when lent after the deadline."""
        conn = await self._pool.getconn()
        if call.expired:  # lent only after the deadline: the caller has its answer
            await self._pool.putconn(conn)
            raise NoAnswer("lent after the deadline")
        call.conn = conn
        return conn

    async def _run(
        self, call: Call, statement: LiteralString, params: Params, *, again: bool
    ) -> list[Row]:
        # getconn and putconn written out, not _lend or the pool's connection(): a
        # context manager's calls on every statement, for nothing a single
        # autocommit statement needs.
        conn = await self._borrow(call)
        try:
            return await conn.fetch(statement, params)
        except psycopg.OperationalError:
            if not (again and conn.broken):
                raise
        finally:
            call.conn = None
            await self._pool.putconn(conn)
        await self._pool.check()
        return await self._run(call, statement, params, again=False)

    def _bounded(self, work: Callable[[Call], Coroutine[Any, Any, T]]) -> asyncio.Future[T]:
        """``work``'s result, run as a task of its own, or ``errors.Unavailable`` once
        it has run ``timeout`` seconds; the driver's errors become ``Unavailable``.

        At the deadline (or when the caller stops waiting) the connection ``work`` is
        using is cut (:func:`_cut`), never cancelled: psycopg cancels a statement by
        asking the server, and a cancel request ends a commit's wait for the
        synchronous standby, which makes a commit that only the primary holds visible
        to every later read (D26: acknowledged means on two hosts; a retry with the
        same Idempotency-Key would be answered from it, and a failover would lose
        it). Cut, the statement fails at once on this side; on the server it goes on
        waiting, unseen, until the standby answers or the primary is demoted. Not
        ``asyncio.timeout`` either, which cancels."""
        loop = asyncio.get_running_loop()
        call = Call()
        task = loop.create_task(work(call))
        answer: asyncio.Future[T] = loop.create_future()
        timer = loop.call_later(self._timeout, self._expire, call, answer)

        def finished(task: asyncio.Task[T]) -> None:
            timer.cancel()
            self._working.discard(task)
            if answer.done():  # answered already: retrieve what it raised
                if not task.cancelled():
                    task.exception()
            elif task.cancelled():
                answer.cancel()
            elif (exc := task.exception()) is not None:
                answer.set_exception(as_unavailable(exc))
            else:
                answer.set_result(task.result())

        def given_up(answer: asyncio.Future[T]) -> None:
            if answer.cancelled():
                call.cut()

        self._working.add(task)
        task.add_done_callback(finished)
        answer.add_done_callback(given_up)
        return answer

    def _expire(self, call: Call, answer: asyncio.Future[Any]) -> None:
        if not answer.done():
            answer.set_exception(
                errors.Unavailable(
                    f"the database did not answer within {self._timeout:g} s; retry shortly"
                )
            )
        call.cut()

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
        if self._working:
            await asyncio.wait(self._working, timeout=self._timeout)
        await self._pool.close(timeout=self._timeout)
