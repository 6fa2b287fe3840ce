"""W3C Trace Context and OpenTelemetry traces (D23): the trace id in the log line,
and spans exported over OTLP/HTTP to a real receiver started here."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from starlette.testclient import TestClient

from petstore.schemas import NewPet
from petstore.server.rules.idempotency import IdempotencyClaim, create_with_key
from petstore.server.store import create_store
from petstore.server.store.traced import span_name
from tests.conftest import NOW, LiveServer

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID, PARENT_SPAN_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def access_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "petstore.access"]


def test_the_log_line_carries_the_trace_id_of_the_traceparent(
    client: TestClient, auth: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Without any exporter configured, the caller's trace id is still logged."""
    with caplog.at_level(logging.INFO, logger="petstore.access"):
        client.get("/v1/pets", headers={**auth, "traceparent": TRACEPARENT})
        client.get("/v1/pets", headers=auth)
    traced, plain = access_records(caplog)[-2:]
    assert traced.trace_id == TRACE_ID  # type: ignore[attr-defined]
    assert getattr(plain, "trace_id", None) is None


@pytest.mark.parametrize(
    "traceparent",
    [
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # the invalid all-zero id
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        "garbage",
    ],
)
def test_a_malformed_traceparent_is_ignored(
    client: TestClient, auth: dict[str, str], caplog: pytest.LogCaptureFixture, traceparent: str
) -> None:
    with caplog.at_level(logging.INFO, logger="petstore.access"):
        response = client.get("/v1/pets", headers={**auth, "traceparent": traceparent})
    assert response.status_code == 200
    assert getattr(access_records(caplog)[-1], "trace_id", None) is None


class Receiver:
    """An OTLP/HTTP trace receiver on a free loopback port: the export requests it
    was sent, decoded from protobuf."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                received.append(request)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list[Any]:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


def attributes(span: Any) -> dict[str, Any]:
    def value(v: Any) -> Any:
        return getattr(v, v.WhichOneof("value"))

    return {a.key: value(a.value) for a in span.attributes}


@pytest.mark.slow
def test_spans_are_exported_as_children_of_the_callers_span(
    receiver: Receiver, tmp_path: Path
) -> None:
    server = LiveServer(
        tmp_path,
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100"},
    )
    server.start()
    try:
        auth = {"Authorization": f"Bearer {server.dev_key}", "traceparent": TRACEPARENT}
        created = httpx2.post(
            f"{server.url}/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=auth
        )
        listed = httpx2.get(f"{server.url}/v1/pets", headers=auth)
        assert (created.status_code, listed.status_code) == (201, 200)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(receiver.spans()) < 4:
            time.sleep(0.1)
    finally:
        server.stop()
    spans = receiver.spans()
    servers = [s for s in spans if s.parent_span_id.hex() == PARENT_SPAN_ID]
    assert sorted(s.name for s in servers) == ["GET /v1/pets", "POST /v1/pets"]
    for span in servers:
        assert span.trace_id.hex() == TRACE_ID
        assert attributes(span) == {
            **attributes(span),
            "http.route": "/v1/pets",
            "url.scheme": "http",
            "url.path": "/v1/pets",
        }
    assert {
        (attributes(s)["http.request.method"], attributes(s)["http.response.status_code"])
        for s in servers
    } == {
        ("POST", 201),
        ("GET", 200),
    }
    post = next(s for s in servers if s.name == "POST /v1/pets")
    children = [s for s in spans if s.parent_span_id == post.span_id]
    assert {s.name for s in children} >= {"INSERT pets", "SELECT api_keys"}
    for child in children:
        assert child.trace_id.hex() == TRACE_ID
        assert attributes(child)["db.system.name"] == "sqlite"
        assert attributes(child)["db.operation.name"] in ("INSERT", "SELECT")
    assert f"trace_id={TRACE_ID}" in server.output(), server.output()[-3000:]


def test_without_an_exporter_nothing_of_opentelemetry_is_loaded(tmp_path: Path) -> None:
    """D23: unset, the SDK's tracing and exporter are never loaded, so no request does
    tracing work. (redis-py loads the OpenTelemetry API for its own optional
    instrumentation; the SDK's trace provider and the OTLP exporter are ours.)"""
    ours = ("opentelemetry.sdk.trace", "opentelemetry.exporter")
    probe = (
        "import sys; from petstore.server.app import create_app; "
        "from petstore.server.config import Settings; "
        f"create_app(Settings(database_url='sqlite:///{tmp_path}/p.db')); "
        f"print(any(name.startswith({ours!r}) for name in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def dialect_statements() -> list[Any]:
    """Every statement of both dialects, named ``<dialect>-<part>.<statement>``."""
    from petstore.server.store import postgres, sqlite_sql

    found = []
    for name, dialect in (("sqlite", sqlite_sql.DIALECT), ("postgresql", postgres.DIALECT)):
        for part, statements in dialect._asdict().items():
            if isinstance(statements, str):
                found.append(pytest.param(statements, id=f"{name}-{part}"))
            elif isinstance(statements, tuple):
                for each, text in statements._asdict().items():
                    if text is not None:
                        found.append(pytest.param(text, id=f"{name}-{part}.{each}"))
    return found


@pytest.mark.parametrize("statement", dialect_statements())
def test_every_statement_of_both_dialects_names_its_span(statement: str) -> None:
    """D23: a span is named ``<operation> <table>``, read off the statement, so every
    statement, those of methods added later included, has a name of both parts."""
    operation, table = span_name(statement)
    assert operation in {"SELECT", "INSERT", "UPDATE", "DELETE"}
    tables = {"pets", "pet_changes", "api_keys", "idempotency_records", "alembic_version"}
    if re.search(r"\b(FROM|INTO|UPDATE)\b", statement):
        assert table in {*tables, "sqlite_master", "sqlite_sequence"}
    else:  # a function call only (PostgreSQL's to_regclass)
        assert table == ""


def test_each_statement_a_request_runs_is_a_child_span(database_url: str) -> None:
    """D23, at the driver's seam: every repository call that reaches the database,
    alone, in a transaction or for many rows at once, is a span of the caller's span,
    with the database semantic-convention attributes."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    system = "sqlite" if database_url.startswith("sqlite") else "postgresql"

    async def main() -> None:
        store = create_store(database_url, tracer=tracer)
        await store.open()
        try:
            with tracer.start_as_current_span("request"):
                rex = NewPet("Rex", 1)
                created = await store.pets.create(rex)
                await store.pets.create_many([rex, rex])
                claim = IdempotencyClaim(
                    api_key_id=1, key="k", fingerprint="fp", created_at=NOW, expired_before=NOW
                )
                await create_with_key(store, rex, claim=claim)
                await store.pets.get(created.id)
                await store.pets.list_page(status=None, after_id=0, limit=5)
                await store.api_keys.find("petstore_x")
        finally:
            await store.close()

    asyncio.run(main())
    spans = exporter.get_finished_spans()
    (request,) = [span for span in spans if span.name == "request"]
    children = [span for span in spans if span.parent == request.context]
    assert [span.name for span in children] == [
        "INSERT pets",
        "INSERT pets",
        "DELETE idempotency_records",
        "INSERT pets",
        "INSERT idempotency_records",
        "SELECT pets",
        "SELECT pets",
        "SELECT api_keys",
    ]
    for span in children:
        operation, table = span.name.split()
        assert dict(span.attributes or {}) == {
            "db.system.name": system,
            "db.operation.name": operation,
            "db.collection.name": table,
        }
