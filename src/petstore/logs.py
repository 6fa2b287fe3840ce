"""Logging: one line per request (D18) and the service's own messages.

``json`` gives one JSON object per line for log pipelines; ``text`` is for people
(the default in development). Every line carries the request id of the request
it belongs to, ``-`` outside requests. No API key or Authorization value is ever
passed to a logger: requests are logged by their API key *id*.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any

import msgspec

_encoder = msgspec.json.Encoder()
_encode = _encoder.encode
access_log = logging.getLogger("petstore.access")


class AccessLine(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The line of one answered request (D18): the one definition of its shape.

    A JSON line is these fields in this order without the ones that are None, whether
    encoded from this Struct (:func:`access` with JSON logs) or from a LogRecord
    (:class:`JsonFormatter`); a text line (:class:`TextFormatter`) shows the same
    fields. Lines are built by :func:`_access_lines` only. Encoding a Struct costs
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


#: Attributes a request's log line may carry beyond the message (every record may
#: carry ``request_id``): :class:`AccessLine`'s fields after ``message``.
REQUEST_FIELDS = AccessLine.__struct_fields__[AccessLine.__struct_fields__.index("message") + 1 :]
#: The request fields a text line shows in its own place: ``request_id=`` before the
#: message, and the message itself (:func:`_access_lines`). The others follow it.
_IN_TEXT_MESSAGE = frozenset(("request_id", "method", "route", "status", "duration_ms"))
_TEXT_TAIL = tuple(field for field in REQUEST_FIELDS if field not in _IN_TEXT_MESSAGE)


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", <request fields>, "error"?}`` per line:
    :class:`AccessLine`'s fields in its order, those the record has not or are None
    left out."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in REQUEST_FIELDS:
            value = getattr(record, field, None)
            if value is not None:
                entry[field] = value
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return _encode(entry).decode()


class TextFormatter(logging.Formatter):
    """``<time> <level> <logger> request_id=<id> <message>`` and then ``name=value`` for
    each other request field the record carries (``api_key_id``, ``client``), the
    ones that are None left out; a traceback, if any, on the lines after."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s request_id=%(request_id)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802  # logging's name
        """The line of ``record`` without its traceback."""
        line = super().formatMessage(record)
        for field in _TEXT_TAIL:
            value = getattr(record, field, None)
            if value is not None:
                line = f"{line} {field}={value}"
        return line


class _RequestIdDefault(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = "-"
        return True


#: Access lines held before they are encoded together (see :meth:`_BufferedStderr.access`).
ACCESS_BATCH = 256


class _BufferedStderr(logging.StreamHandler):  # type: ignore[type-arg]
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
        self._access: deque[_AccessFields] = deque()
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

    def access(self, fields: _AccessFields) -> None:
        """Queue one access line: (epoch seconds, request id, method, route, path,
        status, seconds taken, API key id, client)."""
        self._access.append(fields)
        if len(self._access) >= ACCESS_BATCH:
            with self.lock:  # type: ignore[union-attr]
                self._write_access()

    def _write_access(self) -> None:
        # Called with the lock held.
        lines = _access_lines(self._access)
        if lines:
            self.stream.write(_encoder.encode_lines(lines))  # one JSON object a line


#: An access line as queued: (epoch seconds, request id, method, route, path, status,
#: seconds taken, API key id, client).
_AccessFields = tuple[float, str, str, str | None, str, int, float, int | None, str | None]


def _access_lines(pending: deque[_AccessFields]) -> list[AccessLine]:
    """Empty ``pending`` (oldest first; others may append meanwhile) into its lines.

    The only place an access line is built, its message included, for JSON and
    text alike. It takes a whole batch so that the per-request JSON path pays no
    call for it.
    """
    logger, lines = access_log.name, []
    while pending:
        at, request_id, method, route, path, status, seconds, api_key_id, client = pending.popleft()
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


#: The handler of JSON lines once :func:`configure` has set one up; access lines are
#: then handed straight to it (see :func:`access`).
_json_handler: _BufferedStderr | None = None


def access(
    *,
    request_id: str,
    method: str,
    route: str | None,
    path: str,
    status: int,
    seconds: float,
    api_key_id: int | None,
    client: str | None,
) -> None:
    """Log the line of one answered request (D18) on ``petstore.access`` at INFO:
    ``route`` is its template (None for an unknown path, then ``path`` is shown) and
    ``seconds`` its duration.

    With JSON logs configured, the fields go straight to the handler, which encodes
    the :class:`AccessLine` in batches: a LogRecord and the formatter cost a third of
    a getPet under load (docs/performance.md). Otherwise (text logs, or loggers left
    to the caller, as in tests) it is an ordinary record with the same message and
    the line's request fields as attributes.
    """
    if not access_log.isEnabledFor(logging.INFO):
        return
    handler = _json_handler
    if handler is not None:
        handler.access(
            (time.time(), request_id, method, route, path, status, seconds, api_key_id, client)
        )
        return
    # Apart, for the JSON path's sake: with this inline, a call of access() costs 10%
    # more on Python 3.11 even when it does not get here.
    _access_record(
        (time.time(), request_id, method, route, path, status, seconds, api_key_id, client)
    )


def _access_record(fields: _AccessFields) -> None:
    """Log the access line of ``fields`` as an ordinary record: its message, and its
    request fields as the record's attributes."""
    (line,) = _access_lines(deque((fields,)))
    access_log.info(line.message, extra={field: getattr(line, field) for field in REQUEST_FIELDS})


def configure(*, level: str, json: bool) -> None:
    """Send the ``petstore`` loggers to stderr at ``level`` (a logging level name),
    as JSON lines (:class:`JsonFormatter`) or text (:class:`TextFormatter`); replaces
    whatever handlers they had. Raises ValueError for an unknown level."""
    global _json_handler
    logger = logging.getLogger("petstore")
    logger.setLevel(level)  # first: an unknown level changes nothing
    handler = _BufferedStderr()
    _json_handler = handler if json else None
    handler.addFilter(_RequestIdDefault())
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    # The logging HOWTO's "Optimization": no caller, thread or process lookup per
    # record (our records name none of them); the access log writes one per request.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logger.handlers[:] = [handler]
    logger.propagate = False
