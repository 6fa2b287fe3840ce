"""Kept animals' columns (``store/kept_pets.py``) on a real SQLite store: what is kept
is answered as it was read, what shares a slot or overflows the names' area is read
again, and a name no NewPet could have, or an id or a category too large for the
columns, is never kept. A device that warms (``KeptPets.warm``, which the app's
lifespan runs) answers what it read before any getPet, up to its bounds.

Each test reads through the device, changes animals behind its back (SQL with the
clock stopped, so the change signal does not look again), and tells what was kept
from what was read again by which of the two the device answers.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import msgspec
import pytest
from starlette.testclient import TestClient

from petstore.schemas import NewPet, Pet, PetStatus
from petstore.server.app import create_app
from petstore.server.config import Settings
from petstore.server.store import create_store
from petstore.server.store.kept_pets import NAME_BYTES_MAX, KeptPets
from tests.conftest import run_sql

T = TypeVar("T")

#: Names of one, two, three and four bytes a character, and ASCII of several lengths.
NAMES = ["Rex", "Zoë", "Öko-Kätzchen", "小白", "🐕 Fido", "Bella", "Max the 2nd", "ひまわり"]


def run(
    tmp_path: Path,
    template: Path,
    scenario: Callable[[KeptPets, list[Pet]], Awaitable[T]],
    *,
    before: str = "",
    **device: int,
) -> T:
    """``scenario`` on a fresh store holding one animal of each of :data:`NAMES` (ids
    1-8; then the SQL ``before``, if any), with the device (``device``: its bounds)
    around its pets, the clock stopped. The device has read the block of id 1 once."""
    path = tmp_path / "petstore.db"
    shutil.copyfile(template, path)

    async def main() -> T:
        store = create_store(f"sqlite:///{path}", monotonic=lambda: 1000.0)
        await store.open()
        try:
            async with store.transaction() as tx:
                pets = [
                    await tx.pets.create(NewPet(name=name, category_id=7, status=PetStatus.SOLD))
                    for name in NAMES
                ]
            if before:
                run_sql(f"sqlite:///{path}", before)
            kept = KeptPets(store.pets, **device)
            await kept.get(1)  # the change signal's first look, then no other
            await kept.changes.settled()
            await kept.get(1)  # the block read again, now that the look vouches for it
            return await scenario(kept, pets)
        finally:
            await store.close()

    return asyncio.run(main())


def url_of(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'petstore.db'}"


def rename_all(url: str) -> None:
    """Every animal renamed behind the device's back."""
    run_sql(url, "UPDATE pets SET name = name || ' (renamed)'")


async def names(kept: KeptPets, pet_ids: list[int]) -> list[str | None]:
    """The names the device answers for ``pet_ids``, None where it finds no animal."""
    return [pet.name if (pet := await kept.get(pet_id)) else None for pet_id in pet_ids]


def test_animals_kept_are_answered_as_read_and_whole(
    tmp_path: Path, migrated_template: Path
) -> None:
    """Every name, whatever its bytes, comes back as it was read, with its id,
    category and status, after the animals changed behind the device's back."""

    async def scenario(kept: KeptPets, pets: list[Pet]) -> tuple[list[Pet], list[Pet | None]]:
        rename_all(url_of(tmp_path))
        return pets, [await kept.get(pet.id) for pet in pets]

    pets, answered = run(tmp_path, migrated_template, scenario)
    assert [pet.name for pet in pets] == NAMES
    assert answered == pets


def test_an_animal_that_takes_a_slot_replaces_the_one_kept_there(
    tmp_path: Path, migrated_template: Path
) -> None:
    """With 4 slots, ids 1-8 share them two by two: the animals read last (5-8) are
    answered as read, the ones they replaced (1-4) are read again."""

    async def scenario(kept: KeptPets, pets: list[Pet]) -> list[str | None]:
        await names(kept, [1, 2, 3, 4, 5, 6, 7, 8])
        rename_all(url_of(tmp_path))
        return await names(kept, [5, 6, 7, 8, 1, 2, 3, 4])

    assert run(tmp_path, migrated_template, scenario, slots=4) == [
        *NAMES[4:],
        *(f"{name} (renamed)" for name in NAMES[:4]),
    ]


