"""The PostgreSQL store against a real server: one fresh migrated database per module,
emptied before each test (D5, D7, D9, D10, D13)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import psycopg
import pytest

from petstore.schemas import NewPet, Pet, PetStatus
from petstore.server import errors
from petstore.server.rules.idempotency import ClaimOutcome, IdempotencyClaim, create_with_key
from petstore.server.store import (
    IdempotencyRecord,
    Store,
    migrate,
    open_store,
)
from petstore.server.store.group_commit import GroupCommit
from petstore.server.store.postgres import DIALECT, ID_ORDER_LOCK, PostgresDatabase
from petstore.server.store.postgres_connections import Call
from petstore.server.store.rows import Row
from tests.conftest import ALL_SCOPES_DEFAULT_LIMIT, NOW, postgres_admin_url, postgres_database

T = TypeVar("T")
pytestmark = pytest.mark.servers  # a PostgreSQL of this run's own


@pytest.fixture(scope="module")
def migrated_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this module, migrated to head."""
    with postgres_database() as url:
        migrate.upgrade(url)
        yield url


@pytest.fixture
def url(migrated_url: str) -> str:
    """The module's database, with no animals, no keys and no idempotency records."""
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute("TRUNCATE pets, api_keys, idempotency_records")
    return migrated_url


def postgres_store(url: str, *, pool_size: int = 10, timeout: float = 5.0) -> Store:
    """A store on ``url`` whose every wait is bounded by ``timeout`` seconds."""
    return Store(PostgresDatabase(url, size=pool_size, timeout=timeout), DIALECT)


def run(
    url: str,
    scenario: Callable[[Store], Awaitable[T]],
    *,
    pool_size: int = 10,
    timeout: float = 5.0,
) -> T:
    """Open a store on ``url``, run ``scenario`` with it and close it, on one loop."""

    async def main() -> T:
        store = postgres_store(url, pool_size=pool_size, timeout=timeout)
        await store.open()
        try:
            return await scenario(store)
        finally:
            await store.close()

    return asyncio.run(main())


def new_pet(name: str, status: PetStatus = PetStatus.AVAILABLE) -> NewPet:
    return NewPet(name=name, category_id=1, status=status)


def test_created_pet_is_returned_by_get_and_list(url: str) -> None:
    async def scenario(store: Store) -> tuple[Pet, Pet | None, list[Pet], Pet | None]:
        pet = await store.pets.create(NewPet(name="Rex", category_id=7, status=PetStatus.SOLD))
        return (
            pet,
            await store.pets.get(pet.id),
            await store.pets.list_page(status=None, after_id=0, limit=10),
            await store.pets.get(pet.id + 1),
        )

    pet, got, listed, missing = run(url, scenario)
    assert pet.id > 0
    assert (pet.name, pet.category_id, pet.status) == ("Rex", 7, PetStatus.SOLD)
    assert got == pet
    assert listed == [pet]
    assert missing is None


def test_list_is_ascending_and_pages_by_id_with_status_filter(url: str) -> None:
    statuses = [PetStatus.AVAILABLE, PetStatus.SOLD, PetStatus.AVAILABLE] * 4

    async def scenario(store: Store) -> tuple[list[Pet], list[list[Pet]]]:
        for i, status in enumerate(statuses):
            await store.pets.create(new_pet(f"pet {i}", status))
        everything = await store.pets.list_page(status=None, after_id=0, limit=100)
        pages, after_id = [], 0
        while page := await store.pets.list_page(
            status=PetStatus.AVAILABLE, after_id=after_id, limit=3
        ):
            pages.append(page)
            after_id = page[-1].id
        return everything, pages

    everything, pages = run(url, scenario)
    ids = [pet.id for pet in everything]
    assert ids == sorted(ids)
    assert len(ids) == len(set(ids)) == 12
    assert [len(page) for page in pages] == [3, 3, 2]
    paged = [pet for page in pages for pet in page]
    assert paged == [pet for pet in everything if pet.status is PetStatus.AVAILABLE]


def test_ids_increase_and_are_not_reused_after_deleting_the_highest(url: str) -> None:
    async def scenario(store: Store) -> tuple[Pet, Pet, Pet]:
        first = await store.pets.create(new_pet("a"))
        second = await store.pets.create(new_pet("b"))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DELETE FROM pets WHERE id = %s", (second.id,))
        third = await store.pets.create(new_pet("c"))
        return first, second, third

    first, second, third = run(url, scenario)
    assert first.id < second.id < third.id


