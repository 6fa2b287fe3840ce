"""Kept animals, a speed device (``PETSTORE_KEEP_ANSWERS``): an animal getPet found is
answered again from memory while the store's change signal holds it good
(:mod:`.changes`): at once after a change through this store, within
:data:`~.changes.KEPT_SECONDS` after any other.

Only found animals are kept: a miss kept would hide an animal created afterwards, on
this instance or another.

The animals are kept in columns, 19 bytes an animal beside its name's UTF-8 bytes, so
that a store of a million animals is kept whole: slot ``id % KEPT_SLOTS`` of each
column holds the animal of that id (the rest of its id, its category and status),
when it was read (in tenths of a second, rounded down: a kept answer may be read
again up to a tenth early, never late) and where its name lies in one area of names.
Everything kept was read in one generation of the change signal: once it moves, all
of it is dropped. Ids are handed out in order (D5), so up to :data:`KEPT_SLOTS`
animals in a row never share a slot; one that does replaces the animal kept there. A
getPet that finds nothing good in its slot reads the animals of its whole block of
:data:`BLOCK_IDS` ids in one query and keeps those found (the animals near one asked
for are likely asked for soon, and an instance starting under load reads its animals
in a few queries instead of one each); when the slot holds another animal, or the
block cannot be read whole (a damaged row in it), it reads its own animal only, so
one bad row fails only its own getPet. A new worker reads the store's animals
ahead of getPet, in id order, as it starts (:meth:`KeptPets.warm`), so that it does
not serve its first getPets each with a read. The columns grow with the highest slot
used; the names' area is emptied, with everything kept, once it would pass
:data:`KEPT_NAME_BYTES`, and a name longer than :data:`NAME_BYTES_MAX` is never kept
(docs/operations/run.md: at most 56 MiB a worker). The id's rest and the category are
kept in four bytes each: an animal whose id is 0 or below, or 2**52 or more (with
:data:`KEPT_SLOTS` slots), or whose category is outside the 32-bit integers, is read
each time.
"""

from __future__ import annotations

import asyncio
import logging
import math
from array import array

import msgspec

from petstore.schemas import INT64_MAX, Pet, PetStatus
from petstore.server import errors
from petstore.server.store.changes import Stamp
from petstore.server.store.decorator import PetsDecorator
from petstore.server.store.pets import PetRepository

#: Slots of the columns (a power of two): ids 1 to 1,048,575 each have one of their
#: own. The columns take 19 bytes a slot up to the highest slot used.
KEPT_SLOTS = 1 << 20
#: Bytes of kept names at most (their UTF-8): past it, everything kept is dropped.
KEPT_NAME_BYTES = 32 << 20
#: A name of more UTF-8 bytes than a NewPet's can have (D2) is not kept.
NAME_BYTES_MAX = 400
#: Ids read together when the slot of the id asked for is empty: the block
#: ``[n * BLOCK_IDS, (n + 1) * BLOCK_IDS)`` that holds it.
BLOCK_IDS = 32
#: Animals a query reads while a new worker keeps the store's animals ahead of getPet
#: (:meth:`KeptPets.warm`): about a millisecond of the event loop to keep a page.
WARM_PAGE = 500

_STATUSES = tuple(PetStatus)
_STATUS_CODES = {status: code for code, status in enumerate(_STATUSES)}
_GROWTH = 1 << 12  # slots the columns hold at least once they hold any
#: Seconds the first kept read time lies after the epoch of read times, so that a
#: read stamped a little before it can be kept too.
_EPOCH_BEFORE = 3600.0
_UINT32_MAX = (1 << 32) - 1
_TENTHS_MAX = _UINT32_MAX  # about 13 years of read times
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1

log = logging.getLogger("petstore.store")


