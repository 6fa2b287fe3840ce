"""The primary data node lost mid-load, and what it leaves in the WAL archive (D28):
:mod:`testbed.recovery_drill`'s failover step. The primary is cut off from the
repository's host first, so that segments it finishes are not archived by it; the
node promoted must archive them (deploy/pgbackrest/petstore-pgbackrest-archive-push),
which ``pgbackrest verify`` then shows (:func:`archive_gaps`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import suppress
from functools import partial

import psutil
import psycopg

from testbed import backups
from testbed.cluster import Cluster
from testbed.failover import NODES
from testbed.hosts import Network
from testbed.processes import wait_for
from testbed.recovery_check import Moment, gaps


def fail_primary(cluster: Cluster, last: Callable[[], Moment]) -> tuple[Moment, str]:
    """The primary's last seconds: its link to the repository's host cut (what it
    archives from now on stays in its queue), ``last`` run on it (the drill's mistake,
    whose moment it returns), its WAL segment finished (``pg_switch_wal``) and
    streamed to both secondaries; then the primary lost: its keeper, PostgreSQL and
    pgBackRest killed at once. Once a secondary is promoted, the old node rejoins.
    Returns the moment and a line saying which node was promoted and when."""
    pg, net = cluster.postgres, cluster.hosts
    assert isinstance(net, Network)
    primary = pg.primary()
    others = [i for i in range(NODES) if i != primary]
    host = f"db{primary + 1}"
    net.cut([host], [backups.HOST])
    moment = last()
    with psycopg.connect(pg.node_url(primary), autocommit=True) as connection:
        row = connection.execute("SELECT pg_switch_wal()::text").fetchone()
    assert row is not None
    switched = row[0]
    for index in others:
        url = pg.node_url(index)
        wait_for(partial(_received, url, switched), what=f"node{index + 1} receiving {switched}",
                 seconds=30)  # fmt: skip
    lost = time.monotonic()
    pg.kill_node(primary)
    _kill_pgbackrest(cluster, host)
    promoted = pg.wait_for_promotion(others, seconds=90)
    line = (f"node{primary + 1} lost {lost - moment.after:.1f} s after the mistake, its "
            f"archive cut off; node{promoted + 1} promoted after "
            f"{time.monotonic() - lost:.1f} s")  # fmt: skip
    net.heal([host])
    pg.start_node(primary)
    pg.wait_until_replicated(seconds=180)
    return moment, line


def _received(url: str, lsn: str) -> bool:
    """Whether the standby at ``url`` has received the WAL up to ``lsn``."""
    try:
        with psycopg.connect(url, connect_timeout=1) as connection:
            row = connection.execute(
                "SELECT pg_last_wal_receive_lsn() >= %s::pg_lsn", (lsn,)
            ).fetchone()
    except psycopg.Error:
        return False
    return bool(row and row[0])


def _kill_pgbackrest(cluster: Cluster, host: str) -> None:
    """SIGKILL the pgBackRest processes of data node ``host`` that outlive its
    PostgreSQL (archive-push's asynchronous process detaches itself): a lost host."""
    assert cluster.repository is not None
    config = str(cluster.repository.config(host))
    for process in psutil.process_iter(["name"]):
        if process.info["name"] != "pgbackrest":
            continue
        with suppress(psutil.Error):
            if process.environ().get("PGBACKREST_CONFIG") == config:
                process.kill()


def archive_gaps(cluster: Cluster) -> tuple[list[str], str]:
    """The primary's current segment finished and archived, then ``pgbackrest
    verify``: the archive's holes (:func:`testbed.recovery_check.gaps`) and a line
    saying what it checked."""
    assert cluster.repository is not None
    url = cluster.postgres.node_url(cluster.postgres.primary())  # as a superuser
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute("SELECT pg_walfile_name(pg_switch_wal())").fetchone()
    assert row is not None
    segment = row[0]

    def archived() -> bool:
        with psycopg.connect(url, autocommit=True) as connection:
            done = connection.execute("SELECT last_archived_wal FROM pg_stat_archiver").fetchone()
        # A history file's name (00000002.history) sorts before the segments.
        return done is not None and done[0] is not None and done[0][:24] >= segment

    wait_for(archived, what=f"{segment} archived", seconds=60)
    runs = cluster.repository.verify()
    holes = gaps(runs)
    timelines = sorted({first[:8] for first, _ in runs})
    line = (f"pgbackrest verify: every file valid, WAL of {len(timelines)} timelines in "
            f"{len(runs)} runs, gaps {len(holes)}")  # fmt: skip
    return holes, line
