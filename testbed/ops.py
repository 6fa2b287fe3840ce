"""What a chaos run records (:mod:`testbed.workload`) and its checker judges
(:mod:`testbed.history`): operations, the pages of list walks, and fault windows.
Plain data, no I/O.

An animal, as stored and as answered, is the wire contract's
:class:`~petstore.schemas.Pet`, and two are the same when every member is: a member
added to Pet is recorded, read back from each node and from a restore, and compared
with no edit here, so a value lost or changed in a failover or a restore shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, LiteralString

import msgspec

from petstore.schemas import NewPet, Pet

__all__ = [
    "NO_ANSWER", "SELECT_PETS", "Op", "Page", "Pet", "Window", "pets_from_rows", "sent", "shown",
]  # fmt: skip

#: Every stored animal in id order, every member of Pet read (the table has a column
#: named as each member's field, docs/architecture.md), each column named as the member
#: is on the wire, so that each row reads back as a Pet (:func:`pets_from_rows`). The
#: names come from the struct, never from outside: a literal as far as SQL goes.
_COLUMNS = ", ".join(f'{f.name} AS "{f.encode_name}"' for f in msgspec.structs.fields(Pet))
SELECT_PETS: LiteralString = f"SELECT {_COLUMNS} FROM pets ORDER BY id"  # noqa: S608

#: The codes of a failed operation that got no answer from an instance: 0 (no answer
#: at all, the client gave up waiting or lost the connection), HAProxy's 502 (the
#: instance's connection lost) and 504 (the instance did not answer in time). Any
#: other status is a definite error.
NO_ANSWER = frozenset({0, 502, 504})


def pets_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Pet]:
    """The animals of ``rows`` of :data:`SELECT_PETS`, in order. Raises
    msgspec.ValidationError for a row that is no Pet."""
    return [msgspec.convert(row, Pet) for row in rows]


def shown(pet: Pet | None) -> str:
    """``pet`` as the service answers it (JSON), for a finding's line; ``None`` for
    none."""
    return "None" if pet is None else msgspec.json.encode(pet).decode()


def sent(pet: Pet) -> dict[str, Any]:
    """The members of ``pet`` a create sends (NewPet's), by their Python names: the
    arguments of ``create_pet`` that store it again."""
    return {field.name: getattr(pet, field.name) for field in msgspec.structs.fields(NewPet)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """One page of a list walk: when it was asked and answered, the ids it held (in
    the order served, ascending), whether it linked a next page, and the animals
    themselves when recorded (``pets``, empty when only the ids were kept)."""

    started: float
    ended: float
    ids: tuple[int, ...]
    more: bool
    pets: tuple[Pet, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    """One operation. ``create``: ``key`` (the Idempotency-Key, which is also the
    animal's name) and, when ok, ``value``. ``read``: ``asked`` (the id) and, when ok,
    ``value`` (None for a 404). ``list``: ``status`` (the filter), ``after`` (a walk
    begun from a ``rel="next"`` cursor: the ids above this one; 0 from the first
    page) and the ``pages`` answered (when ok, the walk ended by itself or by its cap).
    ``attempts`` is the HTTP requests it sent, retries included (0: not recorded)."""

    worker: int
    kind: str
    started: float
    ended: float
    outcome: str
    code: int = 0
    key: str = ""
    asked: int = 0
    status: str = ""
    value: Pet | None = None
    pages: tuple[Page, ...] = ()
    after: int = 0
    attempts: int = 0

    @property
    def first_try(self) -> bool:
        """Whether it succeeded without a retry: ok, with no more requests than the
        answers it needed (one, or one per page of a walk)."""
        return self.outcome == "ok" and self.attempts <= max(1, len(self.pages))


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """A fault's window: its kind, from its start to the end of its settling time."""

    kind: str
    started: float
    ended: float
