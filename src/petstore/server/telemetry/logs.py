"""Logging: one line per request (D18) and the service's own messages.

``json`` gives one JSON object per line for log pipelines; ``text`` is for people
(the default in development). Every line carries the request id of the request
it belongs to, ``-`` outside requests. No API key or Authorization value is ever
passed to a logger: requests are logged by their API key *id*.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any

import msgspec

from petstore.server.telemetry.accesslines import (
    LOGGER,
    REQUEST_FIELDS,
    AccessFields,
    BufferedStderr,
    access_lines,
)

_encode = msgspec.json.Encoder().encode
access_log = logging.getLogger(LOGGER)


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


#: The handler of JSON lines once :func:`configure` has set one up; access lines are
#: then handed straight to it (see :func:`access`).
_json_handler: BufferedStderr | None = None


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
    trace_id: str | None = None,
) -> None:
    """Log the line of one answered request (D18) on ``petstore.access`` at INFO:
    ``route`` is its template (None for an unknown path, then ``path`` is shown),
    ``seconds`` its duration, ``trace_id`` its W3C trace id when it has one (D23).

    With JSON logs configured, the fields go straight to the handler, which encodes
    the :class:`AccessLine` in batches: a LogRecord and the formatter cost a third of
    a getPet under load (docs/performance.md). Otherwise (text logs, or loggers left
    to the caller, as in tests) it is an ordinary record with the same message and
    the line's request fields as attributes.
    """
    if not access_log.isEnabledFor(logging.INFO):
        return
    fields = (
        time.time(),
        request_id,
        method,
        route,
        path,
        status,
        seconds,
        api_key_id,
        client,
        trace_id,
    )
    handler = _json_handler
    if handler is not None:
        handler.access(fields)
        return
    # Apart, for the JSON path's sake: with this inline, a call of access() costs 10%
    # more on Python 3.11 even when it does not get here.
    _access_record(fields)


def _access_record(fields: AccessFields) -> None:
    """Log the access line of ``fields`` as an ordinary record: its message, and its
    request fields as the record's attributes."""
    (line,) = access_lines(deque((fields,)))
    access_log.info(line.message, extra={field: getattr(line, field) for field in REQUEST_FIELDS})


def flush() -> None:
    """Write out every log line still buffered (at shutdown: the access lines of the
    last half second would otherwise be lost with the worker)."""
    for handler in logging.getLogger("petstore").handlers:
        handler.flush()


def configure(*, level: str, json: bool) -> None:
    """Send the ``petstore`` loggers to stderr at ``level`` (a logging level name),
    as JSON lines (:class:`JsonFormatter`) or text (:class:`TextFormatter`); replaces
    whatever handlers they had. Raises ValueError for an unknown level."""
    global _json_handler
    logger = logging.getLogger("petstore")
    logger.setLevel(level)  # first: an unknown level changes nothing
    handler = BufferedStderr()
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
