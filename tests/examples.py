"""What tests send and expect, each built in one place: a NewPet body and the Pet the
service answers with (from the wire contract's structs, so a member added to Pet
with a default changes no test but those about it), and a request for every
operation of the interface (from the app's own route table, so a new operation
is in every test that goes through them all)."""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec
import pytest

from petstore.schemas import DEFAULT_STATUS, Pet, PetStatus
from petstore.server.app import create_app
from petstore.server.config import Settings

#: The members of every Pet the service answers with, in order (D6).
PET_MEMBERS = tuple(field.encode_name for field in msgspec.structs.fields(Pet))


def new_pet(name: str = "Rex", category_id: int = 1, **members: Any) -> dict[str, Any]:
    """A NewPet body: ``name``, ``categoryId`` and any other ``members`` as sent."""
    return {"name": name, "categoryId": category_id, **members}


def pet(
    pet_id: int,
    name: str = "Rex",
    category_id: int = 1,
    status: PetStatus | str = DEFAULT_STATUS,
    **fields: Any,
) -> dict[str, Any]:
    """The Pet body the service answers for an animal (D6): every member of Pet, its
    default where not given; ``fields`` by their Python names."""
    stored = Pet(pet_id, name, category_id, PetStatus(status), **fields)
    body: dict[str, Any] = msgspec.to_builtins(stored)
    return body


class Operation(NamedTuple):
    """A request of one operation of the interface: its ``operation_id``, ``method``,
    ``path`` (``1`` in each path parameter) and JSON ``body`` (None for none)."""

    operation_id: str
    method: str
    path: str
    body: dict[str, Any] | None


def operations() -> list[Operation]:
    """A request of every operation of the interface, from the app's route table."""
    router = create_app(Settings(database_url="sqlite:///unused.db")).router
    found = []
    for operation_id, method, template in router.operations():
        path = "/".join("1" if part.startswith("{") else part for part in template.split("/"))
        found.append(Operation(operation_id, method, path, new_pet() if method == "POST" else None))
    return found


#: Every operation of the interface, as pytest parameters (method, path, body).
OPERATION_PARAMS = [
    pytest.param(op.method, op.path, op.body, id=op.operation_id) for op in operations()
]
