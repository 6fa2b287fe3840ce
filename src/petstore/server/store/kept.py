"""Answers that cannot change through the API, kept in memory for a few seconds.

An animal never changes through the API (the interface has no update or delete), so
the animal a getPet read is the animal every later getPet of that id would read.
:class:`KeptPets` keeps found animals (never a miss: a 404 kept would hide an animal
created afterwards, on this instance or another) for at most :data:`KEPT_SECONDS`
after they were read; each instance keeps its own, and every instance answers alike,
since a kept animal is what the database holds.

A change made outside the API (an operator's ``DELETE`` or ``UPDATE`` in SQL) is not
seen by what is kept: an instance may answer with the animal as it was read for up to
:data:`KEPT_SECONDS` after that read, never longer (docs/operations.md, "What an
instance keeps in memory"; pinned by
``tests/test_kept.py::test_an_animal_deleted_outside_the_api_is_gone_within_the_bound``).
The same bound holds for the listPets pages kept by
``rules.pagination.PageCache``.

An animal answered from memory is read again before it goes stale
(:meth:`KeptPets.due`, every :data:`REFRESH_SECONDS` by the store), so one asked for
again and again is read a little more often than every :data:`KEPT_SECONDS`, in
large groups, and never makes a request wait for the database; one read again and
not found (deleted outside the API) is dropped. An animal nobody asked for since its
read simply goes stale.

Measured served on PostgreSQL, one worker under S3 (getPet of a random id among
10,000), profiled with py-spy on a loaded machine: 4,013 -> 9,572 getPets a second,
the store's share of the event loop 30.6% -> 10.5% (docs/performance.md, "Issue 28").
"""

from __future__ import annotations

import heapq
import time

from lru import LRU

from petstore.schemas import Pet

#: Seconds an answer is kept, from the moment it was read from the database: the
#: longest a change made outside the API goes unseen by an instance.
KEPT_SECONDS = 5.0
#: Seconds between two looks for kept animals to read again (:meth:`KeptPets.due`):
#: those asked for that go stale within twice this are read again, so an animal asked
#: for every second or more often is never a miss.
REFRESH_SECONDS = 1.0
#: Animals kept at most (about 310 bytes each, the animal and the cache's bookkeeping,
#: measured with tracemalloc for names like "Rex 12345": 29.6 MiB at most).
KEPT_PETS_MAX = 100_000


class KeptPets:
    """Found animals by id, each for ``seconds`` after it was read (the least recently
    used make room beyond ``max_pets``, an ``lru.LRU``), and which of them were asked
    for since (:meth:`due`)."""

    def __init__(self, *, seconds: float = KEPT_SECONDS, max_pets: int = KEPT_PETS_MAX) -> None:
        self._seconds = seconds
        self._pets: LRU[int, tuple[Pet, float]] = LRU(max_pets)
        self._asked: set[int] = set()  # answered from here since their last read
        self._due: list[tuple[float, int]] = []  # (stale at, id) of those, a heap

    def get(self, pet_id: int) -> Pet | None:
        """The animal ``pet_id`` if kept and read less than ``seconds`` ago, else None."""
        kept = self._pets.get(pet_id)
        if kept is None:
            return None
        if kept[1] <= time.monotonic():
            del self._pets[pet_id]
            return None
        if pet_id not in self._asked:
            self._asked.add(pet_id)
            heapq.heappush(self._due, (kept[1], pet_id))
        return kept[0]

    def keep(self, pet_ids: list[int], pets: list[Pet | None], *, read_at: float) -> None:
        """Keep what a read of ``pet_ids`` found, ``pets`` in the same order (None: no
        such animal; one kept before under that id is dropped, as it was deleted
        outside the API), as read from the database at ``read_at``
        (``time.monotonic()`` taken before the read was sent, so the bound is counted
        from no later than the read)."""
        stale_at = read_at + self._seconds
        for pet_id, pet in zip(pet_ids, pets, strict=True):
            if pet is None:
                self._pets.pop(pet_id, None)
            else:
                self._pets[pet_id] = (pet, stale_at)

    def due(self, *, within: float) -> list[int]:
        """The ids of the kept animals asked for since their last read that go stale in
        less than ``within`` seconds: those to read again (and :meth:`keep`). Each is
        named once per read; one that made room for others, or was read again since,
        is not named."""
        horizon = time.monotonic() + within
        heap, asked = self._due, self._asked
        due = []
        while heap and heap[0][0] <= horizon:
            stale_at, pet_id = heapq.heappop(heap)
            asked.discard(pet_id)
            kept = self._pets.get(pet_id)
            if kept is not None and kept[1] == stale_at:
                due.append(pet_id)
        return due
