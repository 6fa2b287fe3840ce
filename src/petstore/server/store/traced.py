"""Database spans (D23): :class:`TracedStore` gives each store call of a request a
child span of the request's server span, named ``<operation> <table>`` with the
OpenTelemetry database semantic-convention attributes.

Every method of :class:`~petstore.server.store.Store` that reaches the database is
written out here with its span (``tests/test_tracing.py`` checks that none is
missing). A call that a speed device answers with others (a group commit, grouped
reads) is one span per caller, covering its wait; one answered from memory has a
span too, as it stands where the database call would.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any

from petstore.schemas import NewPet, Pet, PetStatus
from petstore.server.store import (
    ApiKey,
    ApiKeyRecord,
    ClaimOutcome,
    IdempotencyClaim,
    IdempotencyRecord,
    Store,
)
from petstore.server.store.decorator import StoreDecorator

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer


class TracedStore(StoreDecorator):
    """``inner`` with a span around each database call, for the ``tracer``;
    ``system`` is ``db.system.name`` (``sqlite`` or ``postgresql``)."""

    def __init__(self, inner: Store, tracer: Tracer, *, system: str) -> None:
        super().__init__(inner)
        self._tracer = tracer
        self._system = system

    def _span(self, operation: str, table: str) -> AbstractContextManager[object]:
        from opentelemetry.trace import get_current_span

        if not get_current_span().is_recording():  # no request span, or not sampled
            return nullcontext()
        return self._recording(operation, table)

    @contextmanager
    def _recording(self, operation: str, table: str) -> Iterator[object]:
        from opentelemetry.trace import SpanKind

        with self._tracer.start_as_current_span(
            f"{operation} {table}",
            kind=SpanKind.CLIENT,
            attributes={
                "db.system.name": self._system,
                "db.operation.name": operation,
                "db.collection.name": table,
            },
        ) as span:
            yield span

    async def create_pet(self, new_pet: NewPet) -> Pet:
        with self._span("INSERT", "pets"):
            return await self.inner.create_pet(new_pet)

    async def create_pets(self, new_pets: Sequence[NewPet]) -> list[Pet]:
        with self._span("INSERT", "pets"):
            return await self.inner.create_pets(new_pets)

    async def create_pet_with_key(
        self, new_pet: NewPet, *, claim: IdempotencyClaim
    ) -> ClaimOutcome:
        with self._span("INSERT", "pets"):
            return await self.inner.create_pet_with_key(new_pet, claim=claim)

    async def find_idempotency_record(
        self, api_key_id: int, key: str, *, created_after: datetime
    ) -> IdempotencyRecord | None:
        with self._span("SELECT", "idempotency_records"):
            return await self.inner.find_idempotency_record(
                api_key_id, key, created_after=created_after
            )

    async def purge_idempotency_records(self, *, created_before: datetime) -> int:
        with self._span("DELETE", "idempotency_records"):
            return await self.inner.purge_idempotency_records(created_before=created_before)

    async def list_pets(self, *, status: PetStatus | None, after_id: int, limit: int) -> list[Pet]:
        with self._span("SELECT", "pets"):
            return await self.inner.list_pets(status=status, after_id=after_id, limit=limit)

    async def get_pet(self, pet_id: int) -> Pet | None:
        with self._span("SELECT", "pets"):
            return await self.inner.get_pet(pet_id)

    async def get_pets(self, pet_ids: Sequence[int]) -> list[Pet | None]:
        with self._span("SELECT", "pets"):
            return await self.inner.get_pets(pet_ids)

    async def pets_version(self) -> tuple[Any, ...] | None:
        with self._span("SELECT", "pet_changes"):
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
        with self._span("INSERT", "api_keys"):
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
        with self._span("SELECT", "api_keys"):
            return await self.inner.list_api_keys()

    async def revoke_api_key(self, key_id: int, *, at: datetime) -> bool:
        with self._span("UPDATE", "api_keys"):
            return await self.inner.revoke_api_key(key_id, at=at)

    async def find_api_keys(self, prefix: str) -> list[ApiKeyRecord]:
        with self._span("SELECT", "api_keys"):
            return await self.inner.find_api_keys(prefix)

    async def count_active_api_keys(self, *, now: datetime) -> int:
        with self._span("SELECT", "api_keys"):
            return await self.inner.count_active_api_keys(now=now)

    async def schema_revision(self) -> str | None:
        with self._span("SELECT", "alembic_version"):
            return await self.inner.schema_revision()
