"""D28's retention as shipped: the backups the timers of deploy/systemd/ take over
16 days (:func:`taken`), expired by the retention of deploy/pgbackrest/repository.conf,
leave any moment of the last 7 days restorable and nothing older than needed.

The backups are dated by Debian's libfaketime, on PostgreSQL and on pgBackRest
alike: pgBackRest names and dates an online backup by the database's clock and
expires by its own, so both run under one offset, moved from one timer firing to the
next (``FAKETIME_TIMESTAMP_FILE``). Rewriting the dates in the repository instead
would mean decrypting, editing and re-checksumming backup.info and every manifest
(the repository is encrypted, its info files checksummed): pgBackRest's internal
format, which the next release may change. The schedule is the one
``systemd-analyze calendar`` gives for each timer's ``OnCalendar=`` (their
``RandomizedDelaySec=`` aside), so a change of a timer or of the retention is tested
as shipped. One PostgreSQL and a repository on this machine, archiving synchronously:
no test hosts, no TLS (tests/deployment/test_backup_restore.py covers those).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from testbed import DEPLOY, backups
from testbed.processes import give_to_postgres, postgres_user
from tests.servers import postgres_server

pytestmark = pytest.mark.slow

#: Debian's libfaketime (package faketime), under the machine's multiarch folder.
LIBFAKETIME = next(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"), None)
#: How far back the schedule starts: two full backups before the 7 days at least.
WINDOW = timedelta(days=16)
#: D28's days, which repository.conf must keep.
DAYS = 7


def firings(timer: Path, *, since: datetime, until: datetime) -> list[datetime]:
    """When ``timer``'s ``OnCalendar=`` fires after ``since`` and not after ``until``
    (UTC), by ``systemd-analyze calendar``."""
    (calendar,) = re.findall(r"^OnCalendar=(.+)$", timer.read_text(), re.MULTILINE)
    done = subprocess.run(
        ["systemd-analyze", "calendar", "--iterations=30", f"--base-time=@{since.timestamp():.0f}",
         calendar],
        capture_output=True, text=True, check=True, env={"TZ": "UTC", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    found = re.findall(r"(?:Next elapse|Iter\. #\d+): \w+ (\S+ \S+) UTC", done.stdout)
    times = [datetime.fromisoformat(f).replace(tzinfo=UTC) for f in found]
    return [t for t in times if t <= until]


def taken(schedule: list[tuple[datetime, str]]) -> list[tuple[datetime, str]]:
    """The backups of ``schedule`` this test takes: every full one, and of the
    differentials between two full ones the first and the last (the ones between
    are expired or kept as those are, with the full backup they depend on: about
    half the backups, and half the test's time, for the same outcome)."""
    runs: list[list[tuple[datetime, str]]] = [[]]
    for backup in schedule:
        if backup[1] == "full":
            runs.append([])
        runs[-1].append(backup)
    return [backup for run in runs for backup in run if backup[1] == "full" or backup in
            (next((b for b in run if b[1] == "diff"), None), run[-1])]  # fmt: skip


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder the postgres user owns: the repository, spool, locks, logs, the clock."""
    made = Path(tempfile.mkdtemp(prefix="petstore-test-retention-"))
    made.chmod(0o755)
    give_to_postgres(made)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_the_shipped_schedule_keeps_seven_days_and_expires_the_rest(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert LIBFAKETIME is not None, "install Debian's faketime (make test does)"
    now = datetime.now(UTC)
    # Up to an hour ago: no full backup then sits within seconds of 7 days old now.
    since, until = now - WINDOW, now - timedelta(hours=1)
    schedule = taken(sorted(
        [(t, "full") for t in firings(DEPLOY / "systemd" / "pgbackrest-full.timer",
                                       since=since, until=until)]
        + [(t, "diff") for t in firings(DEPLOY / "systemd" / "pgbackrest-diff.timer",
                                        since=since, until=until)]
    ))  # fmt: skip
    clock = folder / "clock"
    clock.write_text("+0\n")
    give_to_postgres(clock)
    # PostgreSQL and every pgbackrest started from here on read the offset in `clock`
    # whenever they read the time; monotonic clocks stay true.
    for name, value in {
        "LD_PRELOAD": str(LIBFAKETIME), "FAKETIME_TIMESTAMP_FILE": str(clock),
        "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "PGBACKREST_CONFIG": str(folder / "pgbackrest.conf"),
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)

    def at(moment: datetime) -> None:
        clock.write_text(f"{(moment - datetime.now(UTC)).total_seconds():+.0f}\n")

    archiving = {"archive_mode": "on", "archive_timeout": 0, "wal_level": "replica",
                 "archive_command": "pgbackrest --stanza=petstore archive-push %p"}  # fmt: skip
    with postgres_server(**archiving) as url, psycopg.connect(url, autocommit=True) as connection:
        data, sockets, port = (
            connection.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("data_directory", "unix_socket_directories", "port")
        )
        write_config(folder, data=data, sockets=sockets, port=port)
        pgbackrest("stanza-create")
        connection.execute("CREATE TABLE pets (id serial PRIMARY KEY, name text)")
        for moment, kind in schedule:
            at(moment)
            connection.execute(
                "INSERT INTO pets (name) SELECT 'Rex ' || n FROM generate_series(1, 1000) n"
            )
            pgbackrest(f"--type={kind}", "backup")  # then expires, as the timers' services do
        at(now)
        pgbackrest("expire")  # now, as each backup does after itself
        info = json.loads(pgbackrest("--output=json", "info"))[0]

    kept, archive = info["backup"], info["archive"][0]
    newest_full_older = max(
        t for t, kind in schedule if kind == "full" and t < now - timedelta(days=DAYS)
    )
    started = [datetime.fromtimestamp(b["timestamp"]["start"], UTC) for b in kept]
    # The oldest kept is the newest full backup older than 7 days: every moment since
    # it is restorable, and nothing older is kept.
    assert kept[0]["type"] == "full"
    assert newest_full_older <= started[0] < newest_full_older + timedelta(minutes=1)
    assert datetime.fromtimestamp(kept[0]["timestamp"]["stop"], UTC) < now - timedelta(days=DAYS)
    assert len(kept) == sum(1 for t, _ in schedule if t >= newest_full_older)
    assert len(kept) < len(schedule)  # the older ones were expired
    # WAL: from the oldest kept backup's start on, kept; before it, expired.
    assert archive["min"] == kept[0]["archive"]["start"]
    assert archive["max"] >= kept[-1]["archive"]["stop"]


def pgbackrest(*args: str) -> str:
    """``pgbackrest --stanza=petstore ARGS`` as the PostgreSQL user, with the
    environment's configuration and clock; its output."""
    done = subprocess.run(
        ["pgbackrest", "--stanza=petstore", *args],
        user=postgres_user(), capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def write_config(folder: Path, *, data: str, sockets: str, port: str) -> None:
    """deploy/pgbackrest/repository.conf as shipped (retention, cipher, compression),
    with this machine's paths, the one PostgreSQL local, no TLS server, and a
    passphrase of its own."""
    for sub in ("repo", "spool", "lock", "log"):
        (folder / sub).mkdir()
        give_to_postgres(folder / sub)
    template = (DEPLOY / "pgbackrest" / "repository.conf").read_text()
    remote = sorted(set(re.findall(r"^(pg\d+-host[a-z-]*|pg[2-9]-[a-z-]+)=", template, re.M)))
    text = backups.render(template, {
        "global": {
            "repo1-path": str(folder / "repo"), "spool-path": str(folder / "spool"),
            "lock-path": str(folder / "lock"), "log-path": str(folder / "log"),
            "repo1-cipher-pass": "a passphrase for this test only",
            **{key: [] for key in re.findall(r"^(tls-server-[a-z-]+)=", template, re.M)},
        },
        backups.STANZA: {
            "pg1-path": data, "pg1-port": port, "pg1-socket-path": sockets,
            **{key: [] for key in remote},
        },
    })  # fmt: skip
    config = folder / "pgbackrest.conf"
    config.write_text(text)
    give_to_postgres(config)
