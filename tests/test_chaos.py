"""The deployment of deploy/ on loopback, broken under load: the short version of
``make chaos`` (one of each fault), and ``make cluster-down`` leaving nothing.

HAProxy in front of two instances, PostgreSQL with pg_auto_failover (a primary and
a synchronous secondary) and Redis, all started from Debian's binaries. The workers
use petstore.client with its own retries; the run must lose, duplicate and fail
nothing.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deploy import chaos, cluster

pytestmark = pytest.mark.slow


@pytest.fixture
def root() -> Iterator[Path]:
    """A folder the cluster's ``postgres`` user can reach (pytest's own are 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="petstore-test-cluster-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


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


def test_cluster_down_leaves_no_process_and_no_port(root: Path) -> None:
    """``make cluster`` then ``make cluster-down``, from the recorded state: the
    service answers through HAProxy (and HAProxy's own answers are Error bodies, D10),
    then no process of any of its process groups and none of its ports is left."""
    topology = cluster.Cluster(root, instances=2)
    key = topology.up()
    try:
        response = httpx.get(f"{topology.url}/pets", headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 200
        assert response.json() == []
        assert topology.lb_states() == {"i1": "UP", "i2": "UP"}
        assert topology.postgres.primary() == 0
        for name in ("i1", "i2"):  # no instance in rotation: HAProxy's own answer
            topology.lb_command(f"set server petstore/{name} state maint")
        refused = httpx.get(f"{topology.url}/pets")
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
        left = cluster.down(root)
    assert left == []
    for daemon in topology.daemons():
        assert daemon.process.wait(5) is not None
    assert not root.exists()
    assert all(not cluster._group_alive(group) for group in groups)
    assert not any(cluster.listening(port) for port in ports)
