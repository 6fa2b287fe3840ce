"""The animals' repositories, written once over the driver (:mod:`.driver`), with each
dialect's SQL in :class:`PetStatements`: :class:`PetRepository` (``store.pets``), which
reads and adds, and :class:`PetsInTransaction` (``tx.pets``), the animals inside one
transaction of the store's unit of work (``Store.transaction``, :mod:`.unit_of_work`).

Writes come in two kinds, and the kind decides what answers kept in memory learn of
them (:mod:`.changes`). Adding animals (:meth:`PetRepository.create`,
:meth:`~PetRepository.create_many`, :meth:`PetsInTransaction.create`) changes no
stored animal: each new id is drawn above every committed one (D5, D9). Every other
write is a method of :class:`PetsInTransaction`, and the unit of work moves the
store's change signal once the transaction of any statement but those adds has
ended, committed or not. ``store.pets`` has no other write: its creates are the
batch that group commit shares (:mod:`.group_commit`).

An operation that changes animals is a method of :class:`PetsInTransaction` with its
statements, and those statements in each dialect; its rule runs it in ``async with
store.transaction() as tx:``, and no cache needs telling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, LiteralString, NamedTuple

import msgspec

from petstore.schemas import NewPet, Pet, PetStatus
from petstore.server.store.changes import PetChanges
from petstore.server.store.driver import Database, Transaction
from petstore.server.store.rows import all_into, into, parameters, parameters_json


class PetStatements(NamedTuple):
    """One dialect's SQL for animals. Each statement that returns animals lists the
    columns of :func:`.rows.select_list` (Pet); parameters are named as the comments say."""

    #: One NewPet (its fields by column name, :func:`.rows.parameters`), holding the id
    #: order (D9) before its id is drawn, in a transaction or on its own. It changes
    #: no stored animal (the unit of work moves no change signal for it).
    insert: LiteralString
    #: The NewPets of ``new_pets`` (:func:`.rows.parameters_json`) in one statement,
    #: committed by it, each id drawn above every committed one (D5, D9); each row
    #: also gives its NewPet's ``ordinal``, its place in the array from 0, which the
    #: statement carries through, so a row is matched to its NewPet by nothing else.
    insert_many: LiteralString
    #: What ``insert_many`` needs first, in its transaction (its one row's columns
    #: join the parameters); None where it needs nothing.
    insert_many_first: LiteralString | None
    #: A keyset page (D7): ``after_id``, ``limit``.
    list_page: LiteralString
    #: A keyset page of one status: ``status``, ``after_id``, ``limit``.
    list_page_of_status: LiteralString
    #: One animal: ``id``.
    get: LiteralString
    #: The animals of a JSON array of ids: ``ids``.
    get_many: LiteralString
    #: One row: the animals' version (:meth:`PetRepository.version`); None where none is kept.
    version: LiteralString | None


class PetRepository:
    """The animals of ``database``, with its dialect's ``sql``: reads, and adding
    animals each in a commit of its own or many in one; ``changes`` is the store's
    change signal, which the speed devices read. Every other write is in the unit of
    work (:class:`PetsInTransaction`). Constructing it does no I/O. Every method
    raises ``errors.Unavailable`` when the database cannot be used now."""

    def __init__(self, database: Database, *, sql: PetStatements, changes: PetChanges) -> None:
        self._database = database
        self._sql = sql
        self.changes = changes

    async def create(self, new_pet: NewPet) -> Pet:
        """Insert one animal, durably committed before returning (D5: id assigned here)."""
        (row,) = await self._database.write(self._sql.insert, parameters(new_pet))
        return into(Pet, row)

    async def create_many(self, new_pets: Sequence[NewPet]) -> list[Pet]:
        """Insert ``new_pets`` in one commit, durable once returned; the animals in the
        order given, each with an id above every id committed before (D5, D9)."""
        if len(new_pets) == 1:  # the usual batch under light load
            return [await self.create(new_pets[0])]
        rows = await self._database.write(
            self._sql.insert_many,
            {"new_pets": parameters_json(new_pets)},
            first=self._sql.insert_many_first,
        )
        placed = {row["ordinal"]: row for row in rows}
        return [into(Pet, placed[ordinal]) for ordinal in range(len(new_pets))]

    async def list_page(self, *, status: PetStatus | None, after_id: int, limit: int) -> list[Pet]:
        """Up to ``limit`` animals with ``id > after_id``, ascending id (D7)."""
        if status is None:
            rows = await self._database.read(
                self._sql.list_page, {"after_id": after_id, "limit": limit}
            )
        else:
            rows = await self._database.read(
                self._sql.list_page_of_status,
                {"status": status.value, "after_id": after_id, "limit": limit},
            )
        return all_into(Pet, rows)

    async def get(self, pet_id: int) -> Pet | None:
        """The animal with this id, or None."""
        rows = await self._database.read(self._sql.get, {"id": pet_id})
        return into(Pet, rows[0]) if rows else None

    async def get_many(self, pet_ids: Sequence[int]) -> list[Pet | None]:
        """The animals of ``pet_ids`` in that order (one query), None where none."""
        rows = await self._database.read(
            self._sql.get_many, {"ids": msgspec.json.encode(pet_ids).decode()}
        )
        found = {pet.id: pet for pet in all_into(Pet, rows)}
        return [found.get(pet_id) for pet_id in pet_ids]

    async def version(self) -> tuple[Any, ...] | None:
        """What moves whenever animals change other than by being added (an ``UPDATE``,
        ``DELETE`` or ``TRUNCATE`` of ``pets``, from any instance or from outside the
        service, a restore, a failover: migrations 0004 and 0005); None where the
        database keeps no such version."""
        if self._sql.version is None:
            return None
        rows = await self._database.read(self._sql.version)
        return tuple(rows[0].values()) if rows else None

    def writes_waiting(self) -> int:
        """Creates queued for a commit, not yet in one (group commit's; 0 here)."""
        return 0

    async def warm(self) -> int:
        """Read ahead what a speed device keeps, before any request asks for it (kept
        animals' :meth:`.kept_pets.KeptPets.warm`); the animals read, 0 here."""
        return 0

    async def close(self) -> None:
        """Finish what is queued (the speed devices'); the database is the store's to close."""


class PetsInTransaction:
    """The animals inside one transaction ``tx`` of the store's unit of work
    (``tx.pets``), with the dialect's ``sql``: each method's statements are committed
    with the rest of the transaction, or rolled back with it. Made by the unit of
    work only; every method raises ``errors.Unavailable`` when the database cannot be
    used now (and then the whole transaction is rolled back)."""

    def __init__(self, tx: Transaction, *, sql: PetStatements) -> None:
        self._tx = tx
        self._sql = sql

    async def create(self, new_pet: NewPet) -> Pet:
        """Insert one animal; its id is drawn above every committed one (D5, D9),
        holding the id order until the transaction ends."""
        (row,) = await self._tx.fetch(self._sql.insert, parameters(new_pet))
        return into(Pet, row)
