"""Storage: the only package that speaks SQL.

:class:`Store` is what the rules layer needs from a database, and the one place that
says what a store does. :class:`.queries.SQLStore` implements it once, over the small
driver interface of :mod:`.driver`; each backend (:mod:`.sqlite`, :mod:`.postgres`)
is that driver and its literal SQL. :func:`create_store` picks the backend from the
database URL without connecting; :func:`open_store` also opens it.

The speed devices (:mod:`.group_commit`, :mod:`.read_grouping`, :mod:`.kept_pets`)
and :mod:`.traced` wrap a store in the same interface (:mod:`.decorator`); the app
composes them (``server.app``), and no backend knows of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from datetime import datetime
from typing import Any, NamedTuple, Protocol

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


class ClaimOutcome(NamedTuple):
    """What a create under an Idempotency-Key left stored (D16): the key's ``record``
    (the one this create stored with its animal, or the earlier one it lost to) and
    whether the record was earlier (``replayed``: then nothing was created)."""

    record: IdempotencyRecord
    replayed: bool


class SchemaOutOfDateError(RuntimeError):
    """The database's schema revision is not the one this code was built for."""


class Store(Protocol):
    """Typed queries over one database: what the rules layer needs from it.

    Constructing a store does no I/O; :meth:`open` connects, and :meth:`close`
    releases what it holds. Every other method needs the store open, and raises
    ``errors.Unavailable`` when the database cannot be reached (or the store is not
    open, or closing). Use a store from one event loop. Each method returns an
    awaitable (a backend's are coroutines; a decorator hands back the one of the
    store it wraps).

    Animals are never changed or removed through a store (the interface has no such
    operation), and every new id is above every committed one (D5, D9): a page of
    animals that more animals follow never changes through the API. The speed
    devices rely on that (docs/architecture.md).
    """

    def open(self) -> Awaitable[None]:
        """Connect, then check the schema is current.

        Raises ``errors.Unavailable`` when the database cannot be reached (a SQLite
        file that cannot be opened raises ``sqlite3.Error``), and SchemaOutOfDateError
        when migrations are missing (run ``petstore db upgrade``); either way what
        was opened is closed again.
        """
        ...

    def create_pet(self, new_pet: NewPet) -> Awaitable[Pet]:
        """Insert one animal, durably committed before returning (D5: id assigned here)."""
        ...

    def create_pets(self, new_pets: Sequence[NewPet]) -> Awaitable[list[Pet]]:
        """Insert ``new_pets`` in one commit, durable once awaited; the animals in the
        order given, each with an id above every id committed before (D5, D9)."""
        ...

    def create_pet_with_key(
        self, new_pet: NewPet, *, claim: IdempotencyClaim
    ) -> Awaitable[ClaimOutcome]:
        """Insert one animal and its idempotency record in one transaction (D16),
        unless an unexpired record of the claim's key exists: then nothing is written
        and that record is returned, ``replayed``."""
        ...

    def find_idempotency_record(
        self, api_key_id: int, key: str, *, created_after: datetime
    ) -> Awaitable[IdempotencyRecord | None]:
        """The record of ``key`` for this API key, if created after ``created_after``."""
        ...

    def purge_idempotency_records(self, *, created_before: datetime) -> Awaitable[int]:
        """Delete records created before ``created_before``; how many were deleted."""
        ...

    def list_pets(
        self, *, status: PetStatus | None, after_id: int, limit: int
    ) -> Awaitable[list[Pet]]:
        """Up to ``limit`` animals with ``id > after_id``, ascending id (D7)."""
        ...

    def get_pet(self, pet_id: int) -> Awaitable[Pet | None]:
        """The animal with this id, or None."""
        ...

    def get_pets(self, pet_ids: Sequence[int]) -> Awaitable[list[Pet | None]]:
        """The animals of ``pet_ids`` in that order (one query), None where none."""
        ...

    def pets_version(self) -> Awaitable[tuple[Any, ...] | None]:
        """What moves whenever animals change outside the API (an ``UPDATE``,
        ``DELETE`` or ``TRUNCATE`` of ``pets``, a restore, a failover: migrations 0004
        and 0005); None where the database keeps no such version."""
        ...

    def create_api_key(
        self,
        *,
        name: str,
        prefix: str,
        key_hash: str,
        created_at: datetime,
        expires_at: datetime | None,
        scopes: tuple[str, ...],
        rate_limit: str | None,
    ) -> Awaitable[ApiKey]:
        """Store a new key's hash and metadata (``scopes`` D21, ``rate_limit`` D22)."""
        ...

    def list_api_keys(self) -> Awaitable[list[ApiKey]]:
        """Every key, revoked and expired ones included, by id."""
        ...

    def revoke_api_key(self, key_id: int, *, at: datetime) -> Awaitable[bool]:
        """Mark a key revoked at ``at``; False when no unrevoked key has that id."""
        ...

    def find_api_keys(self, prefix: str) -> Awaitable[list[ApiKeyRecord]]:
        """The keys whose visible prefix is ``prefix`` (usually one)."""
        ...

    def count_active_api_keys(self, *, now: datetime) -> Awaitable[int]:
        """How many keys are neither revoked nor expired at ``now``."""
        ...

    def schema_revision(self) -> Awaitable[str | None]:
        """The applied migration revision, None on an empty database."""
        ...

    def pool_stats(self) -> dict[str, int]:
        """Connection pool figures by name (for metrics): at least ``size``,
        ``available`` and ``writes_waiting``."""
        ...

    def close(self) -> Awaitable[None]:
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
