"""The deployment of deploy/ on loopback, broken under load: the short version of
``make chaos`` (one of each fault), and ``make cluster-down`` leaving nothing.

HAProxy in front of two instances, PostgreSQL with pg_auto_failover (a primary and
two secondaries, number_sync_standbys = 1, D26) and Redis, all started from Debian's
binaries. The workers use petstore.client with its own retries; the run must lose,
duplicate and fail nothing.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import socket
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from testbed import chaos, cluster, cluster_command, processes
from tests.testbed.animals import pet


@pytest.fixture
def root() -> Iterator[Path]:
    """A folder the cluster's ``postgres`` user can reach (pytest's own are 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="petstore-test-cluster-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_one_of_each_fault_loses_duplicates_and_fails_nothing(root: Path) -> None:
    out = io.StringIO()
    counts = chaos.run(
        root,
        rounds=1,
        instances=2,
        workers=4,
        settle=2.0,
        overrides={"PETSTORE_SHUTDOWN_DRAIN_SECONDS": "2"},
        out=out,
    )
    lines = out.getvalue().splitlines()
    print(out.getvalue())
    assert counts["acknowledged"] > 100
    assert (counts["lost"], counts["duplicated"], counts["failed"]) == (0, 0, 0)
    assert (
        lines[-1] == f"chaos: acknowledged {counts['acknowledged']}, lost 0, duplicated 0, failed 0"
    )
    faults = [line.split(" | ")[0].removeprefix("| ") for line in lines if line.startswith("| ")]
    assert faults[1:] == [
        "no fault (baseline)",
        "instance SIGKILLed, restarted",
        "rolling restart of every instance",
        "PostgreSQL primary killed, secondary promoted",
        "Redis restarted",
    ]


@pytest.mark.slow
def test_cluster_down_leaves_no_process_and_no_port(root: Path) -> None:
    """``make cluster`` then ``make cluster-down``, from the recorded state: the
    service answers through HAProxy over TLS (its certificate verified against the test
    bed's CA; the instances' Link headers name the https URL; HAProxy's own answers are
    Error bodies, D10), every data node lets pg_rewind in (a former primary rejoins by
    rewinding, not by a whole copy), then no process of any of its process groups and
    none of its ports is left."""
    topology = cluster.Cluster(root, instances=2)
    key = topology.up()
    try:
        auth = {"Authorization": f"Bearer {key}"}
        api = httpx.Client(base_url=topology.url, headers=auth, verify=topology.balancers.trust())
        with api:
            response = api.get("pets")
            assert response.status_code == 200
            assert response.json() == []
            for name in ("Rex", "Tom"):
                assert api.post("pets", json={"name": name, "categoryId": 1}).status_code == 201
            paged = api.get("pets", params={"limit": 1})
            assert paged.links["next"]["url"].startswith(f"{topology.url}/pets?")
            assert topology.url.startswith("https://")
        assert topology.lb_states() == {"i1": "UP", "i2": "UP"}
        assert topology.postgres.primary() == 0
        # D26: three data nodes, a commit waits for one of the two secondaries.
        assert topology.postgres.replicated()
        assert sorted(topology.postgres.states()) == ["node1", "node2", "node3"]
        cluster.wait_for(
            lambda: _synchronous_standbys(topology.postgres.node_url(0)).startswith("ANY 1 ("),
            what="number_sync_standbys = 1 applied",
        )
        standbys = _synchronous_standbys(topology.postgres.node_url(0))
        assert standbys.count("pgautofailover_standby_") == 2
        _every_server_refuses_what_is_not_verified_tls(topology)
        for node in range(len(topology.postgres.node_ports)):  # a former primary rejoins
            with psycopg.connect(topology.postgres.rewind_source_url(node)) as rewind:
                assert rewind.execute("SELECT current_user").fetchone() == (
                    "pgautofailover_replicator",
                )
        # No instance in rotation, their unchecked backups in maintenance too (an
        # operator's stop of every one): HAProxy's own answer.
        for name in ("i1", "i2", "i1-backup", "i2-backup"):
            topology.lb_command(f"set server petstore/{name} state maint")
        refused = httpx.get(f"{topology.url}/pets", verify=topology.balancers.trust())
        assert refused.status_code == 503
        assert refused.json() == {
            "code": "unavailable",
            "message": "no instance can answer now; retry shortly",
            "status": 503,
        }
        assert refused.headers["retry-after"] == "1"
        assert refused.headers["cache-control"] == "no-store"
        assert refused.headers["x-content-type-options"] == "nosniff"
        assert refused.headers["x-request-id"]
        groups, ports = [d.pid for d in topology.daemons()], topology.ports()
    finally:
        left = cluster_command.down(root)
    assert left == []
    for daemon in topology.daemons():
        assert daemon.process.wait(5) is not None
    assert not root.exists()
    assert all(not processes.group_alive(group) for group in groups)
    assert not any(cluster.listening(port) for port in ports)


