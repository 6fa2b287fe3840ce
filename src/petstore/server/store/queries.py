"""The store, written once: :class:`SQLStore` turns each :class:`~petstore.server.store.Store`
operation into the backend's statements (:class:`.driver.Statements`) and the rows
into values, over the backend's :class:`.driver.Database`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from datetime import datetime
from functools import partial
from typing import Any

from petstore.schemas import NewPet, Pet, PetStatus, encode, pet_from_row
from petstore.server import errors
from petstore.server.store import (
    ApiKey,
    ApiKeyRecord,
    ClaimOutcome,
    IdempotencyClaim,
    IdempotencyRecord,
    require_current_schema,
)
from petstore.server.store.driver import Database, Row, Transaction
from petstore.server.store.results import as_json, inserted, new_pet_fields, then


class _ClaimLost(Exception):
    """Inside a create's transaction: an unexpired record of its key is stored."""


class SQLStore:
    """:class:`petstore.server.store.Store` over ``database``. Constructing it does no
    I/O; :meth:`open` connects."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._sql = database.statements

    async def open(self) -> None:
        """Connect, then check the schema (``Store.open``)."""
        try:
            await self.database.open()
            await require_current_schema(self)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Release the connections (``Store.close``)."""
        await self.database.close()

    def pool_stats(self) -> dict[str, int]:
        """The driver's connection figures, and no write waiting here."""
        return {**self.database.stats(), "writes_waiting": 0}

    # Animals ---------------------------------------------------------------------

    async def create_pet(self, new_pet: NewPet) -> Pet:
        """One animal, committed (``Store.create_pet``)."""
        return (await self.create_pets((new_pet,)))[0]

    def create_pets(self, new_pets: Sequence[NewPet]) -> Awaitable[list[Pet]]:
        """The animals of ``new_pets`` in one statement (``Store.create_pets``); what
        the driver's write hands back, turned into the animals by a callback."""
        written = self.database.write(self._sql.insert_pets, (as_json(new_pets),))
        return then(written, partial(inserted, new_pets))

    async def create_pet_with_key(
        self, new_pet: NewPet, *, claim: IdempotencyClaim
    ) -> ClaimOutcome:
        """The animal and its record in one transaction, or the record the claim lost
        to (``Store.create_pet_with_key``, D16). Raises ``errors.IdempotencyConflict``
        when the record it lost to is gone by the time it is read (purged, or
        replaced after expiring): the client's retry settles it."""
        sql = self._sql

        async def create(tx: Transaction) -> IdempotencyRecord:
            if sql.lock_id_order is not None:
                await tx.fetch(sql.lock_id_order)
            expired_before = sql.to_db(claim.expired_before)
            await tx.fetch(sql.delete_expired_claim, (claim.api_key_id, claim.key, expired_before))
            ((pet_id,),) = await tx.fetch(
                sql.insert_pet, (new_pet.name, new_pet.category_id, new_pet.status.value)
            )
            pet = Pet(pet_id, *new_pet_fields(new_pet))
            response = encode(pet)
            params = (claim.api_key_id, claim.key, claim.fingerprint, pet_id, response.decode())
            if not await tx.fetch(sql.insert_claim, (*params, sql.to_db(claim.created_at))):
                raise _ClaimLost  # rolls the animal back
            return IdempotencyRecord(
                claim.api_key_id, claim.key, claim.fingerprint, pet_id, response, claim.created_at
            )

        try:
            return ClaimOutcome(await self.database.in_transaction(create), replayed=False)
        except _ClaimLost:
            pass
        rows = await self.database.read(sql.select_claim, (claim.api_key_id, claim.key))
        if not rows:
            raise errors.IdempotencyConflict(
                "a request with this Idempotency-Key was being processed; retry"
            )
        return ClaimOutcome(self._record(rows[0]), replayed=True)

    async def list_pets(self, *, status: PetStatus | None, after_id: int, limit: int) -> list[Pet]:
        """A keyset page (``Store.list_pets``)."""
        if status is None:
            rows = await self.database.read(self._sql.list_pets, (after_id, limit))
        else:
            rows = await self.database.read(
                self._sql.list_pets_of_status, (status.value, after_id, limit)
            )
        return [pet_from_row(row) for row in rows]

    async def get_pet(self, pet_id: int) -> Pet | None:
        """One animal by id (``Store.get_pet``)."""
        rows = await self.database.read(self._sql.get_pet, (pet_id,))
        return pet_from_row(rows[0]) if rows else None

    async def get_pets(self, pet_ids: Sequence[int]) -> list[Pet | None]:
        """Animals by id, one query (``Store.get_pets``)."""
        rows = await self.database.read(self._sql.get_pets, (as_json(pet_ids),))
        found = {row[0]: pet_from_row(row) for row in rows}
        return [found.get(pet_id) for pet_id in pet_ids]

    async def pets_version(self) -> tuple[Any, ...] | None:
        """``Store.pets_version``: the backend's version row, if it keeps one."""
        if self._sql.pets_version is None:
            return None
        rows = await self.database.read(self._sql.pets_version)
        return tuple(rows[0]) if rows else None

    # Idempotency records (D16) -------------------------------------------------------

    async def find_idempotency_record(
        self, api_key_id: int, key: str, *, created_after: datetime
    ) -> IdempotencyRecord | None:
        """``Store.find_idempotency_record``."""
        params = (api_key_id, key, self._sql.to_db(created_after))
        rows = await self.database.read(self._sql.find_idempotency_record, params)
        return self._record(rows[0]) if rows else None

    async def purge_idempotency_records(self, *, created_before: datetime) -> int:
        """``Store.purge_idempotency_records``."""
        params = (self._sql.to_db(created_before),)
        return len(
            await self.database.write(self._sql.purge_idempotency_records, params)
        )  # a row each

    def _record(self, row: Row) -> IdempotencyRecord:
        created_at = self._sql.from_db(row[5])
        assert created_at is not None  # NOT NULL
        return IdempotencyRecord(row[0], row[1], row[2], row[3], row[4].encode(), created_at)

    # API keys (D13) --------------------------------------------------------------

    async def create_api_key(
        self,
        *,
        name: str,
        prefix: str,
        key_hash: str,
        created_at: datetime,
        expires_at: datetime | None,
        scopes: tuple[str, ...],
        rate_limit: str | None,
    ) -> ApiKey:
        """``Store.create_api_key``; scopes are stored space-separated."""
        to_db = self._sql.to_db
        expires = None if expires_at is None else to_db(expires_at)
        params = (name, prefix, key_hash, to_db(created_at), expires, " ".join(scopes), rate_limit)
        return self._api_key((await self.database.write(self._sql.insert_api_key, params))[0])

    async def list_api_keys(self) -> list[ApiKey]:
        """``Store.list_api_keys``."""
        return [self._api_key(row) for row in await self.database.read(self._sql.list_api_keys)]

    async def revoke_api_key(self, key_id: int, *, at: datetime) -> bool:
        """``Store.revoke_api_key``."""
        params = (self._sql.to_db(at), key_id)
        return bool(await self.database.write(self._sql.revoke_api_key, params))

    async def find_api_keys(self, prefix: str) -> list[ApiKeyRecord]:
        """``Store.find_api_keys``."""
        time = self._sql.from_db
        rows = await self.database.read(self._sql.find_api_keys, (prefix,))
        return [
            ApiKeyRecord(row[0], row[1], time(row[2]), time(row[3]), tuple(row[4].split()), row[5])
            for row in rows
        ]

    async def count_active_api_keys(self, *, now: datetime) -> int:
        """``Store.count_active_api_keys``."""
        rows = await self.database.read(self._sql.count_active_api_keys, (self._sql.to_db(now),))
        return int(rows[0][0])

    def _api_key(self, row: Row) -> ApiKey:
        time = self._sql.from_db
        created_at = time(row[3])
        assert created_at is not None  # NOT NULL
        scopes = tuple(row[6].split())
        return ApiKey(
            row[0], row[1], row[2], created_at, time(row[4]), time(row[5]), scopes, row[7]
        )

    async def schema_revision(self) -> str | None:
        """``Store.schema_revision``."""
        ((exists,),) = await self.database.read(self._sql.schema_exists)
        if not exists:
            return None
        rows = await self.database.read(self._sql.schema_revision)
        return str(rows[0][0]) if rows else None
