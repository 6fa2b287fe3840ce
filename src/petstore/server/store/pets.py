"""The animals' repository: :class:`PetRepository`, written once over the driver
(:mod:`.driver`), with each dialect's SQL in :class:`PetStatements`.

Writes come in two kinds, and the kind decides what answers kept in memory learn of
them (:mod:`.changes`). Adding animals (:meth:`PetRepository.create`,
:meth:`~PetRepository.create_many`, :meth:`~PetRepository.create_with_key`) changes
no stored animal: each new id is drawn above every committed one (D5, D9). Every
other write goes through :meth:`PetRepository.change`, which moves the store's change
signal once its transaction has ended, committed or not.

An operation that changes animals is a method here that calls :meth:`~PetRepository.change`
with its statements, and those statements in each dialect; the speed devices hand
it on unchanged (:mod:`.decorator`), and no cache needs telling.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, LiteralString, NamedTuple, TypeVar

import msgspec

from petstore.schemas import NewPet, Pet, PetStatus, encode
from petstore.server import errors
from petstore.server.store.changes import PetChanges
from petstore.server.store.driver import Database, Transaction
from petstore.server.store.idempotency_records import (
    IdempotencyClaim,
    IdempotencyRecord,
    IdempotencyStatements,
    record_of,
)
from petstore.server.store.rows import all_into, into, parameters, parameters_json

T = TypeVar("T")


class PetStatements(NamedTuple):
    """One dialect's SQL for animals. Each statement that returns animals lists the
    columns of :func:`.rows.select_list` (Pet); parameters are named as the comments say."""

    #: One NewPet (its fields by column name, :func:`.rows.parameters`), holding the id
    #: order (D9) before its id is drawn, in a transaction or on its own.
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


class ClaimOutcome(NamedTuple):
    """What a create under an Idempotency-Key left stored (D16): the key's ``record``
    (the one this create stored with its animal, or the earlier one it lost to) and
    whether the record was earlier (``replayed``: then nothing was created)."""

    record: IdempotencyRecord
    replayed: bool


class _ClaimLost(Exception):
    """Inside a create's transaction: an unexpired record of its key is stored."""


class PetRepository:
    """The animals of ``database``, with its dialect's ``sql`` (and ``idempotency`` SQL
    for creates under a key); writes that change animals move ``changes``.
    Constructing it does no I/O. Every method raises ``errors.Unavailable`` when the
    database cannot be used now."""

    def __init__(
        self,
        database: Database,
        *,
        sql: PetStatements,
        idempotency: IdempotencyStatements,
        changes: PetChanges,
        to_db: Callable[[Any], Any],
    ) -> None:
        self._database = database
        self._sql = sql
        self._idempotency = idempotency
        self._to_db = to_db
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

    async def create_with_key(self, new_pet: NewPet, *, claim: IdempotencyClaim) -> ClaimOutcome:
        """Insert one animal and its idempotency record in one transaction (D16),
        unless an unexpired record of the claim's key exists: then nothing is written
        and that record is returned, ``replayed``. Raises
        ``errors.IdempotencyConflict`` when the record it lost to is gone by the time
        it is read (purged, or replaced after expiring): the client's retry settles it."""
        sql = self._idempotency
        slot = {"api_key_id": claim.api_key_id, "key": claim.key}

        async def create(tx: Transaction) -> IdempotencyRecord:
            await tx.fetch(
                sql.delete_expired, {**slot, "expired_before": self._to_db(claim.expired_before)}
            )
            (row,) = await tx.fetch(self._sql.insert, parameters(new_pet))
            pet = into(Pet, row)
            stored = {
                **slot,
                "fingerprint": claim.fingerprint,
                "pet_id": pet.id,
                "response": encode(pet).decode(),
                "created_at": self._to_db(claim.created_at),
            }
            if not await tx.fetch(sql.insert, stored):
                raise _ClaimLost  # rolls the animal back
            return IdempotencyRecord(
                claim.api_key_id, claim.key, claim.fingerprint, pet, claim.created_at
            )

        try:
            return ClaimOutcome(await self._database.in_transaction(create), replayed=False)
        except _ClaimLost:
            pass
        rows = await self._database.read(sql.select, slot)
        if not rows:
            raise errors.IdempotencyConflict(
                "a request with this Idempotency-Key was being processed; retry"
            )
        return ClaimOutcome(record_of(rows[0]), replayed=True)

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

    async def change(self, work: Callable[[Transaction], Awaitable[T]]) -> T:
        """``work``'s result, its statements (which change or remove stored animals)
        committed together; the one seam of every write other than adding animals.
        Once the transaction has ended, committed or rolled back, the change signal
        moves (:meth:`PetChanges.changed`): no answer kept before is given again."""
        try:
            return await self._database.in_transaction(work)
        finally:
            self.changes.changed()

    def writes_waiting(self) -> int:
        """Creates queued for a commit, not yet in one (group commit's; 0 here)."""
        return 0

    async def close(self) -> None:
        """Finish what is queued (the speed devices'); the database is the store's to close."""