def _every_server_refuses_what_is_not_verified_tls(topology: cluster.Cluster) -> None:
    """Issue 59: PostgreSQL (every node and the monitor) refuses a connection without
    TLS, and its clients' connections are TLS with the server verified; a client
    that trusts another CA refuses PostgreSQL, Redis and an instance; Redis and the
    instances answer nothing in clear."""
    pg, certificates = topology.postgres, topology.certificates
    urls = [pg.monitor_url, *(pg.node_url(i) for i in range(len(pg.node_ports)))]
    for url in urls:
        plain = url.replace("sslmode=verify-full", "sslmode=disable")
        with pytest.raises(psycopg.OperationalError, match="no encryption"):
            psycopg.connect(plain, connect_timeout=5).close()
    with psycopg.connect(pg.node_url(0)) as connection:
        rows = connection.execute(
            "SELECT a.usename, s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
            "WHERE a.client_addr IS NOT NULL"
        ).fetchall()
    # The instances (petstore), the secondaries (streaming) and this harness.
    assert {"petstore", "pgautofailover_replicator", "postgres"} <= {user for user, _ in rows}
    assert all(ssl for _, ssl in rows)
    other = cluster.Certificates(topology.root / "another-ca")
    other.make("127.0.0.1")
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        psycopg.connect(pg.node_url(0).replace(str(certificates.ca), str(other.ca))).close()
    address, port = topology.hosts.addresses["redis"], topology.redis_port
    with socket.create_connection((address, port), timeout=5) as conn:
        conn.sendall(b"PING\r\n")
        with contextlib.suppress(ConnectionResetError):  # TLS only: no Redis answer in clear
            assert not conn.recv(64).startswith(b"+PONG")
    strangers = ssl.create_default_context(cafile=other.ca)
    for target in [(address, port), ("127.0.0.1", topology.instance_ports[0])]:
        with (
            socket.create_connection(target, timeout=5) as raw,
            pytest.raises(ssl.SSLCertVerificationError),
        ):
            strangers.wrap_socket(raw, server_hostname=target[0])
    instance = f"http://127.0.0.1:{topology.instance_ports[0]}/healthz"
    with pytest.raises(httpx.HTTPError):
        httpx.get(instance, timeout=5)  # TLS only: no plain HTTP answer


def _synchronous_standbys(url: str) -> str:
    with psycopg.connect(url, connect_timeout=2) as connection:
        row = connection.execute("SHOW synchronous_standby_names").fetchone()
    assert row is not None
    return str(row[0])


def test_the_check_counts_what_was_lost_duplicated_or_failed() -> None:
    """The count the run ends with sees each kind of damage (a check that cannot fail
    would prove nothing)."""
    ledger = chaos.Ledger(
        operations=[
            chaos.Operation(kind="create", started=0.0, ended=0.1, failed=False, answers=(201,)),
            chaos.Operation(kind="list", started=0.1, ended=0.2, failed=True, answers=(503, 0)),
        ],
        acknowledged={
            "kept": pet(1, "kept", status="available"),
            "gone": pet(2, "gone"),
            "changed": pet(3, "changed", category_id=2, status="pending"),
        },
        attempted={"kept", "gone", "changed", "twice", "unanswered"},
    )
    stored = {
        "kept": [pet(1, "kept", status="available")],
        "changed": [pet(3, "changed", category_id=2)],
        "twice": [pet(4, "twice", status="available"), pet(5, "twice", status="available")],
        "unanswered": [pet(6, "unanswered", status="available")],
    }
    out = io.StringIO()
    counts = chaos.report(
        ledger, [chaos.Fault(name="window", started=0.0, ended=1.0)], stored, out=out
    )
    assert counts == {"acknowledged": 3, "lost": 2, "duplicated": 1, "failed": 1}
    lines = out.getvalue().splitlines()
    assert lines[-1] == "chaos: acknowledged 3, lost 2, duplicated 1, failed 1"
    assert "| window | 1.0 | 0 | 2 | 1 | 0.90 | 100 | 100 |" in lines
    assert "Animals stored without a 201 reaching the client: 2." in lines
    assert "  slowest: create 0.10 s, answers: 201" in lines
