"""Idempotency keys on ``createPet`` (D16, draft-ietf-httpapi-idempotency-key-header).

A client that retries a POST with the same ``Idempotency-Key`` gets the original 201
and nothing new is created. Keys are scoped to the API key that sent them and live
24 hours. The record is stored in the same transaction as the animal, so a crash
leaves both or neither. A duplicate arriving while the first request is still being
processed by this instance is answered 409; on another instance it waits for the
first one's commit and then gets the replay.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from petstore.schemas import NewPet, encode
from petstore.server import errors
from petstore.server.store import IdempotencyClaim, Store

#: D16: how long a key is remembered.
TTL = timedelta(hours=24)


def fingerprint(new_pet: NewPet) -> str:
    """What "the same body" means: the validated NewPet, defaults applied, hashed."""
    return hashlib.sha256(encode(new_pet)).hexdigest()


class IdempotentCreates:
    """Creates under an Idempotency-Key, with this instance's in-flight keys."""

    def __init__(self) -> None:
        self._in_flight: set[tuple[int, str]] = set()

    async def create(
        self, store: Store, new_pet: NewPet, *, api_key_id: int, key: str, now: datetime
    ) -> tuple[bytes, bool]:
        """The 201 body for this create, and whether it is a replay.

        Raises IdempotencyConflict (409) while the same key is in flight here and
        IdempotencyKeyReused (422) when the key was used with another body.
        """
        slot = (api_key_id, key)
        if slot in self._in_flight:
            raise errors.IdempotencyConflict(
                "a request with this Idempotency-Key is still being processed; retry later"
            )
        self._in_flight.add(slot)
        try:
            digest = fingerprint(new_pet)
            record = await store.find_idempotency_record(api_key_id, key, created_after=now - TTL)
            if record is None:
                claim = IdempotencyClaim(api_key_id, key, digest, now, now - TTL)
                outcome = await store.create_pet_with_key(new_pet, claim=claim)
                if not outcome.replayed:
                    return outcome.record.response, False
                record = outcome.record
            if record.fingerprint != digest:
                raise errors.IdempotencyKeyReused(
                    "this Idempotency-Key was already used with a different body"
                )
            return record.response, True
        finally:
            self._in_flight.discard(slot)
