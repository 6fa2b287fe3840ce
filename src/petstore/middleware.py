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

from petstore import errors
from petstore.metrics import Metrics, operation_of

access_log = logging.getLogger("petstore.access")
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
    request, and answers 500 ``internal_error`` (no internals) on an unhandled fault."""

    def __init__(
        self, app: ASGIApp, *, metrics: Metrics | None = None, trust_forwarded: bool = False
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.trust_forwarded = trust_forwarded

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                if _SANE_REQUEST_ID.fullmatch(value):
                    request_id = value
            elif self.trust_forwarded:
                if name == b"x-forwarded-proto" and value in (b"http", b"https"):
                    scope["scheme"] = value.decode()
                elif name == b"x-forwarded-for" and value:
                    scope["client"] = (value.split(b",")[0].strip().decode("latin-1"), 0)
        if request_id is None:
            request_id = os.urandom(16).hex().encode()
        state = scope.setdefault("state", {})
        state["request_id"] = request_id.decode()
        extra_headers = [*SECURITY_HEADERS, (b"x-request-id", request_id)]
        status = 0
        started = time.perf_counter()
        if self.metrics is not None:
            self.metrics.in_flight.inc()

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", ()), *extra_headers]
                # Set by endpoints for whatever response follows, errors included (D15).
                for name, value in state.get("response_headers", {}).items():
                    headers.append((name.lower().encode(), value.encode()))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            error_log.exception("unhandled error", extra={"request_id": request_id.decode()})
            if status == 0:
                fault = errors.InternalError("an unexpected error occurred; it has been logged")
                await send_with_headers(
                    {
                        "type": "http.response.start",
                        "status": 500,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send_with_headers({"type": "http.response.body", "body": fault.body()})
        finally:
            seconds = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", None)
            if self.metrics is not None:
                self.metrics.in_flight.dec()
                self.metrics.record(operation_of(route, scope["method"]), status, seconds)
            client = scope.get("client")
            access_log.info(
                "%s %s %s %.1fms",
                scope["method"],
                route or scope["path"],
                status,
                seconds * 1000,
                extra={
                    "request_id": state["request_id"],
                    "method": scope["method"],
                    "route": route,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 3),
                    "api_key_id": state.get("api_key_id"),
                    "client": f"{client[0]}:{client[1]}" if client else None,
                },
            )