def test_concurrent_creates_get_distinct_ids_and_are_all_listed(url: str) -> None:
    async def scenario(store: Store) -> tuple[list[Pet], list[Pet]]:
        created = await asyncio.gather(*(store.pets.create(new_pet(f"p{i}")) for i in range(200)))
        listed: list[Pet] = []
        while page := await store.pets.list_page(
            status=None, after_id=listed[-1].id if listed else 0, limit=100
        ):
            listed.extend(page)
        return list(created), listed

    created, listed = run(url, scenario, pool_size=4)
    assert [pet.name for pet in created] == [f"p{i}" for i in range(200)]
    assert len({pet.id for pet in created}) == 200
    assert sorted(created, key=lambda pet: pet.id) == listed


def test_creates_in_one_statement_each_get_their_own_animal(url: str) -> None:
    """Many creates go in with one statement: every NewPet gets an animal of its own
    content, stored under the id it was given; equal NewPets take ascending ids."""
    asked = [new_pet("twin"), new_pet("solo", PetStatus.SOLD), new_pet("twin"), new_pet("x")]

    async def scenario(store: Store) -> tuple[list[Pet], list[Pet]]:
        created = await store.pets.create_many(asked)
        return created, await store.pets.list_page(status=None, after_id=0, limit=100)

    created, listed = run(url, scenario)
    for new, pet in zip(asked, created, strict=True):
        assert (pet.name, pet.category_id, pet.status) == (new.name, new.category_id, new.status)
    assert listed == sorted(created, key=lambda pet: pet.id)
    assert created[0].id < created[2].id


def test_a_create_whose_key_is_taken_stores_nothing_and_answers_the_record(url: str) -> None:
    """D16: a claim on a key already stored rolls its animal back and answers the
    record that won, replayed."""
    claim = IdempotencyClaim(
        api_key_id=1,
        key="k1",
        fingerprint="fp-k1",
        created_at=NOW,
        expired_before=NOW - timedelta(days=1),
    )

    async def scenario(store: Store) -> tuple[list[ClaimOutcome], list[Pet]]:
        first = await create_with_key(store, new_pet("solo"), claim=claim)
        again = await create_with_key(store, new_pet("again"), claim=claim)
        return [first, again], await store.pets.list_page(status=None, after_id=0, limit=100)

    (first, again), listed = run(url, scenario)
    assert not first.replayed
    assert again.replayed
    assert again.record == IdempotencyRecord(
        api_key_id=1, key="k1", fingerprint="fp-k1", pet=first.record.pet, created_at=NOW
    )
    assert [pet.name for pet in listed] == ["solo"]


def test_api_keys_are_created_found_listed_revoked_and_counted(url: str) -> None:
    later = NOW + timedelta(days=1)

    async def scenario(store: Store) -> None:
        forever = await store.api_keys.create(
            name="ci",
            prefix="pk_aaaa",
            key_hash="h1",
            created_at=NOW,
            expires_at=None,
            **ALL_SCOPES_DEFAULT_LIMIT,
        )
        expiring = await store.api_keys.create(
            name="temp",
            prefix="pk_bbbb",
            key_hash="h2",
            created_at=NOW,
            expires_at=later,
            **ALL_SCOPES_DEFAULT_LIMIT,
        )
        assert forever.created_at == NOW
        assert forever.created_at.tzinfo is not None
        assert (expiring.expires_at, expiring.revoked_at) == (later, None)

        found = await store.api_keys.find("pk_bbbb")
        assert [(r.id, r.key_hash, r.expires_at, r.revoked_at) for r in found] == [
            (expiring.id, "h2", later, None)
        ]
        assert await store.api_keys.find("pk_none") == []
        assert await store.api_keys.list_all() == [forever, expiring]

        assert await store.api_keys.count_active(now=NOW) == 2
        assert await store.api_keys.count_active(now=later) == 1
        assert await store.api_keys.revoke(forever.id, at=NOW) is True
        assert await store.api_keys.revoke(forever.id, at=NOW) is False
        assert await store.api_keys.revoke(expiring.id + 1000, at=NOW) is False
        assert await store.api_keys.count_active(now=NOW) == 1
        (revoked, _) = await store.api_keys.list_all()
        assert revoked.revoked_at == NOW

    run(url, scenario)


