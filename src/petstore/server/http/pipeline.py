"""The ASGI app :func:`petstore.server.app.create_app` returns: the lifespan, and every
request from its first byte to its log line.

For each request, in order: the request id (a sane ``X-Request-ID`` is kept), the
``X-Forwarded-*`` headers when trusted, the D18 security headers, the route
(:class:`petstore.server.http.routes.Router`; an unknown path is 404, a method the path lacks
405 with ``Allow``), its handler within the request timeout (D25), then the Error body
of whatever error the handler raised (:func:`petstore.server.errors.render`: a
``PetstoreError`` as itself, anything else as 500 ``internal_error``, logged), and
last, however the request ended, the metrics and the access line (``finally``).
"""

from __future__ import annotations

import asyncio
import re
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from random import getrandbits
from typing import TYPE_CHECKING

from starlette.types import Receive, Scope, Send

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

from petstore.server import errors
from petstore.server.http.deadlines import Deadlines
from petstore.server.http.exchange import Exchange
from petstore.server.http.routes import Route, Router
from petstore.server.telemetry import logs, tracing
from petstore.server.telemetry.escapes import escape_controls
from petstore.server.telemetry.metrics import Metrics

#: D18, OWASP REST Security Cheat Sheet.
SECURITY_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
]
#: A client's X-Request-ID is kept when it is 1-128 of these characters.
_SANE_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:@/+=-]{1,128}")
_NO_SUCH_PATH = "no such path; the API lives under /v1 (see /v1/docs)"
#: The status logged and counted for a request that ended before its answer started.
CLIENT_CLOSED_REQUEST = 499


