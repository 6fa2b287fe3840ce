"""The SQLite store's two connections: how each is opened, what their errors mean
(:data:`reachable`), the thread that commits on the write one, so that the event
loop never waits on a lock or an fsync, and how timestamps are stored."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from petstore.server import errors
from petstore.server.batches import running_loop
from petstore.server.store.driver import Reachable
from petstore.server.store.rows import Row

#: Milliseconds a writer waits for another process's write lock before giving up.
BUSY_TIMEOUT_MS = 5000
_T = TypeVar("_T")
_Job = tuple[Callable[[sqlite3.Connection], Any], "asyncio.Future[Any]"]


#: SQLite's "database not usable now": locked past the busy timeout, file gone or
#: unreadable, disk full (D10).
reachable = Reachable(sqlite3.OperationalError)


def not_open(*args: object) -> NoReturn:
    """Raises errors.Unavailable: the store is not open (not yet, or no longer)."""
    raise errors.Unavailable("the store is not open; retry shortly")


def connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    """A connection to the file at ``path`` in autocommit mode, usable from any thread:
    read-only, with SQLite's default page cache of 2,000 KiB (kept animals answer most
    getPets, docs/performance.md), or a writer in WAL mode with ``synchronous=FULL``
    (a commit is on disk when it returns). Raises sqlite3.Error."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if readonly:
        conn.execute("PRAGMA query_only = ON")
    else:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
    return conn


def rows_of(cursor: sqlite3.Cursor) -> list[Row]:
    """The rows of ``cursor``'s statement, each by the names it gave its columns."""
    rows = cursor.fetchall()
    if not rows:
        return []
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in rows]


class Writer:
    """The thread that owns the write connection to ``path`` and runs write jobs one
    at a time, in submission order. Each job's result is handed back to the
    submitting event loop's future: one queue put and one thread-safe callback.
    Constructing it starts nothing; :meth:`start` does. :attr:`connection` is the
    write connection, for statements run on the event loop while no job runs
    (:class:`petstore.server.store.sqlite.SQLiteDatabase`'s transactions)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # see batches.running_loop
        self.connection: sqlite3.Connection | None = None

    async def start(self) -> None:
        """Start the thread and connect; raises what connecting raised."""
        opened: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(opened,), name="sqlite-writer", daemon=True
        )
        self._thread.start()
        await asyncio.wrap_future(opened)

    def submit(self, job: Callable[[sqlite3.Connection], _T]) -> asyncio.Future[_T]:
        """Run ``job`` with the write connection on the writer thread; its result.
        Raises errors.Unavailable before :meth:`start` and after :meth:`close`."""
        if self._thread is None:
            not_open()
        loop = self._loop = running_loop(self._loop)
        future: asyncio.Future[_T] = loop.create_future()
        self._jobs.put((job, future))
        return future

    def close(self) -> None:
        """Run the jobs already submitted, close the connection, end the thread."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            thread.join()

    def _run(self, opened: concurrent.futures.Future[None]) -> None:
        try:
            conn = connect(self._path, readonly=False)
        except BaseException as exc:
            opened.set_exception(exc)
            return
        self.connection = conn
        opened.set_result(None)
        while (entry := self._jobs.get()) is not None:
            job, future = entry
            loop = future.get_loop()
            outcome: tuple[Any, BaseException | None]
            try:
                outcome = job(conn), None
            except BaseException as exc:
                outcome = None, exc
            # A loop already closed (a shutdown cut short) waits for nothing; the
            # thread goes on to the next job, and to closing the connection.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, *outcome)
        self.connection = None
        conn.close()


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.cancelled():  # its caller stopped waiting; the write itself is done
        return
    if exc is None:
        future.set_result(result)
    else:
        future.set_exception(exc)


def iso(value: datetime) -> str:
    """A timestamp as stored: one fixed UTC spelling, so stored timestamps compare
    correctly as text."""
    return value.astimezone(UTC).isoformat(timespec="microseconds")
