"""Group commit, shared by the stores: writes that arrive while a transaction is in
progress wait and go together into the next one.

Each caller is answered only after the commit that holds its write, so a group
commit costs no durability; it saves one transaction and one fsync per write when
writes are concurrent, and adds no delay when they are not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from petstore import errors

Item = TypeVar("Item")
Result = TypeVar("Result")

#: Writes committed together at most, so one transaction stays short.
MAX_BATCH = 256


class GroupCommitter(Generic[Item, Result]):
    """Feeds submitted items, in arrival order, to ``commit`` in batches.

    ``commit`` gets a list of items and returns one result per item, in order; if it
    raises, every caller of that batch gets the exception. Use from one event loop.
    """

    def __init__(self, commit: Callable[[list[Item]], Awaitable[list[Result]]]) -> None:
        self._commit = commit
        self._queue: asyncio.Queue[tuple[Item, asyncio.Future[Result]] | None] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._closed = False

    async def submit(self, item: Item) -> Result:
        """Commit ``item`` with whatever else is waiting; its result once committed.

        Raises Unavailable after :meth:`close`, and whatever ``commit`` raised.
        """
        if self._closed:
            raise errors.Unavailable("the store is closing; retry shortly")
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._run(self._queue))
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((item, future))
        return await future

    async def _run(self, queue: asyncio.Queue[tuple[Item, asyncio.Future[Result]] | None]) -> None:
        stopping = False
        while not stopping:
            batch: list[tuple[Item, asyncio.Future[Result]]] = []
            entry = await queue.get()
            while entry is not None:
                batch.append(entry)
                if len(batch) == MAX_BATCH or queue.empty():
                    break
                entry = queue.get_nowait()
            stopping = entry is None
            if not batch:
                continue
            try:
                results = await self._commit([item for item, _ in batch])
            except Exception as exc:  # every waiter learns why its write failed
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
            else:
                for (_, future), result in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(result)

    @property
    def waiting(self) -> int:
        """Writes queued for the next transaction."""
        return 0 if self._queue is None else self._queue.qsize()

    async def close(self) -> None:
        """Commit what is already queued, then stop; later submits raise Unavailable."""
        self._closed = True
        if self._queue is not None and self._worker is not None:
            self._queue.put_nowait(None)
            await self._worker
