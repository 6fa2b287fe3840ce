"""Kept animals, a speed device (``PETSTORE_KEEP_ANSWERS``): an animal getPet found is
answered again from memory while the database says no animal changed outside the API.

An animal never changes through the API (the interface has no update or delete), so
the animal a getPet read is the animal every later getPet of that id would read.
Only found animals are kept: a miss kept would hide an animal created afterwards, on
this instance or another.

A change made outside the API (an operator's ``UPDATE`` or ``DELETE`` in SQL, a
restore, a failover) is seen within :data:`KEPT_SECONDS`. An animal is answered from
memory for that long after its read; and for that long after the latest look at the
animals' version (``Store.pets_version``) that found it unchanged since the look
before its read. A version that moved drops every animal kept. The look is taken in
the background, at most every :data:`LOOK_SECONDS`, when an animal is asked for: so
an instance under load answers its animals from memory and asks the database one
small question a second. Where the database keeps no version, each animal is kept
for :data:`KEPT_SECONDS` from its own read.

While there is room, a miss reads the animals of its whole block of
:data:`BLOCK_IDS` ids in one query and keeps those found: ids are handed out in order
(D5), so the animals near one asked for are likely asked for soon, and an instance
starting under load reads its animals in a few queries instead of one each. Once
full, or when the block cannot be read whole (a damaged row in it), a miss reads its
own animal only, so one bad row fails only its own getPet.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import Any

from lru import LRU

from petstore.schemas import INT64_MAX, Pet
from petstore.server import errors
from petstore.server.clock import Monotonic
from petstore.server.store import Store
from petstore.server.store.decorator import StoreDecorator

#: Seconds an answer is kept after the read or look that vouches for it: the
#: longest a change made outside the API goes unseen by an instance.
KEPT_SECONDS = 5.0
#: Seconds between two looks at the animals' version, at least.
LOOK_SECONDS = 1.0
#: Animals kept at most (about 310 bytes each with the cache's bookkeeping).
KEPT_PETS_MAX = 100_000
#: Ids read together on a miss while there is room: the block ``[n * BLOCK_IDS,
#: (n + 1) * BLOCK_IDS)`` that holds the id asked for.
BLOCK_IDS = 32


class KeptPets(StoreDecorator):
    """``inner`` whose found animals are answered from memory, as the module says;
    ``monotonic`` tells the time, and the least recently used animals make room
    beyond ``max_pets``."""

    def __init__(
        self,
        inner: Store,
        *,
        monotonic: Monotonic,
        seconds: float = KEPT_SECONDS,
        look_seconds: float = LOOK_SECONDS,
        max_pets: int = KEPT_PETS_MAX,
    ) -> None:
        super().__init__(inner)
        self._now = monotonic
        self._seconds = seconds
        self._look_seconds = look_seconds
        self._max_pets = max_pets
        self._pets: LRU[int, tuple[Pet, float]] = LRU(max_pets)  # id -> (animal, read at)
        self._version: tuple[Any, ...] | None = None  # as of the latest look
        self._since = math.inf  # when the look that first found this version was sent
        self._looked = -math.inf  # when the latest look that found it was sent
        self._looking: asyncio.Task[None] | None = None

    async def get_pet(self, pet_id: int) -> Pet | None:
        """``Store.get_pet``: the kept animal while vouched for, else read with its
        block while there is room (and kept when found)."""
        now = self._now()
        if now - self._looked >= self._look_seconds and self._looking is None:
            self._looking = asyncio.ensure_future(self._look())
        kept = self._pets.get(pet_id)
        if kept is not None:
            pet, read_at = kept
            vouched = max(read_at, self._looked) if read_at >= self._since else read_at
            if now - vouched < self._seconds:
                return pet
        if len(self._pets) + BLOCK_IDS <= self._max_pets:
            try:
                return await self._read_block(pet_id, now)
            except errors.Unavailable:
                raise
            except Exception:  # a damaged row in the block fails only its own getPet
                return await self._read_alone(pet_id, now)
        return await self._read_alone(pet_id, now)

    async def _read_alone(self, pet_id: int, now: float) -> Pet | None:
        """Read and keep the animal ``pet_id`` alone."""
        found = await self.inner.get_pet(pet_id)
        self._keep(pet_id, found, now)
        return found

    async def _read_block(self, pet_id: int, now: float) -> Pet | None:
        """Read and keep the animals of ``pet_id``'s block; the one of ``pet_id``.
        Raises what the read raised (a row that cannot be decoded fails the block)."""
        first = max(1, pet_id - pet_id % BLOCK_IDS)
        ids = list(range(first, min(first + BLOCK_IDS, INT64_MAX + 1)))
        found: Pet | None = None
        for block_id, read in zip(ids, await self.inner.get_pets(ids), strict=True):
            self._keep(block_id, read, now)
            if block_id == pet_id:
                found = read
        return found

    def _keep(self, pet_id: int, found: Pet | None, now: float) -> None:
        """Keep ``found``, read at ``now``; None: the id has no animal (perhaps
        deleted outside the API), so nothing is kept for it."""
        if found is None:
            self._pets.pop(pet_id, None)
        else:
            self._pets[pet_id] = (found, now)

    async def _look(self) -> None:
        """Read the animals' version: the same, and what is kept is vouched for as of
        now; moved, and everything kept is dropped. A database that cannot say (none
        kept, or unreachable) vouches for nothing more."""
        try:
            looked = self._now()
            version = await self.inner.pets_version()
            if version is not None:
                if version != self._version:
                    self._pets.clear()
                    self._version, self._since = version, looked
                self._looked = looked
        except errors.Unavailable:
            pass
        finally:
            self._looking = None

    async def settled(self) -> None:
        """Once the look in progress, if any, is done (tests)."""
        if self._looking is not None:
            await asyncio.wait([self._looking])

    async def close(self) -> None:
        """Stop looking, then close the store."""
        if self._looking is not None:
            self._looking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._looking
        await self.inner.close()
