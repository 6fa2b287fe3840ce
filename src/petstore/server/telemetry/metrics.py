"""Prometheus metrics (official ``prometheus_client``), served at ``/metrics``.

One registry per app. Request figures are labelled by operation id (``listPets``,
``createPet``, ``getPet``; other routes by their template; unknown paths as
``unmatched``; see :mod:`petstore.server.http.routes`) so label values stay few. Database
pool figures are read from the store when scraped.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator
from itertools import accumulate

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

#: The Content-Type of the text exposition format.
CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


class _PoolCollector(Collector):
    def __init__(self, pool_stats: Callable[[], dict[str, int]]) -> None:
        self._pool_stats = pool_stats

    def collect(self) -> Iterator[Metric]:
        for name, value in self._pool_stats().items():
            family = GaugeMetricFamily(f"petstore_db_pool_{name}", f"Database pool: {name}.")
            family.add_metric([], value)
            yield family


#: Upper bounds (seconds) of the request duration histogram's buckets.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
#: The buckets' ``le`` labels as prometheus_client writes them, then +Inf.
_LE = (*(repr(bound) for bound in LATENCY_BUCKETS), "+Inf")


class _RequestCollector(Collector):
    """``petstore_requests_total`` and ``petstore_request_duration_seconds``, counted
    in plain dicts and handed to ``prometheus_client`` as metric families when
    scraped (its documented custom-collector interface).

    A request is queued as ``(operation, status, seconds)`` and counted with the
    others 256 at a time, and always before a scrape, so a scrape sees every request
    answered. The library's own Counter and Histogram take three locks and scan the
    buckets on every request, a measurable share of a getPet (docs/performance.md).
    The exposition is the library's, and the same as theirs,
    ``_created`` samples included.
    """

    def __init__(self) -> None:
        # (operation, status) -> [count, created]; operation -> per-bucket counts
        # (the last one for +Inf), then the sum of seconds, then created.
        self._requests: dict[tuple[str, int], list[float]] = {}
        self._latency: dict[str, list[float]] = {}
        # Requests not yet counted, folded in 256 at a time and before every scrape
        # (deque appends and pops are atomic; the lock keeps two folds apart).
        self._pending: deque[tuple[str, int, float]] = deque()
        self._folding = threading.Lock()

    def record(self, operation: str, status: int, seconds: float) -> None:
        """Count one request of ``operation`` answered with ``status`` in ``seconds``."""
        self._pending.append((operation, status, seconds))
        if len(self._pending) >= 256:
            self._fold()

    def _fold(self) -> None:
        with self._folding:
            pending, requests, latency = self._pending, self._requests, self._latency
            while pending:
                operation, status, seconds = pending.popleft()
                counter = requests.get((operation, status))
                if counter is None:
                    counter = requests[(operation, status)] = [0, time.time()]
                counter[0] += 1
                histogram = latency.get(operation)
                if histogram is None:
                    histogram = latency[operation] = [0] * (len(_LE) + 1) + [time.time()]
                histogram[bisect_left(LATENCY_BUCKETS, seconds)] += 1  # le: seconds <= bound
                histogram[-2] += seconds

    def collect(self) -> Iterator[Metric]:
        self._fold()
        requests = CounterMetricFamily(
            "petstore_requests", "Requests answered.", labels=["operation", "status"]
        )
        for (operation, status), (count, created) in list(self._requests.items()):
            requests.add_metric([operation, str(status)], count, created=created)
        yield requests
        latency = HistogramMetricFamily(
            "petstore_request_duration_seconds",
            "Time to answer a request.",
            labels=["operation"],
        )
        for operation, histogram in list(self._latency.items()):
            cumulative = accumulate(histogram[: len(_LE)])
            latency.add_metric([operation], list(zip(_LE, cumulative, strict=True)), histogram[-2])
            # HistogramMetricFamily takes no created time; this is the sample Histogram adds.
            latency.add_sample(
                "petstore_request_duration_seconds_created", {"operation": operation}, histogram[-1]
            )
        yield latency


class Metrics:
    """The service's metrics; ``record`` is called once per request."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests = _RequestCollector()
        self.registry.register(self._requests)
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

    def watch_pool(self, pool_stats: Callable[[], dict[str, int]]) -> None:
        """Report ``pool_stats()`` (name -> value) as ``petstore_db_pool_<name>`` gauges."""
        self.registry.register(_PoolCollector(pool_stats))

    def watch_rate_limit_store(self, failing_open: Callable[[], bool]) -> None:
        """Report ``petstore_rate_limit_failing_open``: 1 while ``failing_open()``, the
        counter store (Redis) unreachable and requests served uncounted (D15), else 0.
        The state is the one the last request or ``/readyz`` check met."""
        Gauge(
            "petstore_rate_limit_failing_open",
            "1 while the rate-limit store is unreachable and requests are not counted (D15).",
            registry=self.registry,
        ).set_function(lambda: float(failing_open()))

    def started(self) -> None:
        """Count one request in flight until its :meth:`record`."""
        self._in_flight += 1

    def record(self, operation: str, status: int, seconds: float) -> None:
        """Count one answered request (no longer in flight): its ``operation`` label,
        HTTP ``status`` and duration in ``seconds``."""
        self._in_flight -= 1
        self._requests.record(operation, status, seconds)
        if status == 429:
            self.rate_limited.inc()

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
