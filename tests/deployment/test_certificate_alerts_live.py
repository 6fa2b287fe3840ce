"""The certificate alerts read real probes (issue 59, Alerts).

Debian's prometheus-blackbox-exporter, with deploy/prometheus/blackbox.yml's modules
pointed at a CA of the test's own (deploy/tls/make-certificates), probes a real Redis
that speaks TLS only (a certificate of 10 days), a real pgBackRest TLS server (100
days) and HTTPS servers as the balancer's module asks them (100 days; one whose
certificate another CA signed; one without HSTS). Debian's
prometheus-postgres-exporter reads a real PostgreSQL's certificate (10 days) through
deploy/postgres/certificate-monitor.sql, as a role with only pg_monitor, over a
verify-full connection. A real Prometheus scrapes them with the job of
certificates-scrape.yml (its targets and the exporter's address replaced) and
certificates.yml's rules: each certificate's end is read to the second, and the
alert expressions pick out exactly the 10-day certificates and the failed handshakes
(their ``for`` and thresholds are promtool's tests, in tests/deployment/test_alerts.py).
"""

from __future__ import annotations

import http.server
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest
import yaml

from testbed.certificates import Certificates
from testbed.processes import Daemon, free_port, listening, postgres_user, start, wait_for
from tests import ROOT
from tests.servers import postgres_server

pytestmark = pytest.mark.slow

RULES = ROOT / "deploy" / "prometheus"
SQL = ROOT / "deploy" / "postgres" / "certificate-monitor.sql"
DAY = 86400


def executable(name: str, package: str) -> str:
    found = shutil.which(name)
    assert found, f"install Debian's {package} (make test does)"
    return found


