"""Rules for animals: listing pages, creating, fetching, and the getPet sunset.

No HTTP here: functions take values already parsed (:mod:`petstore.server.http.parsing`) and
the pets repository, return values, and raise ``errors.*`` (interface: Endpoints; D1,
D7, D9, D11, D14).
"""

from __future__ import annotations

from datetime import UTC, datetime

from petstore.schemas import NewPet, Pet, PetStatus
from petstore.server import errors
from petstore.server.store import PetRepository

#: interface: Versioning: getPet is removed on 5 December 2030 (00:00:00 GMT).
SUNSET = datetime(2030, 12, 5, tzinfo=UTC)
REPLACEMENT = "GET /v1/pets with the status filter"


async def list_page(
    pets: PetRepository, *, status: PetStatus | None, limit: int, after_id: int
) -> tuple[list[Pet], bool]:
    """One page of animals after ``after_id`` in ascending id (D7), and whether more follow."""
    page = await pets.list_page(status=status, after_id=after_id, limit=limit + 1)
    return page[:limit], len(page) > limit


async def create(pets: PetRepository, new_pet: NewPet) -> Pet:
    """Store a validated NewPet and return it with its id (D1: status already defaulted)."""
    return await pets.create(new_pet)


async def get(pets: PetRepository, pet_id: int) -> Pet:
    """The animal ``pet_id``; raises NotFound when there is none."""
    pet = await pets.get(pet_id) if pet_id > 0 else None
    if pet is None:
        raise errors.NotFound(f"no animal has id {pet_id}")
    return pet
