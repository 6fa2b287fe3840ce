"""Read grouping, a speed device (``PETSTORE_READ_GROUPING``): getPets that arrive
while one is being read share the next query (``Store.get_pets``).

One query for many saves a round trip (PostgreSQL) or a statement (SQLite) per
getPet when they are concurrent. A grouped read starts after each of its callers
arrived, so it sees every animal whose 201 was sent before, as a read of its own
would (interface: Add an animal, D9).
"""

from __future__ import annotations

from collections.abc import Awaitable

from petstore.schemas import Pet
from petstore.server.batches import Batcher
from petstore.server.store import Store
from petstore.server.store.decorator import StoreDecorator


class GroupedReads(StoreDecorator):
    """``inner`` whose :meth:`get_pet` calls share ``inner.get_pets`` queries."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self._reads: Batcher[int, Pet | None] = Batcher(inner.get_pets)

    def get_pet(self, pet_id: int) -> Awaitable[Pet | None]:
        """``Store.get_pet``, read with the getPets that arrive with it."""
        return self._reads.submit(pet_id)

    async def close(self) -> None:
        """Answer the reads already queued, then close the store."""
        await self._reads.close()
        await self.inner.close()