class Service:
    """Serves ``routes``; ``lifespan()`` is entered at startup and left at shutdown
    (the ASGI lifespan protocol). ``metrics`` counts every request; with
    ``trust_forwarded`` the client address and scheme come from the load balancer's
    ``X-Forwarded-For`` and ``X-Forwarded-Proto``. With a ``tracer`` (D23), each
    request is a server span, the child of the caller's ``traceparent``. A handler
    running ``request_timeout`` seconds (> 0) is cancelled and answered 503
    ``unavailable`` with ``Retry-After`` (D25); access lines go to the app's
    ``access_log`` (by default, the process's handler)."""

    def __init__(
        self,
        routes: list[Route],
        *,
        lifespan: Callable[[], AbstractAsyncContextManager[None]],
        metrics: Metrics,
        trust_forwarded: bool = False,
        tracer: Tracer | None = None,
        request_timeout: float = 10.0,
        access_log: logs.AccessLog | None = None,
    ) -> None:
        self.router = Router(routes)
        self.tracer = tracer
        self.lifespan = lifespan
        self.metrics = metrics
        self.trust_forwarded = trust_forwarded
        self.request_timeout = request_timeout
        self.access_log = access_log or logs.AccessLog()
        # Answered by the deadline, not a tick after it (D25 bounds the answer).
        tick = min(0.25, request_timeout / 10)
        self._deadlines = Deadlines(seconds=request_timeout, tick=tick, early=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self._run_lifespan(receive, send)
            return
        request_id, traceparent = self._read_headers(scope)
        headers = [*SECURITY_HEADERS, (b"x-request-id", request_id)]
        exchange = Exchange(scope, receive, send, request_id.decode(), headers)
        started = time.perf_counter()
        self.metrics.started()
        try:
            if self.tracer is None:
                exchange.trace_id = (
                    None if traceparent is None else tracing.trace_id_of(traceparent)
                )
                await self._answer(exchange)
            else:
                await self._answer_traced(exchange, self.tracer)
        finally:
            self._account(exchange, time.perf_counter() - started)

    def _read_headers(self, scope: Scope) -> tuple[bytes, bytes | None]:
        """The request id (the client's when sane, else a new random one) and the
        ``traceparent`` of the request; with ``trust_forwarded``, the client address
        and scheme of ``scope`` replaced by the load balancer's. One pass over the
        headers for the three: this runs for every request."""
        raw_request_id = traceparent = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                if _SANE_REQUEST_ID.fullmatch(value):
                    raw_request_id = value
            elif name == b"traceparent":
                traceparent = value
            elif self.trust_forwarded:
                if name == b"x-forwarded-proto" and value in (b"http", b"https"):
                    scope["scheme"] = value.decode()
                elif name == b"x-forwarded-for" and value:
                    address = value.split(b",")[0].strip().decode("latin-1")
                    scope["client"] = (escape_controls(address), 0)  # a log field
        if raw_request_id is None:
            # Unique, not secret (a client may choose its own): the process's seeded
            # generator (reseeded in each forked worker), not os.urandom's system call.
            raw_request_id = getrandbits(128).to_bytes(16).hex().encode()
        return raw_request_id, traceparent

    def _account(self, exchange: Exchange, seconds: float) -> None:
        """The metrics and the access line of an ended request, answered or not: one
        that never started its answer (the client went away, the server stopped) is
        counted and logged as 499, nginx's "client closed request"."""
        status = exchange.status or CLIENT_CLOSED_REQUEST
        self.metrics.record(exchange.label, status, seconds)
        scope = exchange.scope
        client = scope.get("client")
        self.access_log.access(
            request_id=exchange.request_id,
            method=scope["method"],
            route=exchange.route,
            path=scope["path"],
            status=status,
            seconds=seconds,
            api_key_id=exchange.api_key_id,
            client=f"{client[0]}:{client[1]}" if client else None,
            trace_id=exchange.trace_id,
        )

    async def _answer(self, exchange: Exchange) -> None:
        """Route ``exchange`` and run its handler; answer whatever error it raised, and
        503 when the request timeout (D25) cut it short: 400 instead while the request
        body is still arriving (then the client is the slow one, D17).

        One coroutine for both, not one inside the other: a coroutine a request fewer
        (docs/performance.md)."""
        deadlines = self._deadlines
        task = deadlines.watch()  # ASGI apps are called in a task
        try:
            try:
                path = exchange.scope["path"]
                matched = self.router.match(path)
                if matched is None:
                    raise errors.NotFound(self._no_such_path(path))
                route, exchange.path_param = matched
                exchange.route = exchange.label = route.template
                answer = route.methods.get(exchange.scope["method"])
                if answer is None:
                    raise errors.MethodNotAllowed(
                        "this path does not support that method; see the Allow header",
                        allow=route.allow,
                    )
                handler, exchange.label = answer
                await handler(exchange)
            except errors.PetstoreError as exc:
                if exchange.status == 0:
                    await exchange.fail(exc)
            except Exception:
                errors.log.exception("unhandled error", extra={"request_id": exchange.request_id})
                if exchange.status == 0:
                    await exchange.fail(errors.internal_error())
        except asyncio.CancelledError:  # also while an error answer was being sent
            if not deadlines.was_cut(task):
                raise
            task.uncancel()
            if exchange.status == 0:
                await exchange.fail(self._timed_out(exchange))
        finally:
            deadlines.forget(task)

    def _timed_out(self, exchange: Exchange) -> errors.PetstoreError:
        seconds = f"{self.request_timeout:g}"
        if exchange.body_read is None:
            return errors.InvalidRequest(
                f"body: the request body did not arrive within {seconds} s"
            )
        return errors.Unavailable(
            f"the request was not answered within {seconds} s (the database may be slow "
            "or unreachable); retry later"
        )

    async def _answer_traced(self, exchange: Exchange, tracer: Tracer) -> None:
        """:meth:`_answer` inside the request's server span (D23, HTTP
        semantic conventions); the span is ended and described however the request
        ends."""
        scope = exchange.scope
        method = scope["method"]
        with tracing.server_span(
            tracer,
            method=method,
            scheme=scope["scheme"],
            path=scope["path"],
            headers=scope["headers"],
        ) as span:
            exchange.trace_id = format(span.get_span_context().trace_id, "032x")
            try:
                await self._answer(exchange)
            finally:
                if span.is_recording():  # else not sampled (OTEL_TRACES_SAMPLER)
                    tracing.describe(
                        span,
                        method=method,
                        route=exchange.route,
                        status=exchange.status,
                        client=scope.get("client"),
                    )

    def _no_such_path(self, path: str) -> str:
        """The 404 message for ``path``; one with a trailing slash names the path
        without it when that one exists (the service never redirects, D20)."""
        if path.endswith("/") and self.router.match(path.rstrip("/")) is not None:
            return f"no such path; did you mean {path.rstrip('/')} (no trailing slash)?"
        return _NO_SUCH_PATH

    async def _run_lifespan(self, receive: Receive, send: Send) -> None:
        """The ASGI lifespan protocol around :attr:`lifespan`: a startup that fails is
        reported with its traceback and raised again, as Starlette does."""
        async with AsyncExitStack() as stack:
            await receive()  # lifespan.startup
            try:
                await stack.enter_async_context(self.lifespan())
            except BaseException:
                await send({"type": "lifespan.startup.failed", "message": traceback.format_exc()})
                raise
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            try:
                await stack.aclose()
            except BaseException:
                await send({"type": "lifespan.shutdown.failed", "message": traceback.format_exc()})
                raise
        await send({"type": "lifespan.shutdown.complete"})
