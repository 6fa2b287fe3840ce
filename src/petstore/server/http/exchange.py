"""The HTTP toolkit every endpoint stands on: one request and its answer
(:class:`Exchange`) and reading a request body within its limits (:class:`BodyReader`,
D17).

Plain ASGI, no framework: the request path of the three operations runs a few
thousand times a second a core, and Starlette's request, response and routing layers
cost a fifth of a request there (docs/performance.md). Everything here is about
bytes on the wire; what an operation means lives in :mod:`petstore.server.http.operations`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from petstore.server import errors
from petstore.server.http.deadlines import Deadlines

Header = tuple[bytes, bytes]
JSON = b"application/json"
#: Seconds between checks of the request bodies being read against their deadline: a
#: stalled body is cut off between ``body_timeout_seconds`` and this much later (D17).
BODY_CHECK_SECONDS = 0.25


@dataclass(slots=True)
class Exchange:
    """One request and what its answer carries.

    ``headers`` go on whatever response is sent (the service's D18 headers, then
    what the operation learns on the way, such as the RateLimit fields of D15);
    ``status`` (0 until the answer starts), ``api_key_id``, ``route`` (the matched
    template, None for an unknown path), ``label`` (the operation's name, or the
    template) and ``trace_id`` are what the access log and the metrics report;
    ``path_param`` is the value of the route template's ``{...}`` part, empty for a
    template without one; ``body_read`` is False until :class:`BodyReader` starts,
    None while it reads and True once it has read the whole request body.
    """

    scope: Scope
    receive: Receive
    send: Send
    request_id: str
    headers: list[Header]
    path_param: str = ""
    status: int = 0
    api_key_id: int | None = None
    route: str | None = None
    label: str = "unmatched"
    trace_id: str | None = None
    body_read: bool | None = False
    _request_headers: dict[bytes, bytes] | None = field(default=None, repr=False)

    def header(self, name: bytes) -> str | None:
        """The first value of request header ``name`` (lower-case bytes), latin-1."""
        if self._request_headers is None:
            # reversed: the first of repeated headers wins, as in Starlette's Headers
            self._request_headers = dict(reversed(self.scope["headers"]))
        value = self._request_headers.get(name)
        return None if value is None else value.decode("latin-1")

    async def respond(
        self,
        status: int,
        body: bytes,
        headers: Iterable[Header] = (),
        *,
        content_type: bytes = JSON,
    ) -> None:
        """Send the whole response: ``body`` with ``headers`` and the exchange's.

        An answer sent before a request body was read whole (401, 413, 415, ...)
        says ``Connection: close``, and the server closes the connection after it
        (D17, RFC 9112 section 9.6): the unread body would otherwise be taken for
        the next request, and a pooling client would send into a closing connection.
        """
        self.status = status
        headers = [
            (b"content-type", content_type),
            (b"content-length", str(len(body)).encode()),
            *headers,
            *self.headers,
        ]
        if not self.body_read and self._has_body():
            headers.append((b"connection", b"close"))
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})

    def _has_body(self) -> bool:
        """Whether the request says a body follows (RFC 9112 section 6.3)."""
        length = self.header(b"content-length")
        return (length is not None and length != "0") or self.header(
            b"transfer-encoding"
        ) is not None

    async def fail(self, error: errors.PetstoreError) -> None:
        """Answer with ``error``'s Error body and headers (:func:`errors.render`)."""
        status, headers, body = errors.render(error, request_id=self.request_id)
        await self.respond(status, body, headers)

    async def forward(self, app: ASGIApp, *, mounted_at: str) -> None:
        """Let the ASGI ``app`` (served under the path ``mounted_at``) answer, with the
        exchange's headers added; an HTTP error it raises gets its Error body."""

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
                message["headers"] = [*message.get("headers", ()), *self.headers]
            await self.send(message)

        try:
            await app({**self.scope, "root_path": mounted_at}, self.receive, send)
        except HTTPException as exc:
            await self.fail(errors.from_http_status(exc.status_code, exc.headers))


class BodyReader:
    """Reads request bodies of at most ``limit`` bytes that arrive within ``within``
    seconds (D17). Use from one event loop.

    The deadlines of all the bodies being read are checked by one timer every
    :data:`BODY_CHECK_SECONDS` (:class:`.deadlines.Deadlines`), not a timer each. A
    read past its deadline is cancelled, as ``asyncio.timeout`` would, and answered
    400.
    """

    def __init__(self, *, limit: int, within: float) -> None:
        self.limit = limit
        self.within = within
        self._deadlines = Deadlines(seconds=within, tick=BODY_CHECK_SECONDS)

    async def read(self, exchange: Exchange) -> bytes:
        """The request body of ``exchange``.

        Raises PayloadTooLarge (413) as soon as it passes ``limit`` bytes (at once
        when ``Content-Length`` says so), and InvalidRequest (400) when it has not
        fully arrived ``within`` seconds or the client went away. Reading stops once
        the bytes of a ``Content-Length`` are in (RFC 9112 section 6.2: they are the
        whole body), without waiting for the server's closing empty message: each
        message is a round trip to the server's I/O thread.
        """
        limit = self.limit
        declared = exchange.header(b"content-length") or ""
        expected = int(declared) if declared.isdigit() else None
        if expected is not None and expected > limit:
            raise self._too_large()
        deadlines = self._deadlines
        task = deadlines.watch()  # ASGI apps are called in a task
        exchange.body_read = None  # being read: a request timeout now is the client's (D17)
        chunks, size = [], 0
        message: Message = {"more_body": True}
        try:
            while size != expected and message.get("more_body", False):
                message = await exchange.receive()
                if message["type"] != "http.request":  # http.disconnect, or broken framing
                    raise errors.InvalidRequest(
                        "body: the request body ended early or is malformed"
                    )
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise self._too_large()
                chunks.append(chunk)
        except asyncio.CancelledError:
            if deadlines.was_cut(task):
                task.uncancel()
                raise errors.InvalidRequest(
                    f"body: the request body did not arrive within {self.within:g} s"
                ) from None
            raise
        finally:
            deadlines.forget(task)
        exchange.body_read = True
        return b"".join(chunks)

    def _too_large(self) -> errors.PayloadTooLarge:
        return errors.PayloadTooLarge(f"the request body is larger than {self.limit} bytes")
