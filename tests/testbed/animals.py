"""Animals for the hand-made histories of the test bed's tests: the wire contract's
Pet, as the test bed records and compares it (:mod:`testbed.ops`)."""

from __future__ import annotations

from petstore.schemas import Pet, PetStatus
from testbed.ops import Op


def pet(pet_id: int, name: str, *, category_id: int = 1, status: str = "sold") -> Pet:
    """The Pet ``pet_id`` named ``name``; category 1 and ``sold`` unless given."""
    return Pet(id=pet_id, name=name, category_id=category_id, status=PetStatus(status))


def created(key: str, pet_id: int, started: float, ended: float, *, status: str = "sold") -> Op:
    """Worker 0's create of the animal named ``key``, acknowledged as Pet ``pet_id``
    (:func:`pet`), asked at ``started`` and answered at ``ended`` (seconds)."""
    return Op(
        worker=0,
        kind="create",
        started=started,
        ended=ended,
        outcome="ok",
        key=key,
        value=pet(pet_id, key, status=status),
    )
