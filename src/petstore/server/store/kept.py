"""Answers that cannot change through the API, kept in memory.

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

:class:`PetColumns` holds every animal instead, read once and then trusted as long
as the database says no animal changed outside the API, so that neither a store of
1,000,000 animals nor the reads again of those asked for cost a round trip (``make
compare`` with 10,000 animals: S3 1.110, S6 1.187; docs/performance.md, "Issue 28,
every animal in memory"). :class:`KeptPets` then keeps only what the columns do not
hold yet.
"""

from __future__ import annotations

import heapq
import time
from array import array
from collections.abc import Sequence
from typing import Any

from lru import LRU

from petstore.schemas import Pet, PetStatus

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


#: Ids :class:`PetColumns` holds at most (ids 1 to this): about 25 bytes an animal,
#: 50 MiB at most.
COLUMNS_MAX_ID = 2_000_000
#: Animals read in one query when :class:`PetColumns` is filled: each query's rows
#: are turned into columns on the event loop, about 1 ms of it for 2,000.
COLUMNS_CHUNK = 2_000

_STATUS_CODE = {status: code for code, status in enumerate(PetStatus, start=1)}
_CODE_STATUS: tuple[PetStatus, ...] = (PetStatus.AVAILABLE, *PetStatus)  # 0: none held


class PetColumns:
    """Every animal the store has read in id order, ids 1 to ``max_id``, in columns:
    its name's UTF-8 bytes in one buffer and where they end, its category, its status
    (about 25 bytes an animal: 1,000,000 animals in about 25 MiB, where as many
    :class:`Pet` objects would take about 300 MiB).

    What is held is trusted for :data:`KEPT_SECONDS` from the moment the database was
    last asked for its *version* (:meth:`confirm`): the count of changes made to
    animals outside the API (kept by a trigger, migration 0004), the table's identity
    and the server's start. Every change, restore or failover moves it; the store
    asks each second, and a version that moved drops everything held. So an animal
    changed outside the API is answered as it was for less than :data:`KEPT_SECONDS`
    after the change committed, as by :class:`KeptPets`. An id not held (not read
    yet, created since, or none) is never an answer: :meth:`get` returns None and
    the store reads the database."""

    #: Whether the animals created since :attr:`last_id` are to be read: after a
    #: drop, or once one of them was asked for (:meth:`get`). Animals created and
    #: never asked for (S4) are not read into the columns, which cost creates 2.5%.
    behind: bool

    def __init__(self, *, max_id: int = COLUMNS_MAX_ID) -> None:
        self._max_id = max_id
        self._version: tuple[Any, ...] | None = None
        self._trusted_until = 0.0
        self._clear()

    def _clear(self) -> None:
        self.behind = True
        self._names = bytearray()
        self._ends = array("I", [0])  # index: id; a name is names[ends[id - 1]:ends[id]]
        self._categories = array("q", [0])
        self._statuses = bytearray(1)  # 0: no animal held under that id

    @property
    def last_id(self) -> int:
        """The highest id read so far (0: none): the next :meth:`add` starts above it."""
        return len(self._statuses) - 1

    @property
    def full(self) -> bool:
        """Whether ids up to ``max_id`` have been read: none above is held."""
        return self.last_id >= self._max_id

    def confirm(self, version: tuple[Any, ...] | None, *, read_at: float) -> bool:
        """Trust what is held until ``read_at + KEPT_SECONDS`` if ``version``, read
        from the database at ``read_at`` (``time.monotonic()`` taken before it was
        sent), is the one it was read under; else drop it all and hold what is read
        from now on under ``version`` (None: the database could not say, so nothing
        is held until it can). Returns whether what was held was kept."""
        if version is not None and version == self._version:
            self._trusted_until = read_at + KEPT_SECONDS
            return True
        self._clear()
        self._version = version
        self._trusted_until = 0.0 if version is None else read_at + KEPT_SECONDS
        return False

    def add(self, rows: Sequence[Sequence[Any]]) -> None:
        """Hold ``rows`` (id, name, category id, status), ids ascending, each above
        :attr:`last_id`, as read after the latest :meth:`confirm`; rows past
        ``max_id`` are left out. Raises KeyError for an unknown status."""
        names, ends, categories, statuses = (
            self._names,
            self._ends,
            self._categories,
            self._statuses,
        )
        for pet_id, name, category_id, status in rows:
            if pet_id > self._max_id:
                break
            gap = pet_id - len(statuses)  # ids never read: held as none
            if gap:
                ends.extend([ends[-1]] * gap)
                categories.extend([0] * gap)
                statuses.extend(bytes(gap))
            names += name.encode()
            ends.append(len(names))
            categories.append(category_id)
            statuses.append(_STATUS_CODE[status])

    def get(self, pet_id: int) -> Pet | None:
        """The animal ``pet_id`` if held and trusted now, else None. An id above
        :attr:`last_id` sets :attr:`behind`."""
        if pet_id >= len(self._statuses):
            self.behind = True
            return None
        if pet_id < 1 or self._trusted_until <= time.monotonic():
            return None
        code = self._statuses[pet_id]
        if not code:
            return None
        ends = self._ends
        name = self._names[ends[pet_id - 1] : ends[pet_id]].decode()
        return Pet(pet_id, name, self._categories[pet_id], _CODE_STATUS[code])
