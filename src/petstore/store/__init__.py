"""Storage: the only package that speaks SQL.

:class:`Store` is what the rules layer needs from a database; each backend module
(``store.sqlite`` now, PostgreSQL beside it) implements it with plain SQL over its
own driver. :func:`open_store` picks the backend from the database URL.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

import msgspec

from petstore.schemas import NewPet, Pet, PetStatus


class ApiKey(msgspec.Struct, frozen=True):
    """An API key as the operator sees it: never the secret, nor its hash (D13)."""

    id: int
    name: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


class ApiKeyRecord(msgspec.Struct, frozen=True):
    """What verifying a presented key needs: its id, stored hash and validity."""

    id: int
    key_hash: str
    expires_at: datetime | None
    revoked_at: datetime | None


class IdempotencyClaim(msgspec.Struct, frozen=True):
    """A create's claim on an Idempotency-Key (D16): stored with the animal, in the
    same transaction, unless an unexpired record of the same key already exists.
    Records of this key created before ``expired_before`` are replaced."""

    api_key_id: int
    key: str
    fingerprint: str
    created_at: datetime
    expired_before: datetime


class IdempotencyRecord(msgspec.Struct, frozen=True):
    """A stored Idempotency-Key: the request's fingerprint and its original 201 body."""

    api_key_id: int
    key: str
    fingerprint: str
    pet_id: int
    response: bytes
    created_at: datetime


class SchemaOutOfDateError(RuntimeError):
    """The database's schema revision is not the one this code was built for."""


class Store(Protocol):
    """Typed queries over one database. Every method raises ``errors.Unavailable``
    when the database cannot be reached."""

    #: True when a page of animals that more animals follow can never change, so it
    #: may be cached for good: animals are never changed or removed (the interface
    #: has no such operation) and every new id is above every committed one.
    #: SQLite: one writer at a time and AUTOINCREMENT, within this file. Not claimed
    #: for PostgreSQL, whose commit order rests on every writer taking the id-order
    #: lock, which compatible engines may lack (docs/operations.md, section 8).
    full_pages_are_final: bool

    async def create_pet(
        self, new_pet: NewPet, *, claim: IdempotencyClaim | None = None
    ) -> Pet | IdempotencyRecord:
        """Insert one animal, durably committed before returning (D5: id assigned here).

        With a ``claim``, the idempotency record is written in the same transaction;
        if an unexpired record of that key exists, nothing is written and that
        record is returned instead (D16).
        """
        ...

    async def find_idempotency_record(
        self, api_key_id: int, key: str, *, created_after: datetime
    ) -> IdempotencyRecord | None:
        """The record of ``key`` for this API key, if created after ``created_after``."""
        ...

    async def purge_idempotency_records(self, *, created_before: datetime) -> int:
        """Delete records created before ``created_before``; how many were deleted."""
        ...

    async def list_pets(self, *, status: PetStatus | None, after_id: int, limit: int) -> list[Pet]:
        """Up to ``limit`` animals with ``id > after_id``, ascending id (D7)."""
        ...

    async def get_pet(self, pet_id: int) -> Pet | None:
        """The animal with this id, or None."""
        ...

    async def create_api_key(
        self,
        *,
        name: str,
        prefix: str,
        key_hash: str,
        created_at: datetime,
        expires_at: datetime | None,
    ) -> ApiKey:
        """Store a new key's hash and metadata."""
        ...

    async def list_api_keys(self) -> list[ApiKey]:
        """Every key, revoked and expired ones included, by id."""
        ...

    async def revoke_api_key(self, key_id: int, *, at: datetime) -> bool:
        """Mark a key revoked at ``at``; False when no unrevoked key has that id."""
        ...

    async def find_api_keys(self, prefix: str) -> list[ApiKeyRecord]:
        """The keys whose visible prefix is ``prefix`` (usually one)."""
        ...

    async def count_active_api_keys(self, *, now: datetime) -> int:
        """How many keys are neither revoked nor expired at ``now``."""
        ...

    async def schema_revision(self) -> str | None:
        """The applied migration revision, None on an empty database."""
        ...

    def pool_stats(self) -> dict[str, int]:
        """Connection pool figures by name (for metrics): at least ``size``,
        ``available`` and ``writes_waiting``."""
        ...

    async def close(self) -> None:
        """Finish pending writes and release connections."""
        ...


async def open_store(url: str, *, pool_size: int = 10) -> Store:
    """Open the store for ``url`` and check its schema is current.

    ``pool_size`` bounds the connections of a PostgreSQL store (SQLite uses one
    reader and one writer). Raises SchemaOutOfDateError when migrations are missing
    (run ``petstore db upgrade``), ``config.UnsupportedDatabaseError`` for an unknown URL
    scheme, and ``errors.Unavailable`` when the database cannot be reached.
    """
    from petstore import config, db

    store: Store
    path = config.sqlite_path(url)
    if path is not None:
        from petstore.store.sqlite import SQLiteStore

        store = SQLiteStore(path)
    elif config.is_postgres(url):
        from petstore.store.postgres import PostgresStore

        store = await PostgresStore.open(url, pool_size=pool_size)
    else:
        raise config.UnsupportedDatabaseError(f"unsupported database URL: {url.split(':', 1)[0]}")
    found = await store.schema_revision()
    if not db.schema_is_usable(found):
        await store.close()
        raise SchemaOutOfDateError(
            f"database schema is at revision {found or 'none'}, this code needs "
            f"{db.head_revision()}; run `petstore db upgrade`"
        )
    return store


class _Shim:  # TEMPORARY
    full_pages_are_final = False

    def __init__(self, url: str, pool_size: int) -> None:
        from petstore import config

        self._url, self._pool_size = url, pool_size
        self._store: Store | None = None
        self.full_pages_are_final = config.sqlite_path(url) is not None

    async def open(self) -> None:
        self._store = await open_store(self._url, pool_size=self._pool_size)

    def pool_stats(self) -> dict[str, int]:
        return {} if self._store is None else self._store.pool_stats()

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._store, name)


def create_store(url: str, *, pool_size: int = 10) -> Store:
    return _Shim(url, pool_size)  # type: ignore[return-value]
