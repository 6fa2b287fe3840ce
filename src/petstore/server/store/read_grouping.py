"""Read grouping, a speed device (``PETSTORE_READ_GROUPING``): getPets that arrive
while one is being read share the next query (``PetRepository.get_many``).

One query for many saves a round trip (PostgreSQL) or a statement (SQLite) per
getPet when they are concurrent. A grouped read starts after each of its callers
arrived, so it sees every animal whose 201 was sent before, and every change
committed before, as a read of its own would (interface: Add an animal, D9).
"""

from __future__ import annotations

from petstore.schemas import Pet
from petstore.server.batches import Batcher
from petstore.server.store.decorator import PetsDecorator
from petstore.server.store.pets import PetRepository


class GroupedReads(PetsDecorator):
    """``inner`` whose :meth:`get` calls share ``inner.get_many`` queries."""

    def __init__(self, inner: PetRepository) -> None:
        super().__init__(inner)
        self._reads: Batcher[int, Pet | None] = Batcher(inner.get_many)

    async def get(self, pet_id: int) -> Pet | None:
        """``PetRepository.get``, read with the getPets that arrive with it."""
        return await self._reads.submit(pet_id)

    async def close(self) -> None:
        """Answer the reads already queued, then close what it wraps."""
        await self._reads.close()
        await self.inner.close()
