"""What an instance keeps in memory, and the bound on changes made outside the API
(docs/operations.md, "What an instance keeps in memory"): the animals getPet found and
the listPets pages that more animals follow are answered from memory for at most
``KEPT_SECONDS`` after they were read; a miss is never kept (issue 28)."""

from __future__ import annotations

import time
from typing import Any

from starlette.testclient import TestClient

from petstore.schemas import Pet, PetStatus
from petstore.server.store.kept import KEPT_SECONDS, KeptPets, PetColumns
from tests.conftest import run_sql


def _create(client: TestClient, auth: dict[str, str], name: str) -> dict[str, Any]:
    answer = client.post("/v1/pets", json={"name": name, "categoryId": 1}, headers=auth)
    assert answer.status_code == 201
    body: dict[str, Any] = answer.json()
    return body


def test_an_animal_deleted_outside_the_api_is_gone_within_the_bound(
    client: TestClient, auth: dict[str, str], database_url: str
) -> None:
    created = [_create(client, auth, f"kept {i}") for i in range(3)]
    first = created[0]
    read_at = time.monotonic()
    assert client.get(f"/v1/pets/{first['id']}", headers=auth).json() == first
    assert client.get("/v1/pets?limit=2", headers=auth).json() == created[:2]
    run_sql(database_url, "DELETE FROM pets WHERE id = ?", (first["id"],))
    # Within the bound the instance may still answer with what it read; from the
    # bound on, never.
    time.sleep(max(0.0, read_at + KEPT_SECONDS + 0.2 - time.monotonic()))
    gone = client.get(f"/v1/pets/{first['id']}", headers=auth)
    assert gone.status_code == 404
    assert client.get("/v1/pets?limit=2", headers=auth).json() == created[1:3]


def test_an_animal_asked_for_before_it_existed_is_found_once_created(
    client: TestClient, auth: dict[str, str]
) -> None:
    existing = _create(client, auth, "first")
    next_id = existing["id"] + 1
    assert client.get(f"/v1/pets/{next_id}", headers=auth).status_code == 404
    created = _create(client, auth, "second")
    assert created["id"] == next_id
    assert client.get(f"/v1/pets/{next_id}", headers=auth).json() == created


def test_kept_animals_go_stale_after_their_seconds_and_misses_are_not_kept() -> None:
    kept = KeptPets(seconds=0.2, max_pets=10)
    rex = Pet(1, "Rex", 1, PetStatus.AVAILABLE)
    kept.keep([1, 2], [rex, None], read_at=time.monotonic())
    assert kept.get(1) == rex
    assert kept.get(2) is None
    time.sleep(0.25)
    assert kept.get(1) is None


def test_kept_animals_are_bounded_by_count() -> None:
    kept = KeptPets(seconds=60, max_pets=2)
    now = time.monotonic()
    pets = [Pet(i, f"p{i}", 1, PetStatus.SOLD) for i in (1, 2, 3)]
    kept.keep([1, 2], [pets[0], pets[1]], read_at=now)
    assert kept.get(1) == pets[0]  # 2 is now the least recently used
    kept.keep([3], [pets[2]], read_at=now)
    assert [kept.get(i) for i in (1, 2, 3)] == [pets[0], None, pets[2]]


def test_the_kept_animals_asked_for_are_due_to_be_read_again_before_they_go_stale() -> None:
    kept = KeptPets(seconds=1.0, max_pets=10)
    pets = [Pet(i, f"p{i}", 1, PetStatus.PENDING) for i in (1, 2, 3)]
    now = time.monotonic()
    kept.keep([1, 2], pets[:2], read_at=now)
    kept.keep([3], [pets[2]], read_at=now + 0.5)
    assert kept.get(1) == pets[0]
    assert kept.get(3) == pets[2]
    assert kept.due(within=0.0) == []  # none goes stale yet
    assert kept.due(within=1.2) == [1]  # 2 was not asked for; 3 goes stale later
    assert kept.due(within=1.2) == []  # each read is due once
    assert kept.due(within=2.0) == [3]
    # Read again (1 is found, 3 was deleted outside the API): 1 is kept anew, 3 dropped.
    kept.keep([1, 3], [pets[0], None], read_at=time.monotonic())
    assert kept.get(3) is None
    assert kept.get(1) == pets[0]
    assert kept.due(within=2.0) == [1]


def _row(pet_id: int, name: str = "", status: str = "available") -> tuple[int, str, int, str]:
    return (pet_id, name or f"p{pet_id}", pet_id * 10, status)


def test_columns_hold_what_was_read_in_id_order_and_never_answer_for_an_id_not_read() -> None:
    columns = PetColumns(max_id=8)
    assert columns.confirm(("changes", 0), read_at=time.monotonic()) is False  # first look
    columns.add([_row(1, "Rex"), _row(2, "Émile", "sold"), _row(5, "", "pending")])
    assert columns.last_id == 5
    assert columns.get(1) == Pet(1, "Rex", 10, PetStatus.AVAILABLE)
    assert columns.get(2) == Pet(2, "Émile", 20, PetStatus.SOLD)
    assert columns.get(5) == Pet(5, "p5", 50, PetStatus.PENDING)
    assert [columns.get(i) for i in (-1, 0, 3, 4, 6)] == [None] * 5  # gaps and beyond
    columns.add([_row(7), _row(8), _row(9)])  # 9 is past max_id
    assert columns.full
    assert columns.last_id == 8
    assert columns.get(8) == Pet(8, "p8", 80, PetStatus.AVAILABLE)
    assert columns.get(9) is None


def test_columns_are_trusted_for_the_bound_after_a_look_and_dropped_when_the_version_moved() -> (
    None
):
    columns = PetColumns()
    long_ago = time.monotonic() - KEPT_SECONDS - 0.1
    columns.confirm(("v", 1), read_at=long_ago)
    columns.add([_row(1)])
    assert columns.get(1) is None  # read more than the bound ago: not trusted
    assert columns.confirm(("v", 1), read_at=time.monotonic()) is True
    assert columns.get(1) == Pet(1, "p1", 10, PetStatus.AVAILABLE)
    assert columns.confirm(("v", 2), read_at=time.monotonic()) is False  # changed outside
    assert columns.get(1) is None
    assert columns.last_id == 0
    columns.add([_row(1, "renamed")])
    assert columns.get(1) == Pet(1, "renamed", 10, PetStatus.AVAILABLE)
    columns.confirm(None, read_at=time.monotonic())  # the database could not say
    assert columns.get(1) is None
    assert columns.confirm(None, read_at=time.monotonic()) is False


def test_columns_are_behind_when_dropped_or_asked_for_an_id_not_read_yet() -> None:
    """Animals created and never asked for are not read into the columns (S4)."""
    columns = PetColumns()
    assert columns.behind  # never read
    columns.confirm(("v", 1), read_at=time.monotonic())
    columns.add([_row(1), _row(2)])
    columns.behind = False  # as the store does once it has read to the end
    assert columns.get(2) is not None
    assert not columns.behind
    assert columns.get(3) is None  # created since the last look
    assert columns.behind
    columns.behind = False
    columns.confirm(("v", 2), read_at=time.monotonic())  # dropped: read every animal again
    assert columns.behind
