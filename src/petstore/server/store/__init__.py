"""Storage: the only package that speaks SQL.

:class:`Store` is what the rules layer needs from a database, and the one place that
says what a store does; each backend (``store.sqlite``, ``store.postgres``) implements
it with plain SQL over its own driver, the SQL they share written once in
``store.sql``. :func:`create_store` picks the backend from the database URL without
connecting; :func:`open_store` also opens it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

import msgspec

from petstore.schemas import NewPet, Pet, PetStatus


class ApiKey(msgspec.Struct, frozen=True):
    """An API key as the operator sees it: never the secret, nor its hash (D13); its
    scopes (D21) and its own rate limit, None for the service's (D22)."""

    id: int
    name: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    scopes: tuple[str, ...]
    rate_limit: str | None


class ApiKeyRecord(msgspec.Struct, frozen=True):
    """What verifying a presented key needs: its id, stored hash and validity, and
    what it may do: its scopes (D21) and rate limit (D22, None for the default)."""

    id: int
    key_hash: str
    expires_at: datetime | None
    revoked_at: datetime | None
    scopes: tuple[str, ...]
    rate_limit: str | None


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
    """Typed queries over one database.

    Constructing a store does no I/O; :meth:`open` connects, and :meth:`close`
    releases what it holds. Every other method needs the store open, and raises
    ``errors.Unavailable`` when the database cannot be reached (or the store is not
    open, or closing). Use a store from one event loop.
    """

    #: True when a page of animals that more animals follow can never change through
    #: the API, so its answer may be kept (for ``store.kept.KEPT_SECONDS``, the bound
    #: on changes made outside the API): animals are never changed or removed (the
    #: interface has no such operation) and every new id is above every committed one
    #: (D5, D9). SQLite: one writer at a time and AUTOINCREMENT, within this file.
    #: PostgreSQL: every create takes the id-order lock before it draws an id
    #: (``postgres.ID_ORDER_LOCK``), on every instance; engines without that lock
    #: cannot run the service's creates (docs/operations.md, section 9).
    full_pages_are_final: bool

    async def open(self) -> None:
        """Connect, then check the schema is current.

        Raises ``errors.Unavailable`` when the database cannot be reached (a SQLite
        file that cannot be opened raises ``sqlite3.Error``), and SchemaOutOfDateError
        when migrations are missing (run ``petstore db upgrade``); either way what
        was opened is closed again.
        """
        ...

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
        scopes: tuple[str, ...],
        rate_limit: str | None,
    ) -> ApiKey:
        """Store a new key's hash and metadata (``scopes`` D21, ``rate_limit`` D22)."""
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
        """Finish pending writes and release connections; later calls raise
        ``errors.Unavailable``. Safe after a failed open, without one, and twice."""
        ...


def create_store(url: str, *, pool_size: int = 10) -> Store:
    """The store for the database ``url``, not yet open (no connection, no thread).

    ``pool_size`` bounds the connections of a PostgreSQL store (SQLite uses one
    reader and one writer). Raises ``config.UnsupportedDatabaseError`` for an unknown
    URL scheme or an unusable SQLite URL.
    """
    from petstore.server import config

    path = config.sqlite_path(url)
    if path is not None:
        from petstore.server.store.sqlite import SQLiteStore

        return SQLiteStore(path)
    if config.is_postgres(url):
        from petstore.server.store.postgres import PostgresStore

        return PostgresStore(url, pool_size=pool_size)
    raise config.UnsupportedDatabaseError(f"unsupported database URL: {url.split(':', 1)[0]}")


async def open_store(url: str, *, pool_size: int = 10) -> Store:
    """:func:`create_store`, then :meth:`Store.open`: an open store with a current
    schema. Raises what each of them raises."""
    store = create_store(url, pool_size=pool_size)
    await store.open()
    return store


async def require_current_schema(store: Store) -> None:
    """For the backends' ``open``: raises SchemaOutOfDateError unless ``store``'s
    schema is one this code can run on (``migrate.schema_is_usable``)."""
    from petstore.server.store import migrate

    found = await store.schema_revision()
    if not migrate.schema_is_usable(found):
        raise SchemaOutOfDateError(
            f"database schema is at revision {found or 'none'}, this code needs "
            f"{migrate.head_revision()}; run `petstore db upgrade`"
        )
