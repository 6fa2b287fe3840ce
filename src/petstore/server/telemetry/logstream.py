"""The stderr handler of the ``petstore`` loggers: lines through a buffer, access
lines in batches encoded and written by a thread of its own, which also flushes the
buffer, stopped by :meth:`close`.

What a line looks like is :mod:`petstore.server.telemetry.logformat`'s business (its
formatters); this module only decides when bytes reach file descriptor 2 (or the
stream it was given).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, BinaryIO, Protocol

#: Access lines held before they are encoded together (see :meth:`BufferedStderr.access`).
ACCESS_BATCH = 256
#: Seconds between flushes of the buffer by the flush thread.
FLUSH_SECONDS = 0.5
#: Access lines waiting at most for the flush thread; past them the event loop writes
#: them itself, waiting for the stream as it must: a stream that stalls (a pipe nobody
#: reads, a disk) holds the loop up rather than the lines piling up in memory
#: (4,096 lines: about 1 MB).
ACCESS_WAITING_MAX = 16 * ACCESS_BATCH


class AccessFormatter(Protocol):
    """A formatter that also turns queued access lines into bytes (all of them,
    emptying the queue, oldest first)."""

    def format(self, record: logging.LogRecord) -> str: ...

    def format_access(self, pending: deque[Any]) -> bytes: ...


class BufferedStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes UTF-8 lines to stderr (or to ``stream``, a binary file its caller
    keeps open and closes) through a 64 KiB buffer, flushed every
    :data:`FLUSH_SECONDS` by a thread of its own and at once for warnings and errors:
    one write per request is a system call saved. :meth:`close` stops the thread
    and flushes; lines written after that go out at once.

    Access lines arrive as their fields (:meth:`access`), with no LogRecord: making
    a LogRecord and formatting it on the request's path was a large share of a
    getPet. The formatter (``format_access``) encodes them in batches, when
    :data:`ACCESS_BATCH` are waiting, at every flush, and before any other record, so
    lines keep their order: a batch in one go costs a request less than each line as
    it comes (docs/performance.md has the figures). The flush thread encodes and
    writes a batch, woken by the access line that completes it, so the event loop
    never waits for the stream, nor for the lock the thread holds while it writes
    (under S4, a batch written to a log file on the database's disk once took 72 ms,
    every request of the loop held meanwhile: ``make tail``, docs/performance.md).
    The loop writes itself only when :data:`ACCESS_WAITING_MAX` lines are waiting.
    """

    def __init__(self, formatter: AccessFormatter, *, stream: BinaryIO | None = None) -> None:
        if stream is None:
            stream = open(2, "wb", buffering=65536, closefd=False)  # noqa: SIM115
        super().__init__(stream)
        self.setFormatter(formatter)  # type: ignore[arg-type]
        self._format_access = formatter.format_access
        # Fields of access lines not yet encoded; deque appends and pops are atomic,
        # so the event loop adds while the flush thread writes.
        self._access: deque[Any] = deque()
        self._batch = ACCESS_BATCH
        self._stopping = threading.Event()
        self._batch_waiting = threading.Event()
        self._flusher = threading.Thread(target=self._flush_often, name="log-flush", daemon=True)
        self._flusher.start()

    def _flush_often(self) -> None:
        # Never waits for the lock unbounded: logging.shutdown (at exit, and in the
        # dictConfig of Granian's start) calls close() with the lock held, and close()
        # waits for this thread. A flush that cannot have the lock is left to the next.
        flushed = time.monotonic()
        while not self._stopping.is_set():
            self._batch_waiting.wait(FLUSH_SECONDS)
            self._batch_waiting.clear()
            if self._stopping.is_set():
                return
            if self.lock.acquire(timeout=FLUSH_SECONDS):  # type: ignore[union-attr]
                try:
                    if time.monotonic() - flushed >= FLUSH_SECONDS:
                        self.flush()
                        flushed = time.monotonic()
                    else:
                        self._write_access()  # into the buffer; written out when full
                finally:
                    self.lock.release()  # type: ignore[union-attr]

    def flush(self) -> None:
        """Encode the waiting access lines, then write everything buffered."""
        with self.lock:  # type: ignore[union-attr]  # created by Handler.__init__
            self._write_access()
            super().flush()

    def close(self) -> None:
        """Stop the flush thread and flush; later lines are written at once. Idempotent
        (``logging.shutdown`` closes every handler at exit, and in ``dictConfig``).
        Called with the handler's lock held, as ``logging.shutdown`` does, it waits
        at most :data:`FLUSH_SECONDS` for the thread."""
        self._stopping.set()
        self._batch_waiting.set()
        if self._flusher.is_alive() and self._flusher is not threading.current_thread():
            self._flusher.join()
        self._batch = 1
        self.flush()
        super().close()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record).encode("utf-8", "backslashreplace")
            with self.lock:  # type: ignore[union-attr]
                self._write_access()
                self.stream.write(line)
                self.stream.write(b"\n")
            if record.levelno >= logging.WARNING or self._stopping.is_set():
                self.flush()
        except Exception:
            self.handleError(record)

    def access(self, fields: tuple[Any, ...]) -> None:
        """Queue one access line's fields (see ``logformat.AccessFields``); wake the
        flush thread when a batch is complete."""
        access = self._access
        access.append(fields)
        if len(access) >= self._batch:
            if self._stopping.is_set():
                self.flush()
            elif len(access) >= ACCESS_WAITING_MAX:
                with self.lock:  # type: ignore[union-attr]
                    self._write_access()
            elif not self._batch_waiting.is_set():
                self._batch_waiting.set()

    def _write_access(self) -> None:
        # Called with the lock held.
        if self._access:
            self.stream.write(self._format_access(self._access))
