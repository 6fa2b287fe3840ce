"""What both backends do the same way, written once: the error guard
(:class:`Reachable`), a create's claim on its Idempotency-Key (:func:`claimed_create`),
and the queries of API keys, idempotency records and the schema revision
(:class:`SharedQueries`).

A backend differs only in its :class:`Dialect` (placeholder style, how timestamps are
stored) and in how it runs a statement: SQLite synchronously, on the event loop or
its writer thread; PostgreSQL asynchronously over its pool. So the claim is written
as a generator of statements, driven by each backend's own loop
(``sqlite._insert_pet``, ``postgres._insert_claimed``): the logic once, no I/O in it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from datetime import datetime
from typing import Any, LiteralString, NamedTuple

from petstore.schemas import NewPet, Pet, encode
from petstore.server import errors
from petstore.server.store import ApiKey, ApiKeyRecord, IdempotencyClaim, IdempotencyRecord, sql

#: A statement and its parameters, as a backend runs it.
Statement = tuple[LiteralString, tuple[Any, ...]]
#: What a driver sends back into :func:`claimed_create` for each statement: the
#: first row (None when none), or for :attr:`Dialect.insert_pet` the new animal's id.
Answer = Any


class Reachable:
    """``with reachable:`` turns the driver errors of ``unavailable`` (types, never
    message text) into ``errors.Unavailable`` (503 with Retry-After, D10, D25): the
    database cannot be used now, and a retry shortly may succeed. A class, not a
    generator: it is entered on every read, and entering it allocates nothing."""

    __slots__ = ("_unavailable",)

    def __init__(self, *unavailable: type[BaseException]) -> None:
        self._unavailable = unavailable

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if kind is not None and issubclass(kind, self._unavailable):
            raise errors.Unavailable("the database is unavailable; retry shortly") from exc


class Dialect(NamedTuple):
    """One backend's spelling of the shared statements (:mod:`store.sql`) and of
    timestamps: ``to_db`` turns an aware datetime into a parameter, ``from_db`` a
    stored value (or NULL) back into a datetime (or None)."""

    insert_pet: LiteralString
    delete_expired_claim: LiteralString
    insert_claim: LiteralString
    select_claim: LiteralString
    find_idempotency_record: LiteralString
    insert_api_key: LiteralString
    list_api_keys: LiteralString
    revoke_api_key: LiteralString
    find_api_keys: LiteralString
    count_active_api_keys: LiteralString
    schema_exists: LiteralString
    schema_revision: LiteralString
    to_db: Callable[[datetime], Any]
    from_db: Callable[[Any], datetime | None]

    def idempotency_record(self, row: Sequence[Any]) -> IdempotencyRecord:
        """The record of a row of ``sql.IDEMPOTENCY_COLUMNS``."""
        created_at = self.from_db(row[5])
        assert created_at is not None  # NOT NULL
        return IdempotencyRecord(row[0], row[1], row[2], row[3], row[4].encode(), created_at)


def claimed_create(
    dialect: Dialect, new: NewPet, claim: IdempotencyClaim
) -> Generator[Statement, Answer, Pet | IdempotencyRecord]:
    """The statements of one create with an Idempotency-Key (D16), inside a
    transaction the driver has open: the animal and its record in a savepoint,
    rolled back, and the existing record returned, when an unexpired record of the
    key is already stored. Returns the new animal, or that record.

    The driver sends back the answer of each statement (:data:`Answer`); a
    statement that fails raises in the driver, which rolls the transaction back.
    """
    yield "SAVEPOINT claim", ()
    expired_before = dialect.to_db(claim.expired_before)
    yield dialect.delete_expired_claim, (claim.api_key_id, claim.key, expired_before)
    pet_id = yield dialect.insert_pet, (new.name, new.category_id, new.status.value)
    pet = Pet(pet_id, new.name, new.category_id, new.status)
    record = (claim.api_key_id, claim.key, claim.fingerprint, pet_id, encode(pet).decode())
    if (yield dialect.insert_claim, (*record, dialect.to_db(claim.created_at))) is not None:
        yield "RELEASE claim", ()
        return pet
    yield "ROLLBACK TO claim", ()
    yield "RELEASE claim", ()
    row = yield dialect.select_claim, (claim.api_key_id, claim.key)
    assert row is not None  # the record that won over this claim
    return dialect.idempotency_record(row)


class SharedQueries:
    """The Store methods whose SQL and results are the same on both backends; a
    backend supplies :attr:`dialect`, :meth:`_read` (a SELECT's rows) and
    :meth:`_write` (an autocommit write's ``RETURNING`` rows), each raising
    ``errors.Unavailable`` when the database cannot be reached."""

    dialect: Dialect

    async def _read(
        self, statement: LiteralString, params: tuple[Any, ...] = ()
    ) -> Sequence[Sequence[Any]]:
        raise NotImplementedError

    async def _write(
        self, statement: LiteralString, params: tuple[Any, ...]
    ) -> Sequence[Sequence[Any]]:
        raise NotImplementedError

    async def find_idempotency_record(
        self, api_key_id: int, key: str, *, created_after: datetime
    ) -> IdempotencyRecord | None:
        d = self.dialect
        params = (api_key_id, key, d.to_db(created_after))
        rows = await self._read(d.find_idempotency_record, params)
        return d.idempotency_record(rows[0]) if rows else None

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
        d = self.dialect
        created, expires = d.to_db(created_at), None if expires_at is None else d.to_db(expires_at)
        params = (name, prefix, key_hash, created, expires, " ".join(scopes), rate_limit)
        return sql.api_key((await self._write(d.insert_api_key, params))[0], time=d.from_db)

    async def list_api_keys(self) -> list[ApiKey]:
        rows = await self._read(self.dialect.list_api_keys)
        return [sql.api_key(row, time=self.dialect.from_db) for row in rows]

    async def revoke_api_key(self, key_id: int, *, at: datetime) -> bool:
        at_value = self.dialect.to_db(at)
        return bool(await self._write(self.dialect.revoke_api_key, (at_value, key_id)))

    async def find_api_keys(self, prefix: str) -> list[ApiKeyRecord]:
        rows = await self._read(self.dialect.find_api_keys, (prefix,))
        return [sql.api_key_record(row, time=self.dialect.from_db) for row in rows]

    async def count_active_api_keys(self, *, now: datetime) -> int:
        rows = await self._read(self.dialect.count_active_api_keys, (self.dialect.to_db(now),))
        return int(rows[0][0])

    async def schema_revision(self) -> str | None:
        (exists,) = (await self._read(self.dialect.schema_exists))[0]
        if not exists:
            return None
        rows = await self._read(self.dialect.schema_revision)
        return str(rows[0][0]) if rows else None
