"""A pets repository around another: :class:`PetsDecorator`.

A speed device overrides only what it changes (:mod:`.group_commit`,
:mod:`.read_grouping`, :mod:`.kept_pets`); every other method of
:class:`~.pets.PetRepository`, those added later included, is handed to the
repository it wraps (``inner``) unchanged: the delegating methods are made here, once,
from the repository's own. So a method added to the repository reaches the database
through every device with no edit here. Writes that change animals are not the
repository's but the unit of work's (``Store.transaction``), which moves the change
signal every device reads.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from petstore.server.store.pets import PetRepository


class PetsDecorator(PetRepository):
    """``inner``, with what a subclass overrides changed; a :class:`PetRepository`
    wherever one is expected."""

    def __init__(self, inner: PetRepository) -> None:  # not the repository's: no database here
        self.inner = inner
        self.changes = inner.changes


def _handed_on(name: str) -> Callable[..., Any]:
    def handed_on(self: PetsDecorator, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)

    handed_on.__name__ = handed_on.__qualname__ = name
    handed_on.__doc__ = f"``{name}`` of the repository this one wraps."
    return handed_on


for _name, _method in inspect.getmembers(PetRepository, inspect.isfunction):
    if not _name.startswith("_"):
        setattr(PetsDecorator, _name, _handed_on(_name))
