"""Logging: one line per request (D18) and the service's own messages.

``json`` gives one JSON object per line for log pipelines; ``text`` is for people
(the default in development). Every line carries the request id of the request
it belongs to, ``-`` outside requests. No API key or Authorization value is ever
passed to a logger: requests are logged by their API key *id*. What a line looks
like is :mod:`.logformat`'s business.

Each app writes its access lines through an :class:`AccessLog` of its own, which
``create_app`` makes and the app's lifespan closes: closing it ends that app's
handler and nobody else's. It hands an access line's fields to its handler (a
:class:`~.logstream.BufferedStderr`), whose formatter builds the :class:`AccessLine`.
An app built without a handler of its own (tests, an embedding program) logs each
access line as an ordinary LogRecord of the ``petstore.access`` logger, with the same
message and fields, to whatever handlers the process gave it.

The ``petstore`` loggers and their level are the process's (Python's ``logging``
has one of each): :func:`configure` is called by whoever starts the process (a
worker's app factory, ``petstore serve``), never by an app's lifespan.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import BinaryIO

from petstore.server.telemetry.logformat import LOGGER as LOGGER
from petstore.server.telemetry.logformat import REQUEST_FIELDS, AccessFields, access_lines
from petstore.server.telemetry.logformat import AccessLine as AccessLine
from petstore.server.telemetry.logformat import JsonFormatter as JsonFormatter
from petstore.server.telemetry.logformat import TextFormatter as TextFormatter
from petstore.server.telemetry.logstream import BufferedStderr

access_log = logging.getLogger(LOGGER)
_service_log = logging.getLogger("petstore")


class AccessLog:
    """Where one app's access lines go (D18): to ``handler``, which then belongs to
    this app (its :meth:`close` closes it), when the handler's level lets INFO
    through; without one, as ordinary records of the ``petstore.access`` logger when
    it logs INFO."""

    def __init__(self, handler: BufferedStderr | None = None) -> None:
        self.handler = handler
        self._queue = (
            handler.access if handler is not None and handler.level <= logging.INFO else None
        )

    def access(
        self,
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
        """Log the line of one answered request (D18) at INFO: ``route`` is its
        template (None for an unknown path, then ``path`` is shown), ``seconds`` its
        duration, ``trace_id`` its W3C trace id when it has one (D23)."""
        queue = self._queue
        if queue is None:
            if self.handler is not None or not access_log.isEnabledFor(logging.INFO):
                return
            queue = _access_record
        at = time.time()
        queue((at, request_id, method, route, path, status, seconds, api_key_id, client, trace_id))

    def close(self) -> None:
        """At the app's shutdown: flush this app's handler and stop its flush thread
        (lines logged later are written at once). Without a handler of its own, only
        flush the process's: it is not this app's to close."""
        if self.handler is None:
            flush()
        else:
            self.handler.close()


def _access_record(fields: AccessFields) -> None:
    """Log the access line of ``fields`` as an ordinary record: its message, and its
    request fields as the record's attributes. A function of its own, apart from
    :meth:`AccessLog.access`, which runs on every request."""
    (line,) = access_lines(deque((fields,)), lambda at: "")  # the record has its time
    access_log.info(line.message, extra={field: getattr(line, field) for field in REQUEST_FIELDS})


def flush() -> None:
    """Write out every log line still buffered by the process's handler (the access
    lines of the last half second would otherwise be lost with the worker)."""
    for handler in _service_log.handlers:
        handler.flush()


class _RequestIdDefault(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = "-"
        return True


def handler(*, json: bool, level: str = "INFO", stream: BinaryIO | None = None) -> BufferedStderr:
    """A new handler of log lines at ``level`` or above (a logging level name) to
    stderr (or ``stream``, kept open by its caller), as JSON lines
    (:class:`JsonFormatter`) or text (:class:`TextFormatter`), every record given a
    ``request_id`` (``-`` outside requests). Its flush thread runs until it is
    closed. Raises ValueError for an unknown level."""
    made = BufferedStderr(JsonFormatter() if json else TextFormatter(), stream=stream)
    made.setLevel(level)
    made.addFilter(_RequestIdDefault())
    return made


def configure(*, level: str, json: bool) -> BufferedStderr:
    """For the process: send the ``petstore`` loggers to stderr at ``level`` (a
    logging level name) through a new :func:`handler`, which is returned; replaces
    whatever handlers they had, closing them. Raises ValueError for an unknown level.
    Whoever calls it owns the handler: the worker hands it to its one app
    (``AccessLog(handler)``), whose lifespan closes it."""
    _service_log.setLevel(level)  # first: an unknown level changes nothing
    made = handler(json=json, level=level)
    replaced, _service_log.handlers[:] = _service_log.handlers[:], [made]
    _service_log.propagate = False
    for old in replaced:
        old.close()
    return made
