"""A store around a store: :class:`StoreDecorator` hands every
:class:`~petstore.server.store.Store` method to the store it wraps, written out one
by one (no ``__getattr__``: a method renamed or added in ``Store`` and missing here
fails the type check of every decorator). A speed device or the tracing overrides
only what it changes (:mod:`.group_commit`, :mod:`.read_grouping`, :mod:`.kept_pets`,
:mod:`.traced`)."""

from __future__ import annotations

from collections.abc import Sequence
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

    async def open(self) -> None:
        """``Store.open`` of the wrapped store."""
        await self.inner.open()

    async def close(self) -> None:
        """``Store.close`` of the wrapped store."""
        await self.inner.close()

    def pool_stats(self) -> dict[str, int]:
        """``Store.pool_stats`` of the wrapped store."""
        return self.inner.pool_stats()

    async def create_pet(self, new_pet: NewPet) -> Pet:
        """``Store.create_pet``."""
        return await self.inner.create_pet(new_pet)

    async def create_pets(self, new_pets: Sequence[NewPet]) -> list[Pet]:
        """``Store.create_pets``."""
        return await self.inner.create_pets(new_pets)

    async def create_pet_with_key(
        self, new_pet: NewPet, *, claim: IdempotencyClaim
    ) -> ClaimOutcome:
        """``Store.create_pet_with_key``."""
        return await self.inner.create_pet_with_key(new_pet, claim=claim)

    async def find_idempotency_record(
        self, api_key_id: int, key: str, *, created_after: datetime
    ) -> IdempotencyRecord | None:
        """``Store.find_idempotency_record``."""
        return await self.inner.find_idempotency_record(
            api_key_id, key, created_after=created_after
        )

    async def purge_idempotency_records(self, *, created_before: datetime) -> int:
        """``Store.purge_idempotency_records``."""
        return await self.inner.purge_idempotency_records(created_before=created_before)

    async def list_pets(self, *, status: PetStatus | None, after_id: int, limit: int) -> list[Pet]:
        """``Store.list_pets``."""
        return await self.inner.list_pets(status=status, after_id=after_id, limit=limit)

    async def get_pet(self, pet_id: int) -> Pet | None:
        """``Store.get_pet``."""
        return await self.inner.get_pet(pet_id)

    async def get_pets(self, pet_ids: Sequence[int]) -> list[Pet | None]:
        """``Store.get_pets``."""
        return await self.inner.get_pets(pet_ids)

    async def pets_version(self) -> tuple[Any, ...] | None:
        """``Store.pets_version``."""
        return await self.inner.pets_version()

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
        """``Store.create_api_key``."""
        return await self.inner.create_api_key(
            name=name,
            prefix=prefix,
            key_hash=key_hash,
            created_at=created_at,
            expires_at=expires_at,
            scopes=scopes,
            rate_limit=rate_limit,
        )

    async def list_api_keys(self) -> list[ApiKey]:
        """``Store.list_api_keys``."""
        return await self.inner.list_api_keys()

    async def revoke_api_key(self, key_id: int, *, at: datetime) -> bool:
        """``Store.revoke_api_key``."""
        return await self.inner.revoke_api_key(key_id, at=at)

    async def find_api_keys(self, prefix: str) -> list[ApiKeyRecord]:
        """``Store.find_api_keys``."""
        return await self.inner.find_api_keys(prefix)

    async def count_active_api_keys(self, *, now: datetime) -> int:
        """``Store.count_active_api_keys``."""
        return await self.inner.count_active_api_keys(now=now)

    async def schema_revision(self) -> str | None:
        """``Store.schema_revision``."""
        return await self.inner.schema_revision()