def test_schema_revision_is_the_head_revision(url: str) -> None:
    assert run(url, Store.schema_revision) == migrate.head_revision()


def test_schema_revision_is_none_once_the_version_table_is_gone() -> None:
    with postgres_database() as own_url:
        migrate.upgrade(own_url)

        async def scenario(store: Store) -> str | None:
            async with await psycopg.AsyncConnection.connect(own_url, autocommit=True) as other:
                await other.execute("DROP TABLE alembic_version")
            return await store.schema_revision()

        assert run(own_url, scenario) is None


@pytest.mark.parametrize("unreachable", ["no server on the port", "no such database"])
def test_open_on_an_unreachable_database_is_unavailable_promptly(unreachable: str) -> None:
    if unreachable == "no server on the port":
        unreachable = "postgresql://postgres@127.0.0.1:1/postgres"
    else:
        unreachable = postgres_admin_url().rsplit("/", 1)[0] + "/petstore_no_such_database"
    started = time.monotonic()
    with pytest.raises(errors.Unavailable) as caught:
        asyncio.run(postgres_store(unreachable, timeout=1.0).open())
    assert time.monotonic() - started < 3
    assert caught.value.headers["Retry-After"] == "1"


def test_queries_are_unavailable_while_the_database_is_gone_and_recover_after() -> None:
    with postgres_database() as gone_url:
        migrate.upgrade(gone_url)
        name = gone_url.rsplit("/", 1)[1]

        def admin(sql: str) -> None:
            with psycopg.connect(postgres_admin_url(), autocommit=True) as conn:
                conn.execute(sql)

        async def scenario(store: Store) -> None:
            await store.pets.create(new_pet("before"))
            admin(f'DROP DATABASE "{name}" WITH (FORCE)')
            for call in (
                store.pets.list_page(status=None, after_id=0, limit=10),
                store.pets.create(new_pet("during")),
            ):
                started = time.monotonic()
                with pytest.raises(errors.Unavailable):
                    await call
                assert time.monotonic() - started < 5

            admin(f'CREATE DATABASE "{name}"')
            await asyncio.to_thread(migrate.upgrade, gone_url)
            deadline = time.monotonic() + 15
            while True:
                try:
                    pet = await store.pets.create(new_pet("after"))
                    break
                except errors.Unavailable:
                    assert time.monotonic() < deadline, "the pool did not reconnect"
                    await asyncio.sleep(0.2)
            assert await store.pets.list_page(status=None, after_id=0, limit=10) == [pet]

        run(gone_url, scenario, timeout=1.0)


def test_concurrent_gets_are_answered_each_with_its_own_animal(url: str) -> None:
    """getPets in flight together share queries; each caller still gets the animal it
    asked for, None for an id with none, and an animal created just before."""

    async def scenario(store: Store) -> None:
        pets = [await store.pets.create(new_pet(f"p{i}")) for i in range(5)]
        ids = [pet.id for pet in pets]
        extremes = [ids[-1] + 1000, 0, 2**63 - 1, -(2**63)]  # none; any int64 (D11)
        asked = [ids[i % 5] for i in range(40)] + extremes + [ids[0]]
        answers = await asyncio.gather(*(store.pets.get(pet_id) for pet_id in asked))
        by_id = {pet.id: pet for pet in pets}
        assert answers == [by_id.get(pet_id) for pet_id in asked]
        created = await store.pets.create(new_pet("fresh"))
        assert await asyncio.gather(store.pets.get(created.id), store.pets.get(ids[0])) == [
            created,
            pets[0],
        ]

    run(url, scenario)


def test_concurrent_lists_are_answered_each_with_its_own_page(url: str) -> None:
    """listPets in flight together share a batch, and the same page asked twice one
    query; each caller still gets the page it asked for, as a list of its own."""

    async def scenario(store: Store) -> None:
        pets = [
            await store.pets.create(
                new_pet(f"p{i}", PetStatus.SOLD if i % 2 else PetStatus.PENDING)
            )
            for i in range(6)
        ]
        asked = [
            (None, 0, 2),
            (None, 0, 2),
            (None, pets[2].id, 10),
            (PetStatus.SOLD, 0, 10),
            (PetStatus.SOLD, pets[3].id, 1),
            (PetStatus.AVAILABLE, 0, 10),
            (None, 0, 2),
        ]
        answers = await asyncio.gather(
            *(store.pets.list_page(status=s, after_id=a, limit=n) for s, a, n in asked)
        )
        expected = [
            [p for p in pets if (s is None or p.status is s) and p.id > a][:n] for s, a, n in asked
        ]
        assert answers == expected
        assert answers[0] is not answers[1]  # the same page, each caller a list of its own

    run(url, scenario)


