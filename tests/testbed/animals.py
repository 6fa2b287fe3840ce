"""Animals for the hand-made histories of the test bed's tests: the wire contract's
Pet, as the test bed records and compares it (:mod:`testbed.ops`)."""

from __future__ import annotations

from petstore.schemas import Pet, PetStatus


def pet(pet_id: int, name: str, *, category_id: int = 1, status: str = "sold") -> Pet:
    """The Pet ``pet_id`` named ``name``; category 1 and ``sold`` unless given."""
    return Pet(id=pet_id, name=name, category_id=category_id, status=PetStatus(status))
