"""The restore drill of docs/operations/recover.md ("Backups and restore"), run as written,
on both stores.

A real ``petstore serve`` takes animals (some under an Idempotency-Key) and API keys;
the documented backup command runs while a client keeps creating; more animals and a
revocation follow; then the documented restore, and what a client of the restored
service sees: every animal acknowledged before the backup, the original answer to a
replayed Idempotency-Key (D16), keys as they were at backup time until the runbook
revokes them again, and an id counter that never reissues an id (D5) once step 5
moves it, and does reissue one when that step is skipped.

And the pgBackRest repository at rest, on two test hosts with deploy/pgbackrest/'s
configuration (:mod:`testbed.backups`): every file in it encrypted, a restore refused
with a passphrase that is not the repository's, and one with the right passphrase
bringing the data back.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest
from click.testing import CliRunner, Result
from psycopg.conninfo import conninfo_to_dict

from petstore.cli.main import main
from petstore.server.store import migrate
from testbed import DEPLOY, backups, hosts
from testbed.processes import (
    Daemon,
    ServerUnavailableError,
    free_port,
    give_to_postgres,
    postgres_user,
    program,
    wait_for,
)
from tests.conftest import LiveServer, postgres_admin_url, run_sql
from tests.deployment.test_systemd_unit import service_section

pytestmark = pytest.mark.slow  # four real petstore serve processes per drill


def _client(name: str) -> str:
    """A PostgreSQL client program (createdb, pg_dump, pg_restore), Debian's."""
    return program(name, package="postgresql-client")


#: Where step 5 of the restore moves the id counter (the statements of recover.md, both stores).
COUNTER_PAST = 100000
#: The server's settings for the drill: a revocation is seen at once (D13's cache
#: would make the test wait 2 s), and the writer is not rate limited (D15).
SERVER_ENV = {"PETSTORE_KEY_CACHE_SECONDS": "0", "PETSTORE_RATE_LIMIT_ENABLED": "false"}


def petstore(database_url: str, *args: str) -> Result:
    """``PETSTORE_DATABASE_URL=database_url petstore args...``, which must succeed."""
    result = CliRunner().invoke(main, list(args), env={"PETSTORE_DATABASE_URL": database_url})
    assert result.exit_code == 0, result.output
    return result


@dataclass
class Key:
    id: int
    key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def create_key(database_url: str, name: str) -> Key:
    """``petstore keys create --name name``: the key is stdout's last line (run.md's runbook)."""
    result = petstore(database_url, "keys", "create", "--name", name)
    key_id = int(result.stderr.split("Created API key ", 1)[1].split(" ", 1)[0])
    return Key(key_id, result.stdout.splitlines()[-1])


def keys_list(database_url: str) -> dict[str, dict[str, Any]]:
    """``petstore keys list --json``, by key name."""
    lines = petstore(database_url, "keys", "list", "--json").stdout.splitlines()
    return {row["name"]: row for row in map(json.loads, lines)}


