"""The store's life on either backend: ``create_store`` picks the backend without any
I/O, ``open`` connects and checks the schema, ``close`` is safe whatever happened
before, and a store that is not open answers 503 (D10) instead of hanging."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from petstore.schemas import NewPet, PetStatus
from petstore.server import config, errors
from petstore.server.rules.idempotency import IdempotencyClaim, create_with_key
from petstore.server.store import (
    SchemaOutOfDateError,
    Store,
    create_store,
    migrate,
    open_store,
)
from petstore.server.store.postgres import PostgresDatabase
from petstore.server.store.sqlite import SQLiteDatabase
from tests.conftest import (
    ALL_SCOPES_DEFAULT_LIMIT,
    NOW,
    postgres_admin_url,
    postgres_database,
    run_sql,
)

UNREACHABLE_POSTGRES = "postgresql://postgres@127.0.0.1:1/postgres"


def writer_threads() -> int:
    """How many SQLite writer threads run in this process (stores not closed)."""
    return sum(thread.name == "sqlite-writer" for thread in threading.enumerate())


def no_connections_left(url: str) -> bool:
    """Whether the PostgreSQL database of ``url`` has no server connection, within a
    few seconds (a closed connection's server process may take a moment to end)."""
    deadline = time.monotonic() + 5
    while True:
        with psycopg.connect(postgres_admin_url(), autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                (url.rsplit("/", 1)[1],),
            ).fetchone()
        if row == (0,) or time.monotonic() > deadline:
            return row == (0,)
        time.sleep(0.05)


@pytest.fixture
def empty_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A database with no schema at all, on this test's backend."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
    else:
        with postgres_database() as url:
            yield url


def test_create_store_picks_the_backend_without_io_thread_or_loop(tmp_path: Path) -> None:
    """Called outside any event loop; neither the SQLite file (nor its directory) nor
    a PostgreSQL connection is made, and no thread is started."""
    threads = threading.active_count()
    path = tmp_path / "not-yet" / "petstore.db"
    sqlite_store = create_store(f"sqlite:///{path}")
    postgres_store = create_store(UNREACHABLE_POSTGRES, pool_size=3)
    assert isinstance(sqlite_store.database, SQLiteDatabase)
    assert isinstance(postgres_store.database, PostgresDatabase)
    assert not path.parent.exists()
    assert threading.active_count() == threads

    async def close_both() -> None:
        await sqlite_store.close()
        await postgres_store.close()

    asyncio.run(close_both())
    assert not path.parent.exists()


@pytest.mark.parametrize("url", ["mysql://localhost/petstore", "sqlite://", "sqlite:///:memory:"])
def test_create_store_refuses_an_unsupported_url(url: str) -> None:
    with pytest.raises(config.UnsupportedDatabaseError):
        create_store(url)


def test_close_is_safe_without_open_and_twice(database_url: str) -> None:
    threads = writer_threads()

    async def main() -> None:
        store = create_store(database_url)
        await store.close()
        await store.close()
        opened = await open_store(database_url)
        await opened.close()
        await opened.close()

    asyncio.run(main())
    assert writer_threads() == threads


async def assert_every_call_is_unavailable(store: Store) -> None:
    pet = NewPet(name="Rex", category_id=1, status=PetStatus.AVAILABLE)
    claim = IdempotencyClaim(
        api_key_id=1,
        key="k",
        fingerprint="fp",
        created_at=NOW,
        expired_before=NOW - timedelta(days=1),
    )

    async def in_a_transaction() -> None:
        async with store.transaction() as tx:
            await tx.pets.create(pet)

    calls = [
        store.pets.get(1),
        store.pets.list_page(status=None, after_id=0, limit=10),
        store.pets.get_many([1]),
        store.pets.create(pet),
        store.pets.create_many([pet]),
        in_a_transaction(),
        create_with_key(store, pet, claim=claim),
        store.idempotency_records.find(1, "k", created_after=NOW),
        store.idempotency_records.get(1, "k"),
        store.idempotency_records.purge(created_before=NOW),
        store.api_keys.create(
            name="k",
            prefix="p",
            key_hash="h",
            created_at=NOW,
            expires_at=None,
            **ALL_SCOPES_DEFAULT_LIMIT,
        ),
        store.api_keys.list_all(),
        store.api_keys.revoke(1, at=NOW),
        store.api_keys.find("p"),
        store.api_keys.count_active(now=NOW),
    ]
    for call in calls:
        with pytest.raises(errors.Unavailable):
            await asyncio.wait_for(call, 10)


def test_a_store_not_open_or_closed_answers_unavailable(database_url: str) -> None:
    async def main() -> None:
        store = create_store(database_url)
        try:
            await assert_every_call_is_unavailable(store)
        finally:
            await store.close()
        opened = await open_store(database_url)
        await opened.close()
        await assert_every_call_is_unavailable(opened)

    asyncio.run(main())


def test_open_on_a_database_without_schema_raises_and_releases_everything(
    backend: str, empty_url: str
) -> None:
    threads = writer_threads()

    async def main() -> None:
        with pytest.raises(SchemaOutOfDateError, match="revision none"):
            await open_store(empty_url)
        store = create_store(empty_url)
        with pytest.raises(SchemaOutOfDateError):
            await store.open()
        await store.close()  # again, after the failed open: still safe

    asyncio.run(main())
    assert writer_threads() == threads
    if backend == "postgres":
        assert no_connections_left(empty_url)


def test_open_on_an_old_schema_raises(backend: str, empty_url: str) -> None:
    """A schema at a revision before the newest lacks something this code uses."""
    migrate.upgrade(empty_url)
    run_sql(empty_url, "UPDATE alembic_version SET version_num = ?", (migrate.revisions()[0],))
    with pytest.raises(SchemaOutOfDateError, match=migrate.head_revision()):
        asyncio.run(open_store(empty_url))


def test_open_on_a_sqlite_file_that_cannot_be_opened_raises_and_stops_its_thread(
    tmp_path: Path,
) -> None:
    threads = writer_threads()
    url = f"sqlite:///{tmp_path / 'missing-directory' / 'petstore.db'}"
    with pytest.raises(sqlite3.OperationalError):
        asyncio.run(open_store(url))
    assert writer_threads() == threads


@pytest.mark.own_database
def test_schema_revision_is_the_head_and_none_once_the_version_table_is_gone(
    database_url: str,
) -> None:
    async def main() -> tuple[str | None, str | None]:
        store = await open_store(database_url)
        try:
            before = await store.schema_revision()
            await asyncio.to_thread(run_sql, database_url, "DROP TABLE alembic_version")
            await asyncio.sleep(0)  # a SQLite read of the next turn sees the drop
            return before, await store.schema_revision()
        finally:
            await store.close()

    assert asyncio.run(main()) == (migrate.head_revision(), None)


def test_purge_deletes_the_records_created_before_and_counts_them(database_url: str) -> None:
    async def main() -> tuple[int, int, int]:
        store = await open_store(database_url)
        try:
            for i, age in enumerate((3, 2, 0)):
                created_at = NOW - timedelta(days=age)
                claim = IdempotencyClaim(
                    api_key_id=1,
                    key=f"k{i}",
                    fingerprint="fp",
                    created_at=created_at,
                    expired_before=created_at,
                )
                new = NewPet(name=f"p{i}", category_id=1, status=PetStatus.AVAILABLE)
                await create_with_key(store, new, claim=claim)
            cutoff = NOW - timedelta(days=1)
            return (
                await store.idempotency_records.purge(created_before=cutoff),
                await store.idempotency_records.purge(created_before=cutoff),
                len(run_sql(database_url, "SELECT * FROM idempotency_records")),
            )
        finally:
            await store.close()

    assert asyncio.run(main()) == (2, 0, 1)


def test_a_transaction_commits_its_block_and_rolls_back_one_that_raises(database_url: str) -> None:
    """The unit of work: a block's writes are stored once it ends; a block that
    raises stores nothing, and what it raised is raised again."""
    new = NewPet(name="Rex", category_id=1, status=PetStatus.AVAILABLE)

    async def main() -> list[object]:
        store = await open_store(database_url)
        try:
            async with store.transaction() as tx:
                kept = await tx.pets.create(new)
            dropped: list[int] = []

            async def raising() -> None:
                async with store.transaction() as tx:
                    dropped.append((await tx.pets.create(new)).id)
                    raise LookupError("the block's own")

            with pytest.raises(LookupError, match="the block's own"):
                await raising()
            return [await store.pets.get(kept.id), await store.pets.get(dropped[0])]
        finally:
            await store.close()

    kept, dropped = asyncio.run(main())
    assert kept is not None
    assert dropped is None


def test_a_cancelled_transaction_stores_nothing_and_frees_the_database(database_url: str) -> None:
    """A block cancelled while it holds its transaction (its request's deadline, a
    client gone) is rolled back, and the next transaction and create go through."""

    def new(name: str) -> NewPet:
        return NewPet(name=name, category_id=1, status=PetStatus.AVAILABLE)

    async def main() -> list[str]:
        store = await open_store(database_url)
        holding = asyncio.Event()
        try:

            async def held() -> None:
                async with store.transaction() as tx:
                    await tx.pets.create(new("held"))
                    holding.set()
                    await asyncio.Event().wait()

            task = asyncio.ensure_future(held())
            await asyncio.wait_for(holding.wait(), 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            async with store.transaction() as tx:
                await asyncio.wait_for(tx.pets.create(new("after")), 10)
            await asyncio.wait_for(store.pets.create(new("also")), 10)
            stored = await store.pets.list_page(status=None, after_id=0, limit=10)
            return [pet.name for pet in stored]
        finally:
            await store.close()

    assert asyncio.run(main()) == ["after", "also"]