def test_clients_walking_the_store_at_once_each_get_their_own_pages(url: str) -> None:
    """Many clients following their own cursors at once share queries (one per status
    filter); each still walks exactly the animals of its filter, in id order, page by
    page, and a page past the last animal is empty."""
    statuses = [PetStatus.AVAILABLE, PetStatus.SOLD, PetStatus.PENDING, PetStatus.AVAILABLE]
    walkers = [(status, size) for status in (None, *PetStatus) for size in (1, 2, 3, 7, 100)]

    async def walk(store: Store, status: PetStatus | None, size: int) -> list[list[Pet]]:
        pages, after_id = [], 0
        while page := await store.pets.list_page(status=status, after_id=after_id, limit=size):
            pages.append(page)
            after_id = page[-1].id
        return pages

    async def scenario(store: Store) -> tuple[list[Pet], list[list[list[Pet]]]]:
        pets = [await store.pets.create(new_pet(f"p{i}", statuses[i % 4])) for i in range(30)]
        walked = await asyncio.gather(*(walk(store, status, size) for status, size in walkers))
        beyond = await asyncio.gather(
            store.pets.list_page(status=None, after_id=2**63 - 1, limit=5),
            store.pets.list_page(status=PetStatus.SOLD, after_id=pets[-1].id, limit=5),
        )
        assert beyond == [[], []]
        return pets, walked

    pets, walked = run(url, scenario)
    for (status, size), pages in zip(walkers, walked, strict=True):
        expected = [pet for pet in pets if status is None or pet.status is status]
        assert [pet for page in pages for pet in page] == expected, (status, size)
        assert all(len(page) == size for page in pages[:-1]), (status, size)
        assert 0 < len(pages[-1]) <= size


