"""Both clients carry every member of NewPet to the service and every member of Pet
back (``client.core.create_request`` builds the body from NewPet), against a real
``petstore serve``. The members come from the structs (:mod:`tests.members`): one
added to NewPet fails here until the clients send it."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from petstore.client import AsyncClient, Client
from petstore.client.core import create_request
from petstore.schemas import NewPet, Pet
from tests.conftest import LiveServer
from tests.members import python_values, wire_values


def _new_pet_members(pet: Pet) -> dict[str, object]:
    return {field.name: getattr(pet, field.name) for field in msgspec.structs.fields(NewPet)}


def test_the_client_sends_every_member_of_new_pet(live_server: LiveServer) -> None:
    members = python_values(NewPet)
    with Client(f"{live_server.url}/v1", api_key=live_server.dev_key) as petstore:
        pet = petstore.create_pet(**members)
    assert _new_pet_members(pet) == members


def test_the_async_client_sends_every_member_of_new_pet(live_server: LiveServer) -> None:
    members = python_values(NewPet)

    async def scenario() -> Pet:
        async with AsyncClient(f"{live_server.url}/v1", api_key=live_server.dev_key) as petstore:
            return await petstore.create_pet(**members)

    assert _new_pet_members(asyncio.run(scenario())) == members


def test_the_body_names_each_member_as_new_pet_does_on_the_wire() -> None:
    body, _ = create_request(python_values(NewPet), idempotency_key="k")
    assert msgspec.json.decode(body) == wire_values(NewPet)


def test_a_member_left_none_is_left_out_and_one_new_pet_lacks_is_refused() -> None:
    members = {**python_values(NewPet), "status": None}
    body, _ = create_request(members, idempotency_key="k")
    assert "status" not in msgspec.json.decode(body)
    with pytest.raises(ValueError, match="no member colour"):
        create_request({**members, "colour": "red"}, idempotency_key="k")
