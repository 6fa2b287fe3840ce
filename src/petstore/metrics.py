"""Prometheus metrics (official ``prometheus_client``), served at ``/metrics``.

One registry per app. Request figures are labelled by operation id (``listPets``,
``createPet``, ``getPet``; other routes by their template; unknown paths as
``unmatched``) so label values stay few. Database pool figures are read from the
store when scraped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: (route template, method) -> the interface's operation id.
OPERATIONS = {
    ("/v1/pets", "GET"): "listPets",
    ("/v1/pets", "HEAD"): "listPets",
    ("/v1/pets", "POST"): "createPet",
    ("/v1/pets/{pet_id}", "GET"): "getPet",
    ("/v1/pets/{pet_id}", "HEAD"): "getPet",
}
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def operation_of(route_path: str | None, method: str) -> str:
    """The label for a request: its operation id, route template, or ``unmatched``."""
    if route_path is None:
        return "unmatched"
    return OPERATIONS.get((route_path, method), route_path)


class _PoolCollector(Collector):
    def __init__(self, pool_stats: Callable[[], dict[str, int]]) -> None:
        self._pool_stats = pool_stats

    def collect(self) -> Iterator[Metric]:
        for name, value in self._pool_stats().items():
            family = GaugeMetricFamily(f"petstore_db_pool_{name}", f"Database pool: {name}.")
            family.add_metric([], value)
            yield family


class Metrics:
    """The service's metrics; ``record`` is called once per request."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "petstore_requests",
            "Requests answered.",
            ["operation", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "petstore_request_duration_seconds",
            "Time to answer a request.",
            ["operation"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=self.registry,
        )
        self._in_flight = 0  # a plain count, read when scraped: no lock per request
        Gauge(
            "petstore_requests_in_flight", "Requests being answered.", registry=self.registry
        ).set_function(lambda: self._in_flight)
        self.rate_limited = Counter(
            "petstore_rate_limited", "Requests refused with 429 (D15).", registry=self.registry
        )
        self.idempotent_replays = Counter(
            "petstore_idempotent_replays",
            "Creates answered from an Idempotency-Key (D16).",
            registry=self.registry,
        )

        self._children: dict[tuple[str, int], tuple[Counter, Histogram]] = {}

    def watch_pool(self, pool_stats: Callable[[], dict[str, int]]) -> None:
        """Report ``pool_stats()`` (name -> value) as ``petstore_db_pool_<name>`` gauges."""
        self.registry.register(_PoolCollector(pool_stats))

    def started(self) -> None:
        """Count one request in flight until its :meth:`record`."""
        self._in_flight += 1

    def record(self, operation: str, status: int, seconds: float) -> None:
        """Count one answered request (no longer in flight)."""
        self._in_flight -= 1
        children = self._children.get((operation, status))
        if children is None:  # label lookups cost; do each once
            children = (
                self.requests.labels(operation, str(status)),
                self.latency.labels(operation),
            )
            self._children[(operation, status)] = children
        children[0].inc()
        children[1].observe(seconds)
        if status == 429:
            self.rate_limited.inc()

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