class KeptPets(PetsDecorator):
    """``inner`` whose found animals are answered from memory, as the module says.
    ``slots`` (a power of two, :data:`KEPT_SLOTS` unless given) and ``name_bytes``
    (:data:`KEPT_NAME_BYTES`) bound what is kept."""

    def __init__(
        self, inner: PetRepository, *, slots: int = KEPT_SLOTS, name_bytes: int = KEPT_NAME_BYTES
    ) -> None:
        super().__init__(inner)
        if slots <= 0 or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two, not {slots}")
        self._mask = slots - 1
        self._shift = slots.bit_length() - 1  # an id is its slot and its tag's bits
        self._name_bytes = name_bytes
        #: The generation of the change signal every kept animal was read in.
        self._generation = -1
        #: Kept read times are tenths of a second after this (monotonic seconds).
        self._epoch: float | None = None
        self._clear()

    def _clear(self) -> None:
        """Drop everything kept: no slot holds an animal (tag 0)."""
        self._tags = array("I")  # the id's bits above its slot's, plus one; 0: none
        self._categories = array("i")
        self._statuses = bytearray()
        self._read_at = array("I")  # tenths of a second after _epoch, rounded down
        self._name_starts = array("I")
        self._name_lengths = array("H")
        self._names = bytearray()

    async def get(self, pet_id: int) -> Pet | None:
        """``PetRepository.get``: the kept animal while it holds, else read (with its
        block unless its slot holds another animal) and kept when found."""
        changes = self.changes
        if changes.generation != self._generation:  # nothing kept holds any longer
            self._clear()
            self._generation = changes.generation
        slot, tag = pet_id & self._mask, (pet_id >> self._shift) + 1
        kept_tag = self._tags[slot] if slot < len(self._tags) else 0  # 0: none
        if kept_tag == tag != 0:  # ids of -1 to -KEPT_SLOTS have tag 0
            assert self._epoch is not None
            if changes.fresh(self._epoch + self._read_at[slot] / 10):  # generation checked above
                start = self._name_starts[slot]
                return Pet(
                    id=pet_id,
                    name=self._names[start : start + self._name_lengths[slot]].decode(
                        "utf-8", "surrogatepass"
                    ),
                    category_id=self._categories[slot],
                    status=_STATUSES[self._statuses[slot]],
                )
        stamp = changes.stamp()
        if kept_tag in (0, tag):
            try:
                return await self._read_block(pet_id, stamp)
            except msgspec.ValidationError:  # a damaged row fails only its own getPet
                pass
        found = await self.inner.get(pet_id)
        self._keep(pet_id, found, stamp)
        return found

    async def warm(self) -> int:
        """Keep the store's animals before getPet asks for them, as a worker starts:
        read them in id order, :data:`WARM_PAGE` a query, each page stamped as a
        getPet's read is (what changes meanwhile is read again, as the module says).
        Stops after as many animals as there are slots, before the names' area could
        overflow (it never drops what it kept), or at a page that cannot be read (the
        database unreachable, a damaged row): getPet then reads the rest itself.
        Returns the animals read; logs how many, and in how many seconds, at INFO."""
        changes = self.changes
        started = changes.stamp()  # the first look, whose version moves the generation
        await changes.settled()
        slots, after_id, read, stopped = self._mask + 1, 0, 0, ""
        while not stopped:
            stamp = changes.stamp()
            try:
                page = await self.inner.list_page(status=None, after_id=after_id, limit=WARM_PAGE)
            except (errors.Unavailable, msgspec.ValidationError) as exc:
                stopped = f"; stopped at a page it could not read ({type(exc).__name__})"
                break
            for pet in page:
                if read == slots or len(self._names) + NAME_BYTES_MAX > self._name_bytes:
                    stopped = "; stopped with every slot or the names' area taken"
                    break
                self._keep(pet.id, pet, stamp)
                read += 1
            if len(page) < WARM_PAGE:
                break
            after_id = page[-1].id
            await asyncio.sleep(0)  # SQLite reads without leaving the loop: let requests in
        seconds = changes.stamp().read_at - started.read_at
        log.info("kept animals: read %d ahead of getPet in %.1f s%s", read, seconds, stopped)
        return read

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
        """Keep ``found``, read with ``stamp``, in ``pet_id``'s slot; None: the id has
        no animal (perhaps deleted), and its slot keeps none of that id. A read stamped
        before the generation of what is kept is not kept; one stamped after it drops
        everything kept first."""
        slot, tag = pet_id & self._mask, (pet_id >> self._shift) + 1
        name = None if found is None else found.name.encode("utf-8", "surrogatepass")
        if stamp.generation > self._generation:
            self._clear()
            self._generation = stamp.generation
        if self._epoch is None:
            self._epoch = stamp.read_at - _EPOCH_BEFORE
        tenths = math.floor((stamp.read_at - self._epoch) * 10)
        if (
            found is None
            or name is None
            or len(name) > NAME_BYTES_MAX
            or stamp.generation < self._generation
            or not 0 <= tenths <= _TENTHS_MAX
            or not 1 <= tag <= _UINT32_MAX
            or not _INT32_MIN <= found.category_id <= _INT32_MAX
        ):
            if slot < len(self._tags) and self._tags[slot] == tag:
                self._tags[slot] = 0
            return
        if slot >= len(self._tags):
            self._grow(slot)
        tags, names = self._tags, self._names
        if not (tags[slot] == tag and self._name_lengths[slot] == len(name)):
            if len(names) + len(name) > self._name_bytes:  # drop everything kept
                self._clear()
                self._grow(slot)
                tags, names = self._tags, self._names
            start = len(names)
            names += name
            self._name_starts[slot] = start
            self._name_lengths[slot] = len(name)
        else:  # the same animal again, its name as long: written over in place
            start = self._name_starts[slot]
            names[start : start + len(name)] = name
        tags[slot] = tag
        self._categories[slot] = found.category_id
        self._statuses[slot] = _STATUS_CODES[found.status]
        self._read_at[slot] = tenths

    def _grow(self, slot: int) -> None:
        """Lengthen every column to hold ``slot`` (by half their length at least)."""
        size = min(self._mask + 1, max(slot + 1, len(self._tags) * 3 // 2, _GROWTH))
        more = size - len(self._tags)
        for column in (
            self._tags,
            self._categories,
            self._read_at,
            self._name_starts,
            self._name_lengths,
        ):
            column.frombytes(bytes(more * column.itemsize))
        self._statuses += bytes(more)
