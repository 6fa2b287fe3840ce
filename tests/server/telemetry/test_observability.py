"""Metrics at /metrics and the per-request log line (issue: metrics, logs; D18)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest
from starlette.testclient import TestClient

from petstore.server.app import create_app
from petstore.server.config import Settings, SettingsError, load_settings
from petstore.server.telemetry import logs
from petstore.server.telemetry.metrics import Metrics
from testbed.processes import free_port
from tests.conftest import LiveServer, lifespan
from tests.server.telemetry.test_logs import JSON_FIELDS


def _sample(text: str, name: str, **labels: str) -> float:
    label_text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = rf"^{re.escape(name)}(?:\{{{re.escape(label_text)}\}})? (\S+)$"
    matches = [float(m) for m in re.findall(pattern, text, flags=re.MULTILINE)]
    assert matches, f"{name}{{{label_text}}} not in metrics"
    return matches[0]


def _labels_sorted(text: str) -> str:
    """prometheus_client writes labels in declaration order; sort them for matching."""

    def sort(match: re.Match[str]) -> str:
        parts = sorted(match.group(1).split('",'))
        return "{" + '",'.join(p.rstrip('"') for p in parts) + '"}'

    return re.sub(r"\{([^}]*)\}", sort, text)


def test_metrics_count_requests_by_operation_and_status(
    client: TestClient, auth: dict[str, str]
) -> None:
    client.post("/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=auth)
    client.get("/v1/pets", headers=auth)
    client.get("/v1/pets")
    client.get("/v1/pets/999", headers=auth)
    client.get("/nowhere")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = _labels_sorted(response.text)
    assert _sample(text, "petstore_requests_total", operation="createPet", status="201") == 1
    assert _sample(text, "petstore_requests_total", operation="listPets", status="200") == 1
    assert _sample(text, "petstore_requests_total", operation="listPets", status="401") == 1
    assert _sample(text, "petstore_requests_total", operation="getPet", status="404") == 1
    assert _sample(text, "petstore_requests_total", operation="unmatched", status="404") == 1
    count = _sample(text, "petstore_request_duration_seconds_count", operation="listPets")
    assert count == 2
    assert _sample(text, "petstore_requests_in_flight") == 1  # the scrape itself
    assert _sample(text, "petstore_db_pool_size") >= 1
    assert "petstore_db_pool_writes_waiting" in text


def test_request_durations_fall_in_cumulative_le_buckets() -> None:
    # Prometheus' histogram: a bucket counts the observations at or below its bound.
    metrics = Metrics()
    for seconds in (0.0007, 0.001, 0.001, 3.0):
        metrics.started()
        metrics.record("getPet", 200, seconds)
    metrics.started()
    metrics.record("getPet", 404, 0.02)
    text = _labels_sorted(metrics.render().decode())
    name = "petstore_request_duration_seconds"
    assert _sample(text, f"{name}_bucket", operation="getPet", le="0.0005") == 0
    assert _sample(text, f"{name}_bucket", operation="getPet", le="0.001") == 3
    assert _sample(text, f"{name}_bucket", operation="getPet", le="0.025") == 4
    assert _sample(text, f"{name}_bucket", operation="getPet", le="2.5") == 4
    assert _sample(text, f"{name}_bucket", operation="getPet", le="+Inf") == 5
    assert _sample(text, f"{name}_count", operation="getPet") == 5
    assert _sample(text, f"{name}_sum", operation="getPet") == pytest.approx(3.0227)
    assert _sample(text, "petstore_requests_total", operation="getPet", status="200") == 4
    assert _sample(text, "petstore_requests_total", operation="getPet", status="404") == 1
    assert _sample(text, "petstore_requests_in_flight") == 0
    assert "petstore_requests_created{" in text  # as prometheus_client's Counter writes


def test_metrics_count_rate_limited_and_idempotent_replays(
    database_url: str, make_key: Callable[..., str]
) -> None:
    settings = Settings(database_url=database_url, rate_limit="2/minute")
    key = make_key()
    auth = {"Authorization": f"Bearer {key}", "Idempotency-Key": "k1"}
    with TestClient(create_app(settings)) as client:
        for _ in range(3):
            client.post("/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=auth)
        text = client.get("/metrics").text
    assert _sample(text, "petstore_rate_limited_total") == 1
    assert _sample(text, "petstore_idempotent_replays_total") == 1


def test_metrics_can_be_turned_off(database_url: str) -> None:
    settings = Settings(database_url=database_url, metrics_enabled=False)
    with TestClient(create_app(settings)) as client:
        response = client.get("/metrics")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_metrics_are_not_under_v1_and_need_no_key(client: TestClient) -> None:
    assert client.get("/v1/metrics").status_code == 404
    assert client.get("/metrics").status_code == 200


def test_each_request_logs_one_line_with_its_fields(
    client: TestClient, auth: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="petstore.access"):
        response = client.get("/v1/pets/7", headers={**auth, "X-Request-ID": "req-42"})
    lines = [r for r in caplog.records if r.name == "petstore.access"]
    assert len(lines) == 1
    line = json.loads(logs.JsonFormatter().format(lines[0]))
    assert response.status_code == 404
    assert line["request_id"] == "req-42"
    assert line["method"] == "GET"
    assert line["route"] == "/v1/pets/{petId}"
    assert line["status"] == 404
    assert isinstance(line["duration_ms"], float)
    assert isinstance(line["api_key_id"], int)
    assert line["client"].startswith("testclient:")
    assert line["time"].endswith("+00:00")


def test_a_served_json_access_line_has_the_fields_of_every_log_line(tmp_path: Path) -> None:
    # Served with JSON logs, the access line is encoded without a LogRecord: it must
    # still be the JsonFormatter's line, with the same fields in the same order.
    server = LiveServer(tmp_path, env={"PETSTORE_LOG_FORMAT": "json"})
    server.start()
    try:
        auth = {"Authorization": f"Bearer {server.dev_key}"}
        httpx2.get(f"{server.url}/v1/pets/1", headers={**auth, "X-Request-ID": "served-1"})
        httpx2.get(f"{server.url}/nowhere", headers={"X-Request-ID": "served-2"})
        time.sleep(1)  # the log buffer is flushed every half second
    finally:
        server.stop()
    lines = [json.loads(line) for line in server.output().splitlines() if line.startswith("{")]
    access = {line["request_id"]: line for line in lines if line["logger"] == "petstore.access"}
    known = access["served-1"]
    assert list(known) == JSON_FIELDS
    assert known["level"] == "INFO"
    assert re.fullmatch(r"GET /v1/pets/\{petId\} 404 \d+\.\dms", known["message"])
    assert (known["method"], known["route"], known["status"]) == ("GET", "/v1/pets/{petId}", 404)
    assert isinstance(known["duration_ms"], float)
    assert isinstance(known["api_key_id"], int)
    assert known["client"].startswith("127.0.0.1:")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", known["time"])
    unknown = access["served-2"]
    assert "route" not in unknown
    assert "api_key_id" not in unknown
    assert re.fullmatch(r"GET /nowhere 404 \d+\.\dms", unknown["message"])


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Request-ID": "bad id with spaces"},
        {"Idempotency-Key": "k"},
    ],
)
def test_no_key_or_authorization_value_reaches_a_log_line(
    client: TestClient,
    api_key: str,
    caplog: pytest.LogCaptureFixture,
    headers: dict[str, str],
) -> None:
    bogus = "petstore_" + "A" * 43
    with caplog.at_level(logging.DEBUG, logger="petstore"):
        for authorization in (f"Bearer {api_key}", f"Bearer {bogus}", "Basic c2VjcmV0", api_key):
            h = {"Authorization": authorization, **headers}
            client.get("/v1/pets", headers=h)
            client.get("/v1/pets/1", headers=h)
            client.post("/v1/pets", content=b"{", headers={**h, "Content-Type": "application/json"})
            client.post("/v1/pets", json={"name": "x", "categoryId": 0}, headers=h)
    formatter = logs.JsonFormatter()
    rendered = "\n".join(formatter.format(r) for r in caplog.records)
    assert caplog.records
    for secret in (api_key, api_key.removeprefix("petstore_"), bogus, "c2VjcmV0"):
        assert secret not in rendered


def test_text_logs_in_development_and_json_elsewhere() -> None:
    assert Settings().json_logs is False
    assert Settings(log_format="json").json_logs is True
    production = Settings(
        environment="production",  # type: ignore[arg-type]
        cursor_secret="xy" * 20,  # type: ignore[arg-type]
        base_url="https://api.pets.example.org/v1",  # type: ignore[arg-type]
    )
    assert production.json_logs is True


def test_metrics_can_move_to_their_own_port(database_url: str) -> None:
    port = free_port()
    settings = Settings(database_url=database_url, metrics_port=port)
    with TestClient(create_app(settings)) as client:
        assert client.get("/metrics").status_code == 404
        client.get("/healthz")
        scraped = httpx2.get(f"http://127.0.0.1:{port}/metrics")
    assert scraped.status_code == 200
    assert "petstore_requests_total" in scraped.text


def test_a_metrics_port_needs_one_worker() -> None:
    with pytest.raises(SettingsError, match="PETSTORE_METRICS_PORT"):
        load_settings(metrics_port=9100, workers=2)


@pytest.mark.slow
def test_the_last_requests_access_lines_survive_a_shutdown(tmp_path: Path) -> None:
    """Access lines are buffered for up to half a second; stopping the server right
    after a request must not lose its line (the lifespan flushes the logs)."""
    server = LiveServer(tmp_path, env={"PETSTORE_LOG_FORMAT": "json"})
    server.start()
    try:
        response = httpx2.get(
            f"{server.url}/v1/pets",
            headers={"Authorization": f"Bearer {server.dev_key}", "X-Request-ID": "last-one"},
        )
        assert response.status_code == 200
    finally:
        server.stop()
    assert '"request_id":"last-one"' in server.output()


def test_a_request_cancelled_mid_way_is_counted_out_and_logged(
    settings: Settings,
    auth: dict[str, str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client that sends its headers and then nothing, its request cancelled while
    the body is awaited (the server stopping, the connection dropped): the in-flight
    gauge is back at 0 and the request has its access line, as 499."""
    monkeypatch.setattr(logging.getLogger("petstore"), "propagate", True)
    app = create_app(settings)
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/pets",
        "raw_path": b"/v1/pets",
        "root_path": "",
        "query_string": b"",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 5000),
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"authorization", auth["Authorization"].encode()),
            (b"content-type", b"application/json"),
            (b"content-length", b"40"),
            (b"x-request-id", b"cut-short"),
        ],
    }

    async def scenario() -> None:
        waiting = asyncio.Event()

        async def receive() -> dict[str, object]:
            waiting.set()
            await asyncio.Event().wait()  # the body never comes
            raise AssertionError("unreachable")

        async def send(message: dict[str, object]) -> None:
            raise AssertionError(f"nothing is sent: {message}")

        async with lifespan(app):
            request = asyncio.create_task(app(scope, receive, send))
            await waiting.wait()
            assert _sample(app.metrics.render().decode(), "petstore_requests_in_flight") == 1
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
            assert _sample(app.metrics.render().decode(), "petstore_requests_in_flight") == 0

    with caplog.at_level(logging.INFO, logger="petstore.access"):
        asyncio.run(scenario())
    (line,) = [r for r in caplog.records if getattr(r, "request_id", None) == "cut-short"]
    assert line.name == "petstore.access"
    assert (line.method, line.route, line.status) == ("POST", "/v1/pets", 499)  # type: ignore[attr-defined]
