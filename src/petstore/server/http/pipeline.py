"""The ASGI app :func:`petstore.server.app.create_app` returns: the lifespan, and every
request from its first byte to its log line.

The steps of a request are listed once, in order, in :meth:`Service.__call__`: read
the request, start its answer with the D18 headers, open its span, run its handler
within the request timeout (D25; an unknown path is 404, a method the path lacks 405
with ``Allow``) and answer its error (:func:`petstore.server.errors.render`: a
``PetstoreError`` as itself, anything else as 500 ``internal_error``, logged), and
last, however it ended, its metrics and access line. An operation's declaration
(:class:`.routes.Operation`) says what runs before its handler (:meth:`Service._answer`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

from msgspec.structs import replace
from starlette.types import Receive, Scope, Send

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

from petstore.server import errors
from petstore.server.http import parsing
from petstore.server.http.deadlines import Deadlines
from petstore.server.http.exchange import SECURITY_HEADERS, BodyReader, Request, Response
from petstore.server.http.lifespan import run_lifespan
from petstore.server.http.reading import read_request
from petstore.server.http.routes import Operation, Route, Router
from petstore.server.rules.admission import Admission
from petstore.server.telemetry import logs, tracing
from petstore.server.telemetry.metrics import Metrics

_NO_SUCH_PATH = "no such path; the API lives under /v1 (see /v1/docs)"
#: The status logged and counted for a request that ended before its answer started.
CLIENT_CLOSED_REQUEST = 499


class Service:
    """Serves ``routes``; ``lifespan()`` is entered at startup and left at shutdown
    (the ASGI lifespan protocol). The callers of operations are admitted by
    ``admission`` (D12-D15, D21, D22) and their request bodies read by ``bodies``
    (D17). ``metrics`` counts every request; with ``trust_forwarded`` the client
    address and scheme come from the load balancer's ``X-Forwarded-For`` and
    ``X-Forwarded-Proto``. With a ``tracer`` (D23), each
    request is a server span, the child of the caller's ``traceparent``. A handler
    running ``request_timeout`` seconds (> 0) is cancelled and answered 503
    ``unavailable`` with ``Retry-After`` (D25); access lines go to the app's
    ``access_log`` (by default, the process's handler)."""

    def __init__(
        self,
        routes: list[Route],
        *,
        lifespan: Callable[[], AbstractAsyncContextManager[None]],
        admission: Admission,
        bodies: BodyReader,
        metrics: Metrics,
        trust_forwarded: bool = False,
        tracer: Tracer | None = None,
        request_timeout: float = 10.0,
        access_log: logs.AccessLog | None = None,
    ) -> None:
        self.router = Router(routes)
        self.tracer = tracer
        self.lifespan = lifespan
        self.admission = admission
        self.bodies = bodies
        self.metrics = metrics
        self.trust_forwarded = trust_forwarded
        self.request_timeout = request_timeout
        self.access_log = access_log or logs.AccessLog()
        # Answered by the deadline, not a tick after it (D25 bounds the answer).
        tick = min(0.25, request_timeout / 10)
        self._deadlines = Deadlines(seconds=request_timeout, tick=tick, early=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request. Its steps, in order:

        1. read it (:func:`.reading.read_request`): the request id, the trusted
           ``X-Forwarded-*`` values, the trace context and the route, once, into a
           :class:`Request`;
        2. start its answer (:class:`Response`) with the D18 security headers and
           ``X-Request-ID``;
        3. with a tracer, open its server span (D23, :meth:`_answer_traced`);
        4. within the request timeout (D25), answer 400 for a malformed request
           (``Request.malformed``), 404 or 405 for a path or method without a
           handler, or run the handler; answer whatever error it raised with its
           Error body (D10) (:meth:`_answer`);
        5. however it ended, count it in the metrics and write its access line
           (:meth:`_account`).
        """
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await run_lifespan(self.lifespan, receive, send)
            return
        started = time.perf_counter()
        self.metrics.started()
        request, route = read_request(
            scope, receive, self.router, trust_forwarded=self.trust_forwarded
        )
        response = Response(
            request, send, [*SECURITY_HEADERS, (b"x-request-id", request.request_id.encode())]
        )
        if self.tracer is not None:
            await self._answer_traced(request, route, response, self.tracer, started)
            return
        try:
            await self._answer(request, route, response)
        finally:
            self._account(request, route, response, time.perf_counter() - started)

    def _account(
        self, request: Request, route: Route | None, response: Response, seconds: float
    ) -> None:
        """The metrics and the access line of an ended request, answered or not: one
        that never started its answer (the client went away, the server stopped) is
        counted and logged as 499, nginx's "client closed request". Metrics label a
        request by its operation id, else its route's template, else ``unmatched``."""
        status = response.status or CLIENT_CLOSED_REQUEST
        label = "unmatched" if route is None else route.labels.get(request.method, route.template)
        self.metrics.record(label, status, seconds)
        client = request.client
        self.access_log.access(
            request_id=request.request_id,
            method=request.method,
            route=request.route,
            path=request.path,
            status=status,
            seconds=seconds,
            api_key_id=response.api_key_id,
            client=f"{client[0]}:{client[1]}" if client else None,
            trace_id=request.trace_id,
        )

    async def _answer(self, request: Request, route: Route | None, response: Response) -> None:
        """Run the handler of ``request``'s ``route`` and method (400 for a malformed
        request, 404 without a route, 405 without the method); answer whatever error it
        raised, and 503 when the request timeout (D25) cut it short: 400 instead while
        the request body is still arriving (then the client is the slow one, D17).

        An operation runs as declared, in the order a client sees refusals: a
        deprecated one's headers first (D14); admission for its scope (401, 403, 429),
        then 410 past a sunset; the ``Content-Type`` where it takes a body (415), the
        Idempotency-Key where it takes one (400, D16), the body read (413, 400: D17)
        and decoded (400: D1-D4), both handed to its handler. One coroutine for all of
        it, not one inside another: a coroutine a request fewer."""
        deadlines = self._deadlines
        task = deadlines.watch()  # ASGI apps are called in a task
        try:
            try:
                if request.malformed is not None:
                    raise errors.InvalidRequest(request.malformed)
                if route is None:
                    raise errors.NotFound(self._no_such_path(request.path))
                answer = route.methods.get(request.method)
                if answer is None:
                    raise errors.MethodNotAllowed(
                        "this path does not support that method; see the Allow header",
                        allow=route.allow,
                    )
                if not isinstance(answer, Operation):
                    await answer(request, response)
                    return
                deprecation = answer.deprecated
                if deprecation is not None:
                    response.add_headers(deprecation.headers(request))
                auth = request.headers.get(b"authorization")
                response.admit(await self.admission.admit(auth, request.client, answer.scope))
                if deprecation is not None:
                    deprecation.check(request)
                body = key = None
                decode = answer.decode
                if decode is not None:
                    parsing.check_json_content_type(request.header(b"content-type"))
                if answer.idempotent:
                    key = parsing.parse_idempotency_key(request.header(b"idempotency-key"))
                if decode is not None:
                    body = decode(await self.bodies.read(request, response))
                await answer.handler(request, response, body, key)
            except errors.PetstoreError as exc:
                if response.status == 0:
                    await response.fail(exc)
            except Exception:
                errors.log.exception("unhandled error", extra={"request_id": request.request_id})
                if response.status == 0:
                    await response.fail(errors.internal_error())
        except asyncio.CancelledError:  # also while an error answer was being sent
            if not deadlines.was_cut(task):
                raise
            task.uncancel()
            if response.status == 0:
                await response.fail(self._timed_out(response))
        finally:
            deadlines.forget(task)

    def _timed_out(self, response: Response) -> errors.PetstoreError:
        seconds = f"{self.request_timeout:g}"
        if response.body_read is None:
            return errors.InvalidRequest(
                f"body: the request body did not arrive within {seconds} s"
            )
        return errors.Unavailable(
            f"the request was not answered within {seconds} s (the database may be slow "
            "or unreachable); retry later"
        )

    async def _answer_traced(
        self,
        request: Request,
        route: Route | None,
        response: Response,
        tracer: Tracer,
        started: float,
    ) -> None:
        """:meth:`_answer` and :meth:`_account` inside the request's server span (D23,
        HTTP semantic conventions), whose trace id the request then carries; the span
        is described and ended however the request ends."""
        method = request.method
        with tracing.server_span(
            tracer,
            method=method,
            scheme=request.scheme,
            path=request.path,
            headers=request.scope["headers"],
        ) as span:
            request = replace(request, trace_id=f"{span.get_span_context().trace_id:032x}")
            try:
                await self._answer(request, route, response)
            finally:
                if span.is_recording():  # else not sampled (OTEL_TRACES_SAMPLER)
                    tracing.describe(
                        span,
                        method=method,
                        route=request.route,
                        status=response.status,
                        client=request.client,
                    )
                self._account(request, route, response, time.perf_counter() - started)

    def _no_such_path(self, path: str) -> str:
        """The 404 message for ``path``; one with a trailing slash names the path
        without it when that one exists (the service never redirects, D20)."""
        if path.endswith("/") and self.router.match(path.rstrip("/")) is not None:
            return f"no such path; did you mean {path.rstrip('/')} (no trailing slash)?"
        return _NO_SUCH_PATH
