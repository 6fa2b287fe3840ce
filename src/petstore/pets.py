"""Rules for animals: listing pages, creating, fetching, and the getPet sunset.

No web framework here: functions take validated values and a Store, and raise
``errors.*`` (interface: Endpoints; D1, D7, D9, D11, D14).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime

from petstore import errors
from petstore.schemas import INT64_MAX, NewPet, Pet, PetStatus
from petstore.store import Store

LIMIT_MIN, LIMIT_MAX, LIMIT_DEFAULT = 1, 100, 20

#: interface: Versioning: getPet is removed on 5 December 2030 (00:00:00 GMT).
SUNSET = datetime(2030, 12, 5, tzinfo=UTC)
SUNSET_HEADER = format_datetime(SUNSET, usegmt=True)  # RFC 8594: IMF-fixdate
_SUNSET_EPOCH = SUNSET.timestamp()
REPLACEMENT = "GET /v1/pets with the status filter"


def _decimal(raw: str, *, max_digits: int) -> int | None:
    """The value of an optionally signed ASCII decimal numeral of at most
    ``max_digits`` significant digits, else None. Leading zeros are allowed; the
    length is checked first because ``int()`` of thousands of digits is slow (and
    refused past 4,300)."""
    sign, digits = (-1, raw[1:]) if raw.startswith("-") else (1, raw)
    significant = digits.lstrip("0") or "0"
    if not (digits.isascii() and digits.isdigit()) or len(significant) > max_digits:
        return None
    return sign * int(significant)


def parse_limit(raw: str | None) -> int:
    """``limit`` from the query: a decimal integer 1-100, 20 when absent (D8)."""
    if raw is None:
        return LIMIT_DEFAULT
    value = None if raw.startswith("-") else _decimal(raw, max_digits=3)
    if value is None or not LIMIT_MIN <= value <= LIMIT_MAX:
        raise errors.InvalidRequest(
            f"limit: must be an integer from {LIMIT_MIN} to {LIMIT_MAX}, got {raw[:40]!r}"
        )
    return value


def parse_status(raw: str | None) -> PetStatus | None:
    """``status`` from the query: a PetStatus, or None when absent (D8)."""
    if raw is None:
        return None
    try:
        return PetStatus(raw)
    except ValueError:
        allowed = ", ".join(s.value for s in PetStatus)
        raise errors.InvalidRequest(f"status: must be one of {allowed}") from None


def parse_pet_id(raw: str) -> int:
    """``petId`` from the path: any int64 (D11; 0 and negatives are then 404)."""
    if len(raw) <= 18 and raw.isdigit() and raw.isascii():
        return int(raw)  # the usual id: plain digits, well inside int64
    value = _decimal(raw, max_digits=19)
    if value is None or not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise errors.InvalidRequest(f"petId: must be a 64-bit integer, got {raw[:40]!r}")
    return value


async def list_page(
    store: Store, *, status: PetStatus | None, limit: int, after_id: int
) -> tuple[list[Pet], bool]:
    """One page of animals after ``after_id`` in ascending id (D7), and whether more follow."""
    pets = await store.list_pets(status=status, after_id=after_id, limit=limit + 1)
    return pets[:limit], len(pets) > limit


async def create(store: Store, new_pet: NewPet) -> Pet:
    """Store a validated NewPet and return it with its id (D1: status already defaulted)."""
    pet = await store.create_pet(new_pet)
    assert isinstance(pet, Pet)  # only a create with an idempotency claim returns a record
    return pet


async def get(store: Store, pet_id: int) -> Pet:
    """The animal ``pet_id``; raises NotFound when there is none."""
    pet = await store.get_pet(pet_id) if pet_id > 0 else None
    if pet is None:
        raise errors.NotFound(f"no animal has id {pet_id}")
    return pet


def sunset_check(clock: Callable[[], datetime] | None) -> Callable[[], None]:
    """A check that raises Gone once getPet's sunset has come (D14), on ``clock``, or
    on the wall clock when None (read as epoch seconds: no datetime per request)."""
    if clock is None:

        def check_wall_clock() -> None:
            if time.time() >= _SUNSET_EPOCH:
                raise _gone()

        return check_wall_clock
    now = clock

    def check_clock() -> None:
        if now() >= SUNSET:
            raise _gone()

    return check_clock


def _gone() -> errors.Gone:
    return errors.Gone(f"GET /v1/pets/{{petId}} was removed on {SUNSET_HEADER}; use {REPLACEMENT}")
