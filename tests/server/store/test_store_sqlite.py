"""The SQLite store's reads: every read sees each commit answered before its request,
also with getPets grouped (interface: Add an animal, Find an animal by id; D10, D11)."""

from __future__ import annotations

import asyncio
import shutil
import socket
import sqlite3
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from petstore.schemas import NewPet, PetStatus
from petstore.server import errors
from petstore.server.store import Store, open_store
from petstore.server.store.read_grouping import GroupedReads


@pytest.fixture
def path(tmp_path: Path, migrated_template: Path) -> Path:
    """A migrated SQLite file with no rows, for this test alone."""
    copy = tmp_path / "petstore.db"
    shutil.copyfile(migrated_template, copy)
    return copy


def new_pet(name: str) -> NewPet:
    return NewPet(name=name, category_id=1, status=PetStatus.AVAILABLE)


INSERT_REX = "INSERT INTO pets (name, category_id, status) VALUES ('Rex', 1, 'available')"


def run(path: Path, scenario: Callable[[Store], Awaitable[None]]) -> None:
    """Open a store on ``path``, run ``scenario`` with it and close it, on one loop."""

    async def main() -> None:
        store = await open_store(f"sqlite:///{path}")
        try:
            await scenario(store)
        finally:
            await store.close()

    asyncio.run(main())


async def next_turn_reads_rex(store: Store) -> None:
    """From the next turn of the loop on, ``store`` reads Rex, the animal with id 1."""
    await asyncio.sleep(0)
    pet = await store.pets.get(1)
    assert pet is not None
    assert pet.name == "Rex"


def test_each_read_sees_every_create_answered_before_it(path: Path) -> None:
    """200 clients each create an animal and read it back at once, while 20 others
    read without pause, so that every turn of the loop holds reads."""

    async def scenario(store: Store) -> None:
        stop = asyncio.Event()

        async def reader() -> None:
            while not stop.is_set():
                await store.pets.get(1)
                await asyncio.sleep(0)

        async def create_then_read(i: int) -> bool:
            await asyncio.sleep(i / 10_000)  # spread the creates over many turns
            pet = await store.pets.create(new_pet(f"pet{i}"))
            found = await store.pets.get(pet.id)
            listed = await store.pets.list_page(status=None, after_id=pet.id - 1, limit=1)
            return found == pet and listed == [pet]

        readers = [asyncio.create_task(reader()) for _ in range(20)]
        try:
            seen = await asyncio.gather(*(create_then_read(i) for i in range(200)))
        finally:
            stop.set()
            await asyncio.gather(*readers)
        assert all(seen)

    run(path, scenario)


def test_a_commit_by_another_connection_is_seen_from_the_next_turn_on(path: Path) -> None:
    """Another process (a second worker, the CLI) commits while this store is between
    reads: the store's next turn reads it."""

    async def scenario(store: Store) -> None:
        assert await store.pets.get(1) is None
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute(INSERT_REX)
        finally:
            other.close()
        await next_turn_reads_rex(store)

    run(path, scenario)


def read_now(read: Coroutine[Any, Any, Any]) -> Any:
    """Run a store read that never suspends (a SQLite read runs on the loop) to its
    end, here and now, in the current turn of the loop: its result."""
    try:
        read.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the read waited for something")


def test_a_request_that_arrives_after_a_commit_reads_it_even_in_the_next_turn(
    path: Path,
) -> None:
    """A read runs on a snapshot taken after its request arrived. A read, another
    worker then commits and answers 201, and the client's next request arrives over
    a socket: the loop runs it in the very next turn, before anything else, and that
    read must see the commit. A read transaction that outlived its turn (a snapshot
    shared by the reads of a turn, ended by ``call_later``) would fail this: the
    request would be read with the old snapshot and its animal missing."""

    async def scenario(store: Store) -> None:
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[list[Any]] = loop.create_future()
        receiving, sending = socket.socketpair()

        def on_request() -> None:  # as a server's protocol callback runs a handler
            loop.remove_reader(receiving)
            receiving.recv(1)
            answered.set_result(read_now(store.pets.list_page(status=None, after_id=0, limit=10)))

        loop.add_reader(receiving, on_request)
        try:
            assert read_now(store.pets.list_page(status=None, after_id=0, limit=10)) == []
            other = sqlite3.connect(path, isolation_level=None)  # another worker
            try:
                other.execute(INSERT_REX)
            finally:
                other.close()
            sending.send(b"G")  # the client, told 201, asks for its animal
            pets = await answered
        finally:
            receiving.close()
            sending.close()
        assert [pet.name for pet in pets] == ["Rex"]

    run(path, scenario)


def test_a_failed_read_is_unavailable_and_the_next_turn_reads_afresh(path: Path) -> None:
    """A read that fails is a 503 (D10), and it leaves no transaction behind that
    would keep later reads on an old snapshot."""

    async def scenario(store: Store) -> None:
        await store.pets.get(1)
        await asyncio.sleep(0)
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("ALTER TABLE pets RENAME TO pets_gone")  # reads now fail
            with pytest.raises(errors.Unavailable):
                await store.pets.get(1)
            await asyncio.sleep(0)
            other.execute("ALTER TABLE pets_gone RENAME TO pets")
            other.execute(INSERT_REX)
        finally:
            other.close()
        await next_turn_reads_rex(store)

    run(path, scenario)


def test_grouped_gets_share_a_query_and_each_gets_its_own_animal(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With read grouping (``store.read_grouping``), getPets asked for together are
    read with one query; each caller still
    gets the animal it asked for, None for an id with none (any int64, D11), and an
    animal created just before. The statements are seen by tracing every connection
    the store opens."""
    statements: list[str] = []
    connect = sqlite3.connect

    def traced_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(lambda sql: tracing and statements.append(sql))
        return conn

    tracing = False
    monkeypatch.setattr(sqlite3, "connect", traced_connect)

    async def scenario(store: Store) -> None:
        nonlocal tracing
        store.pets = GroupedReads(store.pets)
        pets = [await store.pets.create(new_pet(f"p{i}")) for i in range(5)]
        ids = [pet.id for pet in pets]
        extremes = [ids[-1] + 1000, 0, 2**63 - 1, -(2**63)]
        asked = [ids[i % 5] for i in range(40)] + extremes + [ids[0]]
        tracing = True
        answers = await asyncio.gather(*(store.pets.get(pet_id) for pet_id in asked))
        tracing = False
        by_id = {pet.id: pet for pet in pets}
        assert answers == [by_id.get(pet_id) for pet_id in asked]
        assert len([sql for sql in statements if sql.startswith("SELECT")]) == 1
        created = await store.pets.create(new_pet("fresh"))
        assert await asyncio.gather(store.pets.get(created.id), store.pets.get(ids[0])) == [
            created,
            pets[0],
        ]

    run(path, scenario)
