"""Idempotency keys on ``createPet`` (D16, draft-ietf-httpapi-idempotency-key-header).

A client that retries a POST with the same ``Idempotency-Key`` gets the original 201
and nothing new is created. Keys are scoped to the API key that sent them and live
24 hours. The record is stored in the same transaction as the animal, so a crash
leaves both or neither. A duplicate arriving while the first request is still being
processed by this instance is answered 409; on another instance it waits for the
first one's commit and then gets the replay.

"The same body" is judged by a fingerprint of the request (:func:`fingerprint`), an
explicit encoding of its own, versioned, that a deploy does not change: a retry that
straddles a deploy which added an optional member to NewPet, sent with that member
left out (or at its default), matches the record made before. A replay answers the
stored animal encoded as today's Pet (``store.IdempotencyRecord``).
"""

from __future__ import annotations

import functools
import hashlib
from datetime import datetime, timedelta
from typing import Any

import msgspec

from petstore.schemas import NewPet, Pet
from petstore.server import errors
from petstore.server.store import IdempotencyClaim, Store

#: D16: how long a key is remembered.
TTL = timedelta(hours=24)

#: The fingerprint's version 1 (stored as 64 hex digits): its members, always
#: encoded, in this order, NewPet as it was defined then. A later version, should the
#: encoding ever change, would be stored as ``<version>:<hex>`` and each record
#: compared by the version it was stored with.
_V1_MEMBERS = ("name", "categoryId", "status")
_encoder = msgspec.json.Encoder()


def fingerprint(new_pet: NewPet) -> str:
    """What "the same body" means (D16): the SHA-256, hex, of the compact JSON object
    of the validated NewPet, defaults applied, whose members are version 1's
    (``name``, ``categoryId``, ``status``, in this order) and then any member added
    to NewPet since, in the struct's order, only where it differs from its default.
    So a member added later, left at its default, changes no fingerprint."""
    members = msgspec.to_builtins(new_pet)
    defaults = _defaults(type(new_pet))
    canonical = {name: members[name] for name in _V1_MEMBERS}
    for name, value in members.items():
        if name not in canonical and (name not in defaults or value != defaults[name]):
            canonical[name] = value
    return hashlib.sha256(_encoder.encode(canonical)).hexdigest()


@functools.cache
def _defaults(kind: type[msgspec.Struct]) -> dict[str, Any]:
    """The defaults of ``kind``'s fields that have one, by JSON name (as encoded)."""
    return {
        field.encode_name: msgspec.to_builtins(field.default)
        for field in msgspec.structs.fields(kind)
        if field.default is not msgspec.NODEFAULT
    }


class IdempotentCreates:
    """Creates under an Idempotency-Key, with this instance's in-flight keys."""

    def __init__(self) -> None:
        self._in_flight: set[tuple[int, str]] = set()

    async def create(
        self, store: Store, new_pet: NewPet, *, api_key_id: int, key: str, now: datetime
    ) -> tuple[Pet, bool]:
        """The Pet this create answers 201 with, and whether it is a replay.

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
            record = await store.idempotency_records.find(api_key_id, key, created_after=now - TTL)
            if record is None:
                claim = IdempotencyClaim(api_key_id, key, digest, now, now - TTL)
                outcome = await store.pets.create_with_key(new_pet, claim=claim)
                if not outcome.replayed:
                    return outcome.record.pet, False
                record = outcome.record
            if record.fingerprint != digest:
                raise errors.IdempotencyKeyReused(
                    "this Idempotency-Key was already used with a different body"
                )
            return record.pet, True
        finally:
            self._in_flight.discard(slot)
