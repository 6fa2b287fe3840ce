"""No alert about a metric that does not exist (issue: the operator's kit).

A real Prometheus (Debian's) scrapes real ``petstore serve`` instances under a little
load, with deploy/prometheus's rules loaded, and every recording rule, every alert
expression and every query of deploy/grafana/petstore.json is evaluated through its
HTTP API: each names only series the instances expose (or that the rules record),
each returns data where it should, and the alerts whose conditions the test creates
(an instance down, Redis unreachable, clients over their limit, retried creates)
return data while the others do not.

The instances: one on PostgreSQL with Redis and a low rate limit, one on SQLite whose
Redis is a port nothing listens on (rate limits fail open), and a third target where
nothing answers.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from petstore.server.store import migrate
from testbed.processes import Daemon, free_port, wait_for
from tests import ROOT
from tests.conftest import LiveServer, postgres_database, redis_url

pytestmark = pytest.mark.slow

RULES = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "petstore.json"

#: The alerts the load below makes true (expression only: their ``for`` is ignored),
#: and those it must leave quiet. PetstoreHighLatency depends on the machine's speed:
#: only its series are checked.
FIRING = {
    "PetstoreInstanceDown",
    "PetstoreRateLimitFailingOpen",
    "PetstoreClientsRateLimited",
    "PetstoreIdempotentReplaysHigh",
}
QUIET = {
    "PetstoreErrorBudgetBurnFast",
    "PetstoreErrorBudgetBurnSlow",
    "PetstoreErrorBudgetBurnTicket",
    "PetstoreHighErrorRatio",
    "PetstoreDatabaseUnavailable",
    "PetstoreAllInstancesDown",
    "PetstoreInFlightSaturation",
    "PetstoreDatabasePoolExhausted",
}

_CLAUSE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_SELECTOR = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)\s*(\{[^}]*\})?\s*(\()?")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def selectors(expr: str) -> list[str]:
    """The vector selectors of a PromQL expression (``name{matchers}``), without their
    ranges: every series it reads."""
    found = []
    for match in _SELECTOR.finditer(_CLAUSE.sub("", expr)):
        name, matchers, call = match.groups()
        if call is None and name not in _KEYWORDS:
            found.append(name + (matchers or ""))
    return found


def dashboard_queries() -> list[str]:
    """Every query of the dashboard, its variables set as a user would: every
    instance of job petstore, a 15 s rate interval (scrapes are 1 s apart here)."""
    board = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in board["panels"] for target in panel.get("targets", [])]
    return [
        expr.replace("$__rate_interval", "15s")
        .replace("$job", "petstore")
        .replace("$instance", ".*")
        for expr in exprs
    ]


def rules(kind: str) -> dict[str, str]:
    """The rules of ``rules.yml`` (``record``) or ``alerts.yml`` (``alert``): name -> expr."""
    path = RULES / ("rules.yml" if kind == "record" else "alerts.yml")
    groups = yaml.safe_load(path.read_text())["groups"]
    return {rule[kind]: rule["expr"] for group in groups for rule in group["rules"]}


def test_selectors_are_what_the_expression_reads() -> None:
    expr = (
        'sum by (job, le) (rate(petstore_requests_total{status=~"5.."}[5m])) / 0.001 '
        "and on (job) up == 0 or absent(job:petstore_api_errors:ratio_rate1h)"
    )
    assert selectors(expr) == [
        'petstore_requests_total{status=~"5.."}',
        "up",
        "job:petstore_api_errors:ratio_rate1h",
    ]


class Prometheus:
    """Debian's ``prometheus`` on a free loopback port, scraping ``targets`` every
    second as job ``petstore``, with deploy/prometheus's rules evaluated every second."""

    def __init__(self, root: Path, targets: list[str]) -> None:
        executable = shutil.which("prometheus")
        assert executable, "prometheus not found: install Debian's prometheus package"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES / "rules.yml"), str(RULES / "alerts.yml")],
            "scrape_configs": [{"job_name": "petstore", "static_configs": [{"targets": targets}]}],
        }
        (root / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = root / "prometheus.log"
        self.daemon = Daemon(
            [
                executable,
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            log=self.log,
        )
        wait_for(self._ready, what="Prometheus")

    def _ready(self) -> bool:
        assert self.daemon.alive(), self.log.read_text()
        try:
            return httpx2.get(f"{self.url}/-/ready", timeout=1).status_code == 200
        except httpx2.TransportError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now; fails the test on an error."""
        response = httpx2.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = response.json()
        assert response.status_code == 200, (expr, body)
        assert body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def stop(self) -> None:
        self.daemon.stop()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Prometheus scraping the two instances and a dead target, after the load."""
    root = tmp_path_factory.mktemp("prometheus-live")
    with postgres_database() as database_url:
        migrate.upgrade(database_url)
        limited = LiveServer(
            root / "postgres",
            env={
                "PETSTORE_DATABASE_URL": database_url,
                "PETSTORE_REDIS_URL": redis_url(),
                "PETSTORE_RATE_LIMIT": "5/second",
            },
        )
        failing_open = LiveServer(
            root / "sqlite", env={"PETSTORE_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
        )
        for server in (limited, failing_open):
            (server.root / "data").mkdir(parents=True)
        servers = [limited, failing_open]
        prometheus: Prometheus | None = None
        try:
            for server in servers:
                server.start()
            dead = f"127.0.0.1:{free_port()}"
            targets = [server.url.removeprefix("http://") for server in servers] + [dead]
            prometheus = Prometheus(root, targets)
            # Both instances scraped once before the load, so that it shows as an
            # increase: a counter first seen at its final value has a rate of 0 (on a
            # busy machine the first scrape came after the load, and no alert fired).
            deadline = time.monotonic() + 30
            while not set(targets[:2]) <= {
                up["metric"]["instance"] for up in prometheus.query("up == 1")
            }:
                assert time.monotonic() < deadline, "Prometheus never scraped the instances"
                time.sleep(0.2)
            _load(servers)
            # Two more scrapes and rule evaluations after the load.
            time.sleep(3)
            yield prometheus
        finally:
            if prometheus is not None:
                prometheus.stop()
            for server in servers:
                server.stop()


def _load(servers: list[LiveServer]) -> None:
    """A few seconds of every operation on each instance: creates (each retried
    once with its Idempotency-Key), lists, gets, an unknown path, and on the
    rate-limited instance bursts over its limit."""
    deadline = time.monotonic() + 6
    with httpx2.Client(timeout=10) as client:
        while time.monotonic() < deadline:
            for server in servers:
                auth = {"Authorization": f"Bearer {server.dev_key}"}
                key = {"Idempotency-Key": f'"{uuid.uuid4()}"', **auth}
                for _ in range(2):
                    created = client.post(
                        f"{server.url}/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=key
                    )
                    assert created.status_code in (201, 429), created.text
                for _ in range(25):  # a burst well over 5 a second on a slow machine too
                    listed = client.get(f"{server.url}/v1/pets?limit=5", headers=auth)
                    assert listed.status_code in (200, 429), listed.text
                if created.status_code == 201:
                    pet = created.json()["id"]
                    assert client.get(f"{server.url}/v1/pets/{pet}", headers=auth).status_code in (
                        200,
                        429,
                    )
                assert client.get(f"{server.url}/v1/nowhere").status_code == 404
            time.sleep(0.2)


def test_every_recording_rule_returns_data(prometheus: Prometheus) -> None:
    for name, expr in rules("record").items():
        assert prometheus.query(expr), f"{name} returns nothing: {expr}"
        assert prometheus.query(name), f"{name} was not recorded"


def grounded(selector: str) -> str:
    """``selector`` with each of its matchers replaced by "the label is set": the
    series it would read if the values it asks for occurred (5xx need a fault)."""
    name, _, matchers = selector.partition("{")
    labels = re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers)
    return name + "{" + ", ".join(f'{label}!=""' for label in labels) + "}" if labels else name


def test_grounded_selectors_keep_the_labels_not_the_values() -> None:
    assert grounded('petstore_requests_total{operation=~"a|b", status="503"}') == (
        'petstore_requests_total{operation!="", status!=""}'
    )
    assert grounded("up") == "up"


def test_every_series_an_alert_or_the_dashboard_reads_exists(prometheus: Prometheus) -> None:
    """Every metric and label an expression names is exposed (or recorded); the
    values it matches are checked by the tests below."""
    exprs = [*rules("alert").values(), *rules("record").values(), *dashboard_queries()]
    for expr in exprs:
        for selector in selectors(expr):
            series = grounded(selector)
            assert prometheus.query(f"count({series})"), f"no series {series} (in {expr})"


def test_every_metric_named_is_exposed_by_the_instances_or_recorded(
    prometheus: Prometheus,
) -> None:
    response = httpx2.get(f"{prometheus.url}/api/v1/label/__name__/values", timeout=10)
    known = set(response.json()["data"])
    exprs = [*rules("alert").values(), *rules("record").values(), *dashboard_queries()]
    named = {selector.split("{")[0] for expr in exprs for selector in selectors(expr)}
    assert named - known == set()
    assert {name for name in named if ":" not in name} - {"up"} <= {
        name for name in known if name.startswith("petstore_")
    }


def test_the_alerts_the_load_causes_fire_and_the_others_stay_quiet(
    prometheus: Prometheus,
) -> None:
    alerts = rules("alert")
    assert set(alerts) - {"PetstoreHighLatency"} == FIRING | QUIET
    for name in FIRING:
        # A rate over 5 minutes needs two scrapes after the load, and a recording rule
        # one more evaluation: on a busy machine those come seconds late.
        deadline = time.monotonic() + 20
        while not prometheus.query(alerts[name]) and time.monotonic() < deadline:
            time.sleep(0.5)
        seen = {  # what the instances reported, to tell a slow load from a quiet one
            expr: prometheus.query(expr)
            for expr in ("petstore_rate_limited_total", "petstore_rate_limit_failing_open")
        }
        assert prometheus.query(alerts[name]), f"{name} does not fire; {seen}"
    for name in QUIET:
        assert prometheus.query(alerts[name]) == [], f"{name} fires"
    (failing,) = prometheus.query(alerts["PetstoreRateLimitFailingOpen"])
    (down,) = prometheus.query(alerts["PetstoreInstanceDown"])
    assert failing["metric"]["instance"] != down["metric"]["instance"]


def test_every_dashboard_query_returns_data(prometheus: Prometheus) -> None:
    for expr in dashboard_queries():
        assert prometheus.query(expr), f"the dashboard's query returns nothing: {expr}"
