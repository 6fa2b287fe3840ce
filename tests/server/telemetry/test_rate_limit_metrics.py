"""``petstore_rate_limit_failing_open``, the metric behind the PetstoreRateLimitFailingOpen
alert (deploy/prometheus/alerts.yml; D15: Redis unreachable, requests served uncounted)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.testclient import TestClient

from petstore.server.app import create_app
from petstore.server.config import Settings
from testbed.processes import free_port
from tests.conftest import redis_url
from tests.server.telemetry.test_observability import _sample


def _failing_open_after_a_request(settings: Settings, key: str) -> float:
    with TestClient(create_app(settings)) as client:
        listed = client.get("/v1/pets", headers={"Authorization": f"Bearer {key}"})
        assert listed.status_code == 200
        return _sample(client.get("/metrics").text, "petstore_rate_limit_failing_open")


def test_failing_open_is_1_while_redis_is_unreachable(
    database_url: str, make_key: Callable[..., str]
) -> None:
    unreachable = f"redis://127.0.0.1:{free_port()}/0"
    settings = Settings(database_url=database_url, redis_url=unreachable)
    assert _failing_open_after_a_request(settings, make_key()) == 1


def test_failing_open_is_0_with_redis_and_in_memory(
    database_url: str, make_key: Callable[..., str]
) -> None:
    key = make_key()
    with_redis = Settings(database_url=database_url, redis_url=redis_url())
    assert _failing_open_after_a_request(with_redis, key) == 0
    assert _failing_open_after_a_request(Settings(database_url=database_url), key) == 0


def test_there_is_no_failing_open_metric_without_rate_limits(database_url: str) -> None:
    settings = Settings(database_url=database_url, rate_limit_enabled=False)
    with TestClient(create_app(settings)) as client:
        text = client.get("/metrics").text
    assert "petstore_rate_limit_failing_open" not in text
