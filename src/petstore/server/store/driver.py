"""What a backend gives the repositories: a small async interface to its driver
(:class:`Database`, :class:`Transaction`), over which each repository is written once.

A transaction is a callback of the driver's (:meth:`Database.in_transaction`), which
each backend runs as it must (SQLite's on its writer's lock, PostgreSQL's within one
bounded call). The store's unit of work (``Store.transaction``) gives its callers a
block (``async with``) instead: :func:`transactions` picks the driver's own block
where it has one (:class:`TransactionBlocks`: SQLite's, the traced driver's), and
makes one of the callback elsewhere (:func:`bridged`).

Statements are each backend's literal SQL (``store.sqlite``, ``store.postgres``), with
named parameters (SQLite's ``:name``, psycopg's ``%(name)s``) given as a mapping; a
row comes back as a mapping of the names its statement gave the columns
(:mod:`.rows`). Timestamps go in through the dialect's ``to_db``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, LiteralString, Protocol, TypeVar, runtime_checkable

from petstore.server import errors
from petstore.server.store.rows import Row

#: A statement's named parameters.
Params = Mapping[str, Any]
T = TypeVar("T")

#: No parameters.
NONE: Params = {}


class Transaction(Protocol):
    """Statements inside one transaction of :meth:`Database.in_transaction`."""

    async def fetch(self, statement: LiteralString, params: Params = NONE) -> list[Row]:
        """Run ``statement``; its rows (none for a statement without)."""
        ...


class Database(Protocol):
    """One database through one driver. Every method raises ``errors.Unavailable``
    when the database cannot be used now (D10, D25): not open, unreachable, no
    answer within the bound. ``system`` is its OpenTelemetry ``db.system.name``."""

    system: str

    async def open(self) -> None:
        """Connect; raises ``errors.Unavailable`` (SQLite: ``sqlite3.Error``)."""
        ...

    async def read(self, statement: LiteralString, params: Params = NONE) -> list[Row]:
        """The rows of one SELECT."""
        ...

    async def write(
        self,
        statement: LiteralString,
        params: Params = NONE,
        *,
        first: LiteralString | None = None,
    ) -> list[Row]:
        """The rows of one statement, committed, durable once returned. With
        ``first``, a query run before it in the same transaction, whose one row's
        columns join ``params``."""
        ...

    async def in_transaction(self, work: Callable[[Transaction], Awaitable[T]]) -> T:
        """``work``'s result, its statements committed together, durable on return;
        rolled back when it raises (and what it raised raised again)."""
        ...

    def stats(self) -> dict[str, int]:
        """Connection figures: ``size``, ``available``, ``requests_waiting``."""
        ...

    async def close(self) -> None:
        """Release every connection; safe without open and twice."""
        ...


@runtime_checkable
class TransactionBlocks(Protocol):
    """A driver that also runs a transaction as a block."""

    def transaction(self) -> AbstractAsyncContextManager[Transaction]:
        """``async with database.transaction() as tx:``, as :func:`bridged` says."""
        ...


def transactions(database: Database) -> Callable[[], AbstractAsyncContextManager[Transaction]]:
    """What begins a transaction of ``database`` as a block: its own
    (:class:`TransactionBlocks`), or :func:`bridged` over its callback."""
    if isinstance(database, TransactionBlocks):
        return database.transaction
    return lambda: bridged(database)


@asynccontextmanager
async def bridged(database: Database) -> AsyncIterator[Transaction]:
    """``async with bridged(database) as tx:`` runs the block's statements (on ``tx``)
    in one transaction of :meth:`Database.in_transaction`: committed, durable, once
    the block ends; rolled back when it raises, and what it raised raised again (the
    driver's errors as ``errors.Unavailable``, as the callback's are). Raises
    ``errors.Unavailable`` when the transaction cannot begin or commit.

    The driver's transaction runs as a task of its own that waits for the block: a
    callback in the driver is how such a backend bounds and ends a transaction
    (PostgreSQL's, within one bounded call), and a block is how a caller composes
    one. A cancelled block ends the task too, which then ends the transaction as the
    driver ends a cancelled callback's.
    """
    loop = asyncio.get_running_loop()
    begun: asyncio.Future[Transaction] = loop.create_future()
    ended: asyncio.Future[None] = loop.create_future()

    async def block(tx: Transaction) -> None:
        begun.set_result(tx)
        await ended

    running = loop.create_task(database.in_transaction(block))
    try:
        await asyncio.wait((begun, running), return_when=asyncio.FIRST_COMPLETED)
        if not begun.done():
            await running  # raises why the transaction did not begin
    except BaseException:
        ended.cancel()
        running.cancel()
        raise
    try:
        yield begun.result()
    except Exception as exc:
        ended.set_exception(exc)
        await running  # rolled back: raises ``exc``, or errors.Unavailable caused by it
        raise
    except BaseException:  # cancelled, or an interrupt: the task ends as a callback would
        ended.cancel()
        running.cancel()
        raise
    ended.set_result(None)
    await running


class Reachable:
    """``with reachable:`` turns the driver errors of ``unavailable`` (types, never
    message text) into ``errors.Unavailable`` (503 with Retry-After, D10, D25): the
    database cannot be used now, and a retry shortly may succeed."""

    __slots__ = ("_unavailable",)

    def __init__(self, *unavailable: type[BaseException]) -> None:
        self._unavailable = unavailable

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if kind is not None and issubclass(kind, self._unavailable):
            raise errors.Unavailable("the database is unavailable; retry shortly") from exc
