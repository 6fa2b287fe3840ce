"""What the plain store does with statements' results: parameters as one JSON text,
rows into values, and a future's rows into a future of values without a task
(:class:`~petstore.server.store.queries.SQLStore`, both backends)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import msgspec

from petstore.schemas import NewPet, Pet, PetStatus
from petstore.server.store.driver import Row

T = TypeVar("T")


def as_json(values: Sequence[Any]) -> str:
    """``values`` (NewPets, or ids) as one JSON text parameter."""
    return msgspec.json.encode(values).decode()


def then(awaitable: Awaitable[list[Row]], into: Callable[[list[Row]], T]) -> Awaitable[T]:
    """``into`` of what ``awaitable`` gives: for a future, a future settled by its
    done-callback (no task); for anything else, a coroutine."""
    if not isinstance(awaitable, asyncio.Future):
        return _after(awaitable, into)
    settled: asyncio.Future[T] = awaitable.get_loop().create_future()

    def done(written: asyncio.Future[list[Row]]) -> None:
        if settled.cancelled():
            return
        if written.cancelled():
            settled.cancel()
        elif (exc := written.exception()) is not None:
            settled.set_exception(exc)
        else:
            try:
                settled.set_result(into(written.result()))
            except Exception as failure:
                settled.set_exception(failure)

    awaitable.add_done_callback(done)
    return settled


async def _after(awaitable: Awaitable[list[Row]], into: Callable[[list[Row]], T]) -> T:
    return into(await awaitable)


def inserted(new_pets: Sequence[NewPet], rows: list[Row]) -> list[Pet]:
    """The animals of ``new_pets``, in order, from the rows their insert returned.

    Neither database promises that ``RETURNING`` lists rows in the order of the
    ``SELECT`` that fed them, so each row comes back with its content and is matched
    to a NewPet of the same content; equal NewPets take their ids in ascending order.
    """
    if len(new_pets) == 1:  # the usual batch under light load
        return [Pet(rows[0][0], *new_pet_fields(new_pets[0]))]
    ids: dict[tuple[Any, ...], list[int]] = {}  # content -> ids, descending
    for pet_id, *content in sorted(map(tuple, rows), reverse=True):
        ids.setdefault(tuple(content), []).append(pet_id)
    return [
        Pet(ids[new.name, new.category_id, new.status.value].pop(), *new_pet_fields(new))
        for new in new_pets
    ]


def new_pet_fields(new: NewPet) -> tuple[str, int, PetStatus]:
    """A NewPet's name, category id and status, as :class:`Pet` takes them after its id."""
    return new.name, new.category_id, new.status
