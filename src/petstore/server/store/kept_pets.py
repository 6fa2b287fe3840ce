"""Kept animals, a speed device (``PETSTORE_KEEP_ANSWERS``): an animal getPet found is
answered again from memory while the store's change signal holds it good
(:mod:`.changes`): at once after a change through this store, within
:data:`~.changes.KEPT_SECONDS` after any other.

Only found animals are kept: a miss kept would hide an animal created afterwards, on
this instance or another.

While there is room, a miss reads the animals of its whole block of
:data:`BLOCK_IDS` ids in one query and keeps those found: ids are handed out in order
(D5), so the animals near one asked for are likely asked for soon, and an instance
starting under load reads its animals in a few queries instead of one each. Once
full, or when the block cannot be read whole (a damaged row in it), a miss reads its
own animal only, so one bad row fails only its own getPet.
"""

from __future__ import annotations

import msgspec
from lru import LRU

from petstore.schemas import INT64_MAX, Pet
from petstore.server.store.changes import Stamp
from petstore.server.store.decorator import PetsDecorator
from petstore.server.store.pets import PetRepository

#: Animals kept at most (their worst-case memory: docs/operations/run.md).
KEPT_PETS_MAX = 100_000
#: Ids read together on a miss while there is room: the block ``[n * BLOCK_IDS,
#: (n + 1) * BLOCK_IDS)`` that holds the id asked for.
BLOCK_IDS = 32


class KeptPets(PetsDecorator):
    """``inner`` whose found animals are answered from memory, as the module says; the
    least recently used animals make room beyond :data:`KEPT_PETS_MAX`."""

    def __init__(self, inner: PetRepository) -> None:
        super().__init__(inner)
        self._pets: LRU[int, tuple[Pet, Stamp]] = LRU(KEPT_PETS_MAX)

    async def get(self, pet_id: int) -> Pet | None:
        """``PetRepository.get``: the kept animal while it holds, else read with its
        block while there is room (and kept when found)."""
        changes = self.changes
        kept = self._pets.get(pet_id)
        if kept is not None and changes.holds(kept[1]):
            return kept[0]
        stamp = changes.stamp()
        if len(self._pets) + BLOCK_IDS <= KEPT_PETS_MAX:
            try:
                return await self._read_block(pet_id, stamp)
            except msgspec.ValidationError:  # a damaged row fails only its own getPet
                return await self._read_alone(pet_id, stamp)
        return await self._read_alone(pet_id, stamp)

    async def _read_alone(self, pet_id: int, stamp: Stamp) -> Pet | None:
        """Read and keep the animal ``pet_id`` alone."""
        found = await self.inner.get(pet_id)
        self._keep(pet_id, found, stamp)
        return found

    async def _read_block(self, pet_id: int, stamp: Stamp) -> Pet | None:
        """Read and keep the animals of ``pet_id``'s block; the one of ``pet_id``.
        Raises what the read raised (a row that cannot be read fails the block)."""
        first = max(1, pet_id - pet_id % BLOCK_IDS)
        ids = list(range(first, min(first + BLOCK_IDS, INT64_MAX + 1)))
        found: Pet | None = None
        for block_id, read in zip(ids, await self.inner.get_many(ids), strict=True):
            self._keep(block_id, read, stamp)
            if block_id == pet_id:
                found = read
        return found

    def _keep(self, pet_id: int, found: Pet | None, stamp: Stamp) -> None:
        """Keep ``found``, read with ``stamp``; None: the id has no animal (perhaps
        deleted), so nothing is kept for it."""
        if found is None:
            self._pets.pop(pet_id, None)
        else:
            self._pets[pet_id] = (found, stamp)
