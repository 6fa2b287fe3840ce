"""A store around a store: :class:`StoreDecorator` hands every
:class:`~petstore.server.store.Store` method to the store it wraps, written out one
by one (no ``__getattr__``: a method renamed or added in ``Store`` and missing here
fails the type check of every decorator). Each hands back the wrapped store's
awaitable as it is, with no coroutine of its own: a request's store call passes
every decorator around the store. A speed device or the tracing overrides
only what it changes (:mod:`.group_commit`, :mod:`.read_grouping`, :mod:`.kept_pets`,
:mod:`.traced`)."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from datetime import datetime
from typing import Any

from petstore.schemas import NewPet, Pet, PetStatus
from petstore.server.store import (
    ApiKey,
    ApiKeyRecord,
    ClaimOutcome,
    IdempotencyClaim,
    IdempotencyRecord,
    Store,
)


class StoreDecorator:
    """:class:`~petstore.server.store.Store` by way of ``inner``, unchanged."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def open(self) -> Awaitable[None]:
        """``Store.open`` of the wrapped store."""
        return self.inner.open()

    def close(self) -> Awaitable[None]:
        """``Store.close`` of the wrapped store."""
        return self.inner.close()

    def pool_stats(self) -> dict[str, int]:
        """``Store.pool_stats`` of the wrapped store."""
        return self.inner.pool_stats()

    def create_pet(self, new_pet: NewPet) -> Awaitable[Pet]:
        """``Store.create_pet``."""
        return self.inner.create_pet(new_pet)

    def create_pets(self, new_pets: Sequence[NewPet]) -> Awaitable[list[Pet]]:
        """``Store.create_pets``."""
        return self.inner.create_pets(new_pets)

    def create_pet_with_key(
        self, new_pet: NewPet, *, claim: IdempotencyClaim
    ) -> Awaitable[ClaimOutcome]:
        """``Store.create_pet_with_key``."""
        return self.inner.create_pet_with_key(new_pet, claim=claim)

    def find_idempotency_record(
        self, api_key_id: int, key: str, *, created_after: datetime
    ) -> Awaitable[IdempotencyRecord | None]:
        """``Store.find_idempotency_record``."""
        return self.inner.find_idempotency_record(api_key_id, key, created_after=created_after)

    def purge_idempotency_records(self, *, created_before: datetime) -> Awaitable[int]:
        """``Store.purge_idempotency_records``."""
        return self.inner.purge_idempotency_records(created_before=created_before)

    def list_pets(
        self, *, status: PetStatus | None, after_id: int, limit: int
    ) -> Awaitable[list[Pet]]:
        """``Store.list_pets``."""
        return self.inner.list_pets(status=status, after_id=after_id, limit=limit)

    def get_pet(self, pet_id: int) -> Awaitable[Pet | None]:
        """``Store.get_pet``."""
        return self.inner.get_pet(pet_id)

    def get_pets(self, pet_ids: Sequence[int]) -> Awaitable[list[Pet | None]]:
        """``Store.get_pets``."""
        return self.inner.get_pets(pet_ids)

    def pets_version(self) -> Awaitable[tuple[Any, ...] | None]:
        """``Store.pets_version``."""
        return self.inner.pets_version()

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
        """``Store.create_api_key``."""
        return self.inner.create_api_key(
            name=name,
            prefix=prefix,
            key_hash=key_hash,
            created_at=created_at,
            expires_at=expires_at,
            scopes=scopes,
            rate_limit=rate_limit,
        )

    def list_api_keys(self) -> Awaitable[list[ApiKey]]:
        """``Store.list_api_keys``."""
        return self.inner.list_api_keys()

    def revoke_api_key(self, key_id: int, *, at: datetime) -> Awaitable[bool]:
        """``Store.revoke_api_key``."""
        return self.inner.revoke_api_key(key_id, at=at)

    def find_api_keys(self, prefix: str) -> Awaitable[list[ApiKeyRecord]]:
        """``Store.find_api_keys``."""
        return self.inner.find_api_keys(prefix)

    def count_active_api_keys(self, *, now: datetime) -> Awaitable[int]:
        """``Store.count_active_api_keys``."""
        return self.inner.count_active_api_keys(now=now)

    def schema_revision(self) -> Awaitable[str | None]:
        """``Store.schema_revision``."""
        return self.inner.schema_revision()
