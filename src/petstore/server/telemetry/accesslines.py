"""Access lines (D18): the one definition of their shape, and the stderr handler
that writes them in batches.

An access line is built only here (:func:`access_lines`), for JSON and text logs
alike; :mod:`petstore.server.telemetry.logs` decides where it goes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from datetime import UTC, datetime

import msgspec

#: The logger of access lines.
LOGGER = "petstore.access"
_encoder = msgspec.json.Encoder()


class AccessLine(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The line of one answered request (D18): the one definition of its shape.

    A JSON line is these fields in this order without the ones that are None, whether
    encoded from this Struct (``logs.access`` with JSON logs) or from a LogRecord
    (``logs.JsonFormatter``); a text line (``logs.TextFormatter``) shows the same
    fields. Lines are built by :func:`access_lines` only. Encoding a Struct costs
    less than a dict.
    """

    time: str
    level: str
    logger: str
    message: str
    request_id: str
    method: str
    route: str | None = None
    status: int
    duration_ms: float
    api_key_id: int | None = None
    client: str | None = None
    trace_id: str | None = None


#: Attributes a request's log line may carry beyond the message (every record may
#: carry ``request_id``): :class:`AccessLine`'s fields after ``message``.
REQUEST_FIELDS = AccessLine.__struct_fields__[AccessLine.__struct_fields__.index("message") + 1 :]
#: Access lines held before they are encoded together (see :meth:`BufferedStderr.access`).
ACCESS_BATCH = 256


class BufferedStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes UTF-8 lines to stderr through a 64 KiB buffer, flushed every half second
    and at once for warnings and errors: one write per request is a system call saved.

    Access lines arrive as their fields (:meth:`access`), with no LogRecord: a
    LogRecord and the formatter cost a third of a getPet under load, and skipping
    them took served getPet from 0.23 to 0.41 of the raw ASGI baseline. They are
    encoded in batches, when :data:`ACCESS_BATCH` are waiting, at every flush, and
    before any other record, so lines keep their order: a batch in one go costs a
    request less than each line as it comes, +10% served (17,300-19,000 to
    19,300-20,100 req/s; docs/performance.md).
    """

    def __init__(self) -> None:
        super().__init__(open(2, "wb", buffering=65536, closefd=False))  # noqa: SIM115
        # Fields of access lines not yet encoded; deque appends and pops are atomic,
        # so the event loop adds while the flush thread writes.
        self._access: deque[AccessFields] = deque()
        flusher = threading.Thread(target=self._flush_forever, name="log-flush", daemon=True)
        flusher.start()

    def _flush_forever(self) -> None:
        while True:
            time.sleep(0.5)
            self.flush()

    def flush(self) -> None:
        """Encode the waiting access lines, then write everything buffered."""
        with self.lock:  # type: ignore[union-attr]  # created by Handler.__init__
            self._write_access()
            super().flush()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record).encode("utf-8", "backslashreplace")
            with self.lock:  # type: ignore[union-attr]
                self._write_access()
                self.stream.write(line)
                self.stream.write(b"\n")
            if record.levelno >= logging.WARNING:
                self.flush()
        except Exception:
            self.handleError(record)

    def access(self, fields: AccessFields) -> None:
        """Queue one access line: (epoch seconds, request id, method, route, path,
        status, seconds taken, API key id, client, trace id)."""
        self._access.append(fields)
        if len(self._access) >= ACCESS_BATCH:
            with self.lock:  # type: ignore[union-attr]
                self._write_access()

    def _write_access(self) -> None:
        # Called with the lock held.
        lines = access_lines(self._access)
        if lines:
            self.stream.write(_encoder.encode_lines(lines))  # one JSON object a line


#: An access line as queued: (epoch seconds, request id, method, route, path, status,
#: seconds taken, API key id, client, trace id).
AccessFields = tuple[
    float, str, str, str | None, str, int, float, int | None, str | None, str | None
]


def access_lines(pending: deque[AccessFields]) -> list[AccessLine]:
    """Empty ``pending`` (oldest first; others may append meanwhile) into its lines.

    The only place an access line is built, its message included, for JSON and
    text alike. It takes a whole batch so that the per-request JSON path pays no
    call for it.
    """
    logger, lines = LOGGER, []
    while pending:
        at, request_id, method, route, path, status, seconds, api_key_id, client, trace_id = (
            pending.popleft()
        )
        ms = seconds * 1000
        lines.append(
            AccessLine(
                time=_timestamp(at),
                level="INFO",
                logger=logger,
                message=f"{method} {route or path} {status} {ms:.1f}ms",
                request_id=request_id,
                method=method,
                route=route,
                status=status,
                duration_ms=round(ms, 3),
                api_key_id=api_key_id,
                client=client,
                trace_id=trace_id,
            )
        )
    return lines


_stamp: tuple[int, str] = (-1, "")


def _timestamp(at: float) -> str:
    """Epoch seconds ``at`` as JsonFormatter writes a time (UTC, milliseconds),
    formatted once per millisecond: thousands of access lines a second share each."""
    global _stamp
    ms = int(at * 1000)
    if ms != _stamp[0]:
        seconds, millis = divmod(ms, 1000)
        now = datetime.fromtimestamp(seconds, UTC).replace(microsecond=millis * 1000)
        _stamp = (ms, now.isoformat(timespec="milliseconds"))
    return _stamp[1]
