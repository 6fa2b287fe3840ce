"""Kept animals, a speed device (``PETSTORE_KEEP_ANSWERS``): an animal getPet found is
answered again from memory for a few seconds.

An animal never changes through the API (the interface has no update or delete), so
the animal a getPet read is the animal every later getPet of that id would read.
Only found animals are kept: a miss kept would hide an animal created afterwards, on
this instance or another. A change made outside the API (an operator's ``UPDATE`` or
``DELETE`` in SQL, a restore) is seen within :data:`KEPT_SECONDS`: an answer is never
older than that, counted from the moment its read was sent (docs/operations.md,
"What an instance keeps in memory").

An animal asked for once it is :data:`REFRESH_SECONDS` old is still answered from
memory, and read again in the background with the others due (one query), so an
animal asked for every few seconds is never a miss; one read again and not found is
dropped. One nobody asks for goes stale.
"""

from __future__ import annotations

import asyncio
import contextlib

from lru import LRU

from petstore.schemas import Pet
from petstore.server import errors
from petstore.server.clock import Monotonic
from petstore.server.store import Store
from petstore.server.store.decorator import StoreDecorator

#: Seconds an answer is kept, from the moment its read was sent: the longest a
#: change made outside the API goes unseen by an instance.
KEPT_SECONDS = 5.0
#: Age in seconds from which an animal asked for is read again in the background.
REFRESH_SECONDS = 1.0
#: Animals kept at most (about 310 bytes each with the cache's bookkeeping).
KEPT_PETS_MAX = 100_000
#: Ids read again in one query at most.
REFRESH_BATCH = 1000


class KeptPets(StoreDecorator):
    """``inner`` whose found animals are answered from memory for ``seconds`` after
    their read, ``monotonic`` telling the time; the least recently used make room
    beyond ``max_pets``."""

    def __init__(
        self,
        inner: Store,
        *,
        monotonic: Monotonic,
        seconds: float = KEPT_SECONDS,
        refresh_seconds: float = REFRESH_SECONDS,
        max_pets: int = KEPT_PETS_MAX,
    ) -> None:
        super().__init__(inner)
        self._now = monotonic
        self._seconds = seconds
        self._refresh_seconds = refresh_seconds
        self._pets: LRU[int, tuple[Pet, float]] = LRU(max_pets)  # id -> (animal, read at)
        self._due: dict[int, None] = {}  # asked for once old enough, in order
        self._refresher: asyncio.Task[None] | None = None

    async def get_pet(self, pet_id: int) -> Pet | None:
        """``Store.get_pet``: the kept animal if read less than ``seconds`` ago, else
        read (and kept when found)."""
        kept = self._pets.get(pet_id)
        if kept is not None:
            age = self._now() - kept[1]
            if age < self._seconds:
                if age >= self._refresh_seconds:
                    self._refresh_later(pet_id)
                return kept[0]
        read_at = self._now()
        pet = await self.inner.get_pet(pet_id)
        self._keep(pet_id, pet, read_at)
        return pet

    def _keep(self, pet_id: int, pet: Pet | None, read_at: float) -> None:
        if pet is None:
            self._pets.pop(pet_id, None)  # deleted outside the API, if it was kept
            return
        kept = self._pets.get(pet_id)
        if kept is None or kept[1] < read_at:  # never replaced by an older read
            self._pets[pet_id] = (pet, read_at)

    def _refresh_later(self, pet_id: int) -> None:
        self._due[pet_id] = None
        if self._refresher is None:
            self._refresher = asyncio.ensure_future(self._refresh())

    async def _refresh(self) -> None:
        """Read again the animals due, :data:`REFRESH_BATCH` a query, until none is
        due. When the database cannot be read they go stale instead."""
        try:
            while self._due:
                due = list(self._due)[:REFRESH_BATCH]
                read_at = self._now()
                pets = await self.inner.get_pets(due)
                for pet_id, pet in zip(due, pets, strict=True):
                    self._keep(pet_id, pet, read_at)
                    self._due.pop(pet_id, None)
        except errors.Unavailable:
            self._due.clear()
        finally:
            self._refresher = None

    async def settled(self) -> None:
        """Once the reads again in progress are done (tests, and :meth:`close`)."""
        while self._refresher is not None:
            await asyncio.wait([self._refresher])

    async def close(self) -> None:
        """Stop reading again, then close the store."""
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        await self.inner.close()
