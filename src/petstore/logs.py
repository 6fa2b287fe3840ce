"""Logging: one line per request (D18) and the service's own messages.

``json`` gives one JSON object per line for log pipelines; ``text`` is for people
(the default in development). Every line carries the request id of the request
it belongs to, ``-`` outside requests. No API key or Authorization value is ever
passed to a logger: requests are logged by their API key *id*.
"""

from __future__ import annotations

import logging
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


def configure(*, level: str, json: bool) -> None:
    """Send the ``petstore`` loggers to stderr at ``level``, as JSON or text."""
    handler = logging.StreamHandler()
    handler.addFilter(_RequestIdDefault())
    if json:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter(
                "%(asctime)s %(levelname)s %(name)s request_id=%(request_id)s %(message)s"
            )
        )
    logger = logging.getLogger("petstore")
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
