"""The backup alerts read a real exporter (D28): Debian's prometheus-postgres-exporter
with deploy/prometheus/postgres-exporter-queries.yaml, against a real PostgreSQL that
archives through pgBackRest (a repository on this machine, as the postgres user),
with deploy/postgres/pgbackrest-monitor.sql installed.

Every series that deploy/prometheus/backups.yml names is exposed; the newest full
backup's completion is the one ``pgbackrest info`` reports; and when archiving breaks
(the repository is gone), the failures are counted and the queue of segments waiting,
and the age of its oldest, grow: what PetstoreWalArchivingFailing and
PetstoreWalArchivingBehind fire on (their thresholds are promtool's tests, in
tests/deployment/test_alerts.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import psycopg
import pytest
import yaml

from testbed.processes import Daemon, free_port, give_to_postgres, postgres_user, wait_for
from tests import ROOT
from tests.servers import postgres_server

pytestmark = pytest.mark.slow

RULES = ROOT / "deploy" / "prometheus"
#: One sample line of the text exposition format: name, labels, value.
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", re.MULTILINE)


def exporter_program() -> str:
    found = shutil.which("prometheus-postgres-exporter")
    assert found, "install Debian's prometheus-postgres-exporter (make test does)"
    return found


def pgbackrest(config: Path, *args: str) -> str:
    """``pgbackrest --stanza=petstore ARGS`` as the PostgreSQL user; its output."""
    done = subprocess.run(
        ["pgbackrest", f"--config={config}", "--stanza=petstore", *args],
        user=postgres_user(), capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def series_named() -> set[str]:
    """The metric names the expressions of backups.yml select."""
    groups = yaml.safe_load((RULES / "backups.yml").read_text())["groups"]
    exprs = " ".join(rule["expr"] for group in groups for rule in group["rules"])
    return set(re.findall(r"\b(pg_[a-z_]+|pgbackrest_[a-z_]+)\{", exprs))


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder the postgres user owns: the repository, spool, locks and logs."""
    made = Path(tempfile.mkdtemp(prefix="petstore-test-pgbackrest-"))
    made.chmod(0o755)
    give_to_postgres(made)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_the_exporter_exposes_what_the_backup_alerts_read(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = folder / "pgbackrest.conf"
    monkeypatch.setenv("PGBACKREST_CONFIG", str(config))  # the server's archive_command's
    archiving = {"archive_mode": "on", "archive_timeout": 30,
                 "archive_command": "pgbackrest --stanza=petstore archive-push %p"}  # fmt: skip
    with postgres_server(**archiving) as url, psycopg.connect(url, autocommit=True) as connection:
        data, sockets, port = (
            connection.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("data_directory", "unix_socket_directories", "port")
        )
        for sub in ("repo", "spool", "lock", "log"):
            (folder / sub).mkdir()
            give_to_postgres(folder / sub)
        # archive-push synchronous here (deploy/'s is asynchronous): no detached
        # process outlives the test.
        config.write_text(
            "[global]\n"
            f"repo1-path={folder / 'repo'}\nspool-path={folder / 'spool'}\n"
            f"lock-path={folder / 'lock'}\nlog-path={folder / 'log'}\n"
            "start-fast=y\nlog-level-console=warn\n"
            f"[petstore]\npg1-path={data}\npg1-port={port}\npg1-socket-path={sockets}\n"
        )
        give_to_postgres(config)
        pgbackrest(config, "stanza-create")
        pgbackrest(config, "check")
        pgbackrest(config, "--type=full", "backup")
        connection.execute((ROOT / "deploy/postgres/pgbackrest-monitor.sql").read_text())
        info = json.loads(pgbackrest(config, "--output=json", "info"))
        stop = info[0]["backup"][-1]["timestamp"]["stop"]

        port_exporter = free_port()
        exporter = Daemon(
            [exporter_program(), f"--web.listen-address=127.0.0.1:{port_exporter}",
             f"--extend.query-path={RULES / 'postgres-exporter-queries.yaml'}"],
            log=folder / "exporter.log",
            env={"DATA_SOURCE_NAME": f"{url}?sslmode=disable"},
        )  # fmt: skip
        try:

            def metrics() -> dict[str, float]:
                """The exposition as served (no client library's renaming): each
                sample by name, ``[type]`` added where it has that label."""
                text = httpx2.get(f"http://127.0.0.1:{port_exporter}/metrics").text
                found: dict[str, float] = {}
                for name, labels, value in SAMPLE.findall(text):
                    kind = re.search(r'type="([^"]*)"', labels)
                    found[name + (f"[{kind[1]}]" if kind else "")] = float(value)
                return found

            def scraped() -> bool:
                try:
                    return "pg_stat_archiver_archived_count" in metrics()
                except httpx2.HTTPError:
                    return False

            wait_for(scraped, what="the exporter", seconds=30)
            wait_for(lambda: metrics()["pg_wal_archive_queue_ready_segments"] == 0,
                     what="archiving caught up", seconds=60)  # fmt: skip
            healthy = metrics()
            assert series_named() <= {name.split("[")[0] for name in healthy}
            assert healthy["pgbackrest_backup_last_completion_timestamp_seconds[full]"] == stop
            assert healthy["pg_stat_archiver_archived_count"] > 0
            assert healthy["pg_wal_archive_queue_oldest_ready_age_seconds"] == 0

            # The repository is lost: each switched segment waits, each attempt fails.
            (folder / "repo").rename(folder / "repo-lost")
            connection.execute("CREATE TABLE written (n int)")
            connection.execute("SELECT pg_switch_wal()")
            wait_for(lambda: metrics()["pg_stat_archiver_failed_count"] > 0,
                     what="a failed archive_command", seconds=30)  # fmt: skip
            time.sleep(2)
            broken = metrics()
            assert broken["pg_wal_archive_queue_ready_segments"] >= 1
            assert broken["pg_wal_archive_queue_oldest_ready_age_seconds"] >= 1
            assert (
                broken["pg_stat_archiver_archived_count"]
                == (healthy["pg_stat_archiver_archived_count"])
            )
        finally:
            exporter.stop()
