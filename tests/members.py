"""A valid value of every member of a wire struct, made from its types: what the tests
that each member is carried (by the client, the CLI, the test bed) send and expect,
so that none of them lists a member by hand and a member added to Pet or NewPet is
in each of them unasked.

Each member gets a value of its own (no two members of one struct share one), and
not its default, so a member dropped on the way, or put in another's place, shows.
"""

from __future__ import annotations

import enum
from typing import Any, TypeVar

import msgspec
from msgspec import inspect

S = TypeVar("S", bound=msgspec.Struct)


def wire_values(kind: type[msgspec.Struct]) -> dict[str, Any]:
    """A valid value of each member of ``kind`` as JSON holds it, by its name on the
    wire (``categoryId``), in the struct's order. Raises NotImplementedError for a
    member of a type not described here."""
    info = inspect.type_info(kind)
    assert isinstance(info, inspect.StructType)
    return {
        field.encode_name: _value(field.type, index, default=field.default)
        for index, field in enumerate(info.fields)
    }


def python_values(kind: type[msgspec.Struct]) -> dict[str, Any]:
    """:func:`wire_values` by each member's Python name (``category_id``), typed as the
    struct holds them (a PetStatus, not a string)."""
    built = sample(kind)
    return {field.name: getattr(built, field.name) for field in msgspec.structs.fields(kind)}


def sample(kind: type[S]) -> S:
    """A ``kind`` holding :func:`wire_values`."""
    return msgspec.convert(wire_values(kind), kind)


def _value(kind: inspect.Type, index: int, *, default: Any) -> Any:
    """A valid value of ``kind``, told apart by ``index`` (the member's position),
    other than ``default``."""
    if isinstance(kind, inspect.Metadata):
        return _value(kind.type, index, default=default)
    if isinstance(kind, inspect.UnionType):
        first = next(t for t in kind.types if not isinstance(t, inspect.NoneType))
        return _value(first, index, default=default)
    if isinstance(kind, inspect.IntType):
        low = kind.ge if kind.ge is not None else (kind.gt + 1 if kind.gt is not None else 0)
        return low + 1000 + index
    if isinstance(kind, inspect.StrType):
        text = f"member{index}"
        return text.ljust(kind.min_length or 0, "x")
    if isinstance(kind, inspect.BoolType):
        return default is not True
    if isinstance(kind, inspect.EnumType):
        values = [member.value for member in kind.cls]
        return next(value for value in reversed(values) if value != default)
    raise NotImplementedError(f"no sample value for {kind!r}: describe it in tests/members.py")


def changed(value: S, member: str) -> S:
    """``value`` with ``member`` (a Python name) given another valid value: a number
    one more, a text one character longer, the next of an enum's members, a truth
    value negated. Raises NotImplementedError for another type."""
    old = getattr(value, member)
    new: Any
    if isinstance(old, enum.Enum):
        members = list(type(old))
        new = members[(members.index(old) + 1) % len(members)]
    elif isinstance(old, bool):
        new = not old
    elif isinstance(old, int | str):
        new = old + (1 if isinstance(old, int) else "x")
    else:
        raise NotImplementedError(f"no other value for {old!r}: describe it in tests/members.py")
    return msgspec.structs.replace(value, **{member: new})
