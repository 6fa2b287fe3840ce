"""Batches: work submitted close together is done together, each caller still
getting its own result.

:class:`Batcher` (group commit, grouped reads): work that arrives while a batch is in
progress waits and goes together into the next one. Each caller of a write is
answered only after the commit that holds its write, so batching costs no
durability; it saves a transaction (and an fsync) per write when writes are
concurrent. A grouped read starts after each of its callers arrived, so it sees
every write answered before, as a read of its own would.

:class:`TurnBatcher` (rate-limit counts): what is submitted during one turn of the
event loop is done together at the start of the next turn. Under load a turn holds
tens of requests; with no load the next turn follows at once.

Neither reads the time; both are used from one event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from petstore.server import errors

Item = TypeVar("Item")
Result = TypeVar("Result")

#: Items in one batch at most, so one transaction or query stays short.
MAX_BATCH = 256
#: Turns of the event loop a create that finds no commit running waits before its
#: commit starts (``Batcher(wait_turns=...)``), so that creates arriving meanwhile
#: share it: a few microseconds on an idle loop, one turn's requests each on a busy one.
CREATE_WAIT_TURNS = 8


def running_loop(last: asyncio.AbstractEventLoop | None) -> asyncio.AbstractEventLoop:
    """The running event loop: ``last`` (the loop a batcher last ran on) while it runs,
    else ``asyncio.get_running_loop()``, which asks the operating system for the
    process id each time (a system call; a batcher runs on every request).
    Code that runs on one thread has one running loop. Raises RuntimeError when no
    loop runs."""
    if last is not None and last.is_running():
        return last
    return asyncio.get_running_loop()


class Batcher(Generic[Item, Result]):
    """Feeds submitted items, in arrival order, to ``commit`` in batches (a commit of
    writes, or one query for many reads).

    ``commit`` gets a list of items and returns one result per item, in order; if it
    fails, every caller of that batch gets the exception. Use from one event loop.

    An item that finds no batch running starts a runner task, which waits
    ``wait_turns`` turns of the event loop first (so that items submitted meanwhile
    join the first batch), then commits batch after batch until none is queued. A
    caller that is cancelled does not stop the batch it is in.
    """

    def __init__(
        self, commit: Callable[[list[Item]], Awaitable[list[Result]]], *, wait_turns: int = 0
    ) -> None:
        self._commit = commit
        self._wait_turns = wait_turns
        self._queued: list[tuple[Item, asyncio.Future[Result]]] = []
        self._runner: asyncio.Task[None] | None = None
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None  # see running_loop

    def submit(self, item: Item) -> asyncio.Future[Result]:
        """Run ``item`` with whatever else is waiting: the future of its result, set
        once its batch is done (the future itself, as :meth:`TurnBatcher.submit`
        gives). ``item`` is queued at the call.

        Raises Unavailable after :meth:`close`; the future raises whatever
        ``commit`` raised.
        """
        if self._closed:
            raise errors.Unavailable("the store is closing; retry shortly")
        loop = self._loop = running_loop(self._loop)
        future: asyncio.Future[Result] = loop.create_future()
        self._queued.append((item, future))
        if self._runner is None:
            self._runner = loop.create_task(self._run())
        return future

    async def _run(self) -> None:
        """Commit what is queued, batch after batch, after ``wait_turns`` turns."""
        try:
            for _ in range(self._wait_turns):
                await asyncio.sleep(0)
            while self._queued:
                batch, self._queued = self._queued[:MAX_BATCH], self._queued[MAX_BATCH:]
                try:
                    await _settle(batch, self._commit)
                except asyncio.CancelledError:  # and so are the callers of what is queued
                    for _, future in self._queued:
                        future.cancel()
                    raise
        finally:
            self._runner = None

    @property
    def waiting(self) -> int:
        """Items queued for the next batch."""
        return len(self._queued)

    async def close(self) -> None:
        """Run what is already queued, then stop; later submits raise Unavailable."""
        self._closed = True
        while self._runner is not None:
            await asyncio.wait([self._runner])


class TurnBatcher(Generic[Item, Result]):
    """Feeds the items submitted during one turn of the event loop, in submission
    order, to ``run`` at the start of the next turn, as one batch.

    ``run`` gets the items and returns one result per item, in order; if it raises,
    every caller of that batch gets the exception. Each batch runs as a task of its
    own, so a batch that waits (a Redis round trip) does not hold up the next turn's.
    A batch starts after every one of its items was submitted, so a read in it sees
    every write answered before any of its callers arrived. Use from one event loop.
    """

    def __init__(self, run: Callable[[list[Item]], Awaitable[list[Result]]]) -> None:
        self._run = run
        self._queued: list[tuple[Item, asyncio.Future[Result]]] = []
        self._running: set[asyncio.Task[None]] = set()  # strong references until done
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None  # see running_loop

    def submit(self, item: Item) -> asyncio.Future[Result]:
        """The future of ``item``'s result, set once the batch of this turn has run:
        the future itself, not a coroutine awaiting it, so that a caller awaits it
        with no frame between (every request passes here). ``item`` is queued at
        the call.

        Raises Unavailable after :meth:`close`; the future raises whatever ``run``
        raised.
        """
        if self._closed:
            raise errors.Unavailable("the service is stopping; retry shortly")
        loop = self._loop = running_loop(self._loop)
        future: asyncio.Future[Result] = loop.create_future()
        if not self._queued:
            # The task's first step runs at the next turn and takes everything queued by then.
            task = loop.create_task(self._run_batch())
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        self._queued.append((item, future))
        return future

    async def _run_batch(self) -> None:
        batch, self._queued = self._queued, []
        await _settle(batch, self._run)

    async def close(self) -> None:
        """Let the batches already submitted finish; later submits raise Unavailable."""
        self._closed = True
        while self._running:
            await asyncio.wait(list(self._running))


async def _settle(
    batch: list[tuple[Item, asyncio.Future[Result]]],
    run: Callable[[list[Item]], Awaitable[list[Result]]],
) -> None:
    """Run ``batch``'s items through ``run`` and give each future its result, in order,
    or the exception ``run`` raised; a future whose caller stopped waiting is skipped.
    Cancelled (the loop is shutting down, and so are the callers), it cancels every
    future of ``batch`` and raises CancelledError."""
    try:
        results = await run([item for item, _ in batch])
    except asyncio.CancelledError:
        for _, future in batch:
            future.cancel()
        raise
    except Exception as failure:  # every caller learns why its batch failed
        for _, future in batch:
            if not future.done():
                future.set_exception(failure)
        return
    for (_, future), result in zip(batch, results, strict=True):
        if not future.done():
            future.set_result(result)