def test_a_full_names_area_drops_everything_kept(tmp_path: Path, migrated_template: Path) -> None:
    """With a names' area of 20 bytes, the block read of ids 1-8 drops what it kept
    each time the next name would not fit: only "ひまわり" (12 bytes), kept after the
    last drop, is answered as read; "小白" is read again."""

    async def scenario(kept: KeptPets, pets: list[Pet]) -> list[str | None]:
        rename_all(url_of(tmp_path))
        return await names(kept, [8, 4])

    assert run(tmp_path, migrated_template, scenario, name_bytes=20) == [
        "ひまわり",
        "小白 (renamed)",
    ]


def test_a_name_longer_than_a_newpet_can_have_is_read_each_time(
    tmp_path: Path, migrated_template: Path
) -> None:
    """An animal whose name passes NAME_BYTES_MAX (201 "é", written in SQL) is
    answered, and answered as it is now after a change: it was never kept; its
    neighbour was."""
    long_name = "é" * 201
    assert len(long_name.encode()) > NAME_BYTES_MAX

    async def scenario(kept: KeptPets, pets: list[Pet]) -> list[str | None]:
        first = await names(kept, [2])
        rename_all(url_of(tmp_path))
        return first + await names(kept, [3, 2])

    lengthen = "UPDATE pets SET name = replace(hex(zeroblob(201)), '00', 'é') WHERE id = 2"
    assert run(tmp_path, migrated_template, scenario, before=lengthen) == [
        long_name,
        NAMES[2],
        f"{long_name} (renamed)",
    ]


def test_an_id_or_a_category_past_the_columns_is_read_each_time(
    tmp_path: Path, migrated_template: Path
) -> None:
    """An animal of id 2**52 + 2 (its tag past four bytes with a million slots) and one
    of category 3,000,000,000 (past 32 bits), both written in SQL, are answered, and
    answered as they are now after a change: never kept; their neighbour was."""
    big_id = (1 << 52) + 2

    async def scenario(kept: KeptPets, pets: list[Pet]) -> list[str | None]:
        first = await names(kept, [big_id, 3])
        rename_all(url_of(tmp_path))
        return first + await names(kept, [4, big_id, 3])

    move = (
        "UPDATE pets SET id = iif(id = 2, 4503599627370498, id),"
        " category_id = iif(id = 3, 3000000000, category_id) WHERE id IN (2, 3)"
    )
    assert str(big_id) in move
    assert run(tmp_path, migrated_template, scenario, before=move) == [
        NAMES[1],
        NAMES[2],
        NAMES[3],
        f"{NAMES[1]} (renamed)",
        f"{NAMES[2]} (renamed)",
    ]


@pytest.mark.parametrize("slots", [4, 1 << 20])
def test_an_id_of_zero_or_below_finds_no_animal(
    tmp_path: Path, migrated_template: Path, slots: int
) -> None:
    """Ids 0 and below (D11: 404) find nothing, whatever their slots hold: an empty
    slot is not taken for theirs."""

    async def scenario(kept: KeptPets, pets: list[Pet]) -> list[str | None]:
        return await names(kept, [0, -1, -slots, -slots - 1, -(1 << 63)])

    assert run(tmp_path, migrated_template, scenario, slots=slots) == [None] * 5


def test_a_deleted_animal_is_not_found_once_read_again(
    tmp_path: Path, migrated_template: Path
) -> None:
    """A kept animal deleted behind the device's back is answered as read while it
    holds; after a change through the store it is read again and not found, and its
    neighbour is read again and found."""

    async def scenario(kept: KeptPets, pets: list[Pet]) -> list[str | None]:
        run_sql(url_of(tmp_path), "DELETE FROM pets WHERE id = 1")
        still = await names(kept, [1])
        kept.changes.changed()  # as a write through the store does: nothing kept holds
        return still + await names(kept, [1, 2])

    assert run(tmp_path, migrated_template, scenario) == ["Rex", None, "Zoë"]


async def warmed_and_renamed(
    kept: KeptPets, url: str, **device: int
) -> tuple[int, list[str | None], list[str | None]]:
    """What a new device around ``kept``'s store (``device``: its bounds) read as it
    warmed, then, after every animal was renamed behind its back, the names it answers
    for ids 1-8, and those a new device that did not warm answers."""
    warm = KeptPets(kept.inner, **device)
    read = await warm.warm()
    rename_all(url)
    return read, await names(warm, list(range(1, 9))), await names(KeptPets(kept.inner), [1, 8])


