"""The tail probe of ``python -m bench.tail``: timings from inside a served worker.

Python imports ``sitecustomize`` at start-up from the first folder of ``sys.path``
that has one; ``bench.tail`` puts this folder on the service's ``PYTHONPATH`` and names
a file in ``PETSTORE_BENCH_PROBE``. Without that variable it does nothing. In each
process it then records, one line ``<kind> <monotonic s> <ms> [<n>]`` each, to
``<file>.<pid>``:

- ``gc``: every garbage collection (``gc.callbacks``), ``n`` its generation;
- ``write``: every job of the SQLite writer thread (a commit: its SQL, its fsyncs and
  any WAL checkpoint it ran), ``n`` the frames (pages) in the WAL after it;
- ``checkpoint``: a job of the writer thread during which a checkpoint copied WAL
  frames into the database (the WAL-index's ``nBackfill`` grew), ``n`` the frames;
- ``batch``: every group commit, from its start to its callers' answers, ``n`` its
  creates;
- ``lag``: the event loop late by more than 2 ms for a 1 ms sleep;
- ``log``: each batch of access lines encoded and written (``logstream``);
- ``flush``: each flush of the log handler (its thread's, every 0.5 s, holding the
  handler's lock);
- ``access``: an access line's hand-over that took more than 1 ms (the loop waiting
  for the handler's lock, or writing a batch).

``PETSTORE_BENCH_PROBE_GC`` (``freeze``), ``PETSTORE_BENCH_PROBE_WAL_AUTOCHECKPOINT``
(pages; 0: none) and ``PETSTORE_BENCH_PROBE_LOG`` (``on-the-loop``: access lines
written by the request that completes a batch, as before the flush thread wrote them)
change the process for an A/B run. Measurement only: never shipped.
"""

from __future__ import annotations

import os

_FILE = os.environ.get("PETSTORE_BENCH_PROBE")


def _install(file: str) -> None:
    import asyncio
    import gc
    import sys
    import threading
    import time
    from pathlib import Path

    out = open(f"{file}.{os.getpid()}", "a", buffering=1)  # noqa: SIM115
    lock = threading.Lock()

    def record(kind: str, started: float, seconds: float, n: int = 0) -> None:
        with lock:
            out.write(f"{kind} {started:.6f} {seconds * 1e3:.3f} {n}\n")

    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        else:
            record("gc", gc_started[0], time.perf_counter() - gc_started[0], info["generation"])

    gc.callbacks.append(on_gc)
    if os.environ.get("PETSTORE_BENCH_PROBE_GC") == "freeze":
        gc.freeze()

    from petstore.server import batches
    from petstore.server.store import sqlite_connections
    from petstore.server.telemetry import logstream

    checkpoint = os.environ.get("PETSTORE_BENCH_PROBE_WAL_AUTOCHECKPOINT")
    connect = sqlite_connections.connect

    def probed_connect(path: Path, *, readonly: bool):  # type: ignore[no-untyped-def]
        conn = connect(path, readonly=readonly)
        if not readonly and checkpoint is not None:
            conn.execute(f"PRAGMA wal_autocheckpoint = {int(checkpoint)}")
        return conn

    sqlite_connections.connect = probed_connect
    writer = sqlite_connections.Writer
    submit, start = writer.submit, writer.start

    def wal_index(path: Path) -> tuple[int, int]:
        # The WAL-index (the -shm file): mxFrame, the frames in the WAL (bytes 16-19 of
        # its header), and nBackfill, the frames a checkpoint has copied into the
        # database (bytes 96-99), in the machine's byte order.
        try:
            with open(f"{path}-shm", "rb") as shm:
                head = shm.read(100)
        except OSError:
            return 0, 0
        return (
            int.from_bytes(head[16:20], sys.byteorder),
            int.from_bytes(head[96:100], sys.byteorder),
        )

    def probed_submit(self, job):  # type: ignore[no-untyped-def]
        def timed(conn):  # type: ignore[no-untyped-def]
            _, copied = wal_index(self._path)
            began = time.perf_counter()
            try:
                return job(conn)
            finally:
                spent = time.perf_counter() - began
                frames, copied_after = wal_index(self._path)
                record("write", began, spent, frames)
                if copied_after > copied:
                    record("checkpoint", began, spent, copied_after - copied)

        return submit(self, timed)

    async def probed_start(self):  # type: ignore[no-untyped-def]
        await start(self)
        asyncio.get_running_loop().create_task(_lag())

    async def _lag() -> None:
        while True:
            began = time.perf_counter()
            await asyncio.sleep(0.001)
            late = time.perf_counter() - began - 0.001
            if late > 0.002:
                record("lag", began, late)

    writer.submit, writer.start = probed_submit, probed_start  # type: ignore[method-assign]

    batcher_init = batches.Batcher.__init__

    def probed_init(self, commit, *, wait_turns=0):  # type: ignore[no-untyped-def]
        async def timed(items):  # type: ignore[no-untyped-def]
            began = time.perf_counter()
            try:
                return await commit(items)
            finally:
                record("batch", began, time.perf_counter() - began, len(items))

        batcher_init(self, timed, wait_turns=wait_turns)

    batches.Batcher.__init__ = probed_init  # type: ignore[method-assign]

    write_access = logstream.BufferedStderr._write_access

    def probed_write_access(self):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        waiting = len(self._access)
        write_access(self)
        if waiting:
            record("log", began, time.perf_counter() - began, waiting)

    logstream.BufferedStderr._write_access = probed_write_access  # type: ignore[method-assign]

    flush, access = logstream.BufferedStderr.flush, logstream.BufferedStderr.access

    def probed_flush(self):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        flush(self)
        record("flush", began, time.perf_counter() - began)

    def probed_access(self, fields):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        access(self, fields)
        if (spent := time.perf_counter() - began) > 0.001:
            record("access", began, spent)

    if os.environ.get("PETSTORE_BENCH_PROBE_LOG") == "on-the-loop":
        # The handler as it was: the request that completes a batch encodes and writes
        # it, holding the handler's lock, on the event loop.
        def access(self, fields):  # type: ignore[no-untyped-def]
            self._access.append(fields)
            if len(self._access) >= self._batch:
                with self.lock:
                    self._write_access()

    logstream.BufferedStderr.flush = probed_flush  # type: ignore[method-assign]
    logstream.BufferedStderr.access = probed_access  # type: ignore[method-assign]


if _FILE:
    _install(_FILE)
