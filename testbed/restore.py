"""The restore of docs/operations/recover.md ("Backups and restore") from the pgBackRest
repository (D28), step by step, on a :class:`~testbed.cluster.Cluster` on test hosts: what
``make recovery-drill`` runs.

1. The old data nodes are stopped (:func:`stop_data_nodes`, an operator's mistake:
   their data directories kept aside) or lost (:func:`lose_data_nodes`), and dropped
   from the pg_auto_failover monitor.
2. The newest backup is restored into node 1's empty data directory with
   ``pgbackrest restore``: to a moment (``--type=time``, then promote) or through the
   newest archived WAL.
3. That PostgreSQL is started on a local socket only, so that no instance writes to
   it before step 4; once recovery has promoted it, its animals are read
   (:class:`Restored`).
4. The id counter is moved past every id the old nodes may have issued (D5):
   the highest id restored plus :data:`ID_MARGIN`; the recovery settings pgBackRest
   wrote are removed (:data:`RECOVERY_SETTINGS`).
5. It is stopped and registered with ``pg_autoctl create postgres`` as it is (the
   primary); nodes 2 and 3 are created empty and copy it (secondaries); the instances
   reconnect through their multi-host URL by themselves.
6. A full backup of the new nodes is taken (by the caller, :mod:`testbed.recovery_drill`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from testbed.cluster import Cluster
from testbed.failover import DATABASE, NODES, PostgresNodes
from testbed.ops import SELECT_PETS, Pet, pets_from_rows
from testbed.processes import ServerUnavailableError, program, wait_for

#: How far past the highest restored id the counter moves (D5): more ids than the
#: service issues between the restore's target and its end (here, a few hundred a
#: second for minutes; the guide's rule: the creates per second at the busiest,
#: times the seconds since the target, and at least this).
ID_MARGIN = 1_000_000


#: The settings ``pgbackrest restore`` writes into postgresql.auto.conf, removed
#: once the restored node is promoted.
RECOVERY_SETTINGS = ("restore_command", "recovery_target_time", "recovery_target_action")


@dataclass(frozen=True, kw_only=True)
class Restored:
    """What a restore brought back: every animal, and where the counter moved; how
    long ``pgbackrest restore`` took, then the recovery until promoted (seconds), the
    WAL it replayed from the backup's start (bytes), and the seconds from the
    registration of the restored node until three nodes replicated."""

    pets: list[Pet]
    next_id: int
    copied: float = 0.0
    recovered: float = 0.0
    replayed: int = 0
    replicating: float = 0.0


def stop_data_nodes(cluster: Cluster) -> None:
    """Stop every data node (SIGTERM to its keeper, which stops its PostgreSQL) and
    keep its data directory aside (``<node>-before-restore``) with its TLS server
    stopped: the old nodes, taken out of service but not destroyed. Raises
    ServerUnavailableError when the monitor has no primary."""
    pg = cluster.postgres
    primary = pg.primary()
    # The secondaries first: with its primary stopped first, the monitor would
    # promote one of them.
    for index in sorted(range(NODES), key=lambda i: i == primary):
        node = pg.nodes[index]
        if node is not None:
            node.stop(grace=60)
        pg.nodes[index] = None
    for index in range(NODES):
        pgdata = pg.pgdata(f"node{index + 1}")
        aside = pgdata.with_name(f"{pgdata.name}-before-restore")
        shutil.rmtree(aside, ignore_errors=True)
        pgdata.rename(aside)
        _stop_server(cluster, index)


def lose_data_nodes(cluster: Cluster) -> None:
    """Every data node lost at once: its keeper, PostgreSQL and pgBackRest's TLS
    server SIGKILLed, its data directory removed."""
    pg = cluster.postgres
    for index in range(NODES):
        pg.kill_node(index)
        _stop_server(cluster, index)
    for index in range(NODES):
        shutil.rmtree(pg.pgdata(f"node{index + 1}"))


def _stop_server(cluster: Cluster, index: int) -> None:
    assert cluster.repository is not None
    cluster.repository.stop_server(f"db{index + 1}")


def restore(cluster: Cluster, *, target: str | None) -> Restored:
    """Steps 1 to 5 on nodes whose keepers no longer run: the new data nodes,
    restored to ``target`` (a PostgreSQL timestamp; None: the newest archived WAL),
    replicating and registered with the monitor. Returns what was restored. Raises
    ServerUnavailableError."""
    pg, repository = cluster.postgres, cluster.repository
    assert repository is not None
    pg.forget_nodes()
    began = time.monotonic()
    repository.restore(0, target=target)
    copied = time.monotonic() - began
    # The backup restored (pgBackRest picks the newest before the target) began here.
    label = (pg.pgdata("node1") / "backup_label").read_text()
    backup_start = re.search(r"^START WAL LOCATION: (\S+)", label, re.MULTILINE)
    assert backup_start is not None, label
    began = time.monotonic()
    restored = _recover_apart(pg, backup_start=backup_start[1])
    recovered = time.monotonic() - began
    repository.start()
    began = time.monotonic()
    pg.create_nodes()
    return replace(restored, copied=copied, recovered=recovered,
                   replicating=time.monotonic() - began)  # fmt: skip


def _recover_apart(pg: PostgresNodes, *, backup_start: str) -> Restored:
    """Step 3 and 4: node 1's restored PostgreSQL on a socket of its own (no TCP,
    no synchronous standby to wait for) until recovery has promoted it; its animals
    read and its counter moved; then stopped. ``backup_start`` is the restored
    backup's start LSN, whence the WAL replayed is counted."""
    socket = pg.root / "pg" / "restore-socket"
    socket.mkdir(exist_ok=True)
    shutil.chown(socket, pg.hosts.postgres or "root", pg.hosts.postgres or "root")
    pgdata = pg.pgdata("node1")
    # Its own port: the restored configuration is that of the node the backup was
    # taken from, which may have been another.
    options = (
        f"-c listen_addresses='' -c unix_socket_directories='{socket}' "
        f"-c port={pg.node_ports[0]} -c synchronous_standby_names=''"
    )
    pg_ctl = program("pg_ctl", package="postgresql")
    env = {**os.environ, **pg.node_env[0]}  # its archive_command's configuration
    log = pg.root / "pg" / "restore.log"  # the postgres user's folder

    def run(*args: str) -> None:
        argv = pg.hosts.run_in("db1", [pg_ctl, "--pgdata", str(pgdata), *args],
                               user=pg.hosts.postgres)  # fmt: skip
        done = subprocess.run(  # noqa: S603 - our own argv
            argv, env=env, capture_output=True, text=True, check=False, timeout=900
        )
        if done.returncode != 0:
            raise ServerUnavailableError(f"pg_ctl {args[-1]}: {done.stdout} {done.stderr}")

    run("--log", str(log), "--options", options, "--wait", "--timeout", "600", "start")
    url = f"host={socket} port={pg.node_ports[0]} user=postgres dbname={DATABASE}"

    def promoted() -> bool:
        # pg_ctl returns once the server reads; a recovery that cannot reach its
        # target (WAL missing from the archive) ends the server after that.
        if not (pgdata / "postmaster.pid").exists():
            raise ServerUnavailableError(
                f"the restored node stopped before its promotion: {_fatal(pgdata)}"
            )
        return _promoted(url)

    try:
        wait_for(promoted, what="the restored node's promotion", seconds=600)
        with psycopg.connect(url, autocommit=True) as connection:
            lsn = connection.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)::bigint", (backup_start,)
            ).fetchone()
            with connection.cursor(row_factory=dict_row) as cursor:
                pets = pets_from_rows(cursor.execute(SELECT_PETS).fetchall())
            highest = connection.execute("SELECT last_value FROM pets_id_seq").fetchone()
            next_id = max([p.id for p in pets] + [highest[0] if highest else 0]) + ID_MARGIN
            connection.execute(f"ALTER TABLE pets ALTER COLUMN id RESTART WITH {int(next_id)}")
            # What pgBackRest wrote for the restore: a secondary copying this node
            # would run the same recovery and promote itself at the target.
            for setting in RECOVERY_SETTINGS:
                connection.execute(f"ALTER SYSTEM RESET {setting}")
    finally:
        if (pgdata / "postmaster.pid").exists():
            run("--mode", "fast", "--wait", "stop")
    replayed = int(lsn[0]) if lsn else 0
    return Restored(pets=pets, next_id=next_id, replayed=replayed)


def _fatal(pgdata: Path) -> str:
    """The last FATAL line of the newest server log in ``pgdata``'s log folder."""
    logs = sorted((pgdata / "log").glob("*.log"), key=lambda path: path.stat().st_mtime)
    lines = logs[-1].read_text(errors="replace").splitlines() if logs else []
    return next((line for line in reversed(lines) if "FATAL:" in line), "no FATAL line logged")


def _promoted(url: str) -> bool:
    """Whether the PostgreSQL at ``url`` answers and is out of recovery."""
    try:
        with psycopg.connect(url, connect_timeout=1) as connection:
            row = connection.execute("SELECT pg_is_in_recovery()").fetchone()
    except psycopg.Error:
        return False
    return row is not None and not row[0]
