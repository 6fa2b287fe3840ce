"""Idempotency records (D16): their values, each dialect's SQL for them, and their
repositories: :class:`IdempotencyRecordRepository` (``store.idempotency_records``)
finds and purges them, and :class:`IdempotencyRecordsInTransaction`
(``tx.idempotency``) writes them, inside a transaction of the store's unit of work
(``Store.transaction``): a record is written only with its animal, in the animal's
transaction (the rule ``rules.idempotency.create_with_key``).

A record keeps the original 201's Pet as JSON; it is read back into today's
:class:`~petstore.schemas.Pet`, so a replay after a deploy that added an optional
field to Pet has the field, at its default.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, LiteralString, NamedTuple

import msgspec

from petstore.schemas import Pet, encode
from petstore.server.store.driver import Database, Transaction
from petstore.server.store.rows import Row


class IdempotencyRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A stored Idempotency-Key (``key``, of the API key ``api_key_id``): the request's
    ``fingerprint`` and the Pet its first 201 answered, in today's shape; made by
    keyword only (``key`` and ``fingerprint`` are both ``str``)."""

    api_key_id: int
    key: str
    fingerprint: str
    pet: Pet
    created_at: datetime


class IdempotencyStatements(NamedTuple):
    """One dialect's SQL for idempotency records; parameters named as the comments
    say. Each that returns a record lists ``api_key_id``, ``key``, ``fingerprint``,
    ``response`` (the Pet's JSON) and ``created_at``."""

    #: ``api_key_id``, ``key``, ``expired_before``. It changes no stored animal, nor
    #: does ``insert`` (the unit of work moves no change signal for them).
    delete_expired: LiteralString
    #: ``api_key_id``, ``key``, ``fingerprint``, ``pet_id``, ``response``,
    #: ``created_at``; a row when stored, none when the key has a record.
    insert: LiteralString
    #: ``api_key_id``, ``key``.
    select: LiteralString
    #: ``api_key_id``, ``key``, ``created_after``.
    find: LiteralString
    #: ``created_before``; a row for each record deleted.
    purge: LiteralString


#: What a statement of :class:`IdempotencyStatements` that returns a record lists, in
#: both dialects.
RECORD_COLUMNS = "api_key_id, idempotency_key AS key, fingerprint, response, created_at"


def record_of(row: Row) -> IdempotencyRecord:
    """The record of a row of :class:`IdempotencyStatements`. Raises
    msgspec.ValidationError or msgspec.DecodeError for a damaged row."""
    pet = msgspec.json.decode(row["response"], type=Pet)
    fields = {name: value for name, value in row.items() if name != "response"}
    return msgspec.convert({**fields, "pet": pet}, IdempotencyRecord)


class IdempotencyRecordRepository:
    """The idempotency records of ``database``, with its dialect's ``sql``;
    ``to_db`` is the dialect's timestamp parameter. Every method raises
    ``errors.Unavailable`` when the database cannot be used now."""

    def __init__(
        self, database: Database, *, sql: IdempotencyStatements, to_db: Callable[[Any], Any]
    ) -> None:
        self._database = database
        self._sql = sql
        self._to_db = to_db

    async def get(self, api_key_id: int, key: str) -> IdempotencyRecord | None:
        """The record of ``key`` for this API key, however old (a create that lost
        its claim answers it)."""
        rows = await self._database.read(self._sql.select, {"api_key_id": api_key_id, "key": key})
        return record_of(rows[0]) if rows else None

    async def find(
        self, api_key_id: int, key: str, *, created_after: datetime
    ) -> IdempotencyRecord | None:
        """The record of ``key`` for this API key, if created after ``created_after``."""
        params = {"api_key_id": api_key_id, "key": key, "created_after": self._to_db(created_after)}
        rows = await self._database.read(self._sql.find, params)
        return record_of(rows[0]) if rows else None

    async def purge(self, *, created_before: datetime) -> int:
        """Delete records created before ``created_before``; how many were deleted."""
        params = {"created_before": self._to_db(created_before)}
        return len(await self._database.write(self._sql.purge, params))


class IdempotencyRecordsInTransaction:
    """The idempotency records inside one transaction ``tx`` of the store's unit of
    work (``tx.idempotency``), with the dialect's ``sql`` and timestamp parameter
    ``to_db``. Made by the unit of work only; every method raises
    ``errors.Unavailable`` when the database cannot be used now (and then the whole
    transaction is rolled back)."""

    def __init__(
        self, tx: Transaction, *, sql: IdempotencyStatements, to_db: Callable[[Any], Any]
    ) -> None:
        self._tx = tx
        self._sql = sql
        self._to_db = to_db

    async def delete_expired(self, api_key_id: int, key: str, *, created_before: datetime) -> None:
        """Delete the record of ``key`` for this API key if created before
        ``created_before`` (an expired record is replaced, D16)."""
        params = {
            "api_key_id": api_key_id,
            "key": key,
            "expired_before": self._to_db(created_before),
        }
        await self._tx.fetch(self._sql.delete_expired, params)

    async def insert(self, record: IdempotencyRecord) -> bool:
        """Store ``record`` (its animal must be stored in this transaction); False,
        and nothing stored, when its key already has a record (stored earlier, or by
        a transaction that committed meanwhile: PostgreSQL waits for one in progress)."""
        params = {
            "api_key_id": record.api_key_id,
            "key": record.key,
            "fingerprint": record.fingerprint,
            "pet_id": record.pet.id,
            "response": encode(record.pet).decode(),
            "created_at": self._to_db(record.created_at),
        }
        return bool(await self._tx.fetch(self._sql.insert, params))
