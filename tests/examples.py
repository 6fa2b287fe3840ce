"""What tests send and expect, each built in one place: a NewPet body and the Pet the
service answers with (from the wire contract's structs, so a member added to Pet
with a default changes no test but those about it), and a request for every
operation of the interface (from the app's own route table, so a new operation
is in every test that goes through them all, with a body where it takes one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import msgspec
import pytest

from petstore.schemas import DEFAULT_STATUS, NewPet, Pet, PetStatus
from petstore.server.app import create_app
from petstore.server.config import Settings
from petstore.server.http import routes

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


#: What makes a valid body of each body struct an operation may take
#: (``routes.Operation.body``).
BODIES: dict[type[msgspec.Struct], Callable[[], dict[str, Any]]] = {NewPet: new_pet}


class Operation(NamedTuple):
    """A request of one operation of the interface: its ``operation_id``, ``method``,
    ``path`` (``1`` in each path parameter) and JSON ``body`` (None for none), and
    its ``declared`` operation on the route table."""

    operation_id: str
    method: str
    path: str
    body: dict[str, Any] | None
    declared: routes.Operation


def table() -> list[tuple[str, str, routes.Operation]]:
    """``(method, template, operation)`` of every operation on the app's route table."""
    return create_app(Settings(database_url="sqlite:///unused.db")).router.operations()


def operations() -> list[Operation]:
    """A request of every operation of the interface, from the app's route table: a
    body of :data:`BODIES` for each that takes one (a KeyError names a body struct
    without an example there)."""
    found = []
    for method, template, declared in table():
        path = "/".join("1" if part.startswith("{") else part for part in template.split("/"))
        body = None if declared.body is None else BODIES[declared.body]()
        found.append(Operation(declared.operation_id, method, path, body, declared))
    return found


#: Every operation of the interface, as pytest parameters (method, path, body).
OPERATION_PARAMS = [
    pytest.param(op.method, op.path, op.body, id=op.operation_id) for op in operations()
]