def test_a_warmed_device_answers_every_animal_as_read_before_any_get(
    tmp_path: Path, migrated_template: Path
) -> None:
    """A device that warmed answers all eight animals as they were when it warmed;
    one that did not reads them now, renamed."""

    async def scenario(kept: KeptPets, pets: list[Pet]) -> object:
        return await warmed_and_renamed(kept, url_of(tmp_path))

    assert run(tmp_path, migrated_template, scenario) == (
        8,
        NAMES,
        [f"{NAMES[0]} (renamed)", f"{NAMES[7]} (renamed)"],
    )


@pytest.mark.parametrize(
    ("device", "read"),
    [
        pytest.param({"slots": 4}, 4, id="as-many-as-slots"),
        # Rex, Zoë and Öko-Kätzchen take 21 bytes: 小白 might not fit, were it 400.
        pytest.param({"name_bytes": NAME_BYTES_MAX + 10}, 3, id="no-overflow-of-names"),
    ],
)
def test_warming_stops_before_it_would_replace_or_drop_what_it_kept(
    tmp_path: Path, migrated_template: Path, device: dict[str, int], read: int
) -> None:
    """Warming reads no more animals than there are slots (ids 5-8 would replace 1-4)
    and stops before a name could overflow the names' area (which drops everything
    kept): the animals it read are answered as read, the rest read again."""

    async def scenario(kept: KeptPets, pets: list[Pet]) -> object:
        return (await warmed_and_renamed(kept, url_of(tmp_path), **device))[:2]

    assert run(tmp_path, migrated_template, scenario) == (
        read,
        [*NAMES[:read], *(f"{name} (renamed)" for name in NAMES[read:])],
    )


def test_warming_stops_at_a_page_it_cannot_read_and_getpet_still_answers(
    tmp_path: Path, migrated_template: Path
) -> None:
    """A damaged row (a category stored as text, written in SQL) fails the page that holds
    it: warming stops there, raising nothing, and getPet answers the animals around it
    (read again) and fails only on that one."""

    async def scenario(kept: KeptPets, pets: list[Pet]) -> object:
        run_sql(url_of(tmp_path), "UPDATE pets SET category_id = 'seven' WHERE id = 5")
        warm = KeptPets(kept.inner)
        read = await warm.warm()
        rename_all(url_of(tmp_path))
        with pytest.raises(msgspec.ValidationError):
            await warm.get(5)
        return read, await names(warm, [4, 6])

    assert run(tmp_path, migrated_template, scenario) == (
        0,
        [f"{NAMES[3]} (renamed)", f"{NAMES[5]} (renamed)"],
    )


def test_a_worker_keeps_the_animals_as_it_starts(
    database_url: str, make_key: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    """The app's lifespan warms the kept animals: once it logs so, getPet answers an
    animal as it was when the worker started, after a rename behind its back (the
    monotonic clock stopped: the change signal does not look again)."""
    run_sql(database_url, "INSERT INTO pets (name, category_id, status) VALUES ('Rex', 1, 'sold')")
    (pet,) = run_sql(database_url, "SELECT id FROM pets")
    auth = {"Authorization": f"Bearer {make_key()}"}
    caplog.set_level(logging.INFO, logger="petstore.store")
    app = create_app(Settings(database_url=database_url), monotonic=lambda: 1000.0)
    with TestClient(app) as client:
        for _ in range(500):  # 5 s at most
            if any("kept animals: read 1 ahead" in r.getMessage() for r in caplog.records):
                break
            time.sleep(0.01)
        run_sql(database_url, "UPDATE pets SET name = 'Max'")
        answer = client.get(f"/v1/pets/{pet['id']}", headers=auth)
    assert (answer.status_code, answer.json()["name"]) == (200, "Rex")


@pytest.mark.parametrize("slots", [0, 3, 6])
def test_slots_must_be_a_power_of_two(tmp_path: Path, slots: int) -> None:
    store = create_store(f"sqlite:///{tmp_path / 'none.db'}")
    with pytest.raises(ValueError, match="power of two"):
        KeptPets(store.pets, slots=slots)