def sqlite3_command(database: Path, command: str) -> list[str]:
    """``sqlite3 database "command"`` as the guide writes it; its output lines.

    Without the ``sqlite3`` tool, Python's module stands in for the documented
    command: ``Connection.backup`` for ``.backup FILE``, and the statements
    themselves (``VACUUM INTO`` included) otherwise, each row printed as the tool
    prints it (columns joined by ``|``).
    """
    if shutil.which("sqlite3"):
        done = subprocess.run(
            ["sqlite3", str(database), command], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        return done.stdout.splitlines()
    source = sqlite3.connect(database, isolation_level=None)
    try:
        if command.startswith(".backup "):
            target = sqlite3.connect(command.removeprefix(".backup "))
            try:
                source.backup(target)
            finally:
                target.close()
            return []
        lines: list[str] = []
        for statement in filter(str.strip, command.split(";")):
            for row in source.execute(statement):
                lines.append("|".join(map(str, row)))
        return lines
    finally:
        source.close()


@dataclass
class Drill:
    """What the clients were told, as the drill goes on."""

    writer: Key
    revoked_before: Key
    revoked_after: Key
    created_after: Key | None = None
    #: Every animal a 201 acknowledged, by id, as it was acknowledged.
    acknowledged: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: Ids acknowledged before the backup command started: the restore must keep them.
    before_backup: set[int] = field(default_factory=set)
    #: Ids created after the backup had finished: the restore loses them.
    after_backup: set[int] = field(default_factory=set)
    #: (Idempotency-Key, body, the 201's bytes) of creates before the backup.
    idempotent: list[tuple[str, dict[str, Any], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acknowledge(self, pet: dict[str, Any]) -> None:
        with self.lock:
            self.acknowledged[pet["id"]] = pet

    def acknowledged_ids(self) -> set[int]:
        with self.lock:
            return set(self.acknowledged)


def start_server(root: Path, database_url: str) -> LiveServer:
    server = LiveServer(root, env={**SERVER_ENV, "PETSTORE_DATABASE_URL": database_url})
    root.mkdir(parents=True, exist_ok=True)
    server.start()
    return server


def stop_with_sigterm(server: LiveServer) -> None:
    """Restore step 1: SIGTERM to ``petstore serve``, which stops cleanly."""
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(15) == 0, server.output()


def create_pet(
    client: httpx2.Client, drill: Drill, body: dict[str, Any], *, idempotency_key: str = ""
) -> int:
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    response = client.post("/v1/pets", json=body, headers=headers)
    assert response.status_code == 201, response.text
    pet: dict[str, Any] = response.json()
    assert pet == {"id": pet["id"], "status": "available", **body}
    drill.acknowledge(pet)
    if idempotency_key:
        drill.idempotent.append((idempotency_key, body, response.content))
    return int(pet["id"])


def before_the_backup(server: LiveServer, database_url: str) -> Drill:
    """Before the backup: keys made and one revoked with the CLI (run.md's runbook), animals
    created over HTTP, every fourth under an Idempotency-Key."""
    drill = Drill(
        writer=create_key(database_url, "writer"),
        revoked_before=create_key(database_url, "revoked-before"),
        revoked_after=create_key(database_url, "revoked-after"),
    )
    petstore(database_url, "keys", "revoke", str(drill.revoked_before.id))
    with httpx2.Client(base_url=server.url, headers=drill.writer.auth) as client:
        for i in range(40):
            status = ("available", "pending", "sold")[i % 3]
            body = {"name": f"Mia №{i} 🐈", "categoryId": 1 + i % 7, "status": status}
            create_pet(client, drill, body, idempotency_key=f"drill-{i}" if i % 4 == 0 else "")
        assert client.get("/v1/pets", headers=drill.revoked_before.auth).status_code == 401
    return drill


@contextmanager
def writing(server: LiveServer, drill: Drill) -> Iterator[None]:
    """Two clients creating animals without pause for as long as the block runs
    (at least until each has had 10 answers before the block's body starts)."""
    stop = threading.Event()
    counts = [0, 0]
    failures: list[BaseException] = []

    def write(n: int) -> None:
        try:
            with httpx2.Client(base_url=server.url, headers=drill.writer.auth) as client:
                while not stop.is_set():
                    body = {"name": f"writer {n} #{counts[n]}", "categoryId": 1 + n}
                    create_pet(client, drill, body)
                    counts[n] += 1
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    while min(counts) < 10 and not failures:
        stop.wait(0.01)
    drill.before_backup = drill.acknowledged_ids()
    try:
        yield
        during = sum(counts)
        while sum(counts) <= during and not failures:  # still serving after the backup
            stop.wait(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not failures, failures


def after_the_backup(server: LiveServer, database_url: str, drill: Drill) -> None:
    """After the backup: what the restore loses (recover.md): animals, a revocation, a
    key."""
    with httpx2.Client(base_url=server.url, headers=drill.writer.auth) as client:
        for i in range(5):
            body = {"name": f"after backup {i}", "categoryId": 9}
            drill.after_backup.add(create_pet(client, drill, body))
        petstore(database_url, "keys", "revoke", str(drill.revoked_after.id))
        drill.created_after = create_key(database_url, "created-after")
        assert client.get("/v1/pets", headers=drill.revoked_after.auth).status_code == 401
        assert client.get("/v1/pets", headers=drill.created_after.auth).status_code == 200


def check_backup_rows(rows: list[dict[str, Any]], drill: Drill) -> None:
    """A consistent backup: every animal in it as it was acknowledged, and every
    animal acknowledged before the backup started is in it."""
    by_id = {row["id"]: row for row in rows}
    assert len(by_id) == len(rows)
    for pet_id, pet in by_id.items():
        assert pet == drill.acknowledged[pet_id]
    assert drill.before_backup <= by_id.keys()
    assert not drill.after_backup & by_id.keys()


def every_pet(client: httpx2.Client) -> tuple[list[dict[str, Any]], int]:
    """listPets followed through ``Link: rel="next"`` (D9): the animals and the pages."""
    pets: list[dict[str, Any]] = []
    url: str | None = "/v1/pets?limit=25"
    pages = 0
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.text
        pets += response.json()
        pages += 1
        link = response.headers.get("link")
        url = link[1 : link.index(">")] if link else None
    return pets, pages


def check_restore_without_step_5(server: LiveServer, drill: Drill) -> None:
    """What the section warns of: keys revoked after the backup are valid again, keys
    created after it are gone, and the next animal reuses an issued id."""
    assert drill.created_after is not None
    with httpx2.Client(base_url=server.url, headers=drill.writer.auth) as client:
        assert client.get("/v1/pets", headers=drill.revoked_after.auth).status_code == 200
        assert client.get("/v1/pets", headers=drill.revoked_before.auth).status_code == 401
        assert client.get("/v1/pets", headers=drill.created_after.auth).status_code == 401
        response = client.post("/v1/pets", json={"name": "Newcomer", "categoryId": 3})
    assert response.status_code == 201
    reused = response.json()["id"]
    assert reused in drill.acknowledged  # a client already holds this id for another animal
    assert drill.acknowledged[reused]["name"] != "Newcomer"


def revoke_again(database_url: str, drill: Drill) -> None:
    """Restore step 5, keys: compare ``petstore keys list`` with the records, revoke
    again what must stay revoked."""
    assert drill.created_after is not None
    listed = keys_list(database_url)
    assert "created-after" not in listed
    assert listed["revoked-before"]["revoked_at"] is not None
    assert listed["revoked-after"]["revoked_at"] is None  # what the operator must catch
    assert listed["writer"]["revoked_at"] is None
    petstore(database_url, "keys", "revoke", str(drill.revoked_after.id))


def check_restored_service(server: LiveServer, drill: Drill) -> list[dict[str, Any]]:
    """The documented restore, as a client sees it; returns the animals listed."""
    assert drill.created_after is not None
    with httpx2.Client(base_url=server.url, headers=drill.writer.auth) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready"

        pets, pages = every_pet(client)
        assert pages > 1
        assert [pet["id"] for pet in pets] == sorted({pet["id"] for pet in pets})
        check_backup_rows(pets, drill)

        for key, body, original in drill.idempotent:
            replay = client.post("/v1/pets", json=body, headers={"Idempotency-Key": key})
            assert replay.status_code == 201
            assert replay.headers["idempotent-replayed"] == "true"
            assert replay.content == original

        for gone in (drill.revoked_before, drill.revoked_after, drill.created_after):
            refused = client.get("/v1/pets", headers=gone.auth)
            assert refused.status_code == 401
            assert refused.json()["code"] == "unauthorized"

        response = client.post("/v1/pets", json={"name": "Newcomer", "categoryId": 3})
    assert response.status_code == 201
    assert response.json()["id"] == COUNTER_PAST + 1
    assert response.json()["id"] > max(drill.acknowledged)
    return pets


def sqlite_rows(database: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT id, name, category_id, status FROM pets ORDER BY id")
        return [{"id": i, "name": n, "categoryId": c, "status": s} for i, n, c, s in rows]
    finally:
        conn.close()


def sqlite_backup(database: Path, backup: Path, command: str) -> None:
    """The documented backup: ``petstore db backup PATH`` (D28), or the ``sqlite3``
    tool's ``VACUUM INTO``; the former says what it copied."""
    if command == "petstore db backup":
        done = petstore(f"sqlite:///{database}", "db", "backup", str(backup))
        assert done.stdout.startswith(f"Backed up {database} to {backup}: ")
        assert done.stdout.endswith(" animals, integrity ok.\n")
    else:
        assert sqlite3_command(database, command.format(backup=backup)) == []


@pytest.mark.parametrize(
    "backup_command",
    [
        pytest.param("petstore db backup", id="petstore-db-backup"),
        pytest.param("VACUUM INTO '{backup}'", id="vacuum-into"),
    ],
)
def test_sqlite_restore_drill_as_documented(tmp_path: Path, backup_command: str) -> None:
    live = tmp_path / "live"
    server = start_server(live, f"sqlite:///{live / 'data' / 'petstore.db'}")
    database, url = live / "data" / "petstore.db", server.database_url
    backup = tmp_path / "backups" / "petstore-2026-11-21.db"
    backup.parent.mkdir()
    try:
        drill = before_the_backup(server, url)
        with writing(server, drill):  # the documented backup, then its check
            sqlite_backup(database, backup, backup_command)
        check = "PRAGMA integrity_check; SELECT version_num FROM alembic_version; "
        check += "SELECT count(*) FROM pets;"
        rows = sqlite_rows(backup)
        assert sqlite3_command(backup, check) == ["ok", migrate.head_revision(), str(len(rows))]
        check_backup_rows(rows, drill)
        after_the_backup(server, url, drill)

        # The restore with step 5 (counter, keys) left out, on a copy elsewhere.
        skipped = tmp_path / "without-step-5"
        (skipped / "data").mkdir(parents=True)
        shutil.copyfile(backup, skipped / "data" / "petstore.db")
        unmoved = start_server(skipped, f"sqlite:///{skipped / 'data' / 'petstore.db'}")
        try:
            check_restore_without_step_5(unmoved, drill)
        finally:
            unmoved.stop()

        # The documented restore, steps 1 to 7.
        stop_with_sigterm(server)  # step 1
        assert not database.with_name("petstore.db-wal").exists()  # folded back, as it says
        database.rename(database.with_name("petstore.db.broken"))  # step 2
        for leftover in (
            "petstore.db-wal",
            "petstore.db-shm",
        ):  # step 3
            database.with_name(leftover).unlink(missing_ok=True)
        shutil.copyfile(backup, database)  # step 4
        counter = (
            "INSERT INTO sqlite_sequence (name, seq) SELECT 'pets', 0 WHERE NOT EXISTS "
            "(SELECT 1 FROM sqlite_sequence WHERE name = 'pets'); "
            "UPDATE sqlite_sequence SET seq = 100000 WHERE name = 'pets'"
        )
        assert sqlite3_command(database, counter) == []  # step 5
        revoke_again(url, drill)
        server = start_server(tmp_path / "restored", url)  # step 6
        assert check_restored_service(server, drill) == rows  # step 7
    finally:
        server.stop()


@dataclass
class PostgresCluster:
    """The test cluster as the guide's commands address it, and a role of the drill's
    own standing for the guide's ``petstore`` role (deploy.md, step 1)."""

    host: str
    port: str
    admin_url: str
    role: str
    password: str

    def url(self, database: str) -> str:
        return f"postgresql://{self.role}:{self.password}@{self.host}:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)


def run(*command: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


@pytest.fixture
def cluster() -> Iterator[PostgresCluster]:
    """A login role owning the databases the drill makes; all dropped afterwards."""
    admin_url = postgres_admin_url()
    info = conninfo_to_dict(admin_url)
    found = PostgresCluster(
        host=str(info.get("host", "127.0.0.1")),
        port=str(info.get("port", "5432")),
        admin_url=admin_url,
        role=f"petstore_drill_{secrets.token_hex(4)}",
        password=secrets.token_hex(16),
    )
    found.admin(f"CREATE ROLE {found.role} LOGIN PASSWORD '{found.password}'")
    try:
        yield found
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            owned = conn.execute(
                "SELECT datname FROM pg_database WHERE pg_get_userbyid(datdba) = %s",
                (found.role,),
            ).fetchall()
            for (name,) in owned:
                conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            conn.execute(f"DROP ROLE {found.role}")


def createdb(cluster: PostgresCluster, name: str) -> str:
    """``createdb -h HOST -U postgres -O petstore NAME`` (recover.md); the URL."""
    info = conninfo_to_dict(cluster.admin_url)
    env = None
    if info.get("password"):
        env = {**os.environ, "PGPASSWORD": str(info["password"])}
    user = str(info.get("user", "postgres"))
    where = ["-h", cluster.host, "-p", cluster.port, "-U", user]
    run(_client("createdb"), *where, "-O", cluster.role, name, env=env)
    return cluster.url(name)


def restore(cluster: PostgresCluster, dump: Path, name: str) -> str:
    """The documented restore into a new database NAME: createdb, pg_restore, db upgrade."""
    url = createdb(cluster, name)
    run(_client("pg_restore"), "-d", url, "--no-owner", str(dump))
    upgraded = petstore(url, "db", "upgrade")
    assert upgraded.stdout == f"Database is at revision {migrate.head_revision()}.\n"
    return url


def test_postgres_restore_drill_as_documented(tmp_path: Path, cluster: PostgresCluster) -> None:
    source = f"petstore_{secrets.token_hex(4)}"
    cluster.admin(f"CREATE DATABASE {source} OWNER {cluster.role}")
    url = cluster.url(source)
    petstore(url, "db", "upgrade")
    server = start_server(tmp_path / "live", url)
    dump = tmp_path / "backups" / "petstore-2026-11-21.dump"
    dump.parent.mkdir()
    try:
        drill = before_the_backup(server, url)
        with writing(server, drill):  # the documented backup
            run(_client("pg_dump"), "-Fc", "-d", url, "-f", str(dump))
        after_the_backup(server, url, drill)

        # The restore with the counter and keys step left out, into a database of its own.
        unmoved_url = restore(cluster, dump, f"{source}_without_step_5")
        selected = "SELECT id, name, category_id, status FROM pets ORDER BY id"
        rows = [{"categoryId": r.pop("category_id"), **r} for r in run_sql(unmoved_url, selected)]
        check_backup_rows(rows, drill)
        unmoved = start_server(tmp_path / "without-step-5", unmoved_url)
        try:
            check_restore_without_step_5(unmoved, drill)
        finally:
            unmoved.stop()

        # The documented restore: a new database, the counter moved and the keys
        # revoked again, every instance pointed at it and restarted, then checked.
        restored = restore(cluster, dump, f"{source}_restored")
        run_sql(restored, "ALTER TABLE pets ALTER COLUMN id RESTART WITH 100001;")
        revoke_again(restored, drill)
        stop_with_sigterm(server)
        server = start_server(tmp_path / "restored", restored)
        assert check_restored_service(server, drill) == rows
    finally:
        server.stop()


def test_petstore_db_backup_refuses_an_existing_file_and_postgresql(tmp_path: Path) -> None:
    """``petstore db backup PATH`` never overwrites PATH (exit 1, the file as it was)
    and sends PostgreSQL to pgBackRest (exit 2); a failed copy leaves no file."""
    url = f"sqlite:///{tmp_path / 'petstore.db'}"
    petstore(url, "db", "upgrade")
    taken = tmp_path / "taken.db"
    taken.write_bytes(b"an older backup")
    runner = CliRunner()
    refused = runner.invoke(main, ["db", "backup", str(taken)], env={"PETSTORE_DATABASE_URL": url})
    assert refused.exit_code == 1
    assert f"{taken} already exists" in refused.output
    assert taken.read_bytes() == b"an older backup"
    nowhere = tmp_path / "missing" / "b.db"
    failed = runner.invoke(main, ["db", "backup", str(nowhere)], env={"PETSTORE_DATABASE_URL": url})
    assert failed.exit_code == 1
    assert not nowhere.parent.exists()
    postgres = runner.invoke(
        main, ["db", "backup", str(tmp_path / "p.db")],
        env={"PETSTORE_DATABASE_URL": "postgresql://petstore@db.internal/petstore"},
    )  # fmt: skip
    assert postgres.exit_code == 2
    assert "pgBackRest" in postgres.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["petstore.db", "taken.db"]


#: The magic numbers a file of pgBackRest's repository starts with when it is
#: compressed and not encrypted (zstd, gzip), and when it is encrypted (OpenSSL's
#: salted format, which pgBackRest's aes-256-cbc writes).
ZSTD_MAGIC, GZIP_MAGIC, ENCRYPTED_MAGIC = b"\x28\xb5\x2f\xfd", b"\x1f\x8b", b"Salted__"
#: Where libpq and pgBackRest look for PostgreSQL's socket by default (Debian's).
SOCKETS = "/var/run/postgresql"
#: pgbackrest-server.service's file-system sandbox, as far as it can be made without
#: systemd: in a mount namespace of its own every mount read-only (ProtectSystem=strict;
#: /tmp too, where the unit has a private one), the paths given before ``--`` writable
#: again (ReadWritePaths=), then the PostgreSQL user (User=) with no capability
#: (CapabilityBoundingSet=) and no new privileges (NoNewPrivileges=) runs the command
#: after ``--``. Run as ``sh -c SANDBOX sh PATH... -- COMMAND...`` by root.
SANDBOX = """set -eu
mount --make-rprivate /
findmnt -rn -o TARGET | while read -r target; do
  case $target in
    /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) ;;
    *) mount -o remount,bind,ro "$target" ;;
  esac
done
while [ "$1" != -- ]; do mount --bind "$1" "$1"; mount -o remount,bind,rw "$1"; shift; done
shift
exec setpriv --reuid=postgres --regid=postgres --init-groups --no-new-privs --bounding-set=-all \
  --inh-caps=-all -- "$@"
"""
SERVER_UNIT = DEPLOY / "systemd" / "pgbackrest-server.service"


@pytest.fixture
def hosts_root() -> Iterator[Path]:
    """A folder the ``postgres`` user can reach (pytest's own are 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="petstore-test-repository-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def start_node(network: hosts.Network, repository: backups.Repository, pgdata: Path,
               port: int) -> tuple[Daemon, str]:  # fmt: skip
    """PostgreSQL on test host ``db1`` with ``pgdata`` (made by initdb when it does not
    exist), archiving through deploy/postgres/archiving.conf; returns it and the URL of
    its socket once it answers and is out of recovery."""
    if not pgdata.exists():
        initdb = program("initdb", package="postgresql")
        made = subprocess.run(
            [initdb, "-D", str(pgdata), "-U", "postgres", "-A", "trust", "-E", "UTF8"],
            user=postgres_user(), capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        shutil.copyfile(DEPLOY / "postgres" / "archiving.conf", pgdata / "archiving.conf")
        give_to_postgres(pgdata / "archiving.conf")
        with (pgdata / "postgresql.conf").open("a") as conf:
            conf.write("include 'archiving.conf'\n")
    settings = {"listen_addresses": "", "port": port, "unix_socket_directories": SOCKETS}
    options = [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
    argv = [program("postgres", package="postgresql"), "-D", str(pgdata), *options]
    node = Daemon(
        network.run_in("db1", argv, user=network.postgres),
        log=pgdata.parent / "db1.log",
        env={**os.environ, **repository.node_env(0)},
    )  # fmt: skip
    url = f"host={SOCKETS} port={port} user=postgres dbname=postgres"

    def primary() -> bool:
        try:
            with psycopg.connect(url, connect_timeout=1) as connection:
                row = connection.execute("SELECT pg_is_in_recovery()").fetchone()
        except psycopg.Error:
            return False
        return row is not None and not row[0]

    try:
        wait_for(primary, what="PostgreSQL on db1", seconds=120)
    except ServerUnavailableError:
        node.stop()
        raise AssertionError(node.tail()) from None
    return node, url


def sandbox(repository: backups.Repository, host: str) -> list[str]:
    """:data:`SANDBOX` for ``host``'s TLS server, with the unit's ReadWritePaths= as
    the test bed has them for that host (the test hosts share one file system: a
    data node's /var/lib/pgbackrest, empty in production, is left out)."""
    service = service_section(SERVER_UNIT)
    assert service["ProtectSystem"] == ["strict"]
    assert service["NoNewPrivileges"] == ["yes"]
    assert service["CapabilityBoundingSet"] == [""]
    assert service["User"] == ["postgres"]
    root = repository.root
    where = {
        "/var/lib/pgbackrest": [root / "repo"] if host == backups.HOST else [],
        "/var/log/pgbackrest": [root / "log" / host],
        # Production's lock-path is /var/spool/pgbackrest/lock (deploy/pgbackrest/).
        "/var/spool/pgbackrest": [root / "spool" / host, root / "lock" / host],
    }
    writable = [str(path) for paths in service["ReadWritePaths"] for unit_path in paths.split()
                for path in where[unit_path]]  # fmt: skip
    return ["unshare", "--mount", "sh", "-c", SANDBOX, "sh", *writable, "--"]


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root (as CI runs)")
def test_the_pgbackrest_repository_is_encrypted_and_opens_with_its_passphrase_only(
    hosts_root: Path,
) -> None:
    """D28's repository at rest: ``pgbackrest info`` says aes-256-cbc; every file in
    it (WAL, backup files, manifests, info files) is ciphertext, none compressed in
    clear nor holding an animal's name; with another passphrase on the repository
    host a restore is refused, naming the passphrase file, before the data directory
    is made; with the repository's own, the restore brings the animal back (the data
    node gets the passphrase from the repository host, over TLS). Both TLS servers
    run in pgbackrest-server.service's file-system sandbox (:data:`SANDBOX`): the
    archive, the backup and the restore need no write outside its ReadWritePaths=."""
    network = hosts.Network(["db1", backups.HOST])
    pgdata, port = hosts_root / "db1" / "data", free_port()
    repository = backups.Repository(
        hosts_root, network, nodes=["db1"], ports=[port], pgdata=lambda _: pgdata
    )
    name = f"Zebulon the encrypted {secrets.token_hex(8)}"
    node: Daemon | None = None
    network.up()
    try:
        repository.prepare()
        pgdata.parent.mkdir()
        give_to_postgres(pgdata.parent)
        node, url = start_node(network, repository, pgdata, port)
        for host in repository.servers:
            repository.servers[host] = repository.start_server(
                host, sandbox=sandbox(repository, host)
            )
        repository.create_stanza()
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("CREATE TABLE pets (name text)")
            connection.execute("INSERT INTO pets VALUES (%s)", (name,))
        repository.backup("full")
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("SELECT pg_switch_wal()")  # the insert's segment, archived

        info = repository.info()
        assert info["cipher"] == "aes-256-cbc"
        assert len(info["backup"]) == 1
        files = [path for path in (repository.root / "repo").rglob("*") if path.is_file()]
        names = {path.name for path in files}
        assert {"archive.info", "backup.info", "backup.manifest", "PG_VERSION.zst"} <= names
        assert any(path.parent.name == "0000000100000000" for path in files)  # WAL
        for path in files:
            content = path.read_bytes()
            assert content.startswith(ENCRYPTED_MAGIC), path
            assert not content.startswith((ZSTD_MAGIC, GZIP_MAGIC)), path
            assert name.encode() not in content, path
        node.stop(60, signum=signal.SIGINT)  # a fast shutdown
        node = None
        pgdata.rename(pgdata.with_name("data-before-restore"))

        made_with = repository.passphrase.read_text()
        repository.write_passphrase(base64.b64encode(secrets.token_bytes(48)).decode())
        with pytest.raises(ServerUnavailableError, match="passphrase") as refused:
            repository.restore(0)
        assert f"is {repository.passphrase} the passphrase it was made with?" in str(refused.value)
        assert not pgdata.exists()

        repository.passphrase.write_text(made_with)
        repository.restore(0)
        node, url = start_node(network, repository, pgdata, port)  # recovers, then promotes
        with psycopg.connect(url) as connection:
            assert connection.execute("SELECT name FROM pets").fetchall() == [(name,)]
    finally:
        if node is not None:
            node.stop(signum=signal.SIGQUIT)
        for daemon in repository.daemons():
            daemon.stop()
        network.down()


ARCHIVE_PUSH = DEPLOY / "pgbackrest" / "petstore-pgbackrest-archive-push"


def test_a_promoted_node_archives_the_old_timeline_up_to_the_switch_first(tmp_path: Path) -> None:
    """deploy/postgres/archiving.conf's archive_command with a stand-in pgbackrest
    that records its calls: a segment is pushed as it is; a timeline history file (a
    promotion) first has every segment of the parent timeline below the switch pushed,
    the newest first, synchronously, one failing push holding up none of the others
    nor the history file; never a segment at or past the switch (a standby's recycled
    files), of another timeline, or the ``.partial`` one."""
    wal = tmp_path / "pg_wal"
    wal.mkdir()
    names = [f"00000001{n:016X}" for n in range(3, 10)]  # timeline 1 up to the switch
    past = ["00000001000000000000000A", "00000001000000000000000B"]  # recycled, stale
    for name in [*names, *past, "00000002000000000000000A"]:
        with (wal / name).open("wb") as segment:  # wal_segment_size, sparse
            segment.truncate(16 * 2**20)
    (wal / "00000001000000000000000A.partial").touch()
    # Timeline 2 began at 0/A000060: in segment A of timeline 1.
    (wal / "00000002.history").write_text("1\t0/A000060\tno recovery target specified\n")
    stand_in = tmp_path / "bin" / "pgbackrest"
    stand_in.parent.mkdir()
    stand_in.write_text(
        '#!/bin/sh\necho "$*" >> "$CALLS"\ncase "$*" in *000000010000000000000007) exit 1;; esac\n'
    )
    stand_in.chmod(0o755)
    calls = tmp_path / "calls"
    env = {"PATH": f"{stand_in.parent}:/usr/bin:/bin", "CALLS": str(calls)}

    def archive(path: str) -> subprocess.CompletedProcess[str]:
        calls.unlink(missing_ok=True)
        return subprocess.run(
            [str(ARCHIVE_PUSH), path], cwd=tmp_path, env=env, capture_output=True, text=True,
            check=False,
        )  # fmt: skip

    done = archive("pg_wal/00000002000000000000000A")
    assert done.returncode == 0, done.stderr
    assert calls.read_text().splitlines() == [
        "--stanza=petstore archive-push pg_wal/00000002000000000000000A"
    ]
    done = archive("pg_wal/00000002.history")
    assert done.returncode == 0, done.stderr
    assert calls.read_text().splitlines() == [
        *(f"--stanza=petstore --no-archive-async archive-push pg_wal/{n}" for n in names[::-1]),
        "--stanza=petstore archive-push pg_wal/00000002.history",
    ]
    assert "000000010000000000000007 of timeline 1 not archived" in done.stderr
