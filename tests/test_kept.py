"""What an instance keeps in memory, and the bound on changes made outside the API
(docs/operations.md, "What an instance keeps in memory"): the animals getPet found and
the listPets pages that more animals follow are answered from memory for at most
``KEPT_SECONDS`` after they were read; a miss is never kept (issue 28)."""

from __future__ import annotations

import time
from typing import Any

from starlette.testclient import TestClient

from petstore.schemas import Pet, PetStatus
from petstore.server.store.kept import KEPT_SECONDS, KeptPets
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