def _cut_every_connection_to(url: str, *, cut: bool = True) -> int:
    """Terminate every server process serving ``url``'s database, as a restart of the
    server or an idle-connection timeout between us and it would; how many. With
    ``cut=False``, only count them."""
    what = "pg_terminate_backend(pid)" if cut else "pid"
    with psycopg.connect(postgres_admin_url(), autocommit=True) as admin:
        row = admin.execute(
            f"SELECT count({what}) FROM pg_stat_activity "  # noqa: S608 (one of two constants)
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (url.rsplit("/", 1)[1],),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def _every_connection_open(store: Store, url: str) -> int:
    """The pool's size once the server serves that many connections (the pool counts
    one it is still opening), within 5 s."""
    for _ in range(50):
        size = store.pool_stats()["size"]
        if await asyncio.to_thread(_cut_every_connection_to, url, cut=False) == size:
            return size
        await asyncio.sleep(0.1)
    raise AssertionError(f"the pool counts {size} connections, the server serves another number")


def test_reads_and_writes_go_on_after_the_server_cut_every_pooled_connection(
    url: str,
) -> None:
    """The pool lends connections untested. A read that finds its connection cut is
    run again on a fresh one, and the pool replaces the other dead ones, so neither
    the read nor the write after it sees an error."""

    async def scenario(store: Store) -> None:
        pet = await store.pets.create(new_pet("kept"))
        await asyncio.gather(  # one query per status filter, each on a connection
            *(
                store.pets.list_page(status=status, after_id=0, limit=10)
                for status in (None, *PetStatus)
            )
        )
        size = await _every_connection_open(store, url)
        assert size > 1
        assert await asyncio.to_thread(_cut_every_connection_to, url) == size
        assert await store.pets.get(pet.id) == pet
        assert await store.pets.list_page(status=None, after_id=0, limit=10) == [pet]
        after = await store.pets.create(new_pet("after"))
        assert await store.pets.list_page(status=None, after_id=0, limit=10) == [pet, after]

    run(url, scenario)


def test_a_write_on_a_cut_connection_is_unavailable_and_not_run_twice(url: str) -> None:
    """A write is not run again (its commit may have landed before the connection
    died): it answers 503 (D10), and the next write finds a live connection."""

    async def scenario(store: Store) -> None:
        assert await asyncio.to_thread(_cut_every_connection_to, url) >= 1
        with pytest.raises(errors.Unavailable):
            await store.api_keys.create(
                name="cut",
                prefix="p_cut",
                key_hash="h-cut",
                created_at=NOW,
                expires_at=None,
                **ALL_SCOPES_DEFAULT_LIMIT,
            )
        key = await store.api_keys.create(
            name="next",
            prefix="p_next",
            key_hash="h-next",
            created_at=NOW,
            expires_at=None,
            **ALL_SCOPES_DEFAULT_LIMIT,
        )
        assert [k.name for k in await store.api_keys.list_all()] == ["next"]
        assert key.name == "next"

    run(url, scenario)


def test_a_connection_cut_after_its_last_statement_is_not_lent_again(url: str) -> None:
    """A call given up on (cancelled, or past its bound) just after its connection
    answered its last statement: that connection is cut and looks sound, and the next
    write (never run twice) must not be lent it."""

    async def scenario() -> list[Row]:
        database = PostgresDatabase(url, size=1)
        await database.open()
        try:
            call = Call()
            async with database._lend(call) as conn:
                await conn.fetch("SELECT 1 AS one")
                call.cut()  # the caller stopped waiting as the answer arrived
            return await database.write("SELECT 2 AS two")
        finally:
            await database.close()

    assert asyncio.run(scenario()) == [{"two": 2}]


def test_close_commits_creates_already_queued(url: str) -> None:
    async def main() -> list[Pet]:
        store = await open_store(url)
        store.pets = GroupCommit(store.pets)
        pending = [asyncio.ensure_future(store.pets.create(new_pet(f"q{i}"))) for i in range(5)]
        await asyncio.sleep(0)
        await store.close()
        return [await task for task in pending]

    created = asyncio.run(main())
    with psycopg.connect(url) as conn:
        count = conn.execute("SELECT count(*) FROM pets").fetchone()
    assert count == (len(created),) == (5,)


def test_returned_timestamps_are_aware(url: str) -> None:
    expiry = datetime(2030, 1, 1, tzinfo=UTC)

    async def scenario(store: Store) -> datetime | None:
        key = await store.api_keys.create(
            name="x",
            prefix="pk_x",
            key_hash="hx",
            created_at=NOW,
            expires_at=expiry,
            **ALL_SCOPES_DEFAULT_LIMIT,
        )
        return key.expires_at

    expires_at = run(url, scenario)
    assert expires_at == expiry
    assert expires_at is not None
    assert expires_at.utcoffset() == timedelta(0)


def test_creates_wait_for_the_id_order_lock_held_by_another_instance(url: str) -> None:
    """D9: id assignment is serialised with commits across instances by one lock."""

    async def scenario(store: Store) -> None:
        async with await psycopg.AsyncConnection.connect(url) as other:
            await other.execute("SELECT pg_advisory_xact_lock(%s)", (ID_ORDER_LOCK,))
            create = asyncio.ensure_future(store.pets.create(new_pet("waits")))
            await asyncio.sleep(0.3)
            assert not create.done()
            await other.commit()
            pet = await create
        assert await store.pets.list_page(status=None, after_id=0, limit=10) == [pet]

    run(url, scenario)


def test_a_create_draws_its_id_only_once_it_holds_the_id_order_lock(url: str) -> None:
    """D9: a plain create is one statement; it must take the lock before its id is
    drawn, or a row inserted by the lock's holder meanwhile would get a higher id and
    commit first (an id would then become visible after a higher one)."""

    async def scenario(store: Store) -> tuple[Pet, int]:
        async with await psycopg.AsyncConnection.connect(url) as other:
            await other.execute("SELECT pg_advisory_xact_lock(%s)", (ID_ORDER_LOCK,))
            create = asyncio.ensure_future(store.pets.create(new_pet("waits")))
            await asyncio.sleep(0.3)
            assert not create.done()
            cursor = await other.execute(
                "INSERT INTO pets (name, category_id, status) "
                "VALUES ('holder', 1, 'available') RETURNING id"
            )
            row = await cursor.fetchone()
            assert row is not None
            await other.commit()
            return await create, row[0]

    waiter, holder_id = run(url, scenario)
    assert waiter.id > holder_id
