"""W3C Trace Context and OpenTelemetry traces (D23).

A request's ``traceparent`` (W3C Trace Context) names its trace: its trace id is in
the request's log line whatever else is configured (:func:`trace_id_of`, a string
slice, no library). Spans are exported only when the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (and
``OTEL_SDK_DISABLED`` is not ``true``): then :func:`tracing_from_environment` builds
the OpenTelemetry SDK's tracer with its OTLP/HTTP exporter, configured by the other
``OTEL_*`` variables as the SDK reads them, and ``store.traced.TracedDatabase`` wraps
the store's driver so each statement of a request is a child span of the request's
server span.
Unset, nothing of OpenTelemetry is imported and a request does no tracing work.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

_TRACEPARENT = re.compile(rb"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")
_NO_TRACE = b"0" * 32


def trace_id_of(traceparent: bytes | None) -> str | None:
    """The trace id of a W3C ``traceparent`` header value (32 lower-case hex digits),
    or None when it is absent or malformed (then it is ignored, as the spec says)."""
    if traceparent is None:
        return None
    match = _TRACEPARENT.fullmatch(traceparent.strip())
    if match is None or match.group(1) == _NO_TRACE:
        return None
    return match.group(1).decode()


def exporting() -> bool:
    """Whether the ``OTEL_*`` environment asks for spans to be exported."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


@dataclass(frozen=True)
class Tracing:
    """The tracer requests and database calls start their spans with, and
    ``shutdown``, which exports what is still queued and stops the exporter."""

    tracer: Tracer
    shutdown: Callable[[], None]


def tracing_from_environment() -> Tracing | None:
    """Spans exported over OTLP/HTTP, as the ``OTEL_*`` variables configure them
    (``OTEL_SERVICE_NAME`` defaults to ``petstore``), or None when :func:`exporting`
    is false. Spans are sent in batches by a background thread (the SDK's
    BatchSpanProcessor), never on the request path."""
    if not exporting():
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME") or "petstore"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return Tracing(provider.get_tracer("petstore"), provider.shutdown)


def server_span(tracer: Tracer, *, method: str, scheme: str, path: str, headers: list[Any]) -> Any:
    """A started server span (the context manager of ``start_as_current_span``) for a
    request, the child of the caller's span when its ``traceparent`` names one
    (W3C Trace Context, the SDK's propagator reads ``headers``, the ASGI list)."""
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in headers
        if name in (b"traceparent", b"tracestate")
    }
    return tracer.start_as_current_span(
        method,
        context=TraceContextTextMapPropagator().extract(carrier),
        kind=SpanKind.SERVER,
        attributes={"http.request.method": method, "url.scheme": scheme, "url.path": path},
    )


def describe(
    span: Any, *, method: str, route: str | None, status: int, client: tuple[str, int] | None
) -> None:
    """Name a recording server ``span`` for its ``route`` template (None: an unknown
    path) and give it the answer's ``status`` (0: none was started) and the
    ``client`` address; a 5xx marks it an error (D23, HTTP semantic conventions)."""
    if route is not None:
        span.update_name(f"{method} {route}")
        span.set_attribute("http.route", route)
    if status:
        span.set_attribute("http.response.status_code", status)
    if client:
        span.set_attribute("client.address", client[0])
    if status >= 500:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR))