def not_after(certificate: Path) -> float:
    """When ``certificate`` ends (Unix seconds), as openssl reads it."""
    out = subprocess.run(
        ["openssl", "x509", "-noout", "-enddate", "-in", str(certificate)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return float(ssl.cert_time_to_seconds(out.strip().removeprefix("notAfter=")))


class _Healthz(http.server.BaseHTTPRequestHandler):
    """``GET /healthz`` 200, with HSTS unless the server says otherwise."""

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        if getattr(self.server, "hsts", True):
            self.send_header("Strict-Transport-Security", "max-age=63072000")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the probes' requests are not the test's output."""


@dataclass
class Https:
    """An HTTPS server on a free loopback port, in a thread."""

    server: http.server.ThreadingHTTPServer
    thread: threading.Thread

    @classmethod
    def serve(cls, certificates: Certificates, name: str, *, hsts: bool = True) -> Https:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificates.certificate(name), certificates.key(name))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Healthz)
        server.hsts = hsts  # type: ignore[attr-defined]
        server.socket = context.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        return cls(server, thread)

    @property
    def target(self) -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}/healthz"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Probed:
    """What the test started, and Prometheus' HTTP API over it."""

    prometheus: str
    targets: dict[str, str]
    ends: dict[str, float]

    def query(self, expr: str) -> dict[str, float]:
        """``expr`` now: each series' value by its ``instance``."""
        response = httpx2.get(f"{self.prometheus}/api/v1/query", params={"query": expr})
        body = response.json()
        assert body["status"] == "success", body
        return {row["metric"]["instance"]: float(row["value"][1]) for row in body["data"]["result"]}


@pytest.fixture(scope="module")
def probed() -> Iterator[Probed]:
    # Not pytest's temporary folder: PostgreSQL and pgBackRest, as the postgres user,
    # read their certificates here.
    root = Path(tempfile.mkdtemp(prefix="petstore-test-certificates-"))
    root.chmod(0o755)
    ours, stranger = Certificates(root / "tls"), Certificates(root / "stranger")
    ours.make("redis,127.0.0.1", "postgres,127.0.0.1", days=10)
    ours.make("pgbackrest,127.0.0.1", "https,127.0.0.1", days=100)
    stranger.make("https,127.0.0.1", days=100)
    ours.give_to_postgres()  # PostgreSQL and pgBackRest refuse a key others can read
    ends = {name: not_after(ours.certificate(name)) for name in ("redis", "postgres")}
    ends |= {name: not_after(ours.certificate(name)) for name in ("pgbackrest", "https")}

    daemons: list[Daemon] = []
    servers = [
        Https.serve(ours, "https"),
        Https.serve(stranger, "https"),
        Https.serve(ours, "https", hsts=False),
    ]
    try:
        redis_port = free_port()
        daemons.append(start(
            [executable("redis-server", "redis-server"), "--port", "0",
             "--tls-port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
             "--tls-cert-file", str(ours.certificate("redis")),
             "--tls-key-file", str(ours.key("redis")),
             "--tls-ca-cert-file", str(ours.ca), "--tls-auth-clients", "no"],
            ready=partial(listening, redis_port), what="Redis", log=root / "redis.log",
        ))  # fmt: skip
        pgbackrest_port = free_port()
        config = root / "tls" / "pgbackrest.conf"
        config.write_text(
            f"[global]\ntls-server-address=127.0.0.1\ntls-server-port={pgbackrest_port}\n"
            f"tls-server-ca-file={ours.ca}\ntls-server-cert-file={ours.certificate('pgbackrest')}\n"
            f"tls-server-key-file={ours.key('pgbackrest')}\ntls-server-auth=backup=petstore\n"
            f"log-path={root / 'tls'}\nlock-path={root / 'tls'}\nlog-level-file=off\n"
        )
        ours.give_to_postgres()
        daemons.append(start(
            [executable("pgbackrest", "pgbackrest"), f"--config={config}", "server"],
            ready=partial(listening, pgbackrest_port), what="pgBackRest's TLS server",
            log=root / "pgbackrest.log", user=postgres_user(),
        ))  # fmt: skip

        blackbox = yaml.safe_load((RULES / "blackbox.yml").read_text())
        for module in blackbox["modules"].values():
            settings = module[module["prober"]]
            settings["tls_config"]["ca_file"] = str(ours.ca)
            if "server_name" in settings["tls_config"]:  # the balancer's public name
                settings["tls_config"]["server_name"] = "127.0.0.1"
                settings["headers"]["Host"] = "127.0.0.1"
        (root / "blackbox.yml").write_text(yaml.safe_dump(blackbox))
        blackbox_port = free_port()
        daemons.append(start(
            [executable("prometheus-blackbox-exporter", "prometheus-blackbox-exporter"),
             f"--config.file={root / 'blackbox.yml'}",
             f"--web.listen-address=127.0.0.1:{blackbox_port}"],
            ready=partial(listening, blackbox_port), what="the blackbox exporter",
            log=root / "blackbox.log",
        ))  # fmt: skip

        targets = {
            "redis": f"127.0.0.1:{redis_port}",
            "pgbackrest": f"127.0.0.1:{pgbackrest_port}",
            "https": servers[0].target,
            "stranger": servers[1].target,
            "no-hsts": servers[2].target,
        }
        with postgres_server(
            ssl="on",
            ssl_cert_file=ours.certificate("postgres"),
            ssl_key_file=ours.key("postgres"),
        ) as url:
            with psycopg.connect(url, autocommit=True) as connection:
                connection.execute(SQL.read_text())
                connection.execute("CREATE ROLE exporter LOGIN IN ROLE pg_monitor")
            exporter_port = free_port()
            port = url.rsplit(":", 1)[1].split("/")[0]
            verified = f"sslmode=verify-full&sslrootcert={ours.ca}"
            daemons.append(start(
                [executable("prometheus-postgres-exporter", "prometheus-postgres-exporter"),
                 f"--web.listen-address=127.0.0.1:{exporter_port}",
                 f"--extend.query-path={RULES / 'postgres-exporter-queries.yaml'}"],
                ready=partial(listening, exporter_port), what="the PostgreSQL exporter",
                log=root / "postgres-exporter.log",
                env={"DATA_SOURCE_NAME":
                     f"postgresql://exporter@127.0.0.1:{port}/postgres?{verified}"},
            ))  # fmt: skip
            targets["postgres"] = f"127.0.0.1:{exporter_port}"

            (job,) = yaml.safe_load((RULES / "certificates-scrape.yml").read_text())[
                "scrape_configs"
            ]
            job["scrape_interval"] = "1s"
            modules = {"redis": "redis_tls", "pgbackrest": "pgbackrest_tls"}
            job["static_configs"] = [
                {"targets": [target], "labels": {"module": modules.get(name, "balancer_https")}}
                for name, target in targets.items()
                if name != "postgres"
            ]
            (address,) = (rule for rule in job["relabel_configs"] if "replacement" in rule)
            address["replacement"] = f"127.0.0.1:{blackbox_port}"
            prometheus_port = free_port()
            (root / "prometheus.yml").write_text(yaml.safe_dump({
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES / "certificates.yml")],
                "scrape_configs": [job, {"job_name": "postgres",
                                         "static_configs": [{"targets": [targets["postgres"]]}]}],
            }))  # fmt: skip
            daemons.append(start(
                [executable("prometheus", "prometheus"),
                 f"--config.file={root / 'prometheus.yml'}",
                 f"--storage.tsdb.path={root / 'data'}",
                 f"--web.listen-address=127.0.0.1:{prometheus_port}", "--log.level=warn"],
                ready=partial(listening, prometheus_port), what="Prometheus",
                log=root / "prometheus.log",
            ))  # fmt: skip
            found = Probed(f"http://127.0.0.1:{prometheus_port}", targets, ends)
            # Every probe and the exporter scraped, each a few times.
            wait_for(lambda: len(found.query("up == 1")) == len(targets), what="the scrapes")
            wait_for(
                lambda: (
                    len(found.query("probe_success")) == len(targets) - 1
                    and bool(found.query("pg_server_certificate_not_after_seconds"))
                ),
                what="every probe",
            )
            time.sleep(2)
            yield found
    finally:
        for daemon in reversed(daemons):
            daemon.stop()
        for server in servers:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_each_probe_reads_the_end_of_the_certificate_served(probed: Probed) -> None:
    ends = probed.query("probe_ssl_earliest_cert_expiry")
    # The server without HSTS fails its probe after the handshake: its end is known.
    names = {target: name for name, target in probed.targets.items()}
    names[probed.targets["no-hsts"]] = "https"
    assert {names[target] for target in ends} == {"redis", "pgbackrest", "https"}
    assert probed.targets["stranger"] not in ends  # no verified handshake
    for target, end in ends.items():
        assert end == probed.ends[names[target]], names[target]
    now = time.time()
    assert abs(ends[probed.targets["redis"]] - (now + 10 * DAY)) < DAY
    assert abs(ends[probed.targets["pgbackrest"]] - (now + 100 * DAY)) < DAY
    assert abs(ends[probed.targets["https"]] - (now + 100 * DAY)) < DAY


def test_postgres_certificate_is_read_by_the_exporter_with_pg_monitor_only(
    probed: Probed,
) -> None:
    (end,) = probed.query("pg_server_certificate_not_after_seconds").values()
    assert end == probed.ends["postgres"]
    assert abs(end - (time.time() + 10 * DAY)) < DAY


def test_a_certificate_of_another_ca_or_an_answer_without_hsts_fails_the_probe(
    probed: Probed,
) -> None:
    success = probed.query("probe_success")
    failed = {target for target, value in success.items() if value == 0}
    assert failed == {probed.targets["stranger"], probed.targets["no-hsts"]}


def test_the_alerts_pick_out_the_10_day_certificates_and_the_failed_handshakes(
    probed: Probed,
) -> None:
    groups = yaml.safe_load((RULES / "certificates.yml").read_text())["groups"]
    alerts = {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}
    soon = probed.query(alerts["PetstoreCertificateExpiresSoon"])
    assert set(soon) == {probed.targets["redis"], probed.targets["postgres"]}
    assert all(9 * DAY < left < 10 * DAY for left in soon.values())
    failing = probed.query(alerts["PetstoreTLSProbeFailing"])
    assert set(failing) == {probed.targets["stranger"], probed.targets["no-hsts"]}
