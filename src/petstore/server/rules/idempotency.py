"""Idempotency keys on ``createPet`` (D16, draft-ietf-httpapi-idempotency-key-header).

A client that retries a POST with the same ``Idempotency-Key`` gets the original 201
and nothing new is created. Keys are scoped to the API key that sent them and live
24 hours. The record is stored in the same transaction as the animal, so a crash
leaves both or neither: :func:`create_with_key` writes both through the store's
unit of work (``tx.pets`` and ``tx.idempotency``). A duplicate arriving while the
first request is still being processed by this instance is answered 409; on another
instance it waits for the first one's commit and then gets the replay.

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
from typing import Any, NamedTuple

import msgspec

from petstore.schemas import NewPet, Pet
from petstore.server import errors
from petstore.server.store import IdempotencyRecord, Store

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


class IdempotencyClaim(msgspec.Struct, frozen=True, kw_only=True):
    """A create's claim on an Idempotency-Key (D16): ``key`` of the API key
    ``api_key_id``, for a request of this ``fingerprint``, stored with the animal as
    created at ``created_at``, unless an unexpired record of the same key exists.
    Records of this key created before ``expired_before`` are replaced. Made by
    keyword only (``key`` and ``fingerprint`` are both ``str``, as are the times)."""

    api_key_id: int
    key: str
    fingerprint: str
    created_at: datetime
    expired_before: datetime


class ClaimOutcome(NamedTuple):
    """What a create under an Idempotency-Key left stored (D16): the key's ``record``
    (the one this create stored with its animal, or the earlier one it lost to) and
    whether the record was earlier (``replayed``: then nothing was created)."""

    record: IdempotencyRecord
    replayed: bool


class _ClaimLost(Exception):
    """Inside a create's transaction: an unexpired record of its key is stored."""


async def create_with_key(
    store: Store, new_pet: NewPet, *, claim: IdempotencyClaim
) -> ClaimOutcome:
    """Store one animal and its idempotency record in one transaction (D16), unless
    an unexpired record of the claim's key exists: then nothing is stored and that
    record is returned, ``replayed``. Raises ``errors.IdempotencyConflict`` when the
    record it lost to is gone by the time it is read (purged, or replaced after
    expiring): the client's retry settles it; ``errors.Unavailable`` when the
    database cannot be used now."""
    try:
        async with store.transaction() as tx:
            await tx.idempotency.delete_expired(
                claim.api_key_id, claim.key, created_before=claim.expired_before
            )
            record = IdempotencyRecord(
                api_key_id=claim.api_key_id,
                key=claim.key,
                fingerprint=claim.fingerprint,
                pet=await tx.pets.create(new_pet),
                created_at=claim.created_at,
            )
            if not await tx.idempotency.insert(record):
                raise _ClaimLost  # rolls the animal back
        return ClaimOutcome(record, replayed=False)
    except _ClaimLost:
        pass
    found = await store.idempotency_records.get(claim.api_key_id, claim.key)
    if found is None:
        raise errors.IdempotencyConflict(
            "a request with this Idempotency-Key was being processed; retry"
        )
    return ClaimOutcome(found, replayed=True)


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
                claim = IdempotencyClaim(
                    api_key_id=api_key_id,
                    key=key,
                    fingerprint=digest,
                    created_at=now,
                    expired_before=now - TTL,
                )
                outcome = await create_with_key(store, new_pet, claim=claim)
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
