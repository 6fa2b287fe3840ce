"""Group commit, a speed device (``PETSTORE_GROUP_COMMIT``): creates that arrive
while a commit is in progress go together into the next one.

Each caller is still answered only after the commit that holds its animal, so it
costs no durability (interface: Add an animal; D26), and it saves a commit (an fsync,
a round trip) per create when creates are concurrent. A create that finds no commit
running waits :data:`petstore.server.batches.CREATE_WAIT_TURNS` turns of the event
loop first, so that creates arriving meanwhile share its commit. Creates under an
Idempotency-Key go through the store's unit of work (``Store.transaction``), each in
a transaction of its own with its record (D16).
"""

from __future__ import annotations

from petstore.schemas import NewPet, Pet
from petstore.server.batches import CREATE_WAIT_TURNS, Batcher
from petstore.server.store.decorator import PetsDecorator
from petstore.server.store.pets import PetRepository


class GroupCommit(PetsDecorator):
    """``inner`` whose :meth:`create` calls share ``inner.create_many`` commits."""

    def __init__(self, inner: PetRepository, *, wait_turns: int = CREATE_WAIT_TURNS) -> None:
        super().__init__(inner)
        self._creates: Batcher[NewPet, Pet] = Batcher(inner.create_many, wait_turns=wait_turns)

    async def create(self, new_pet: NewPet) -> Pet:
        """``PetRepository.create``, committed with the creates that arrive with it."""
        return await self._creates.submit(new_pet)

    def writes_waiting(self) -> int:
        """The creates queued for a commit."""
        return self._creates.waiting

    async def close(self) -> None:
        """Commit the creates already queued, then close what it wraps."""
        await self._creates.close()
        await self.inner.close()
