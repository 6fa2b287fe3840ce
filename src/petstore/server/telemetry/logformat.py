"""What a log line looks like: the access line of a request (D18) and every other
record, as JSON (:class:`JsonFormatter`) or text (:class:`TextFormatter`).

:mod:`petstore.server.telemetry.logs` decides where lines go; this module only
turns records, and queued access lines in batches, into text.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any

import msgspec

from petstore.server.telemetry.escapes import escape_controls, escape_field

#: The logger of access lines.
LOGGER = "petstore.access"


class AccessLine(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The line of one answered request (D18): the one definition of its shape.

    A JSON line is these fields in this order without the ones that are None, from
    this Struct or a LogRecord (:class:`JsonFormatter`); a text line shows the same
    fields. Lines are built by :func:`access_lines` only.
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
#: An access line as queued: (epoch seconds, request id, method, route, path, status,
#: seconds taken, API key id, client, trace id).
AccessFields = tuple[
    float, str, str, str | None, str, int, float, int | None, str | None, str | None
]
#: The fields a text line shows in its own place (``request_id=`` first, the message).
_IN_TEXT_MESSAGE = frozenset(("request_id", "method", "route", "status", "duration_ms"))
_TEXT_TAIL = tuple(field for field in REQUEST_FIELDS if field not in _IN_TEXT_MESSAGE)


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", <request fields>, "error"?}`` per line:
    :class:`AccessLine`'s fields in its order, those the record has not or are None
    left out."""

    def __init__(self) -> None:
        super().__init__()
        self._encoder = msgspec.json.Encoder()
        self._stamp: tuple[int, str] = (-1, "")

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
        return self._encoder.encode(entry).decode()

    def format_access(self, pending: deque[AccessFields]) -> bytes:
        """Empty ``pending`` into its JSON lines, one object a line."""
        return self._encoder.encode_lines(access_lines(pending, self._timestamp))

    def _timestamp(self, at: float) -> str:
        """Epoch seconds ``at`` as :meth:`format` writes a time (UTC, milliseconds),
        formatted once per millisecond: thousands of access lines a second share each."""
        ms = int(at * 1000)
        if ms != self._stamp[0]:
            seconds, millis = divmod(ms, 1000)
            now = datetime.fromtimestamp(seconds, UTC).replace(microsecond=millis * 1000)
            self._stamp = (ms, now.isoformat(timespec="milliseconds"))
        return self._stamp[1]


class TextFormatter(logging.Formatter):
    """``<time> <level> <logger> request_id=<id> <message>`` and then ``name=value`` for
    each other request field the record carries (``api_key_id``, ``client``,
    ``trace_id``), the ones that are None left out, each value escaped as a field
    (:func:`escape_field`: no space in it is a separator); a traceback, if any, on
    the lines after. The time is local, as ``logging`` writes ``asctime``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s request_id=%(request_id)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802  # logging's name
        """The line of ``record`` without its traceback, its control characters
        escaped (:func:`escape_controls`): one record, one line."""
        return escape_controls(self._tail(super().formatMessage(record), record))

    def format_access(self, pending: deque[AccessFields]) -> bytes:
        """Empty ``pending`` into its text lines, as :meth:`format` writes a record."""
        lines = [
            self._tail(
                f"{line.time} INFO {line.logger} request_id={line.request_id} {line.message}",
                line,
            )
            for line in access_lines(pending, self._asctime)
        ]
        lines.append("")
        return "\n".join(lines).encode("utf-8", "backslashreplace")

    def _asctime(self, at: float) -> str:
        seconds = time.strftime(self.default_time_format, time.localtime(at))
        return f"{seconds},{int(at % 1 * 1000):03d}"

    @staticmethod
    def _tail(line: str, source: object) -> str:
        for field in _TEXT_TAIL:
            value = getattr(source, field, None)
            if value is not None:
                line = f"{line} {field}={escape_field(str(value))}"
        return line


def access_lines(pending: deque[AccessFields], timestamp: Any) -> list[AccessLine]:
    """Empty ``pending`` (oldest first; others may append meanwhile) into its lines,
    each time written by ``timestamp(epoch_seconds) -> str``. The only place an access
    line is built, its message included; it takes a whole batch so that the
    per-request path pays no call for it. The path of an unknown route, which a
    client chose, is written as a field (:func:`escape_field`: its white space,
    control and format characters and backslashes escaped), in both formats, so
    that no path can end the message and forge the fields after it."""
    logger, lines = LOGGER, []
    while pending:
        at, request_id, method, route, path, status, seconds, api_key_id, client, trace_id = (
            pending.popleft()
        )
        ms = seconds * 1000
        if route is None:
            path = escape_field(path)
        lines.append(
            AccessLine(
                time=timestamp(at),
                level="INFO",
                logger=logger,
                message=f"{method} {route or path} {status} {ms:.1f}ms",
                request_id=request_id,
                method=method,
                route=route,
                status=status,
                duration_ms=round(seconds * 1e6) / 1000,  # whole microseconds; round(ms, 3) is slow
                api_key_id=api_key_id,
                client=client,
                trace_id=trace_id,
            )
        )
    return lines
