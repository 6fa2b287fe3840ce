"""The outermost ASGI layer: request ids, security headers, the access log, and
the Error body for anything no inner layer handled (D10, D18).

A pure ASGI middleware (no per-request task or body copy), because it runs on
every request.
"""

from __future__ import annotations

import logging
import os
import re
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from petstore import errors, logs
from petstore.api import Exchange, PetsApi
from petstore.metrics import Metrics, operation_of

error_log = logging.getLogger("petstore.error")

#: D18, OWASP REST Security Cheat Sheet.
SECURITY_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
]
#: A client's X-Request-ID is kept when it is 1-128 of these characters.
_SANE_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:@/+=-]{1,128}")


class ServiceMiddleware:
    """Adds ``X-Request-ID`` and the D18 headers to every response, logs one line per
    request, and answers 500 ``internal_error`` (no internals) on an unhandled fault.

    Requests for the ``/v1/pets`` operations go straight to ``api`` (plain ASGI,
    see :mod:`petstore.api`); everything else to ``app``, the Starlette app.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        api: PetsApi | None = None,
        metrics: Metrics | None = None,
        trust_forwarded: bool = False,
    ) -> None:
        self.app = app
        self.api = api
        self.metrics = metrics
        self.trust_forwarded = trust_forwarded

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw_request_id = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                if _SANE_REQUEST_ID.fullmatch(value):
                    raw_request_id = value
            elif self.trust_forwarded:
                if name == b"x-forwarded-proto" and value in (b"http", b"https"):
                    scope["scheme"] = value.decode()
                elif name == b"x-forwarded-for" and value:
                    scope["client"] = (value.split(b",")[0].strip().decode("latin-1"), 0)
        if raw_request_id is None:
            raw_request_id = os.urandom(16).hex().encode()
        request_id = raw_request_id.decode()
        headers = [*SECURITY_HEADERS, (b"x-request-id", raw_request_id)]
        started = time.perf_counter()
        if self.metrics is not None:
            self.metrics.started()
        method = scope["method"]
        matched = None
        if self.api is not None and not scope.get("root_path"):
            matched = self.api.route(method, scope["path"])
        if matched is None:
            route, status = await self._call_app(scope, receive, send, request_id, headers)
            api_key_id = None
        else:
            route, operation_handler = matched
            exchange = Exchange(scope, receive, send, request_id, headers)
            try:
                await operation_handler(exchange)
            except Exception:
                error_log.exception("unhandled error", extra={"request_id": request_id})
                if exchange.status == 0:
                    await exchange.respond_error(_internal_error())
            status, api_key_id = exchange.status, exchange.api_key_id
        seconds = time.perf_counter() - started
        if self.metrics is not None:
            self.metrics.record(operation_of(route, method), status, seconds)
        client = scope.get("client")
        logs.access(
            request_id=request_id,
            method=method,
            route=route,
            path=scope["path"],
            status=status,
            seconds=seconds,
            api_key_id=api_key_id,
            client=f"{client[0]}:{client[1]}" if client else None,
        )

    async def _call_app(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        request_id: str,
        extra_headers: list[tuple[bytes, bytes]],
    ) -> tuple[str | None, int]:
        """Run the Starlette app with ``extra_headers`` on its response: the route
        template it matched (None if none) and the status sent."""
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        status = 0

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), *extra_headers]
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            error_log.exception("unhandled error", extra={"request_id": request_id})
            if status == 0:
                fault = _internal_error()
                await send_with_headers(
                    {
                        "type": "http.response.start",
                        "status": 500,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send_with_headers({"type": "http.response.body", "body": fault.body()})
        return getattr(scope.get("route"), "path", None), status


def _internal_error() -> errors.InternalError:
    return errors.InternalError("an unexpected error occurred; it has been logged")
