"""The HTTP toolkit every endpoint stands on: the request as an immutable view
(:class:`Request`), the answer being built (:class:`Response`), and reading a request
body within its limits (:class:`BodyReader`, D17).

Plain ASGI, no framework: the request path of the operations is the hot path,
and Starlette's request, response and routing layers cost a measurable share of
each request there (docs/performance.md). Everything here is about bytes on the
wire; what an operation is lives on the route table (:mod:`.routes`), its rule in
:mod:`.operations`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import msgspec
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from petstore.server import errors
from petstore.server.http.deadlines import Deadlines

if TYPE_CHECKING:
    from petstore.server.rules.admission import Verdict

Header = tuple[bytes, bytes]
JSON = b"application/json"
#: The headers on every answer, which the pipeline starts with them (D18, OWASP REST
#: Security Cheat Sheet).
SECURITY_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
]
#: Seconds between checks of the request bodies being read against their deadline: a
#: stalled body is cut off between ``body_timeout_seconds`` and this much later (D17).
BODY_CHECK_SECONDS = 0.25


class Request(msgspec.Struct, frozen=True, kw_only=True):
    """What a request says, read once by the pipeline and never changed (a frozen
    struct, built by keyword: of its members, several share a type; msgspec builds
    one in half the time of a named tuple built by position).

    ``scheme`` and ``client`` (address, port) are the load balancer's ``X-Forwarded-*``
    values where those are trusted; ``headers`` maps each lower-case name to its first
    value; ``request_id`` is the client's sane ``X-Request-ID`` or a new one;
    ``trace_id`` the W3C trace (D23; None without a ``traceparent`` or tracer);
    ``route`` the template of the matched route (None for an unknown path) and
    ``path_param`` the value of its ``{...}`` part. ``scope`` and ``receive`` are the ASGI ones, for
    reading the body and for handing the request to a mounted app. ``malformed`` says
    why the request is answered 400 whatever it asks (a missing or repeated ``Host``,
    a repeated ``Authorization``: :func:`.reading.malformed`), None for most.
    """

    method: str
    path: str
    query: bytes
    scheme: str
    client: tuple[str, int] | None
    headers: Mapping[bytes, bytes]
    request_id: str
    trace_id: str | None
    route: str | None
    path_param: str
    scope: Scope
    receive: Receive
    malformed: str | None = None

    def header(self, name: bytes) -> str | None:
        """The first value of request header ``name`` (lower-case bytes), latin-1."""
        value = self.headers.get(name)
        return None if value is None else value.decode("latin-1")

    def has_body(self) -> bool:
        """Whether the request says a body follows (RFC 9112 section 6.3)."""
        headers = self.headers
        return headers.get(b"content-length", b"0") != b"0" or b"transfer-encoding" in headers


class Response:
    """The answer being built for ``request``, sent once by :meth:`respond`.

    ``headers`` go on whatever answer is sent (the service's D18 headers, then what the
    operation learns on the way, such as the RateLimit fields of D15), added with
    :meth:`add_headers`. ``status`` is 0 until the answer starts; ``api_key_id`` is
    the caller's key once known (logged, never the key: D13); ``body_read`` is False
    until :class:`BodyReader` starts, None while it reads and True once it has read
    the whole request body.
    """

    __slots__ = ("_request", "_send", "api_key_id", "body_read", "headers", "status")

    def __init__(self, request: Request, send: Send, headers: list[Header]) -> None:
        self._request = request
        self._send = send
        self.headers = headers
        self.status = 0
        self.api_key_id: int | None = None
        self.body_read: bool | None = False

    def admit(self, verdict: Verdict) -> int:
        """The caller's API key id of ``verdict`` (``rules.admission``), once its key
        id and RateLimit fields are on this answer, whatever it turns out to be.
        Raises the verdict's refusal, if any (401, 403, 429)."""
        api_key_id, headers, refusal = verdict
        self.api_key_id = api_key_id  # logged by id, never the key (D13)
        self.headers += headers
        if refusal is not None:
            raise refusal
        assert api_key_id is not None
        return api_key_id

    def add_headers(self, headers: Iterable[Header]) -> None:
        """Put ``headers`` on whatever answer is sent."""
        self.headers += headers

    def drop_header(self, name: bytes) -> None:
        """Take the header ``name`` (lower-case bytes) off the answer."""
        self.headers = [header for header in self.headers if header[0] != name]

    async def respond(
        self,
        status: int,
        body: bytes,
        headers: Iterable[Header] = (),
        *,
        content_type: bytes = JSON,
    ) -> None:
        """Send the whole answer: ``body`` with ``headers`` and the response's own.

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
        if not self.body_read and self._request.has_body():
            headers.append((b"connection", b"close"))
        send = self._send
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def fail(self, error: errors.PetstoreError) -> None:
        """Answer with ``error``'s Error body and headers (:func:`errors.render`)."""
        status, headers, body = errors.render(error, request_id=self._request.request_id)
        await self.respond(status, body, headers)

    async def forward(self, app: ASGIApp, *, mounted_at: str) -> None:
        """Let the ASGI ``app`` (served under the path ``mounted_at``) answer, with the
        response's headers added; an HTTP error it raises gets its Error body."""

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
                message["headers"] = [*message.get("headers", ()), *self.headers]
            await self._send(message)

        request = self._request
        try:
            await app({**request.scope, "root_path": mounted_at}, request.receive, send)
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

    async def read(self, request: Request, response: Response) -> bytes:
        """The body of ``request``, whose answer is ``response``.

        Raises PayloadTooLarge (413) as soon as it passes ``limit`` bytes (at once
        when ``Content-Length`` says so), and InvalidRequest (400) when it has not
        fully arrived ``within`` seconds or the client went away. Reading stops once
        the bytes of a ``Content-Length`` are in (RFC 9112 section 6.2: they are the
        whole body), without waiting for the server's closing empty message: each
        message is a round trip to the server's I/O thread.
        """
        limit = self.limit
        declared = request.header(b"content-length") or ""
        expected = int(declared) if declared.isdigit() else None
        if expected is not None and expected > limit:
            raise self._too_large()
        deadlines = self._deadlines
        task = deadlines.watch()  # ASGI apps are called in a task
        response.body_read = None  # being read: a request timeout now is the client's (D17)
        chunks, size = [], 0
        message: Message = {"more_body": True}
        try:
            while size != expected and message.get("more_body", False):
                message = await request.receive()
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
        response.body_read = True
        return b"".join(chunks)

    def _too_large(self) -> errors.PayloadTooLarge:
        return errors.PayloadTooLarge(f"the request body is larger than {self.limit} bytes")
