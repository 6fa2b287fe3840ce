"""A fresh database with N animals: migrated by ``petstore db upgrade``, then filled
by bulk inserts straight into its table (SQLite ``executemany`` in chunks,
PostgreSQL ``COPY``), with a progress line on stderr.

Animals get ids 1..N in insertion order, a third of each status, and names and
categories that vary like real ones.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

STATUSES = ("available", "pending", "sold")
NAMES = ("Rex", "Luna", "Milo", "Bella", "Charlie", "Nala", "Oscar", "Daisy", "Simba", "Coco")
CHUNK = 10_000


def animal(index: int) -> tuple[str, int, str]:
    """The ``index``-th seeded animal (0-based): name, category id, status."""
    return f"{NAMES[index % len(NAMES)]} {index + 1}", 1 + index % 50, STATUSES[index % 3]


class Progress:
    """A ``\\r``-updated progress bar on stderr."""

    def __init__(self, label: str, total: int) -> None:
        self.label = label
        self.total = max(total, 1)
        self.started = time.monotonic()
        self._shown = 0.0

    def show(self, done: int) -> None:
        """Redraw with ``done`` of the total, at most ten times a second."""
        now = time.monotonic()
        if now - self._shown < 0.1 and done < self.total:
            return
        self._shown = now
        share = done / self.total
        bar = "#" * int(share * 30)
        rate = done / max(time.monotonic() - self.started, 1e-9)
        sys.stderr.write(
            f"\r{self.label} [{bar:<30}] {share:6.1%} {done:>9,}/{self.total:,} {rate:,.0f}/s"
        )
        sys.stderr.flush()

    def finish(self) -> None:
        """Draw the full bar and end its line."""
        self.show(self.total)
        sys.stderr.write("\n")


def petstore(*args: str, database_url: str) -> str:
    """Run the ``petstore`` command on ``database_url``; its stdout. Raises
    CalledProcessError with the command's output when it fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PETSTORE_")}
    env["PETSTORE_DATABASE_URL"] = database_url
    done = subprocess.run(
        [sys.executable, "-m", "petstore", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
    return done.stdout


def _chunks(total: int) -> Iterator[list[tuple[str, int, str]]]:
    for start in range(0, total, CHUNK):
        yield [animal(i) for i in range(start, min(start + CHUNK, total))]


def fill_sqlite(path: Path, *, pets: int) -> None:
    """Insert ``pets`` animals into the migrated SQLite file at ``path``."""
    progress = Progress("seeding SQLite", pets)
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA synchronous = OFF")  # one final commit; the file is fresh
        done = 0
        for rows in _chunks(pets):
            conn.executemany("INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?)", rows)
            done += len(rows)
            progress.show(done)
        conn.commit()
        conn.execute("ANALYZE")
        conn.commit()
    finally:
        conn.close()
    progress.finish()


def fill_postgres(url: str, *, pets: int) -> None:
    """COPY ``pets`` animals into the migrated PostgreSQL database at ``url``, then
    VACUUM ANALYZE it, as autovacuum would have by the time a store is this big."""
    import psycopg

    progress = Progress("seeding PostgreSQL", pets)
    with psycopg.connect(url) as conn:
        with conn.cursor() as cursor:
            done = 0
            with cursor.copy("COPY pets (name, category_id, status) FROM STDIN") as copy:
                for rows in _chunks(pets):
                    for row in rows:
                        copy.write_row(row)
                    done += len(rows)
                    progress.show(done)
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE pets")
    progress.finish()


@contextmanager
def sqlite_database(*, pets: int) -> Iterator[str]:
    """A seeded SQLite file in a temporary folder, removed afterwards; yields its URL."""
    folder = Path(tempfile.mkdtemp(prefix="petstore-bench-"))
    try:
        path = folder / "petstore.db"
        url = f"sqlite:///{path}"  # an absolute path: sqlite:////tmp/...
        petstore("db", "upgrade", database_url=url)
        fill_sqlite(path, pets=pets)
        yield url
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def postgres_database(admin_url: str, *, pets: int) -> Iterator[str]:
    """A new database ``petstore_bench_<hex>`` on the server of ``admin_url``, seeded,
    dropped afterwards (connections and all); yields its URL."""
    import psycopg

    name = f"petstore_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = admin_url.rsplit("/", 1)[0] + f"/{name}"
        petstore("db", "upgrade", database_url=url)
        fill_postgres(url, pets=pets)
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def database(backend: str, *, pets: int, postgres_url: str) -> AbstractContextManager[str]:
    """The seeded database of ``backend`` (``sqlite`` or ``postgres``, the latter on the
    server of ``postgres_url``), removed afterwards; yields its URL."""
    if backend == "sqlite":
        return sqlite_database(pets=pets)
    return postgres_database(postgres_url, pets=pets)


def create_key(database_url: str) -> str:
    """A new API key named ``bench``, made by ``petstore keys create``."""
    return (
        petstore("keys", "create", "--name", "bench", database_url=database_url)
        .strip()
        .splitlines()[-1]
    )
