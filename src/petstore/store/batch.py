"""Batches, shared by the stores: work that arrives while a batch is in progress
waits and goes together into the next one.

Group commit: each caller is answered only after the commit that holds its write, so
it costs no durability; it saves one transaction and one fsync per write when writes
are concurrent, and adds no delay when they are not. Grouped reads (getPet on
PostgreSQL): each caller's read starts after the caller arrived, so it sees every
write answered before, as a read of its own would; it saves one round trip per read
when reads are concurrent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from petstore import errors

Item = TypeVar("Item")
Result = TypeVar("Result")

#: Items in one batch at most, so one transaction or query stays short.
MAX_BATCH = 256


class Batcher(Generic[Item, Result]):
    """Feeds submitted items, in arrival order, to ``commit`` in batches (a commit of
    writes, or one query for many reads).

    ``commit`` gets a list of items and returns an awaitable of one result per item,
    in order; if it fails, every caller of that batch gets the exception. Use from
    one event loop.

    An item that finds no batch running starts one at once; the next batch starts
    from the done-callback of the one before. When ``commit`` returns a future (the
    SQLite writer thread's), no task sits between a caller and its commit: a task
    switch costs a lone create more than its SQL. A coroutine runs as a task of its
    own. Either way a caller that is cancelled does not stop the batch it is in.
    """

    def __init__(self, commit: Callable[[list[Item]], Awaitable[list[Result]]]) -> None:
        self._commit = commit
        self._queued: list[tuple[Item, asyncio.Future[Result]]] = []
        self._running: asyncio.Future[list[Result]] | None = None
        self._closed = False

    async def submit(self, item: Item) -> Result:
        """Run ``item`` with whatever else is waiting; its result once its batch is done.

        Raises Unavailable after :meth:`close`, and whatever ``commit`` raised.
        """
        if self._closed:
            raise errors.Unavailable("the store is closing; retry shortly")
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._queued.append((item, future))
        if self._running is None:
            self._start()
        return await future

    def _start(self) -> None:
        batch, self._queued = self._queued[:MAX_BATCH], self._queued[MAX_BATCH:]
        try:
            commit = self._commit([item for item, _ in batch])
            self._running = asyncio.ensure_future(commit)
        except Exception as exc:  # the commit could not even start: its batch learns why
            self._running = asyncio.get_running_loop().create_future()
            self._running.set_exception(exc)
        self._running.add_done_callback(lambda done: self._finish(batch, done))

    def _finish(
        self, batch: list[tuple[Item, asyncio.Future[Result]]], done: asyncio.Future[list[Result]]
    ) -> None:
        failure = None if done.cancelled() else done.exception()
        if done.cancelled() or failure is not None:
            for _, future in batch:  # every waiter learns why its write failed
                if not future.done():
                    if failure is None:
                        future.cancel()
                    else:
                        future.set_exception(failure)
        else:
            for (_, future), result in zip(batch, done.result(), strict=True):
                if not future.done():
                    future.set_result(result)
        self._running = None
        if self._queued:
            self._start()

    @property
    def waiting(self) -> int:
        """Items queued for the next batch."""
        return len(self._queued)

    async def close(self) -> None:
        """Run what is already queued, then stop; later submits raise Unavailable."""
        self._closed = True
        while self._running is not None:
            await asyncio.wait([self._running])
