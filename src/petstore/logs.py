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
from datetime import UTC, datetime
from typing import Any

import msgspec

#: Attributes a request's log line may carry beyond the message (see middleware).
REQUEST_FIELDS = ("request_id", "method", "route", "status", "duration_ms", "api_key_id", "client")
_encode = msgspec.json.Encoder().encode


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", <request fields>, "error"?}`` per line."""

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


class _RequestIdDefault(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = "-"
        return True


class _BufferedStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to stderr through a 64 KiB buffer, flushed every half second and at once
    for warnings and errors: one write per request is a system call saved."""

    def __init__(self) -> None:
        super().__init__(open(2, "w", buffering=65536, closefd=False))  # noqa: SIM115
        flusher = threading.Thread(target=self._flush_forever, name="log-flush", daemon=True)
        flusher.start()

    def _flush_forever(self) -> None:
        while True:
            time.sleep(0.5)
            self.flush()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write(self.format(record) + "\n")
            if record.levelno >= logging.WARNING:
                self.flush()
        except Exception:
            self.handleError(record)


def configure(*, level: str, json: bool) -> None:
    """Send the ``petstore`` loggers to stderr at ``level``, as JSON or text."""
    handler = _BufferedStderr()
    handler.addFilter(_RequestIdDefault())
    if json:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter(
                "%(asctime)s %(levelname)s %(name)s request_id=%(request_id)s %(message)s"
            )
        )
    # The logging HOWTO's "Optimization": no caller, thread or process lookup per
    # record (our records name none of them); the access log writes one per request.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logger = logging.getLogger("petstore")
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
